"""Imported by ``loadtrace.pth`` at interpreter start when ``LOADTRACE`` is set: watch for the first hooked library
(``activation.watch``).

Runs in every process of the job, before the job's own code, and most never load anything: it imports only modules
the interpreter has already loaded, and must never raise.
"""

import os

try:
    if os.environ.get("LOADTRACE", "").strip().lower() in ("1", "true", "yes", "on"):  # settings.TRUE (tested)
        from .instrumentation.activation import watch

        watch()
    else:  # a value the .pth line lets through but settings does not take as on: said once
        from .instrumentation.settings import from_env

        from_env()
except Exception as _error:  # pragma: no cover - the last line of defence
    from .instrumentation._log import warn_once

    warn_once("activate", f"could not start ({type(_error).__name__}: {_error}); the job runs untraced")
