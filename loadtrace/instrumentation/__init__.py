"""The in-job half: what runs inside a traced job's processes (activation, the hooks under ``hooks/``, spans, the
state file's writer, export). It imports the shared formats (``loadtrace.semconv``, ``loadtrace.statefile``) and
nothing of the analysis half."""
