"""The loads open in the process, every thread's: the first to open reads the memory limit (its attributes go on every
load until the last closes), starts the state's load and watches termination signals; the last to close may end the
rank's startup (a load with no preparation to follow)."""

from __future__ import annotations

import time
from typing import Any

from ... import semconv
from ..counting import attributes
from ..counting.memory import limits
from ..counting.scope import OpenScopes, Scope
from ..counting.statemirror import StateMirror
from .startup import Startup


class Loads:
    def __init__(self, open: OpenScopes, state_file: StateMirror, startup: Startup):
        self.open = open
        self.state_file = state_file
        self.startup = startup
        self.limit: dict[str, Any] = {}  # the memory limit attributes of the current outermost load

    def opened(self, scope: Scope, start: dict[str, Any]) -> None:
        if start.get(semconv.STRATEGY) in semconv.PREPARED_STRATEGIES:
            self.startup.awaits_preparation = True
        self.startup.strategy = self.startup.strategy or start.get(semconv.STRATEGY)
        open = self.open
        with open.lock:
            open.loads_open += 1
            open.loads.add(scope)
            first = open.loads_open == 1
        if first:
            found = limits()
            self.limit = attributes.memory_limit(found)
            self.state_file.load_started(scope, start, found)
            self.startup.handlers.watch()
        else:
            self.state_file.load_nested(scope, start)
        if self.limit and scope.recording:
            scope.span.set_attributes(self.limit)

    def closed(self, scope: Scope, error: BaseException | None, end_time: int | None = None) -> None:
        """``end_time``: where the load's span ended, when not now (then the startup it ends ends there too)."""
        open, startup = self.open, self.startup
        with open.lock:
            open.loads.discard(scope)
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
