"""Scopes: loads, phases and files become spans.

A *scope* is an open span plus the ledger whose counters become its attributes when it ends (attributes.py). Loads
and phases are tracked per thread of control (a context variable), so a ``zeros_like`` is charged to the load open
where it was called; file scopes belong to the load that opened them, so reads made in transformers' worker threads
are charged to the right file and load without any context crossing threads.
"""

from __future__ import annotations

import hashlib
import os
import time
from contextvars import ContextVar, Token
from enum import Enum
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from . import attributes, context, semconv
from .ledger import Ledger
from .memory import Memory, Peak, process_memory
from .provider import Provider
from .settings import Settings


class ScopeKind(Enum):
    LOAD = semconv.SCOPE_LOAD  # ``from_pretrained`` or ``traced_load``: the totals
    PHASE = semconv.SCOPE_PHASE  # a loading step inside a load, one span however often it is entered
    FILE = semconv.SCOPE_FILE  # a file opened or read, charged to the load that opened it


class Scope:
    """An open span and its ledger."""

    __slots__ = (
        "kind",
        "span",
        "ledger",
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
    )

    def __init__(self, kind: ScopeKind, span: trace.Span, load: Scope | None = None):
        self.kind = kind
        self.span = span
        self.ledger = Ledger()
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


ActiveToken = Token[tuple[Scope, ...]]


class Tracing:
    """Opens and ends the scopes of this process, through its ``Provider``."""

    def __init__(
        self,
        settings: Settings,
        tracer_provider: trace.TracerProvider | None = None,
        listener: LoadListener | None = None,
    ):
        self.settings = settings
        self.job = context.Job(settings.job_id)
        self.provider = Provider(settings, self.job, tracer_provider, at_exit=self.shutdown)
        self.listener = listener
        self._open_files: set[Scope] = set()  # ended at exit if the job never closed them
        self._shut_down = False

    def shutdown(self) -> None:
        """End the files the job left open, then flush (bounded)."""
        for file in list(self._open_files):
            self.close_file(file)
        self._shut_down = True
        self.provider.shutdown()

    def after_fork(self) -> None:
        self.provider.after_fork()

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
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))

    # Spans ------------------------------------------------------------------------------------------------------

    def _start(
        self, name: str, start: dict[str, Any] | None, parent: Scope | None, start_time: int | None = None
    ) -> trace.Span:
        parent_context = trace.set_span_in_context(parent.span) if parent is not None else self.provider.job_context()
        return self.provider.tracer.start_span(name, context=parent_context, attributes=start, start_time=start_time)

    def _measure_from_now(self, scope: Scope) -> None:
        reading = process_memory()
        scope.memory_before = reading
        scope.peak = Peak.starting_at(reading)
        if self.provider.monitor is not None:
            self.provider.monitor.opened(scope)

    def _measure_until_now(self, scope: Scope) -> None:
        scope.memory_after = process_memory()
        if self.provider.monitor is not None:
            self.provider.monitor.closed(scope)

    def start_load(self, name: str, start: dict[str, Any]) -> tuple[Scope, ActiveToken]:
        stack = _active.get()
        scope = Scope(ScopeKind.LOAD, self._start(name, start, stack[-1] if stack else None))
        self._measure_from_now(scope)
        if self.listener is not None:
            self.listener.load_opened()
        return scope, _active.set(stack + (scope,))

    def end_load(self, scope: Scope, token: ActiveToken, extra: dict[str, Any], error: BaseException | None) -> None:
        """``extra``: what the hook learnt from the result (the model's held bytes)."""
        _active.reset(token)
        if self.listener is not None:
            self.listener.load_closed()
        self._measure_until_now(scope)
        for phase in scope.phases.values():
            self._finish(phase, phase.last_end)
        for file in scope.files:
            self.close_file(file)
        self._finish(scope, error=error, extra=extra)

    def enter_phase(self, name: str) -> tuple[Scope, ActiveToken]:
        """A phase entered several times in one load (transformers' per-file ``load_state_dict``) is ONE span."""
        stack = _active.get()
        load = current_load()
        phase = load.phases.get(name) if load is not None else None
        if phase is None:
            phase = Scope(ScopeKind.PHASE, self._start(name, None, stack[-1] if stack else None), load)
            if load is not None:
                load.phases[name] = phase
            self._measure_from_now(phase)
        elif self.provider.monitor is not None:
            self.provider.monitor.opened(phase)
        phase.calls += 1
        return phase, _active.set(stack + (phase,))

    def exit_phase(self, phase: Scope, token: ActiveToken, error: BaseException | None) -> None:
        _active.reset(token)
        phase.last_end = time.time_ns()
        self._measure_until_now(phase)
        if error is not None and phase.recording:
            self._record_error(phase.span, error)
        if phase.load is None:
            self._finish(phase, phase.last_end)

    def open_file(self, name: str, start: dict[str, Any], start_time: int | None = None) -> Scope:
        load = current_load()
        stack = _active.get()
        scope = Scope(ScopeKind.FILE, self._start(name, start, stack[-1] if stack else None, start_time), load)
        if load is not None:
            load.files.append(scope)
        self._open_files.add(scope)
        return scope

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
    ) -> None:
        if scope.ended:
            return
        scope.ended = True
        span = scope.span
        if scope.recording:
            if scope.kind is ScopeKind.LOAD:
                span.set_attributes(attributes.load_end(scope, extra or {}))
            elif scope.kind is ScopeKind.PHASE:
                span.set_attributes(attributes.phase_end(scope))
            else:
                span.set_attributes(attributes.file_end(scope))
            if error is not None:
                self._record_error(span, error)
        span.end(end_time=end_time)

    # Records from hooks -----------------------------------------------------------------------------------------

    def record_materialized(self, site: str, device: str, nbytes: int) -> None:
        for scope in _active.get():
            scope.ledger.add_materialized(site, device, nbytes)

    def record_conversion(self, operations: tuple[str, ...], nbytes: int) -> None:
        for scope in _active.get():
            scope.ledger.add_conversion(operations, nbytes)

    def record_fault(self, where: str, scope: Scope | None = None) -> None:
        """Count a fault on the load it belongs to: the scope's (a file read in a worker thread), else this thread's."""
        if scope is None:
            load = current_load()
        else:
            load = scope if scope.kind is ScopeKind.LOAD else scope.load
        if load is not None:
            load.ledger.add_error(where)


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
