"""One clear line on stderr, once: how loadtrace tells the job's owner that something went wrong."""

from __future__ import annotations

import os
import sys
import threading

from ..semconv import ENV_SAID, redact_secrets

_said: set[str] = set()
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def warn_once(key: str, message: str) -> None:
    """Print ``loadtrace: <message>`` the first time ``key`` is seen in this process, its secrets redacted (an
    endpoint's user info, a header value that an OpenTelemetry warning quotes); never raises."""
    with _lock:
        if key in _said:
            return
        _said.add(key)
    try:
        sys.stderr.write(f"loadtrace: {redact_secrets(message)}\n")
        sys.stderr.flush()
    except Exception:  # a closed or broken stderr must not reach the job
        pass


def say_for_the_job(key: str, message: str, speaks: bool) -> None:
    """A problem every process of the job meets alike (a bad setting, an unwritable ``LOADTRACE_DIR``), said once for
    the job rather than once per process: by the first process that meets it and ``speaks`` (the launcher, which
    runs first; without a launcher that loadtrace runs in, rank 0), which leaves ``key`` in ``LOADTRACE_SAID`` in its
    environment, so that the processes it starts (its ranks, and theirs) say nothing more. Never raises."""
    try:
        said = os.environ.get(ENV_SAID, "").split()
        if key in said or not speaks:
            return
        os.environ[ENV_SAID] = " ".join([*said, key])
    except Exception:  # an odd environment: said by this process, as any other problem
        pass
    warn_once(key, message)
