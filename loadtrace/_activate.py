"""Imported by ``loadtrace.pth`` at interpreter start when ``LOADTRACE`` is set: settings, then instrument.

Runs in every process of the job, before the job's own code; it must never raise.
"""

try:
    from .settings import from_env

    _settings = from_env()
    if _settings.enabled and not _settings.sdk_disabled:
        from .instrumentor import LoadtraceInstrumentor

        LoadtraceInstrumentor().instrument(settings=_settings)
except Exception as _error:  # pragma: no cover - the last line of defence
    from ._log import warn_once

    warn_once("activate", f"could not start ({type(_error).__name__}: {_error}); the job runs untraced")
