"""The phases of a load or a startup stage (transformers' ``load_state_dict``, ``convert``, DeepSpeed's gathered
parameters ...): a phase entered several times in one load is ONE span, aggregated into its owner (the innermost open
load or stage), kept in the state file and read at its boundaries; a phase outside any load ends at its exit."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..counting.memory import process_memory
from ..counting.monitor import Monitor
from ..counting.readings import Readings
from ..counting.scope import ActiveToken, OpenScopes, Scope, ScopeKind, owner
from ..counting.scope import active_scopes as _active
from ..counting.statemirror import StateMirror, set_phase
from .ending import Ends

if TYPE_CHECKING:
    from opentelemetry import trace

# The front's span start (spans.Tracing._start): name, start attributes, parent scope.
StartSpan = Callable[[str, "dict[str, Any] | None", "Scope | None"], "trace.Span"]


class Phases:
    def __init__(
        self,
        open: OpenScopes,
        state_file: StateMirror,
        readings: Readings,
        ends: Ends,
        monitor: Callable[[], Monitor | None],
        start_span: StartSpan,
    ):
        self.open, self.state_file, self.readings, self.ends = open, state_file, readings, ends
        self.monitor, self.start_span = monitor, start_span

    def entered(self, name: str) -> tuple[Scope, ActiveToken]:
        stack = _active.get()
        load = owner()
        phase = load.phases.get(name) if load is not None else None
        if phase is None:
            phase = Scope(ScopeKind.PHASE, name, self.start_span(name, None, stack[-1] if stack else None), load)
            self.state_file.keep(phase)
            if load is not None:
                load.phases[name] = phase
            else:
                self.open.loose_phases.add(phase)
            self.readings.phase_boundary(phase, left=False)
        elif (monitor := self.monitor()) is not None:
            monitor.opened(phase)
        phase.calls += 1
        token = _active.set(stack + (phase,))
        self.state_file.update(set_phase, phase)
        return phase, token

    def left(self, phase: Scope, token: ActiveToken, error: BaseException | None) -> None:
        _active.reset(token)
        phase.last_end = time.time_ns()
        self.readings.phase_boundary(phase, left=True)
        if error is not None and phase.recording and not phase.ended:
            self.ends.record_error(phase.span, error)
        if phase.load is None:
            self.open.loose_phases.discard(phase)
            monitor = self.monitor()
            if monitor is not None:
                monitor.settle((phase,), process_memory())  # a phase outside loads ends now: its span needs them
            self.ends.finish(phase, phase.last_end)
        self.state_file.update(set_phase, phase)
