"""Scopes: loads, phases and files become spans, and the process's state file follows them.

A *scope* is an open span plus the ledger whose counters become its attributes when it ends (attributes.py); a file
scope also has a read slot in the state file (statefile.py), into which its tensor reads are counted. Loads and phases
are tracked per thread of control (a context variable), so a ``zeros_like`` is charged to the load open where it was
called; file scopes belong to the load that opened them, so reads made in transformers' worker threads are charged to
the right file and load without any context crossing threads.

OpenTelemetry is imported, and the process's SDK, files, monitor thread and state built, at the first span of any kind
(``Tracing.provider``): a process that never opens one pays for none of it.

The state file says at every moment what the process is doing and has done (status, the load and phase open, every
count), exact even at a SIGKILL; a termination signal while loading ends the open spans with what they counted
(termination.py); a load that raises says so (``error.type``) and the exception goes on unchanged.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Iterable
from contextvars import ContextVar, Token
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from . import attributes, context, semconv, statefile, summary, termination
from ._log import warn_once
from .activation import import_times, importing, stop_import_clock
from .ledger import Ledger
from .memory import Memory, Peak, limits, oom_kill_count, process_memory
from .monitor import Monitor
from .monitor import record as monitor_record
from .settings import Settings
from .termination import bounded

if TYPE_CHECKING:
    from opentelemetry import trace

    from .provider import Provider


class ScopeKind(Enum):
    LOAD = semconv.SCOPE_LOAD  # ``from_pretrained`` or ``traced_load``: the totals
    PHASE = semconv.SCOPE_PHASE  # a loading step inside a load, one span however often it is entered
    FILE = semconv.SCOPE_FILE  # a file opened or read, charged to the load that opened it
    STAGE = semconv.SCOPE_STAGE  # the rank's startup, and its phases outside loading (rendezvous, preparation)


class Scope:
    """An open span and its ledger."""

    __slots__ = (
        "kind",
        "name",
        "span",
        "ledger",
        "slot",
        "load",
        "phases",
        "files",
        "calls",
        "last_end",
        "ended",
        "recording",
        "memory_before",
        "memory_after",
        "peak",
        "residency",
        "record",
    )

    def __init__(self, kind: ScopeKind, name: str, span: trace.Span, load: Scope | None = None):
        self.kind = kind
        self.name = name
        self.span = span
        self.ledger = Ledger()
        self.slot: statefile.ReadSlot | None = None  # files only: tensors and bytes read through it
        self.load = load  # the load a phase or file belongs to
        self.phases: dict[str, Scope] = {}
        self.files: list[Scope] = []
        self.calls = 0  # phases: times entered
        self.last_end: int | None = None
        self.ended = False
        self.recording = span.is_recording()
        self.memory_before: Memory | None = None  # loads and phases only: memory when first entered,
        self.memory_after: Memory | None = None  # when last left,
        self.peak: Peak | None = None  # and the highest seen in between
        # Files only: (path, size, bytes in the page cache at open); the cached bytes None where unknown.
        self.residency: tuple[str, int, int | None] | None = None
        self.record: tuple[statefile.Writer, int] | None = None  # non-file scopes: its record in the state file


class LoadListener(Protocol):
    """Told when loads open and close (the hook registry: its while-loading hooks are in place only meanwhile)."""

    def load_opened(self) -> None: ...

    def load_closed(self) -> None: ...


_active: ContextVar[tuple[Scope, ...]] = ContextVar("loadtrace_active", default=())


def active() -> tuple[Scope, ...]:
    """Loads and phases open in this thread of control, outermost first; empty outside loading (the fast path)."""
    return _active.get()


def current_load() -> Scope | None:
    for scope in reversed(_active.get()):
        if scope.kind is ScopeKind.LOAD:
            return scope
    return None


def _owner() -> Scope | None:
    """Where a phase entered now is aggregated: the innermost open load or startup stage (``deepspeed.initialize``)."""
    for scope in reversed(_active.get()):
        if scope.kind is ScopeKind.LOAD or scope.kind is ScopeKind.STAGE:
            return scope
    return None


ActiveToken = Token[tuple[Scope, ...]]


class Tracing:
    """Opens and ends the scopes of this process, through its ``Provider``, and keeps its state file current."""

    def __init__(
        self,
        settings: Settings,
        tracer_provider: trace.TracerProvider | None = None,
        listener: LoadListener | None = None,
    ):
        self.settings = settings
        self.job = context.Job(settings.job_id)
        self._given = tracer_provider
        self._provider: Provider | None = None  # made at the first span: see ``provider``
        self.listener = listener
        self.handlers = termination.Handlers(self._terminated)
        self._open_files: set[Scope] = set()  # ended at exit if the job never closed them
        self._open_loads: set[Scope] = set()  # every thread's
        self._loose_phases: set[Scope] = set()  # open phases outside any load
        self._loads_open = 0
        self._lock = threading.Lock()  # the loads open, and the state's load fields with them
        self._load_limit: dict[str, Any] = {}  # the memory limit attributes of the current outermost load
        self._load_hwm = 0  # the process's VmHWM when it began
        self._count_lock = None if getattr(sys, "_is_gil_enabled", lambda: True)() else threading.Lock()
        self._shut_down = False
        self._forked = False  # a forked child never says the job's summary line
        # The rank's startup (``loadtrace.startup``): opened with the first span that has no parent, from the process's
        # start; every parentless span hangs from it until a preparation ends it (or the process exits).
        self._startup: Scope | None = None
        self._startup_over = False
        self._startup_lock = threading.Lock()
        self._open_stages: set[Scope] = set()
        self._last_activity: int | None = None  # when the last load or startup stage ended
        self._awaits_preparation = False  # a load's strategy (FSDP, ZeRO-3) has a preparation follow it
        self._instrumented = time.time_ns()

    @property
    def provider(self) -> Provider:
        """This process's OpenTelemetry set-up (provider.py), made by the first span of any kind: the SDK is imported
        then, from whichever thread opens it, with forks held back meanwhile (``activation.importing``)."""
        provider = self._provider
        if provider is None:
            with importing():
                if self._provider is None:
                    from .provider import Provider

                    made = Provider(
                        self.settings, self.job, self._given, at_exit=self.shutdown, on_sample=self._raise_rss_peak
                    )
                    made.build()  # the SDK, files, state and monitor now, while forks wait
                    self._provider = made
                provider = self._provider
        return provider

    @property
    def state(self) -> statefile.Writer | None:
        """The process's state file, once the first span made the provider (None before, or in a forked child)."""
        provider = self._provider
        return provider.state if provider is not None else None

    def shutdown(self) -> None:
        """End the files the job left open and the startup (where it was never prepared), then flush (bounded); the
        state says the process exited (not died)."""
        for file in list(self._open_files):
            self.close_file(file)
        said = self._shut_down
        try:
            self._end_startup(semconv.STARTUP_END_EXIT, self._settled())
        except Exception:
            pass  # the flush goes ahead whatever happened to the startup
        self._shut_down = True
        self._update_state(self._exited)
        self.handlers.restore()
        provider = self._provider
        if provider is None:
            return  # no span was ever made here: nothing to flush, nothing to say
        state, trace_file, exported = provider.state, provider.trace_file, provider.exporting
        provider.shutdown()
        if exported and state is not None and not (said or self._forked):
            rank = None if state["rank"] < 0 else state["rank"]
            job_id = self.job.id or self.job.fallback_id()
            summary.say(self.settings, job_id, rank, state["local_world_size"], trace_file)

    def _exited(self, state: statefile.Writer) -> None:
        if state["status"] != statefile.STATUS_SIGNALLED:
            state["status"] = statefile.STATUS_EXITED
        state.touch()

    def after_fork(self) -> None:
        """In a forked child: its parent's open files, loads and state are not its own. A slot of a file still open
        in the parent becomes private memory, so reads through a handle the child inherited stay out of the
        parent's state file."""
        for file in self._open_files:
            if file.slot is not None:
                file.slot.counts = detached_slot(file.slot.tensors, file.slot.bytes).counts
        self._open_files = set()
        self._open_loads = set()
        self._loose_phases = set()
        self._loads_open = 0
        self._lock = threading.Lock()
        self._forked = True
        self._startup_lock = threading.Lock()
        self._open_stages = set()
        self._startup, self._startup_over = None, True  # the parent's startup; a child's spans hang from the job
        if self._provider is not None:
            self._provider.after_fork()

    def job_changed(self) -> None:
        """The job id was adopted from the process group's store: the state names the job and trace spans go to."""
        job_id = self.job.id
        startup = self._startup
        if job_id and startup is not None and not startup.ended:
            if startup.span.get_span_context().trace_id != semconv.job_trace_ids(job_id)[0]:
                self._end_startup(semconv.STARTUP_END_JOB)
                self._startup, self._startup_over = None, False  # the next span opens one in the job's trace

        def update(state: statefile.Writer) -> None:
            if job_id:
                state.set_text("job_id", job_id)
                state.set_text("trace_id", format(semconv.job_trace_ids(job_id)[0], "032x"))

        self._update_state(update)

    def path(self, value: Any) -> str:
        """A path as spans show it: as given, or with ``LOADTRACE_REDACT_PATHS`` a stable hash plus the basename, so
        ranks that read the same file still match and no directory names leave the job."""
        text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else str(value)
        if not self.settings.redact_paths:
            return text
        digest = hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:12]
        return f"{digest}/{os.path.basename(text.rstrip('/'))}"

    def _record_error(self, span: trace.Span, error: BaseException) -> None:
        # The job's own exception, raised on unchanged. Its message can name files: kept only when paths may be shown.
        if not self.settings.redact_paths:
            span.record_exception(error)
        self.provider.set_error(span, type(error).__name__)

    # The state file ---------------------------------------------------------------------------------------------

    def _update_state(self, update: Any, scope: Scope | None = None) -> None:
        """Apply ``update(state)``; a state write that fails is a fault like any other: said once, counted on the
        load, never raised into the job."""
        state = self.state
        if state is None:
            return
        try:
            update(state)
        except Exception as error:
            self._state_failed(error, scope)

    def _state_failed(self, error: Exception, scope: Scope | None = None) -> None:
        warn_once(
            "state",
            f"cannot update the state file ({type(error).__name__}: {error}); "
            f"counted in {semconv.HOOK_ERRORS} on its load span",
        )
        self.record_fault("state", scope)

    def _keep(self, scope: Scope) -> None:
        """An open load, phase or stage in the state file (statefile.py), for the witness to end if the process dies
        with it open: spans that finished under it keep their parent."""
        state = self.state
        if state is None or not scope.recording:
            return
        span, context = scope.span, scope.span.get_span_context()
        parent = getattr(span, "parent", None)
        try:
            index = state.open_scope(
                scope.name,
                context.trace_id,
                parent.span_id if parent is not None else 0,
                getattr(span, "start_time", None) or time.time_ns(),
                context.span_id,
            )
        except Exception as error:
            self._state_failed(error, scope)
            return
        if index is not None:
            scope.record = (state, index)

    def _release(self, scope: Scope) -> None:
        record, scope.record = scope.record, None
        if record is not None and record[0] is self.state:  # not a forked child's: the parent's record is its own
            try:
                record[0].close_scope(record[1])
            except Exception as error:
                self._state_failed(error, scope)

    def _raise_rss_peak(self, reading: Memory) -> None:
        """The state's ``rss_peak``: the highest VmRSS seen during the open load (the monitor's samples and the
        readings at phase boundaries), or VmHWM once it rose during the load (then exact)."""
        state = self.state
        if state is None or self._loads_open == 0:
            return
        peak = max(reading.rss, reading.hwm if reading.hwm > self._load_hwm else 0)
        with self._lock:
            if peak > state["rss_peak"]:
                state["rss_peak"] = peak

    def _load_opened(self, scope: Scope, start: dict[str, Any]) -> None:
        if start.get(semconv.STRATEGY) in semconv.PREPARED_STRATEGIES:
            self._awaits_preparation = True
        with self._lock:
            self._loads_open += 1
            self._open_loads.add(scope)
            first = self._loads_open == 1
        if first:
            found = limits()
            self._load_limit = attributes.memory_limit(found)
            self._update_state(lambda state: self._state_load_started(state, scope, start, found), scope)
            try:
                self.handlers.install()
            except Exception as error:  # a job that replaced the signal module, a platform without the signals
                warn_once("signals", f"cannot watch termination signals ({type(error).__name__}: {error})")
        else:
            self._update_state(lambda state: self._state_load_nested(state, scope, start), scope)
        if self._load_limit and scope.recording:
            scope.span.set_attributes(self._load_limit)

    def _state_load_started(self, state: statefile.Writer, scope: Scope, start: dict[str, Any], found: Any) -> None:
        state.load_started()
        state["loads_open"] = 1
        state["status"] = statefile.STATUS_LOADING
        state["signal"] = 0
        state.set_text("load", scope.name)
        state.set_text("phase", scope.name)
        state.set_text("strategy", str(start.get(semconv.STRATEGY, "")))
        state["checkpoint_tensor_bytes"] = int(start.get(semconv.CHECKPOINT_TENSOR_BYTES) or 0)
        state.set_text("failure", "")
        state["memory_limit"], state["memory_limit_source"] = found.limit
        state["rss_peak"] = 0  # this load's: raised from its first reading on
        state["node_memory_total"] = found.node_total
        state["cgroup_memory_max"] = found.cgroup_max or 0
        state.set_text("cgroup", found.cgroup_dir or "")
        before = oom_kill_count(found.cgroup_dir)
        state["oom_kill_before"] = -1 if before is None else before
        state.touch()

    def _state_load_nested(self, state: statefile.Writer, scope: Scope, start: dict[str, Any]) -> None:
        state["loads_open"] = self._loads_open
        state.set_text("phase", scope.name)
        if start.get(semconv.STRATEGY):
            state.set_text("strategy", str(start[semconv.STRATEGY]))
        state.touch()

    def _load_closed(self, scope: Scope, error: BaseException | None) -> None:
        with self._lock:
            self._open_loads.discard(scope)
            self._loads_open = max(0, self._loads_open - 1)
            last = self._loads_open == 0
            others = [load.name for load in self._open_loads]

        def update(state: statefile.Writer) -> None:
            state["loads_open"] = 0 if last else len(others)
            if error is not None:
                state.set_text("failure", type(error).__name__)
            if last:
                # A load unwound by the signal that stopped it stays "signalled"; one that finished after the job's
                # own handler let it go on is idle again.
                if state["status"] == statefile.STATUS_LOADING or error is None:
                    state["status"] = statefile.STATUS_IDLE
                state.set_text("phase", "")
            else:
                self._state_phase(state, others[0])
            state.touch()

        self._update_state(update, scope)
        self._last_activity = time.time_ns()
        if last and not self._open_stages and not self._awaits_preparation:
            self._end_startup(semconv.STARTUP_END_LOAD, memory=scope.memory_after)
        self._settle_handlers()

    def _settle_handlers(self) -> None:
        """Our signal handlers stay while a load, a startup stage or the startup itself is open (so a rank stopped
        before its startup is over still writes it); then they go."""
        if self._loads_open or self._open_stages or self._startup_open():
            return
        try:
            self.handlers.restore()
        except Exception as error:
            warn_once("signals", f"cannot give back the signal handlers ({type(error).__name__}: {error})")

    def _state_phase(self, state: statefile.Writer, fallback: str = "") -> None:
        """The state's ``phase``: the innermost load or phase this thread has open."""
        stack = _active.get()
        state.set_text("phase", stack[-1].name if stack else fallback)
        state.touch()

    # Termination signals ----------------------------------------------------------------------------------------

    def _terminated(self, signo: int) -> None:
        """A termination signal while loading (termination.py): the state says so at once; then every open span ends
        with what it counted, ERROR and the signal's name, and is flushed, all within ``LOADTRACE_EXIT_TIMEOUT``.
        The work runs in a thread: the signal may have interrupted this one inside a lock that work needs."""
        if self._loads_open == 0 and not self._startup_open():
            return
        state = self.state
        if state is not None and self._loads_open:  # the state tells of loads: a rank stopped after its load is idle
            state["status"] = statefile.STATUS_SIGNALLED
            state["signal"] = signo
            state.touch()
        timeout_s = self.settings.exit_timeout_s
        deadline = time.monotonic() + timeout_s
        name = termination.name(signo)

        def work() -> None:
            self._end_open_scopes(name)
            if self._provider is not None:
                self._provider.force_flush(max(0.0, deadline - time.monotonic()))

        if not bounded(work, timeout_s, "loadtrace-signal-flush"):
            warn_once("export", f"gave up flushing spans after {timeout_s:g} s on {name}")

    def _end_open_scopes(self, signal_name: str) -> None:
        """Files, then phases, then loads (innermost first): each with its attributes so far."""
        reading = process_memory()
        monitor = self._monitor()
        if monitor is not None:
            phases = [*self._loose_phases, *(phase for load in self._open_loads for phase in load.phases.values())]
            monitor.settle(phases, reading)
        for file in list(self._open_files):
            self._open_files.discard(file)
            self._finish(file, signal_name=signal_name)
        newest_first = lambda scope: getattr(scope.span, "start_time", 0) or 0  # noqa: E731
        loads = sorted(self._open_loads, key=newest_first, reverse=True)
        stages = sorted(self._open_stages, key=newest_first, reverse=True)
        owners = [*loads, *stages]
        phases = [*self._loose_phases, *(phase for owner in owners for phase in owner.phases.values())]
        for scope in sorted((*phases, *owners), key=newest_first, reverse=True):
            if not scope.ended:
                scope.memory_after = reading
                if scope.peak is not None:
                    scope.peak.raise_to(reading)
                self._finish(scope, signal_name=signal_name)
        # Stopped before its startup was over (loading, preparing, or between a load and its preparation).
        self._end_startup(signal_name, signal_name=signal_name)

    # Spans ------------------------------------------------------------------------------------------------------

    def _start(
        self, name: str, start: dict[str, Any] | None, parent: Scope | None, start_time: int | None = None
    ) -> trace.Span:
        if parent is None:
            parent = self._startup_scope()
        provider = self._provider or self.provider
        return provider.start_span(name, parent.span if parent is not None else None, start, start_time)

    def _monitor(self) -> Monitor | None:
        provider = self._provider
        return provider.monitor if provider is not None else None

    # The startup -------------------------------------------------------------------------------------------------

    def _startup_open(self) -> bool:
        return self._startup is not None and not self._startup.ended

    def _startup_scope(self) -> Scope | None:
        """The rank's startup span while it lasts, opened by the first span that needs it: from the process's start
        (the kernel's record), or from ``instrument()`` where that is unknown."""
        if self._startup_over:
            return None
        with self._startup_lock:
            if self._startup is None and not self._startup_over:
                started, source = context.process_start_ns(), semconv.STARTUP_START_PROCESS
                if started is None or started > time.time_ns():
                    started, source = self._instrumented, semconv.STARTUP_START_INSTRUMENT
                attrs = {semconv.STARTUP_START: source}
                span = self.provider.start_span(semconv.SPAN_STARTUP, None, attrs, started)
                self._startup = Scope(ScopeKind.STAGE, semconv.SPAN_STARTUP, span)
                self._keep(self._startup)
                try:  # a rank stopped before its startup is over still writes it (termination.py)
                    self.handlers.install()
                except Exception as error:
                    warn_once("signals", f"cannot watch termination signals ({type(error).__name__}: {error})")
            return self._startup

    def _settled(self) -> int | None:
        """Where a startup that no preparation ended stops: the end of its last load or stage (None: now, when one is
        still open or none ended)."""
        return None if self._open_loads or self._open_stages else self._last_activity

    def _end_startup(
        self, how: str, end_time: int | None = None, signal_name: str | None = None, memory: Memory | None = None
    ) -> None:
        """End the rank's startup: ``how`` it ended (``STARTUP_END_*`` or the signal's name) and the process's memory
        and storage reads since it started (the kernel's counters are from the process's start, as the span is).
        ``memory``: the reading the load or stage that ends it took at its end (no second read on that thread)."""
        with self._startup_lock:
            startup = self._startup
            self._startup_over = True
            if startup is None or startup.ended:
                return
            startup.ended = True
        self._release(startup)
        imports = import_times()
        if how != semconv.STARTUP_END_JOB:
            stop_import_clock()  # the startup is over for good: later imports are the job's, not its startup's
        if startup.recording:
            startup.span.set_attributes(
                {semconv.STARTUP_END: how, **attributes.startup_end(memory or process_memory())}
            )
            if imports:
                startup.span.set_attribute(semconv.STARTUP_IMPORTS, imports)
            if signal_name is not None:
                startup.span.set_attribute(semconv.EXIT_SIGNAL, signal_name)
                self.provider.set_error(startup.span, signal_name)
        startup.span.end(end_time=end_time)
        self._settle_handlers()

    def enter_stage(self, name: str, start: dict[str, Any]) -> tuple[Scope, ActiveToken]:
        """A startup phase outside loading (accelerate's preparation, ``deepspeed.initialize``): a span per call;
        phases entered inside it (``GatheredParameters``) are aggregated into it, as into a load."""
        stack = _active.get()
        scope = Scope(ScopeKind.STAGE, name, self._start(name, start, stack[-1] if stack else None))
        self._keep(scope)
        self._raise_rss_peak(self._measure_from_now(scope))
        self._open_stages.add(scope)
        try:  # a rank stopped here ends its stage and startup (termination.py), as it ends its loads
            self.handlers.install()
        except Exception as error:
            warn_once("signals", f"cannot watch termination signals ({type(error).__name__}: {error})")
        token = _active.set(stack + (scope,))
        self._update_state(self._state_phase, scope)
        return scope, token

    def exit_stage(
        self, scope: Scope, token: ActiveToken, extra: dict[str, Any], error: BaseException | None, prepares: bool
    ) -> None:
        """``prepares``: the strategy's preparation, whose end (the outermost one's) ends the rank's startup."""
        _active.reset(token)
        self._measure_until_now(scope)
        for phase in scope.phases.values():
            self._finish(phase, phase.last_end)
        self._open_stages.discard(scope)
        self._finish(scope, error=error, extra=extra)
        self._last_activity = time.time_ns()
        self._update_state(self._state_phase, scope)
        if prepares and not any(open.kind is ScopeKind.STAGE for open in _active.get()):
            self._end_startup(semconv.STARTUP_END_PREPARATION, memory=scope.memory_after)
        self._settle_handlers()

    def stage_span(self, name: str, start_time: int, start: dict[str, Any], error: BaseException | None = None) -> None:
        """A startup phase made after the fact (``init_process_group``: its trace is known only once it returned)."""
        stack = _active.get()
        scope = Scope(ScopeKind.STAGE, name, self._start(name, start, stack[-1] if stack else None, start_time))
        self._finish(scope, error=error)
        self._last_activity = time.time_ns()

    def _measure_from_now(self, scope: Scope) -> Memory:
        """A load's memory at its start, read here and now (exact: its storage reads and high-water mark start here)."""
        reading = process_memory()
        scope.memory_before = reading
        scope.peak = Peak.starting_at(reading)
        monitor = self._monitor()
        if monitor is not None:
            monitor.opened(scope)
        return reading

    def _measure_until_now(self, scope: Scope) -> Memory:
        scope.memory_after = reading = process_memory()
        monitor = self._monitor()
        if monitor is not None:
            monitor.closed(scope)
        self._raise_rss_peak(reading)
        return reading

    def _phase_boundary(self, phase: Scope, left: bool) -> None:
        """A phase's memory when entered or left: read by the monitor thread at once, off the loading thread (here
        only when there is no monitor)."""
        monitor = self._monitor()
        if monitor is None:
            reading = process_memory()
            monitor_record(phase, left, reading)
            self._raise_rss_peak(reading)
            return
        if left:
            monitor.closed(phase)
        else:
            monitor.opened(phase)
        monitor.mark(phase, left)

    def start_load(self, name: str, start: dict[str, Any]) -> tuple[Scope, ActiveToken]:
        stack = _active.get()
        scope = Scope(ScopeKind.LOAD, name, self._start(name, start, stack[-1] if stack else None))
        self._keep(scope)
        reading = self._measure_from_now(scope)
        if self._loads_open == 0:
            self._load_hwm = reading.hwm
        self._load_opened(scope, start)
        self._raise_rss_peak(reading)
        if self.listener is not None:
            self.listener.load_opened()
        return scope, _active.set(stack + (scope,))

    def end_load(self, scope: Scope, token: ActiveToken, extra: dict[str, Any], error: BaseException | None) -> None:
        """``extra``: what the hook learnt from the result (the model's held bytes)."""
        _active.reset(token)
        if self.listener is not None:
            self.listener.load_closed()
        reading = self._measure_until_now(scope)
        monitor = self._monitor()
        if monitor is not None:
            monitor.settle(scope.phases.values(), reading)  # boundaries the monitor has not read yet: now
        for phase in scope.phases.values():
            self._finish(phase, phase.last_end)
        for file in scope.files:
            self.close_file(file)
        self._finish(scope, error=error, extra=extra)
        self._load_closed(scope, error)

    def enter_phase(self, name: str) -> tuple[Scope, ActiveToken]:
        """A phase entered several times in one load (transformers' per-file ``load_state_dict``) is ONE span."""
        stack = _active.get()
        load = _owner()
        phase = load.phases.get(name) if load is not None else None
        if phase is None:
            phase = Scope(ScopeKind.PHASE, name, self._start(name, None, stack[-1] if stack else None), load)
            self._keep(phase)
            if load is not None:
                load.phases[name] = phase
            else:
                self._loose_phases.add(phase)
            self._phase_boundary(phase, left=False)
        elif (monitor := self._monitor()) is not None:
            monitor.opened(phase)
        phase.calls += 1
        token = _active.set(stack + (phase,))
        self._update_state(self._state_phase, phase)
        return phase, token

    def exit_phase(self, phase: Scope, token: ActiveToken, error: BaseException | None) -> None:
        _active.reset(token)
        phase.last_end = time.time_ns()
        self._phase_boundary(phase, left=True)
        if error is not None and phase.recording and not phase.ended:
            self._record_error(phase.span, error)
        if phase.load is None:
            self._loose_phases.discard(phase)
            monitor = self._monitor()
            if monitor is not None:
                monitor.settle((phase,), process_memory())  # a phase outside loads ends now: its span needs them
            self._finish(phase, phase.last_end)
        self._update_state(self._state_phase, phase)

    def open_file(self, name: str, start: dict[str, Any], start_time: int | None = None) -> Scope:
        load = current_load()
        stack = _active.get()
        scope = Scope(ScopeKind.FILE, name, self._start(name, start, stack[-1] if stack else None, start_time), load)
        scope.slot = self._new_slot(scope)
        path, size = start.get(semconv.FILE_PATH), start.get(semconv.FILE_SIZE)
        if path is not None and size is not None:
            scope.residency = (path, size, start.get(semconv.FILE_CACHED_BYTES_AT_OPEN))
        if load is not None:
            load.files.append(scope)
        self._open_files.add(scope)
        return scope

    def _new_slot(self, scope: Scope) -> statefile.ReadSlot:
        """The file's read slot in the state file; private memory when there is no state (or no room in it)."""
        state = self.state
        if state is not None:
            try:
                slot = state.new_slot()
                state.add("files_opened", 1)
                return slot
            except Exception as error:
                warn_once("state", f"cannot grow the state file ({type(error).__name__}: {error}); reads are counted")
                self.record_fault("state", scope)
        return detached_slot()

    def count_reads(self, scope: Scope, tensors: Iterable[Any]) -> None:
        """Tensors a file call returned all at once (``torch.load``, ``safetensors.torch.load``), into its slot: they
        were all read by the time the call returned, so they are counted together, with one ``+=`` each."""
        slot = scope.slot
        if slot is None:
            return
        count = nbytes = 0
        for tensor in tensors:
            count += 1
            nbytes += int(tensor.nbytes)
        if self._count_lock is None:
            counts = slot.counts
            counts[0] += count
            counts[1] += nbytes
        else:
            with self._count_lock:
                counts = slot.counts
                counts[0] += count
                counts[1] += nbytes

    def close_file(self, scope: Scope, error: BaseException | None = None) -> None:
        self._open_files.discard(scope)
        if scope.ended or self._shut_down:
            return
        self._finish(scope, error=error)

    def point_span(self, name: str, parent: Scope | None, start_time: int, start: dict[str, Any]) -> None:
        """A short span for one tensor (``LOADTRACE_DETAIL=tensor``), parented explicitly: it may run in a worker
        thread that knows nothing of the load."""
        self._start(name, start, parent, start_time).end()

    def _finish(
        self,
        scope: Scope,
        end_time: int | None = None,
        error: BaseException | None = None,
        extra: dict[str, Any] | None = None,
        signal_name: str | None = None,
    ) -> None:
        if scope.ended:
            return
        scope.ended = True
        self._release(scope)
        span = scope.span
        if scope.recording:
            if scope.kind is ScopeKind.LOAD:
                span.set_attributes(attributes.load_end(scope, extra or {}))
            elif scope.kind is ScopeKind.PHASE:
                span.set_attributes(attributes.phase_end(scope))
            elif scope.kind is ScopeKind.STAGE:
                span.set_attributes(attributes.stage_end(scope, extra or {}))
            else:
                span.set_attributes(attributes.file_end(scope))
            if error is not None:
                self._record_error(span, error)
                if scope.kind is ScopeKind.LOAD:
                    span.set_attribute(semconv.ERROR_TYPE, type(error).__name__)
            if signal_name is not None:
                span.set_attribute(semconv.EXIT_SIGNAL, signal_name)
                self.provider.set_error(span, signal_name)
        span.end(end_time=end_time)

    # Records from hooks -----------------------------------------------------------------------------------------

    def record_materialized(self, site: str, device: str, nbytes: int) -> None:
        for scope in _active.get():
            scope.ledger.add_materialized(site, device, nbytes)
        self._update_state(lambda state: state.add(statefile.device_column(device), nbytes))

    def record_conversion(self, operations: tuple[str, ...], nbytes: int) -> None:
        # Once per converted weight, inside the load's hottest loop: the fewest steps (see ``_update_state``).
        record = (operations, nbytes)
        for scope in _active.get():
            scope.ledger.conversions.append(record)
        provider = self._provider
        state = provider.state if provider is not None else None
        if state is not None:
            try:
                state.add("conversions", 1)
                state.add("conversion_bytes", nbytes)
            except Exception as error:
                self._state_failed(error)

    def record_fault(self, where: str, scope: Scope | None = None) -> None:
        """Count a fault on the load it belongs to: the scope's (a file read in a worker thread), else this thread's."""
        if scope is None:
            load = current_load()
        else:
            load = scope if scope.kind is ScopeKind.LOAD else scope.load
        if load is not None:
            load.ledger.add_error(where)
            state = self.state
            if state is not None:
                try:
                    state.add("hook_errors", 1)
                except Exception:
                    pass  # the state is what failed: the span still counts it


def detached_slot(tensors: int = 0, nbytes: int = 0) -> statefile.ReadSlot:
    """A read slot in private memory: for a process without a state file, and a forked child's inherited files."""
    counts = memoryview(bytearray(statefile.SLOT_BYTES)).cast("q")
    counts[0], counts[1] = tensors, nbytes
    return statefile.ReadSlot(counts)


# The tracing of this process while instrumented: what every hook reads first (None: pass through untraced).
_tracing: Tracing | None = None


def tracing() -> Tracing | None:
    return _tracing


def set_tracing(value: Tracing | None) -> None:
    global _tracing
    _tracing = value


def _after_fork_in_child() -> None:
    """A forked child (DataLoader worker, multiprocessing pool) is a process of its own: it builds its own SDK and
    file on first use, and starts outside whatever load its parent had open."""
    if _tracing is not None:
        _tracing.after_fork()
    _active.set(())


os.register_at_fork(after_in_child=_after_fork_in_child)
