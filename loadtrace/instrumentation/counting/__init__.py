"""What counts: a scope's ledger of bytes, tensors and calls (``scope``, ``ledger``), the process's memory and storage
reads (``memory``, ``readings``, and the ``monitor`` thread that samples them between hook calls), the state file kept
exact as scopes move (``statemirror``), the startup's phase split (``phases``), and the sums a scope's span carries
when it ends (``attributes``).

It imports the shared formats and the floor below it (``settings``, ``context``, ``_log``), never the layers above:
it knows nothing of where spans go (``exporting``), who watches the job (``beside``) or who opens scopes
(``tracing``).
"""
