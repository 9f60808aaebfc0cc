"""What runs beside the job, for when it dies: the launcher's witness of a worker it saw die (``witness``, and the
spans it ends in the dead worker's place: ``witness_scopes``), termination signals (``termination``) and uncaught
exceptions (``excepthooks``).

It imports ``exporting`` (the witness writes spans in its workers' place), ``counting`` and the floor below them;
``tracing`` and the hooks call into it.
"""
