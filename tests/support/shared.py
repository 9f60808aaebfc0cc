"""What several test files share from one session: made once, even when pytest-xdist runs the session on several
workers (pytest's default here, ``addopts`` in pyproject.toml).

A worker is a process of its own, so a session-wide fixture would run in each. Under xdist the first worker to ask
for a key makes it while holding the key's lock in the workers' common folder (``getbasetemp().parent``), and
writes what it made (or how it failed or skipped) there; the others wait on the lock and read it: pytest-xdist's
documented pattern. What a key makes must pickle (dataclasses of paths, numbers and text); its files stay where the
first worker wrote them, under its own temporary folder, which lives until the session ends. Without xdist a key is
made once in this process, as it always was.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

_MADE: dict[object, tuple[bool, Any]] = {}


def worker() -> str | None:
    """This process's xdist worker id (``gw0``, ...), or None in a serial run."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def workers_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this session sees (this process's own temporary folder in a serial run)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker() else base


def once(tmp_path_factory: pytest.TempPathFactory, key: object, make: Callable[[], Any]) -> Any:
    """``make()`` the first time ``key`` is asked for in the session, then the same result (or the same failure or
    skip, raised again): a real job that tests in several files assert on runs once per session."""
    if key not in _MADE:
        _MADE[key] = _once_across_workers(tmp_path_factory, key, make) if worker() else _outcome(make)
    made, found = _MADE[key]
    if not made:
        raise found
    return found


def _outcome(make: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, make()
    except (Exception, pytest.skip.Exception, pytest.fail.Exception) as error:
        return False, error


def _once_across_workers(tmp_path_factory: pytest.TempPathFactory, key: object, make: Callable[[], Any]) -> Any:
    folder = workers_folder(tmp_path_factory) / "shared"
    folder.mkdir(exist_ok=True)
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    result = folder / f"{name}.pickle"
    # A worker that dies holding the lock lets it go with its process: the next one makes the key itself.
    with FileLock(str(folder / f"{name}.lock")):
        if result.exists():
            return pickle.loads(result.read_bytes())
        outcome = _outcome(make)
        try:
            data = pickle.dumps(outcome)
        except Exception as error:  # an exception that will not pickle: its words are enough
            data = pickle.dumps((False, AssertionError(f"{outcome[1]!r} (not picklable: {error})")))
        partial = result.with_suffix(".partial")
        partial.write_bytes(data)
        partial.rename(result)
        return outcome
