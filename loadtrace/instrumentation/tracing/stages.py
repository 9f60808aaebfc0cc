"""The startup stages open in the process, outside loading (accelerate's preparation, ``deepspeed.initialize``):
entered, a stage is kept in the state file, charged the memory reading, and watched for termination signals (a rank
stopped there ends its stage and startup, as it ends its loads); left, its phases and span end, and the end of the
outermost preparation ends the rank's startup."""

from __future__ import annotations

import time

from ... import semconv
from ..counting.readings import Readings
from ..counting.scope import ActiveToken, OpenScopes, Scope, ScopeKind, active_scopes
from ..counting.statemirror import StateMirror, set_phase
from .ending import Ends
from .startup import Startup


class Stages:
    def __init__(self, open: OpenScopes, state_file: StateMirror, readings: Readings, startup: Startup, ends: Ends):
        self.open, self.state_file, self.readings, self.startup, self.ends = open, state_file, readings, startup, ends

    def entered(self, scope: Scope, stack: tuple[Scope, ...]) -> ActiveToken:
        """The stage ``scope`` begins inside ``stack`` (this thread's open scopes): it becomes the innermost."""
        self.state_file.keep(scope)
        self.readings.raise_rss_peak(self.readings.from_now(scope))
        self.open.stages.add(scope)
        self.startup.handlers.watch()
        token = active_scopes.set(stack + (scope,))
        self.state_file.update(set_phase, scope)
        return token

    def left(self, scope: Scope, token: ActiveToken, extra: dict, error: BaseException | None, prepares: bool) -> None:
        """``prepares``: the strategy's preparation, whose end (the outermost one's) ends the rank's startup."""
        active_scopes.reset(token)
        self.readings.until_now(scope)
        for phase in scope.phases.values():
            self.ends.finish(phase, phase.last_end)
        self.open.stages.discard(scope)
        self.ends.finish(scope, error=error, extra=extra)
        self.startup.last_activity = time.time_ns()
        self.state_file.update(set_phase, scope)
        if prepares and not any(open.kind is ScopeKind.STAGE for open in active_scopes.get()):
            self.startup.end(semconv.STARTUP_END_PREPARATION, memory=scope.memory_after)
        self.startup.settle_handlers()
