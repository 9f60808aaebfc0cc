"""Memory read at scope boundaries (memory.py), and the state's ``rss_peak`` raised from every reading while a load is
open: the monitor thread's samples and the readings at phase boundaries."""

from __future__ import annotations

from collections.abc import Callable

from ... import statefile
from ...startup_split import Interval, close_shortest_gaps
from .fetching import Fetching
from .memory import Memory, Peak, process_memory, waiting_on_storage
from .monitor import Monitor
from .monitor import record as monitor_record
from .scope import OpenScopes, Scope


class Readings:
    """``monitor()``: the process's monitor thread, None before the first span (or where it could not start)."""

    def __init__(
        self,
        open: OpenScopes,
        state: Callable[[], statefile.Writer | None],
        monitor: Callable[[], Monitor | None],
        on_fault: Callable[[Exception], None] | None = None,
    ):
        self.open = open
        self.state = state
        self.monitor = monitor
        self.on_fault = on_fault  # a state write that failed (said once, counted on the load: statemirror.py)
        self.load_hwm = 0  # the process's VmHWM when the outermost load began
        self.fetching: Fetching | None = None  # the storage reads since the outermost load began (fetching.py)

    def outermost_load(self, reading: Memory) -> Fetching:
        """The first load of the process's loads open began with ``reading``: its peak and storage reads start here;
        the state file keeps the storage reads for a rank that dies."""
        self.load_hwm = reading.hwm
        self.fetching = Fetching(reading, self._fetched)
        return self.fetching

    def _fetched(self, start: int, now: int, at_ns: int, intervals: list[Interval]) -> None:
        state = self.state()
        if state is None:
            return
        try:
            state.fetched(start, now, at_ns, close_shortest_gaps(intervals, statefile.FETCH_INTERVALS))
        except Exception as error:
            if self.on_fault is not None:
                self.on_fault(error)

    def sampled(self, reading: Memory) -> None:
        """A monitor sample: the state's ``rss_peak``, and the storage reads of the loads open."""
        self.raise_rss_peak(reading)
        fetching = self.fetching
        if fetching is not None and self.open.loads_open:
            fetching.sample(reading, waiting_on_storage)

    def raise_rss_peak(self, reading: Memory) -> None:
        """The state's ``rss_peak``: the highest VmRSS seen during the open load, or VmHWM once it rose during the
        load (then exact)."""
        state = self.state()
        if state is None or self.open.loads_open == 0:
            return
        peak = max(reading.rss, reading.hwm if reading.hwm > self.load_hwm else 0)
        with self.open.lock:
            if peak > state["rss_peak"]:
                state["rss_peak"] = peak

    def from_now(self, scope: Scope, reading: Memory | None = None) -> Memory:
        """A load's memory at its start, read here and now (exact: its storage reads and high-water mark start here),
        or the ``reading`` taken where it began (a load of reads outside any load: tracing/loose.py)."""
        reading = reading or process_memory()
        scope.memory_before = reading
        scope.peak = Peak.starting_at(reading)
        monitor = self.monitor()
        if monitor is not None:
            monitor.opened(scope)
        return reading

    def until_now(self, scope: Scope) -> Memory:
        scope.memory_after = reading = process_memory()
        monitor = self.monitor()
        if monitor is not None:
            monitor.closed(scope)
        self.raise_rss_peak(reading)
        return reading

    def phase_boundary(self, phase: Scope, left: bool) -> None:
        """A phase's memory when entered or left: read by the monitor thread at once, off the loading thread (here
        only when there is no monitor)."""
        monitor = self.monitor()
        if monitor is None:
            reading = process_memory()
            monitor_record(phase, left, reading)
            self.raise_rss_peak(reading)
            return
        if left:
            monitor.closed(phase)
        else:
            monitor.opened(phase)
        monitor.mark(phase, left)
