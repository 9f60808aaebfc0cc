"""What leaves the process: spans as OTLP files or over OTLP (``export``), the span budget of a big job (``budget``,
``budget_processor``), the metrics of progress and startup (``progress``, ``progress_metrics``, ``startup_metrics``)
and the line rank 0 says at exit (``summary``).

It imports ``counting`` and the floor below it (``settings``, ``context``, ``_log``); what opens the scopes
(``tracing``) and what watches the job (``beside``) use it, not the other way round.
"""
