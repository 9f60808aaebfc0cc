"""One clear line on stderr, once: how loadtrace tells the job's owner that something went wrong."""

from __future__ import annotations

import os
import sys
import threading

_said: set[str] = set()
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def warn_once(key: str, message: str) -> None:
    """Print ``loadtrace: <message>`` the first time ``key`` is seen in this process; never raises."""
    with _lock:
        if key in _said:
            return
        _said.add(key)
    try:
        sys.stderr.write(f"loadtrace: {message}\n")
        sys.stderr.flush()
    except Exception:  # a closed or broken stderr must not reach the job
        pass
