"""The only module that talks to the OpenTelemetry API: loads, phases and files become spans.

A *scope* is an open span plus the ledger whose counters become its attributes when it ends. Loads and phases are
tracked per thread of control (a context variable), so a ``zeros_like`` is charged to the load open where it was
called; file scopes belong to the load that opened them, so reads made in transformers' worker threads are charged
to the right file and load without any context crossing threads.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from . import __version__, context, export, memory
from ._log import warn_once
from .ledger import Ledger
from .memory import Memory, process_memory
from .monitor import Monitor
from .settings import Settings

SCOPE_NAME = "loadtrace"


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

    def __init__(self, kind: str, span: trace.Span, ledger: Ledger, load: Scope | None = None):
        self.kind = kind  # "load", "phase" or "file"
        self.span = span
        self.ledger = ledger
        self.load = load  # the load a phase or file belongs to
        self.phases: dict[str, Scope] = {}
        self.files: list[Scope] = []
        self.calls = 1
        self.last_end: int | None = None
        self.ended = False
        self.recording = span.is_recording()
        self.memory_before: Memory | None = None  # loads and phases only: memory when first entered,
        self.memory_after: Memory | None = None  # when last left,
        self.peak: list[int] | None = None  # and the highest rss, anon, file, shmem seen in between


_active: ContextVar[tuple[Scope, ...]] = ContextVar("loadtrace_active", default=())


def active() -> tuple[Scope, ...]:
    """Loads and phases open in this thread of control, outermost first; empty outside loading (the fast path)."""
    return _active.get()


def current_load() -> Scope | None:
    for scope in reversed(_active.get()):
        if scope.kind == "load":
            return scope
    return None


class Tracing:
    """The tracer, the job's trace and how spans are exported; built on first use, so processes that never load
    anything (the launcher, pip, a DataLoader worker) create no files and say nothing."""

    def __init__(self, settings: Settings, tracer_provider: trace.TracerProvider | None = None):
        self.settings = settings
        self.job = context.Job(settings.job_id)
        self._given_provider = tracer_provider
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer | None = None
        self._lock = threading.Lock()
        self.monitor: Monitor | None = None
        self._open_files: set[Scope] = set()  # ended at exit if the job never closed them
        # Told when a load opens and closes: the instrumentor puts the while-loading hooks in place for that time.
        self.load_listeners: tuple[Callable[[], None], Callable[[], None]] | None = None
        self._shut_down = False

    @property
    def tracer(self) -> trace.Tracer:
        if self._tracer is None:
            with self._lock:
                if self._tracer is None:
                    self._tracer = self._build()
        return self._tracer

    def _build(self) -> trace.Tracer:
        try:
            if self._given_provider is not None:
                self.monitor = Monitor(None, progress_record, {})
                return self._given_provider.get_tracer(SCOPE_NAME, __version__)
            export.route_otel_logs()
            attributes = context.resource_attributes(self.job, service_name=None, version=__version__)
            default_service = attributes.pop("service.name")
            resource = Resource.create(attributes)
            if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
                resource = resource.merge(Resource({"service.name": default_service}))
            path = (
                export.trace_file_path(self.settings, dict(resource.attributes)) if self.settings.writes_files else None
            )
            processors = export.span_processors(self.settings, path)
            self.monitor = Monitor(
                export.progress_path(path) if path else None,
                progress_record,
                {key: resource.attributes.get(f"loadtrace.{key}") for key in ("rank", "world_size", "job.id")}
                | {"host": resource.attributes.get("host.name"), "pid": os.getpid()},
            )
            # Our own bounded flush at exit replaces the SDK's, which can wait on a dead collector for many seconds.
            provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            for processor in processors:
                provider.add_span_processor(processor)
            self._provider = provider
            atexit.register(self.shutdown)
            if resource.attributes.get("loadtrace.rank") == 0 and self.job.source != "process":
                self._emit_job_root(resource, processors)
            return provider.get_tracer(SCOPE_NAME, __version__)
        except Exception as error:
            warn_once("tracer", f"tracing is off in this process: {type(error).__name__}: {error}")
            return trace.NoOpTracer()

    def _emit_job_root(self, resource: Resource, processors: list) -> None:
        """Rank 0 writes the span that every rank's spans name as their parent, so the trace has one root."""
        trace_id, span_id = context.trace_ids(self.job.id)
        now = time.time_ns()
        root = ReadableSpan(
            "loadtrace.job",
            context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
            resource=resource,
            attributes={"loadtrace.job.id": self.job.id},
            kind=SpanKind.INTERNAL,
            start_time=now,
            end_time=now,
            instrumentation_scope=InstrumentationScope(SCOPE_NAME, __version__),
        )
        for processor in processors:
            processor.on_end(root)

    def job_context(self):
        """The OTel context whose parent is the job's root span: every rank derives the same one."""
        job_id = self.job.id or self.job.fallback_id()
        trace_id, span_id = context.trace_ids(job_id)
        parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return trace.set_span_in_context(NonRecordingSpan(parent))

    def shutdown(self) -> None:
        """Flush within ``LOADTRACE_EXIT_TIMEOUT``; a dead or slow collector must not hold the job's exit."""
        for file in list(self._open_files):
            self.close_file(file)
        self._shut_down = True
        provider, self._provider = self._provider, None
        if provider is None:
            return
        done = threading.Event()

        def flush() -> None:
            try:
                provider.force_flush(int(self.settings.exit_timeout_s * 900))
                provider.shutdown()
            except Exception:
                pass
            done.set()

        threading.Thread(target=flush, name="loadtrace-exit-flush", daemon=True).start()
        if not done.wait(self.settings.exit_timeout_s):
            warn_once("export", f"gave up flushing spans after {self.settings.exit_timeout_s:g} s at exit")

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

    def _start(self, name: str, attributes: dict[str, Any] | None, parent: Scope | None, start_time: int | None = None):
        parent_context = trace.set_span_in_context(parent.span) if parent is not None else self.job_context()
        return self.tracer.start_span(name, context=parent_context, attributes=attributes, start_time=start_time)

    def _measure_from_now(self, scope: Scope) -> None:
        memory = process_memory()
        scope.memory_before = memory
        scope.peak = [memory.rss, memory.anon, memory.file, memory.shmem]
        if self.monitor is not None:
            self.monitor.opened(scope)

    def _measure_until_now(self, scope: Scope) -> None:
        scope.memory_after = process_memory()
        if self.monitor is not None:
            self.monitor.closed(scope)

    def start_load(self, name: str, attributes: dict[str, Any]) -> tuple[Scope, Any]:
        stack = _active.get()
        scope = Scope("load", self._start(name, attributes, stack[-1] if stack else None), Ledger())
        self._measure_from_now(scope)
        if self.load_listeners is not None:
            self.load_listeners[0]()
        return scope, _active.set(stack + (scope,))

    def end_load(self, scope: Scope, token: Any, attributes: dict[str, Any], error: BaseException | None) -> None:
        _active.reset(token)
        if self.load_listeners is not None:
            self.load_listeners[1]()
        self._measure_until_now(scope)
        for phase in scope.phases.values():
            self._finish(phase, phase.last_end)
        for file in scope.files:
            self.close_file(file)
        if scope.recording:
            scope.span.set_attributes(attributes)
            totals = scope.ledger.load_attributes([file.ledger for file in scope.files])
            storage_read = scope.memory_after.storage_read - scope.memory_before.storage_read
            totals["loadtrace.io.cached_bytes"] = max(0, totals["loadtrace.read.bytes"] - storage_read)
            totals.update(memory.limit_attributes(memory.limits()))
            scope.span.set_attributes(totals)
        self._finish(scope, error=error)

    def enter_phase(self, name: str) -> tuple[Scope, Any]:
        """A phase entered several times in one load (transformers' per-file ``load_state_dict``) is ONE span."""
        stack = _active.get()
        load = current_load()
        phase = load.phases.get(name) if load is not None else None
        if phase is None:
            phase = Scope("phase", self._start(name, None, stack[-1] if stack else None), Ledger(), load)
            phase.calls = 0
            if load is not None:
                load.phases[name] = phase
            self._measure_from_now(phase)
        elif self.monitor is not None:
            self.monitor.opened(phase)
        phase.calls += 1
        return phase, _active.set(stack + (phase,))

    def exit_phase(self, phase: Scope, token: Any, error: BaseException | None) -> None:
        _active.reset(token)
        phase.last_end = time.time_ns()
        self._measure_until_now(phase)
        if error is not None and phase.recording:
            self._record_error(phase.span, error)
        if phase.load is None:
            self._finish(phase, phase.last_end)

    def open_file(self, name: str, attributes: dict[str, Any], start_time: int | None = None) -> Scope:
        load = current_load()
        stack = _active.get()
        parent = stack[-1] if stack else None
        span = self._start(name, attributes, parent, start_time)
        scope = Scope("file", span, Ledger(), load)
        if load is not None:
            load.files.append(scope)
        self._open_files.add(scope)
        return scope

    def close_file(self, scope: Scope, error: BaseException | None = None) -> None:
        self._open_files.discard(scope)
        if scope.ended or self._shut_down:
            return
        if scope.recording:
            scope.span.set_attributes(scope.ledger.read_attributes())
        self._finish(scope, error=error)

    def point_span(self, name: str, parent: Scope | None, start_time: int, attributes: dict[str, Any]) -> None:
        """A short span for one tensor (``LOADTRACE_DETAIL=tensor``), parented explicitly: it may run in a worker
        thread that knows nothing of the load."""
        self._start(name, attributes, parent, start_time).end()

    def _finish(self, scope: Scope, end_time: int | None = None, error: BaseException | None = None) -> None:
        if scope.ended:
            return
        scope.ended = True
        span = scope.span
        if scope.recording:
            if scope.kind == "phase":
                span.set_attribute("loadtrace.calls", scope.calls)
            if scope.memory_before is not None and scope.memory_after is not None:
                span.set_attributes(memory.span_attributes(scope.memory_before, scope.memory_after, scope.peak))
            if scope.ledger.materialized:
                span.set_attributes(scope.ledger.materialized_attributes())
            if scope.ledger.conversions:
                span.set_attributes(scope.ledger.conversion_attributes())
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
        load = (scope if scope.kind == "load" else scope.load) if scope is not None else current_load()
        if load is not None:
            load.ledger.add_error(where)


