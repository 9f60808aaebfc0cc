"""The rank's startup (``loadtrace.startup``): opened with the first span that has no parent, from the process's start;
every parentless span hangs from it until a preparation ends it (or a load with nothing to prepare, the job's trace
being adopted, a termination signal, the process's exit)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from ... import semconv
from .. import context
from ..beside.termination import Handlers
from ..counting import attributes
from ..counting.memory import Memory, process_memory
from ..counting.scope import OpenScopes, Scope, ScopeKind
from ..importclock import import_times, stop_import_clock

if TYPE_CHECKING:
    from ..counting.statemirror import StateMirror
    from .provider import ProviderSource


class Startup:
    """``source.provider``: the process's provider (made by then: the first span made it). Our signal handlers stay
    while a load, a startup stage or the startup itself is open (``settle_handlers``), so a rank stopped before its
    startup is over still writes it."""

    def __init__(
        self,
        source: ProviderSource,
        handlers: Handlers,
        open: OpenScopes,
        state_file: StateMirror | None = None,
    ):
        self.source = source
        self.handlers = handlers
        self.open = open
        self.state_file = state_file  # keeps the open startup's record for the witness (issue 26)
        self.scope_: Scope | None = None
        self.over = False
        self.lock = threading.Lock()
        self.last_activity: int | None = None  # when the last load or startup stage ended
        self.awaits_preparation = False  # a load's strategy (FSDP, ZeRO-3) has a preparation follow it
        self.strategy: str | None = None  # its first load's, for the startup metric (startup_metrics.py)
        self.instrumented = time.time_ns()

    def is_open(self) -> bool:
        return self.scope_ is not None and not self.scope_.ended

    def scope(self) -> Scope | None:
        """The rank's startup span while it lasts, opened by the first span that needs it: from the process's start
        (the kernel's record), or from ``instrument()`` where that is unknown."""
        if self.over:
            return None
        with self.lock:
            if self.scope_ is None and not self.over:
                started, source = context.process_start_ns(), semconv.STARTUP_START_PROCESS
                if started is None or started > time.time_ns():
                    started, source = self.instrumented, semconv.STARTUP_START_INSTRUMENT
                attrs = {semconv.STARTUP_START: source}
                span = self.source.provider.start_span(semconv.SPAN_STARTUP, None, attrs, started)
                self.scope_ = Scope(ScopeKind.STAGE, semconv.SPAN_STARTUP, span)
                if self.state_file is not None:
                    self.state_file.keep(self.scope_)
                self.handlers.watch()  # a rank stopped before its startup is over still writes it (termination.py)
            return self.scope_

    def settled(self) -> int | None:
        """Where a startup that no preparation ended stops: the end of its last load or stage (None: now, when one is
        still open or none ended)."""
        return None if self.open.loads or self.open.stages else self.last_activity

    def end(
        self, how: str, end_time: int | None = None, signal_name: str | None = None, memory: Memory | None = None
    ) -> None:
        """End the rank's startup: ``how`` it ended (``STARTUP_END_*`` or the signal's name) and the process's memory
        and storage reads since it started (the kernel's counters are from the process's start, as the span is).
        ``memory``: the reading the load or stage that ends it took at its end (no second read on that thread)."""
        with self.lock:
            startup = self.scope_
            self.over = True
            if startup is None or startup.ended:
                return
            startup.ended = True
        if self.state_file is not None:
            self.state_file.release(startup)
        imports = import_times()
        if how != semconv.STARTUP_END_JOB:
            stop_import_clock()  # the startup is over for good: later imports are the job's, not its startup's
        end_time = end_time if end_time is not None else time.time_ns()
        phases = self.source.provider.phases
        if startup.recording:
            startup.span.set_attributes(
                {semconv.STARTUP_END: how, **attributes.startup_end(memory or process_memory())}
            )
            if imports:
                startup.span.set_attribute(semconv.STARTUP_IMPORTS, imports)
            if phases is not None and (split := phases.split(startup.span, end_time, imports)) is not None:
                startup.span.set_attribute(semconv.STARTUP_PHASE_NS, split)
            if signal_name is not None:
                startup.span.set_attribute(semconv.EXIT_SIGNAL, signal_name)
                self.source.provider.set_error(startup.span, signal_name)
        if phases is not None and how != semconv.STARTUP_END_JOB:
            phases.stop()
        startup.span.end(end_time=end_time)
        if how != semconv.STARTUP_END_JOB:  # the real end, in the job's trace: measured once
            measured = {semconv.STRATEGY: self.strategy, semconv.STARTUP_END: how}
            self.source.provider.measure(semconv.METRIC_STARTUP_DURATION, startup.span, measured)
        self.settle_handlers()

    def settle_handlers(self) -> None:
        if not (self.open.watching or self.open.stages or self.is_open()):
            self.handlers.release()

    def job_changed(self, job_id: str | None) -> None:
        """The job id was adopted: a startup in another trace ends, and the next span opens one in the job's."""
        startup = self.scope_
        if job_id and startup is not None and not startup.ended:
            if startup.span.get_span_context().trace_id != semconv.job_trace_ids(job_id)[0]:
                self.end(semconv.STARTUP_END_JOB)
                self.scope_, self.over = None, False

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        self.scope_, self.over = None, True  # the parent's startup; a child's spans hang from the job
