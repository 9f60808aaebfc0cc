"""While anything is loading: memory peaks between hook calls, and progress that survives SIGKILL.

One daemon thread per process, started by the first load. Every ``SAMPLE_INTERVAL_S`` it reads the process's memory
and raises the peaks of the open loads and phases; every ``PROGRESS_INTERVAL_S``, and within one sample of a load or
phase starting or ending, it writes what is open, with the bytes so far, to ``<trace file>.progress.json``, replaced
atomically. A rank that finishes removes the file; a rank the OOM killer takes leaves its last state behind for
``loadtrace report``. Idle, the thread blocks on an event and costs nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from . import semconv
from .attributes import progress_record
from .memory import Memory, process_memory

if TYPE_CHECKING:
    from .spans import Scope

SAMPLE_INTERVAL_S = 0.05
PROGRESS_INTERVAL_S = 1.0


class Monitor:
    def __init__(self, progress_path: str | None, identity: dict[str, Any]):
        self.progress_path = progress_path
        self._identity = identity  # rank, host, pid, trace: who wrote the progress file
        self._open: dict[int, Scope] = {}
        self._lock = threading.Lock()
        self._busy = threading.Event()
        self._thread: threading.Thread | None = None
        self._broken = False
        self._changed = False
        self._write_lock = threading.Lock()  # a write and the final removal never interleave

    def opened(self, scope: Scope) -> None:
        with self._lock:
            self._open[id(scope)] = scope
            self._changed = True
            self._busy.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="loadtrace-monitor", daemon=True)
                self._thread.start()

    def closed(self, scope: Scope) -> None:
        with self._lock:
            self._open.pop(id(scope), None)
            self._changed = True
            finished = not self._open
        if finished:  # at once, on the loading thread: the process may exit right after its last load
            self._remove_progress()

    def _run(self) -> None:
        # The loading thread only marks changes; this thread samples and writes, so the load never waits on a write.
        last_progress = 0.0
        while True:
            self._busy.wait()
            with self._lock:
                scopes = list(self._open.values())
                changed, self._changed = self._changed, False
                if not scopes:
                    self._busy.clear()
                    continue
            observe(scopes, process_memory())
            if changed or time.monotonic() - last_progress >= PROGRESS_INTERVAL_S:
                self._write_progress()
                last_progress = time.monotonic()
            time.sleep(SAMPLE_INTERVAL_S)

    def _write_progress(self) -> None:
        if self.progress_path is None or self._broken:
            return
        with self._write_lock:
            with self._lock:
                scopes = list(self._open.values())
            if not scopes:  # the last load ended meanwhile and removed the file: do not bring it back
                return
            try:
                record = {
                    **self._identity,
                    semconv.PROGRESS_TIME: time.time_ns(),
                    semconv.PROGRESS_OPEN: [progress_record(scope) for scope in scopes],
                }
                os.makedirs(os.path.dirname(self.progress_path) or ".", mode=0o700, exist_ok=True)
                temporary = f"{self.progress_path}.tmp"
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(descriptor, "w") as handle:
                    json.dump(record, handle)
                os.replace(temporary, self.progress_path)
            except Exception:
                self._broken = True  # the trace file's own error (disk full, unwritable) is said by the exporter

    def _remove_progress(self) -> None:
        if self.progress_path is None:
            return
        with self._write_lock:
            try:
                os.remove(self.progress_path)
            except OSError:
                pass  # never written (a short load), or already gone


def observe(scopes: list[Scope], reading: Memory) -> None:
    """Raise each scope's peaks to this reading."""
    for scope in scopes:
        if scope.peak is not None:
            scope.peak.raise_to(reading)
