"""While anything is loading: memory at phase boundaries and peaks between hook calls, read off the loading thread.

One daemon thread per process, started by the first load. Every ``SAMPLE_INTERVAL_S`` it reads the process's memory,
raises the peaks of the open loads and phases, and hands the reading on (the state file's ``rss_peak``: see
``spans.Tracing``). A phase's memory when it is entered and left is read here too (``mark``), at once: reading
``/proc/self/status`` costs 15-40 µs on a bare machine but 1.5-3 ms in a sandboxed kernel once an accelerator holds
GBs, and a load crosses dozens of phase boundaries. Loads read theirs on the loading thread, exactly at their start
and end (``spans.Tracing``). Idle, the thread blocks on an event and costs nothing. What a killed rank had done is not
this thread's business: every count is already exact in the state file (statefile.py) the moment it is made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .memory import Memory, Peak, process_memory

if TYPE_CHECKING:
    from .scope import Scope

# Each sample costs ~0.5 ms of CPU in a sandboxed kernel (the timed wait alone ~0.2 ms, /proc reads, the GIL), beside
# the load: 10 a second. A load's own peak is exact anyway (VmHWM); samples bound phases' peaks and a killed rank's.
SAMPLE_INTERVAL_S = 0.1


class Monitor:
    def __init__(self, on_sample: Callable[[Memory], None] | None = None):
        self._on_sample = on_sample
        self._open: dict[int, Scope] = {}
        self._marks: list[tuple[Scope, bool]] = []  # (scope, left): boundaries still to read, in order
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def opened(self, scope: Scope) -> None:
        with self._lock:
            self._open[id(scope)] = scope
            self._start()
        self._wake.set()

    def closed(self, scope: Scope) -> None:
        with self._lock:
            self._open.pop(id(scope), None)

    def mark(self, scope: Scope, left: bool) -> None:
        """``scope`` was entered (its ``memory_before`` and peak start) or left (``memory_after``) just now: read
        it in the monitor's thread, at once."""
        with self._lock:
            self._marks.append((scope, left))
            self._start()
        self._wake.set()

    def settle(self, scopes: Iterable[Scope], reading: Memory) -> None:
        """The boundaries of ``scopes`` not read yet get ``reading`` (taken by the caller as their spans end)."""
        wanted = {id(scope) for scope in scopes}
        with self._lock:
            kept = []
            for scope, left in self._marks:
                if id(scope) in wanted:
                    record(scope, left, reading)
                else:
                    kept.append((scope, left))
            self._marks = kept

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="loadtrace-monitor", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(SAMPLE_INTERVAL_S if self._open else None)
            self._wake.clear()
            with self._lock:
                batch = list(self._marks)  # kept alive, so their ids stay theirs until applied
                if not batch and not self._open:
                    continue
            reading = process_memory()
            with self._lock:
                taken = {id(mark) for mark in batch}
                kept = []
                for mark in self._marks:  # settle() may have taken some meanwhile; later ones wait for the next
                    if id(mark) in taken:
                        record(mark[0], mark[1], reading)
                    else:
                        kept.append(mark)
                self._marks = kept
                scopes = list(self._open.values())
            observe(scopes, reading)
            if self._on_sample is not None:
                try:
                    self._on_sample(reading)
                except Exception:
                    pass  # a sample that cannot be recorded is simply not recorded; the next one tries again


def record(scope: Scope, left: bool, reading: Memory) -> None:
    """A boundary's reading: the memory when the scope was last left, or when it was entered (its peak starts there)."""
    if left:
        scope.memory_after = reading
    else:
        scope.memory_before = reading
        if scope.peak is None:
            scope.peak = Peak.starting_at(reading)
        else:
            scope.peak.raise_to(reading)


def observe(scopes: list[Scope], reading: Memory) -> None:
    """Raise each scope's peaks to this reading."""
    for scope in scopes:
        if scope.peak is not None:
            scope.peak.raise_to(reading)
