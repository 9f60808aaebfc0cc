"""This process's OpenTelemetry SDK: resource, span processors, the job's root span, the bounded exit flush.

Set up on first use, so processes that never load anything (the launcher, pip, a DataLoader worker) create no files
and say nothing; set up again in a forked child, which is a process of its own.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from . import __version__, context, export, semconv
from ._log import warn_once
from .monitor import Monitor
from .settings import Settings


class Provider:
    """The tracer spans are started with, and the monitor that watches them while they are open."""

    def __init__(
        self,
        settings: Settings,
        job: context.Job,
        given: trace.TracerProvider | None,
        at_exit: Callable[[], None],
    ):
        self.settings = settings
        self.job = job
        self._given = given  # instrument(tracer_provider=...): the caller's SDK, which we neither build nor flush
        self._at_exit = at_exit  # what runs at interpreter exit once our SDK exists (ends open spans, then flushes)
        self._sdk: TracerProvider | None = None
        self._tracer: trace.Tracer | None = None
        self._lock = threading.Lock()
        self.monitor: Monitor | None = None

    @property
    def tracer(self) -> trace.Tracer:
        if self._tracer is None:
            with self._lock:
                if self._tracer is None:
                    self._tracer = self._build()
        return self._tracer

    def _build(self) -> trace.Tracer:
        try:
            if self._given is not None:
                self.monitor = Monitor(None, {})
                return self._given.get_tracer(semconv.SCOPE_NAME, __version__)
            export.route_otel_logs()
            resource = self._resource()
            attributes = dict(resource.attributes)
            path = export.trace_file_path(self.settings, attributes) if self.settings.writes_files else None
            processors = export.span_processors(self.settings, path)
            self.monitor = Monitor(
                export.progress_path(path) if path else None,
                {
                    semconv.PROGRESS_RANK: attributes.get(semconv.RANK),
                    semconv.PROGRESS_WORLD_SIZE: attributes.get(semconv.WORLD_SIZE),
                    semconv.PROGRESS_JOB_ID: attributes.get(semconv.JOB_ID),
                    semconv.PROGRESS_HOST: attributes.get(semconv.HOST_NAME),
                    semconv.PROGRESS_PID: os.getpid(),
                },
            )
            # Our own bounded flush at exit replaces the SDK's, which can wait on a dead collector for many seconds.
            sdk = TracerProvider(resource=resource, shutdown_on_exit=False)
            for processor in processors:
                sdk.add_span_processor(processor)
            self._sdk = sdk
            atexit.register(self._at_exit)
            job_id = self.job.id
            if attributes.get(semconv.RANK) == 0 and job_id is not None and self.job.source != context.SOURCE_PROCESS:
                self._emit_job_root(job_id, resource, processors)
            return sdk.get_tracer(semconv.SCOPE_NAME, __version__)
        except Exception as error:
            warn_once("tracer", f"tracing is off in this process: {type(error).__name__}: {error}")
            return trace.NoOpTracer()

    def _resource(self) -> Resource:
        """Ours, with ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` added; our service name unless they set
        one."""
        attributes = context.resource_attributes(self.job, self.settings.cluster, __version__)
        default_service = attributes.pop(semconv.SERVICE_NAME)
        resource = Resource.create(attributes)
        if str(resource.attributes.get(semconv.SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({semconv.SERVICE_NAME: default_service}))
        return resource

    def _emit_job_root(self, job_id: str, resource: Resource, processors: list[SpanProcessor]) -> None:
        """Rank 0 writes the span that every rank's spans name as their parent, so the trace has one root."""
        trace_id, span_id = semconv.job_trace_ids(job_id)
        now = time.time_ns()
        root = ReadableSpan(
            semconv.SPAN_JOB,
            context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
            resource=resource,
            attributes={semconv.JOB_ID: job_id},
            kind=SpanKind.INTERNAL,
            start_time=now,
            end_time=now,
            instrumentation_scope=InstrumentationScope(semconv.SCOPE_NAME, __version__),
        )
        for processor in processors:
            processor.on_end(root)

    def job_context(self) -> otel_context.Context:
        """The OTel context whose parent is the job's root span: every rank derives the same one."""
        trace_id, span_id = semconv.job_trace_ids(self.job.id or self.job.fallback_id())
        parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return trace.set_span_in_context(NonRecordingSpan(parent))

    def shutdown(self) -> None:
        """Flush within ``LOADTRACE_EXIT_TIMEOUT``; a dead or slow collector must not hold the job's exit."""
        sdk, self._sdk = self._sdk, None
        if sdk is None:
            return
        timeout_s = self.settings.exit_timeout_s
        done = threading.Event()

        def flush() -> None:
            try:
                sdk.force_flush(int(timeout_s * 900))
                sdk.shutdown()
            except Exception:
                pass
            done.set()

        threading.Thread(target=flush, name="loadtrace-exit-flush", daemon=True).start()
        if not done.wait(timeout_s):
            warn_once("export", f"gave up flushing spans after {timeout_s:g} s at exit")

    def after_fork(self) -> None:
        """In a forked child: the parent's SDK, exporter threads and monitor are not ours; build our own on first
        use (another thread may have held the lock at the fork)."""
        self._sdk = None
        self._tracer = None
        self.monitor = None
        self._lock = threading.Lock()
