"""An uncaught exception's type and first line, into the state file and a span, before the process dies of it.

A rank that fails in its first collective after loading (a gloo timeout, ``DistBackendError``) dies of an exception
nobody catches; the report needs it to tell the skew that killed the job (analysis/skew.py). ``sys.excepthook`` (the
main thread) and ``threading.excepthook`` (any other) are wrapped, chained to whatever was there: ours records, then
calls the previous hook with the same arguments, so the job's own hook and Python's traceback go ahead unchanged. Ours
never raises. Installed once per process when its tracing is set up (provider.py); a later ``instrument()`` only
points the installed hooks at its own recorder.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

Recorder = Callable[[str, str], None]  # (exception type name, first line of its message)

_recorder: Recorder | None = None
_installed = False


def summary(error: BaseException | None, kind: type[BaseException] | None = None) -> tuple[str, str]:
    """(type name, the first non-empty line of its message, at most 240 characters)."""
    name = (kind or type(error)).__name__
    try:
        text = str(error) if error is not None else ""
    except Exception:
        text = ""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return name, first[:240]


def _record(kind: type[BaseException] | None, error: BaseException | None) -> None:
    recorder = _recorder
    if recorder is None or kind is None:
        return
    try:
        recorder(*summary(error, kind))
    except Exception:
        pass  # the job's own hook and traceback go ahead whatever happened to ours


def install(recorder: Recorder) -> None:
    """Record every uncaught exception with ``recorder`` from now on (chained in front of the hooks in place)."""
    global _recorder, _installed
    _recorder = recorder
    if _installed:
        return
    _installed = True
    previous_sys = sys.excepthook
    previous_threading = threading.excepthook

    def sys_hook(kind: type[BaseException], error: BaseException, traceback: Any) -> Any:
        _record(kind, error)
        return previous_sys(kind, error, traceback)

    def threading_hook(args: Any) -> Any:
        if args.exc_type is not SystemExit:  # threading ignores a thread's SystemExit: so do we
            _record(args.exc_type, args.exc_value)
        return previous_threading(args)

    sys.excepthook = sys_hook
    threading.excepthook = threading_hook


def stop() -> None:
    """Record nothing more (``uninstrument``); the hooks stay chained, passing straight through."""
    global _recorder
    _recorder = None
