"""The tracing front: loads, phases, stages and files become spans (scope.py), through the process's ``Provider``.

OpenTelemetry is imported, and the process's SDK, files, monitor thread and state built, at the first span of any kind
(``Tracing.provider``): a process that never opens one pays for none of it. File scopes belong to the load that
opened them, so reads made in transformers' worker threads are charged to the right file and load without any context
crossing threads; a load that raises says so (``error.type``) and the exception goes on unchanged.

What follows the scopes is each in a collaborator the front owns: the state file (statemirror.py: exact even at a
SIGKILL), memory readings and the state's RSS peak (readings.py), the rank's startup span (startup.py), the loads open
(loads.py), their phases (phasing.py), the stages outside loading (stages.py), the loads no call holds open (loose.py:
reads outside any load, streaming loaders), and the process's exit, forks and termination signals (lifecycle.py). The
hooks reach all of it through the front.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ... import semconv, statefile
from ...statefile import ReadSlot as ReadSlot  # the hooks' read slots, through the front
from .. import context, importing
from ..beside import termination
from ..counting import workload
from ..counting.memory import Memory
from ..counting.memory import cached_bytes_of as cached_bytes_of  # the hooks' page-cache reads, through the front
from ..counting.monitor import Monitor
from ..counting.readings import Readings
from ..counting.scope import ActiveToken as ActiveToken
from ..counting.scope import OpenScopes, Scope, ScopeKind, count_reads
from ..counting.scope import active as active
from ..counting.scope import active_scopes as _active
from ..counting.scope import adopt as adopt
from ..counting.scope import current_load as current_load
from ..counting.scope import detached_slot as detached_slot
from ..counting.scope import release as release
from ..counting.statemirror import StateMirror
from ..counting.workload import trained as trained
from ..settings import Settings, shown_path
from .ending import Ends
from .lifecycle import Lifecycle
from .loads import LoadListener as LoadListener
from .loads import Loads
from .loose import Loose, not_before
from .phasing import Phases
from .stages import Stages
from .startup import Startup

if TYPE_CHECKING:
    from opentelemetry import trace

    from .provider import Provider


class Tracing:
    """Opens and ends the scopes of this process; owns what follows them (the module's docstring)."""

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
        self.open = OpenScopes()
        self.state_file = StateMirror(self._state, self.open, self.record_fault)
        self.readings = Readings(self.open, self._state, self._monitor, self.state_file.failed)
        self.handlers = termination.Handlers(lambda signo: self.lifecycle.terminated(signo))
        self.startup = Startup(self, self.handlers, self.open, self.state_file)
        self.loads = Loads(self.open, self.state_file, self.startup, self.readings, listener)
        self.ends = Ends(settings, self, self.state_file)
        self.stages = Stages(self.open, self.state_file, self.readings, self.startup, self.ends)
        self.phases = Phases(self.open, self.state_file, self.readings, self.ends, self._monitor, self._start)
        self.lifecycle = Lifecycle(
            settings, self.job, self.open, self.startup, self.state_file, self.readings, self.ends, self
        )
        workload.forget()
        self.loose = Loose(self, settings.load_idle_s)

    @property
    def provider(self) -> Provider:
        """This process's OpenTelemetry set-up (provider.py), made by the first span of any kind: the SDK is imported
        then, from whichever thread opens it, with forks held back meanwhile (``instrumentation.importing``)."""
        provider = self._provider
        if provider is None:
            with importing():
                if self._provider is None:
                    from .provider import Provider

                    made = Provider(self.settings, self.job, self._given, self.shutdown, self.readings.sampled)
                    made.build()  # the SDK, files, state and monitor now, while forks wait
                    self._provider = made
                provider = self._provider
        return provider

    @property
    def made(self) -> Provider | None:
        """The provider once the first span made it (None before); ``provider`` makes it."""
        return self._provider

    def _state(self) -> statefile.Writer | None:
        provider = self._provider
        return provider.state if provider is not None else None

    state = property(_state, doc="The process's state file, once the first span made the provider (None before).")

    def _monitor(self) -> Monitor | None:
        provider = self._provider
        return provider.monitor if provider is not None else None

    def shutdown(self) -> None:
        self.loose.finish()
        self.lifecycle.shutdown()

    def after_fork(self) -> None:
        self.loose.after_fork()
        self.lifecycle.after_fork()

    def job_changed(self) -> None:
        """The job id was adopted from the process group's store: the state names the job and trace spans go to."""
        self.startup.job_changed(self.job.id)
        self.state_file.job(self.job.id)

    def path(self, value: Any) -> str:
        """A path as spans show it (``LOADTRACE_REDACT_PATHS``: settings.shown_path)."""
        return shown_path(value, self.settings.redact_paths)

    # Scopes ---------------------------------------------------------------------------------------------------------

    def start_load(self, name: str, start: dict[str, Any]) -> tuple[Scope, ActiveToken]:
        self.loose.settle()  # reads before it outside any load were a load of their own: it ends where they did
        stack = _active.get()
        scope = Scope(ScopeKind.LOAD, name, self._start(name, start, stack[-1] if stack else None))
        scope.nested = any(open.kind is ScopeKind.LOAD for open in stack)
        self.loads.opened(scope, start)
        return scope, _active.set(stack + (scope,))

    def start_detached_load(
        self, name: str, start: dict[str, Any], extra: Callable[[], dict[str, Any]] = dict
    ) -> Scope:
        """A load that outlives the call that opened it (a streaming loader's): no thread's active load, its files
        given to it explicitly (``open_file(load=)``); ``end_detached_load`` ends it, else the process's exit (with
        ``extra()``: what its hook counted)."""
        self.loose.settle()
        scope = Scope(ScopeKind.LOAD, name, self._start(name, start, None))
        self.loads.opened(scope, start)
        self.loose.detached[scope] = extra
        return scope

    def start_loose_load(self, start_time: int | None, reading: Memory | None) -> Scope:
        start = {semconv.LOAD_NAME: semconv.LOAD_NAME_READS}
        scope = Scope(ScopeKind.LOAD, semconv.SPAN_LOAD, self._start(semconv.SPAN_LOAD, start, None, start_time))
        self.loads.opened(scope, start, reading)
        return scope

    def end_load(self, scope: Scope, token: ActiveToken, extra: dict[str, Any], error: BaseException | None) -> None:
        """``extra``: what the hook learnt from the result (the model's held bytes)."""
        _active.reset(token)
        self.end_detached_load(scope, extra, error)

    def end_detached_load(
        self, scope: Scope, extra: dict[str, Any], error: BaseException | None = None, end_time: int | None = None
    ) -> None:
        """``end_time``: where its span ends when not now (a loose load: where its last file closed)."""
        self.loose.detached.pop(scope, None)
        if not scope.ended:  # else a termination signal ended its spans: only its closing is left
            self.loads.closing()
            reading = self.readings.until_now(scope)
            monitor = self._monitor()
            if monitor is not None:
                monitor.settle(scope.phases.values(), reading)  # boundaries the monitor has not read yet: now
            for phase in scope.phases.values():
                self.ends.finish(phase, phase.last_end)
            for file in scope.files:
                self.close_file(file)
            self.ends.finish(scope, end_time=end_time, error=error, extra=extra)
        self.loads.closed(scope, error, end_time)

    def enter_stage(self, name: str, start: dict[str, Any]) -> tuple[Scope, ActiveToken]:
        """A startup phase outside loading (accelerate's preparation, ``deepspeed.initialize``): a span per call;
        phases entered inside it (``GatheredParameters``) are aggregated into it, as into a load (stages.py)."""
        stack = _active.get()
        scope = Scope(ScopeKind.STAGE, name, self._start(name, start, stack[-1] if stack else None))
        return scope, self.stages.entered(scope, stack)

    def exit_stage(
        self, scope: Scope, token: ActiveToken, extra: dict[str, Any], error: BaseException | None, prepares: bool
    ) -> None:
        """``prepares``: the strategy's preparation, whose end (the outermost one's) ends the rank's startup."""
        self.stages.left(scope, token, extra, error, prepares)

    def stage_span(self, name: str, start_time: int, start: dict[str, Any], error: BaseException | None = None) -> None:
        """A startup phase made after the fact (``init_process_group``: its trace is known only once it returned)."""
        stack = _active.get()
        scope = Scope(ScopeKind.STAGE, name, self._start(name, start, stack[-1] if stack else None, start_time))
        self.ends.finish(scope, error=error)
        self.startup.last_activity = time.time_ns()

    def enter_phase(self, name: str) -> tuple[Scope, ActiveToken]:
        """A phase entered several times in one load (transformers' per-file ``load_state_dict``) is ONE span."""
        return self.phases.entered(name)

    def exit_phase(self, phase: Scope, token: ActiveToken, error: BaseException | None) -> None:
        self.phases.left(phase, token, error)

    def open_file(
        self,
        name: str,
        start: dict[str, Any],
        start_time: int | None = None,
        load: Scope | None = None,
        before: Memory | None = None,
        expected: bool = False,
    ) -> Scope:
        """A file opened or read: charged to ``load`` if given, else to this thread's load, else to the process's load
        of reads outside any load (loose.py: ``before``, the memory where this read began, if it opens that load;
        ``expected``: the read was told to it before the call, ``Loose.expect_read``)."""
        stack = _active.get()
        loose = False
        if load is None:
            load = current_load()
            if load is None:
                load, loose = self.loose.attach(start_time, expected, before), True
                start_time = not_before(load, start_time)
        parent = stack[-1] if stack and not loose else load
        scope = Scope(ScopeKind.FILE, name, self._start(name, start, parent, start_time), load)
        path, size = start.get(semconv.FILE_PATH), start.get(semconv.FILE_SIZE)
        again = path is not None and path in load.opened
        scope.slot = self.state_file.new_slot(scope, counted=not again)  # a file opened again is no second file
        if path is not None and size is not None:
            scope.residency = (path, size, start.get(semconv.FILE_CACHED_BYTES_AT_OPEN))
        load.files.append(scope)
        load.opened.add(path if path is not None else id(scope))
        self.open.files.add(scope)
        if loose:
            self.loose.opened(scope)
        return scope

    def count_reads(self, scope: Scope, tensors: Iterable[Any]) -> None:
        count_reads(scope.slot, tensors)

    def close_file(self, scope: Scope, error: BaseException | None = None) -> None:
        self.open.files.discard(scope)
        if scope.ended or self.lifecycle.shut_down:
            return
        self.ends.finish(scope, error=error)
        self.loose.closed(scope)

    def point_span(self, name: str, parent: Scope | None, start_time: int, start: dict[str, Any]) -> None:
        """A short span for one tensor (``LOADTRACE_DETAIL=tensor``), parented explicitly: it may run in a worker
        thread that knows nothing of the load."""
        self._start(name, start, parent, start_time).end()

    def _start(
        self, name: str, start: dict[str, Any] | None, parent: Scope | None, start_time: int | None = None
    ) -> trace.Span:
        if parent is None:
            parent = self.startup.scope()
        provider = self._provider or self.provider
        return provider.start_span(name, parent.span if parent is not None else None, start, start_time)

    # Records from hooks -----------------------------------------------------------------------------------------

    def record_materialized(self, site: str, device: str, nbytes: int) -> None:
        for scope in _active.get():
            scope.ledger.add_materialized(site, device, nbytes)
        self.state_file.update(lambda state: state.add(statefile.device_column(device), nbytes))

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
                self.state_file.failed(error)

    def record_cast(self, scope: Scope | None, start_ns: int, end_ns: int, nbytes: int) -> None:
        """A read tensor cast to the model's dtype or copied to a device as transformers materialised it, in a worker
        thread of its pool (no active scopes there): charged to the load of the file it came from (``scope``), else to
        this thread's."""
        load = current_load() if scope is None else scope if scope.kind is ScopeKind.LOAD else scope.load
        if load is not None:
            load.ledger.casts.append((start_ns, end_ns, nbytes))

    def record_fault(self, where: str, scope: Scope | None = None) -> None:
        """Count a fault on the load it belongs to: the scope's (a file read in a worker thread), else this thread's."""
        if scope is None:
            load = current_load()
        else:
            load = scope if scope.kind is ScopeKind.LOAD else scope.load
        if load is not None:
            load.ledger.add_error(where)
            self.state_file.hook_error()


# The tracing of this process while instrumented: what every hook reads first (None: pass through untraced).
_tracing: Tracing | None = None


def tracing() -> Tracing | None:
    return _tracing


def set_tracing(value: Tracing | None) -> None:
    global _tracing
    _tracing = value


def saw_training(sign: str) -> None:
    """A sign of training (``counting/workload.py``): the load and startup spans that end later carry it; the
    process's first, when its startup span has already ended, is a ``loadtrace.training_sign`` span of its own."""
    if not workload.saw_training(sign):
        return
    tracing = _tracing
    startup = tracing.startup.scope_ if tracing is not None else None
    if tracing is not None and startup is not None and startup.ended and not tracing.lifecycle.shut_down:
        tracing.point_span(semconv.SPAN_TRAINING_SIGN, None, time.time_ns(), workload.attributes())


def _after_fork_in_child() -> None:
    """A forked child (DataLoader worker, multiprocessing pool) is a process of its own: it builds its own SDK and
    file on first use, and starts outside whatever load its parent had open."""
    if _tracing is not None:
        _tracing.after_fork()
    _active.set(())


os.register_at_fork(after_in_child=_after_fork_in_child)
