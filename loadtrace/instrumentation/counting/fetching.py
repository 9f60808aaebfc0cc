"""When the process fetched from storage while it loaded: the stretches between memory readings in which its
``/proc/self/io`` ``read_bytes`` rose, or in which it was still waiting for what it had asked for.

``read_bytes`` counts what the kernel read from storage for this process, every thread of it: a page fault on a
mapped checkpoint and the readahead it starts, ``read()``, ``O_DIRECT`` (measured on Linux 6.18, ext4 on a virtio
disk: each equals the file's growth in the page cache, or its size with ``O_DIRECT``). Pages another process fetched
are not in it. It is exact at any instant but says nothing of when; the readings say when. A load's readings are its
exact start and end (the loading thread) and the monitor's samples between them (every 0.1 s, off the loading thread,
monitor.py).

The kernel counts a read when it asks the disk for it, not when the bytes arrive: with a large readahead window (8 MB
on the machine above) a fault asks for megabytes at once and its thread then waits for them, the count standing
still. So a run of fetching is the stretches between readings in which the count rose, and after them, while a thread
of the process is still waiting on storage at the reading (``memory.waiting_on_storage``: asked only during such a
run, so a warm load pays nothing for it). The run's time is an upper bound of the time storage was delivering, by
less than one reading interval at each of its edges (docs/report.md, Storage words). Per reading, never per tensor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ...startup_split import Interval, clip, close_shortest_gaps
from .memory import Memory

MAX_INTERVALS = 64  # stretches a load span carries; past it the shortest gaps between them are closed


class Fetching:
    """The process's storage reads since its outermost load began: the bytes, and the stretches they moved in.
    ``on_change(base, now, at_ns, intervals)`` hears of each change (the state file keeps it for a rank that dies)."""

    def __init__(self, start: Memory, on_change: Callable[[int, int, int, list[Interval]], None] | None = None):
        self.base = start.storage_read
        self._last = (start.at_ns, start.storage_read)
        self.intervals: list[Interval] = []
        self._on_change = on_change
        self._lock = threading.Lock()
        if on_change is not None:
            on_change(self.base, self.base, start.at_ns, [])

    def sample(self, reading: Memory, waiting: Callable[[], bool] = lambda: False) -> None:
        """A reading, from any thread, in any order (one taken before the last one applied is already in it);
        ``waiting()``: whether a thread still waits on storage now, asked only to continue a run of fetching."""
        with self._lock:
            last_at, last_read = self._last
            if reading.at_ns <= last_at:
                return
            self._last = (reading.at_ns, max(reading.storage_read, last_read))
            in_run = bool(self.intervals) and self.intervals[-1][1] == last_at
            if reading.storage_read <= last_read and not (in_run and waiting()):
                return
            if in_run:
                self.intervals[-1] = (self.intervals[-1][0], reading.at_ns)
            else:
                self.intervals.append((last_at, reading.at_ns))
            self.intervals = close_shortest_gaps(self.intervals, MAX_INTERVALS)
            if self._on_change is not None:
                self._on_change(self.base, self._last[1], reading.at_ns, list(self.intervals))

    def between(self, start_ns: int, end_ns: int) -> list[Interval]:
        """The stretches in which storage delivered, within a load's bounds."""
        with self._lock:
            return clip(list(self.intervals), (start_ns, end_ns))
