"""The loads open in the process, every thread's: the first to open reads the memory limit (its attributes go on every
load until the last closes), starts the state's load and its storage count, and watches termination signals; the last
to close may end the rank's startup (a load with no preparation to follow). The listener (the hook registry) is told
of each, as its while-loading hooks are in place only meanwhile."""

from __future__ import annotations

import time
from typing import Any, Protocol

from ... import semconv
from ..counting import attributes
from ..counting.memory import Memory, limits
from ..counting.readings import Readings
from ..counting.scope import OpenScopes, Scope
from ..counting.statemirror import StateMirror
from .startup import Startup


class LoadListener(Protocol):
    """Told when loads open and close (the hook registry: its while-loading hooks are in place only meanwhile)."""

    def load_opened(self) -> None: ...

    def load_closed(self) -> None: ...


class Loads:
    def __init__(
        self,
        open: OpenScopes,
        state_file: StateMirror,
        startup: Startup,
        readings: Readings,
        listener: LoadListener | None,
    ):
        self.open = open
        self.state_file = state_file
        self.startup = startup
        self.readings = readings
        self.listener = listener
        self.limit: dict[str, Any] = {}  # the memory limit attributes of the current outermost load

    def opened(self, scope: Scope, start: dict[str, Any], reading: Memory | None = None) -> None:
        """``reading``: the memory where the load began, when not now (a loose load's: before its first read)."""
        self.state_file.keep(scope)
        reading = self.readings.from_now(scope, reading)
        if self.open.loads_open == 0:
            scope.fetching = self.readings.outermost_load(reading)
        else:
            scope.fetching = self.readings.fetching
        self._count(scope, start)
        self.readings.raise_rss_peak(reading)
        if self.listener is not None:
            self.listener.load_opened()

    def closing(self) -> None:
        if self.listener is not None:
            self.listener.load_closed()

    def _count(self, scope: Scope, start: dict[str, Any]) -> None:
        if start.get(semconv.STRATEGY) in semconv.PREPARED_STRATEGIES:
            self.startup.awaits_preparation = True
        self.startup.strategy = self.startup.strategy or start.get(semconv.STRATEGY)
        open = self.open
        # The load for reads outside any load does not hold our termination handlers in place: it stays open while
        # idle (loose.py), as a pool or DataLoader worker waits for work in a lock, where a Python handler may never
        # run and the worker would then outlive the SIGTERM that ends its pool; by the default action it dies as
        # untraced, and its state file keeps its counts.
        watches = start.get(semconv.LOAD_NAME) != semconv.LOAD_NAME_READS
        with open.lock:
            open.loads_open += 1
            open.loads.add(scope)
            first = open.loads_open == 1
            if watches:
                open.watching.add(scope)
        if first:
            found = limits()
            self.limit = attributes.memory_limit(found)
            self.state_file.load_started(scope, start, found)
        else:
            self.state_file.load_nested(scope, start)
        if watches:
            self.startup.handlers.watch()
        if self.limit and scope.recording:
            scope.span.set_attributes(self.limit)

    def closed(self, scope: Scope, error: BaseException | None, end_time: int | None = None) -> None:
        """``end_time``: where the load's span ended, when not now (then the startup it ends ends there too)."""
        open, startup = self.open, self.startup
        with open.lock:
            if scope not in open.loads:
                return  # closed already (a streaming loader's load, ended at exit and then by the job)
            open.loads.discard(scope)
            open.watching.discard(scope)
            open.loads_open = max(0, open.loads_open - 1)
            last = open.loads_open == 0
            others = [load.name for load in open.loads]
        self.state_file.load_closed(scope, error, last, others)
        startup.last_activity = end_time or time.time_ns()
        if last and not open.stages and not startup.awaits_preparation:
            startup.end(semconv.STARTUP_END_LOAD, end_time, memory=scope.memory_after)
        startup.settle_handlers()

    def learned(self, scope: Scope, learned: dict[str, Any]) -> None:
        """What a load's hook learnt after it began (a DCP load: its strategy, from its plan, and the checkpoint's
        tensor bytes, from its metadata): on its span, and in the state file."""
        if scope.ended:
            return
        self.startup.strategy = self.startup.strategy or learned.get(semconv.STRATEGY)
        if scope.recording:
            scope.span.set_attributes(learned)
        self.state_file.load_learned(scope, learned)
