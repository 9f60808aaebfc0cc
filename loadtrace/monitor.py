"""While anything is loading: memory peaks between hook calls.

One daemon thread per process, started by the first load. Every ``SAMPLE_INTERVAL_S`` it reads the process's memory,
raises the peaks of the open loads and phases, and hands the reading on (the state file's ``rss_peak``: see
``spans.Tracing``). Idle, the thread blocks on an event and costs nothing. What a killed rank had done is not this
thread's business: every count is already exact in the state file (statefile.py) the moment it is made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .memory import Memory, process_memory

if TYPE_CHECKING:
    from .spans import Scope

SAMPLE_INTERVAL_S = 0.05


class Monitor:
    def __init__(self, on_sample: Callable[[Memory], None] | None = None):
        self._on_sample = on_sample
        self._open: dict[int, Scope] = {}
        self._lock = threading.Lock()
        self._busy = threading.Event()
        self._thread: threading.Thread | None = None

    def opened(self, scope: Scope) -> None:
        with self._lock:
            self._open[id(scope)] = scope
            self._busy.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="loadtrace-monitor", daemon=True)
                self._thread.start()

    def closed(self, scope: Scope) -> None:
        with self._lock:
            self._open.pop(id(scope), None)

    def _run(self) -> None:
        while True:
            self._busy.wait()
            with self._lock:
                scopes = list(self._open.values())
                if not scopes:
                    self._busy.clear()
                    continue
            reading = process_memory()
            observe(scopes, reading)
            if self._on_sample is not None:
                try:
                    self._on_sample(reading)
                except Exception:
                    pass  # a sample that cannot be recorded is simply not recorded; the next one tries again
            time.sleep(SAMPLE_INTERVAL_S)


def observe(scopes: list[Scope], reading: Memory) -> None:
    """Raise each scope's peaks to this reading."""
    for scope in scopes:
        if scope.peak is not None:
            scope.peak.raise_to(reading)