def progress_record(scope: Scope) -> dict[str, Any]:
    """What a killed rank leaves behind about one span it had open (see monitor.py)."""
    context = scope.span.get_span_context()
    ledger = scope.ledger
    materialized: dict[str, int] = {}
    for _, device, nbytes in list(ledger.materialized):
        materialized[device] = materialized.get(device, 0) + nbytes
    reads = [n for part in (ledger, *(file.ledger for file in scope.files)) for n in list(part.reads)]
    return {
        "name": getattr(scope.span, "name", ""),
        "kind": scope.kind,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "start_time_unix_nano": getattr(scope.span, "start_time", None),
        "read_tensors": len(reads),
        "read_bytes": sum(reads),
        "files_opened": len(scope.files),
        "materialized_bytes": materialized,
        "rss_peak": scope.peak[0] if scope.peak else None,
    }


_tracing: Tracing | None = None


def _after_fork_in_child() -> None:
    """A forked child (DataLoader worker, multiprocessing pool) is a process of its own: it builds its own exporter
    and file on first use, and starts outside whatever load its parent had open."""
    if _tracing is not None:
        _tracing._provider = None
        _tracing._tracer = None
        _tracing.monitor = None
        _tracing._lock = threading.Lock()
    _active.set(())


os.register_at_fork(after_in_child=_after_fork_in_child)


def tracing() -> Tracing | None:
    return _tracing


def set_tracing(value: Tracing | None) -> None:
    global _tracing
    _tracing = value
