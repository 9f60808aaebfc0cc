"""This process's OpenTelemetry SDK and state file: resource, span processors, the job's root span, the bounded flush.

Imported and set up at the first span (``spans.Tracing.provider``), so processes that never load anything (the
launcher, pip, a DataLoader worker) import no OpenTelemetry, create no files and say nothing; set up again in a forked
child, which is a process of its own. The state file (statefile.py) is made with it: beside the trace file, or in a
private temporary directory when spans go only over OTLP, or in anonymous memory when neither can be written (the same
code runs either way), and announced to a witnessing launcher.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from ... import semconv, statefile
from ...version import __version__
from .. import context
from .._log import warn_once
from ..beside import excepthooks, witness
from ..beside.termination import bounded
from ..counting.memory import Memory
from ..counting.monitor import Monitor
from ..counting.phases import PhaseRecorder
from ..exporting import budget, export
from ..exporting.budget_processor import Budget
from ..exporting.progress import Progress
from ..exporting.startup_metrics import StartupMetrics
from ..settings import Settings, say_traces_not_written, trace_dir_problem


class ProviderSource(Protocol):
    """Where the scopes find this process's provider (``spans.Tracing``): made by the first span of any kind, so a
    process that opens none imports no OpenTelemetry."""

    @property
    def provider(self) -> Provider:
        """The provider, made now if no span made it yet."""
        ...

    @property
    def made(self) -> Provider | None:
        """The provider once the first span made it; None before (nothing to end, flush or say)."""
        ...


# The state files of this process, by path: a second ``instrument()`` reuses its predecessor's rather than truncating
# a file whose pages old proxies may still count into (a store past the end of a mapped file is a SIGBUS).
_writers: dict[tuple[int, str], statefile.Writer] = {}


class Provider:
    """The tracer spans are started with, and the monitor that watches them while they are open."""

    def __init__(
        self,
        settings: Settings,
        job: context.Job,
        given: trace.TracerProvider | None,
        at_exit: Callable[[], None],
        on_sample: Callable[[Memory], None] | None = None,
    ):
        self.settings = settings
        self.job = job
        self._given = given  # instrument(tracer_provider=...): the caller's SDK, which we neither build nor flush
        self._at_exit = at_exit  # what runs at interpreter exit once we are set up (ends open spans, then flushes)
        self._on_sample = on_sample  # the monitor's memory samples go there
        self._sdk: TracerProvider | None = None
        self._tracer: trace.Tracer | None = None
        self._lock = threading.Lock()
        self.monitor: Monitor | None = None
        self.state: statefile.Writer | None = None
        self.progress: Progress | None = None
        self.startup_metrics: StartupMetrics | None = None  # with an OTLP endpoint: startup_metrics.py
        self._resource_made: Resource | None = None
        self.exporting = False  # our own SDK exports this process's spans (to trace_file, OTLP, or both)
        self.trace_file: str | None = None
        self.delivery: export.Delivery | None = None  # the OTLP exporter's record: did every batch arrive
        self.phases: PhaseRecorder | None = None  # what the startup span's phase split is made of (our own SDK only)
        self.service = semconv.DEFAULT_SERVICE_NAME  # the service, before a rank's own name is made of it
        self.rank: int | None = None  # this process's rank, when the launcher or torch.distributed says it
        self.model: str | None = None  # the model its first load loaded (``semconv.model_name``): the trace's name
        self._processors: list[Any] = []  # where the job's structure goes (``write_structure``), behind the budget
        self._structure_written = False

    @property
    def tracer(self) -> trace.Tracer:
        if self._tracer is None:
            with self._lock:
                if self._tracer is None:
                    self._tracer = self._build()
        return self._tracer

    def build(self) -> None:
        """Set up now rather than at the first ``tracer``."""
        _ = self.tracer

    def _build(self) -> trace.Tracer:
        try:
            if self._given is not None:
                self.state = self._open_state(None)
                self._watch()
                atexit.register(self._at_exit)
                return self._given.get_tracer(semconv.SCOPE_NAME, __version__)
            export.route_otel_logs(self.settings)
            resource = self._resource()
            attributes = dict(resource.attributes)
            path = export.trace_file_path(self.settings, attributes) if self.settings.writes_files else None
            problem = trace_dir_problem(os.path.dirname(path)) if path is not None else None
            if path is not None and problem is not None:  # no trace file; the state file goes where OTLP-only's goes
                say_traces_not_written(self.settings, os.path.dirname(path), problem)
                path = None
            processors, self.delivery = export.span_processors(self.settings, path)
            self._processors = processors
            self.state = self._open_state(path)
            self._resource_made = resource
            self._watch()
            # Our own bounded flush at exit replaces the SDK's, which can wait on a dead collector for many seconds.
            sdk = TracerProvider(resource=resource, shutdown_on_exit=False)
            self.phases = PhaseRecorder()
            rank = context.current_rank()  # the launcher's variables say it from the start
            kept, folds = budget.file_spans_kept(self.settings, rank), budget.folds(self.settings, rank)
            # The exporters behind the span budget (budget.py); the phase recorder beside it sees every span.
            for processor in (self.phases, Budget(processors, kept, folds)):
                sdk.add_span_processor(processor)
            self._sdk = sdk
            self.exporting, self.trace_file = True, path
            atexit.register(self._at_exit)
            return sdk.get_tracer(semconv.SCOPE_NAME, __version__)
        except Exception as error:
            warn_once("tracer", f"tracing is off in this process: {type(error).__name__}: {error}")
            return trace.NoOpTracer()

    def _watch(self) -> None:
        """The monitor thread (its samples keep the state's live fields: progress.py) and the excepthooks."""
        self.progress = Progress(self.settings, self.resource)
        if self.settings.otlp_endpoint:
            self.startup_metrics = StartupMetrics(self.settings, self.service_name)
        self.monitor = Monitor(self._sample)
        excepthooks.install(self._uncaught)

    def resource(self) -> Resource:
        if self._resource_made is None:
            self._resource_made = self._resource()
        return self._resource_made

    def service_name(self) -> str:
        """The service, as the metrics name it: never a rank's own (each would be a series of its own)."""
        self.resource()
        return self.service

    def measure(self, name: str, span: trace.Span, attributes: dict[str, Any]) -> None:
        """A startup metric (startup_metrics.py): the span's duration, queued for sending; nothing without an OTLP
        endpoint."""
        metrics = self.startup_metrics
        if metrics is not None:
            metrics.record(name, span, attributes)

    def _sample(self, reading: Memory) -> None:
        """A monitor sample: the load's peak (spans.Tracing), then the live fields and metrics."""
        try:
            if self._on_sample is not None:
                self._on_sample(reading)
        finally:
            state, progress = self.state, self.progress
            if state is not None and progress is not None:
                progress.sample(state, reading)

    def _uncaught(self, kind: str, line: str) -> None:
        """An exception nobody caught (excepthooks.py): into the state file and a ``loadtrace.exception`` span. Not in a
        forked child that has not traced anything of its own (its parent's set-up is not its own)."""
        if self._tracer is None:
            return
        now = time.time_ns()
        state = self.state
        if state is not None:
            state.set_text("exception", f"{kind}: {line}" if line else kind)
            state.set_live("exception_ns", now)
        attributes = {semconv.EXCEPTION_TYPE: kind}
        if line and not self.settings.redact_paths:
            attributes[semconv.EXCEPTION_MESSAGE] = line
        span = self.start_span(semconv.SPAN_EXCEPTION, None, attributes, now)
        self.set_error(span, kind)
        span.end(end_time=now)

    def _open_state(self, trace_file: str | None) -> statefile.Writer:
        """The process's state file (see the module's docstring), described and announced."""
        rank = context.current_rank()
        job_id = self.job.id or self.job.fallback_id()
        identity: dict[statefile.HeaderField, int] = {
            "pid": os.getpid(),
            "rank": -1 if rank.rank is None else rank.rank,
            "local_rank": -1 if rank.local_rank is None else rank.local_rank,
            "world_size": rank.world_size or 0,
            "local_world_size": rank.local_world_size or 0,
            "attempt": self.settings.attempt,
        }
        texts: dict[statefile.TextField, str] = {
            "job_id": job_id,
            "trace_id": format(semconv.job_trace_ids(job_id)[0], "032x"),
            "launch_id": self.settings.launch_id or "",
            "host": socket.gethostname(),
            "trace_file": os.path.abspath(trace_file) if trace_file is not None else "",
        }
        try:
            resource = {semconv.JOB_ID: job_id, semconv.RANK: rank.rank}
            path = os.path.abspath(export.state_file_path(self.settings, resource, trace_file))
            writer = _writers.get((os.getpid(), path))
            if writer is None:
                writer = _writers[(os.getpid(), path)] = statefile.Writer(path, identity, texts)
            else:
                describe(writer, identity, texts)
        except Exception as error:
            key, where = ("file-export", "cannot write traces to") if trace_file else ("state-file", "cannot keep")
            warn_once(
                key,
                f"{where} this process's state file ({type(error).__name__}: {error}); its totals are kept in "
                "memory only, so if it is killed its last state is lost",
            )
            return statefile.Writer(None, identity, texts)
        witness.announce(path)
        return writer

    def _resource(self) -> Resource:
        """Ours, with ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` added; our service name unless they set
        one."""
        settings = self.settings
        attributes = context.resource_attributes(
            self.job, settings.cluster, __version__, settings.attempt, settings.launch_id
        )
        default_service = attributes.pop(semconv.SERVICE_NAME)
        resource = Resource.create(attributes)
        if str(resource.attributes.get(semconv.SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({semconv.SERVICE_NAME: default_service}))
        self.service = str(resource.attributes[semconv.SERVICE_NAME])
        rank = resource.attributes.get(semconv.RANK)
        self.rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        if self.rank is None:
            return resource
        # Jaeger's UI labels and colours a row by its service alone: each rank its own, within the job's namespace.
        own = {semconv.SERVICE_NAME: semconv.rank_service(self.service, self.rank)}
        if semconv.SERVICE_NAMESPACE not in resource.attributes:
            own[semconv.SERVICE_NAMESPACE] = self.service
        return resource.merge(Resource(own))

    def note_load(self, attributes: Any) -> None:
        """A load ended: the first one's model names the job's trace, which rank 0 now lays out
        (``write_structure``)."""
        if self.model is None and attributes:
            self.model = semconv.model_name(attributes.get(semconv.CHECKPOINT), attributes.get(semconv.MODEL_CLASS))
        try:
            self.write_structure()
        except Exception as error:  # the job's load has returned: nothing of ours may reach it
            warn_once("structure", f"the job's trace lacks its root: {type(error).__name__}: {error}")

    def write_structure(self) -> None:
        """Rank 0, once: the job's root and every rank's group (structure.py), at the end of its first load (the
        model then known, and a rank 0 stopped later by its launcher, with no handler of ours left, has written them),
        else at its exit or a termination signal. The trace file gets them as one line; the OTLP exporter through its
        batch processor's queue (``settings.BSP_MAX_QUEUE_SIZE`` holds a job of 4,096 ranks), never by a call that
        waits on the collector."""
        job_id, resource = self.job.id, self._resource_made
        if self._structure_written or self.rank != 0 or not self._processors or resource is None:
            return
        if job_id is None or self.job.source == context.SOURCE_PROCESS:
            return
        self._structure_written = True
        from . import structure

        attributes = dict(resource.attributes)
        given = attributes.get(semconv.WORLD_SIZE)
        world_size = context.current_rank().world_size or (given if isinstance(given, int) else 1)
        start = structure.job_start_ns(world_size)
        spans = structure.job_spans(job_id, attributes, self.service, world_size, self.model, start)
        for processor in self._processors:
            if isinstance(processor, export.WriteAsItEnds):
                processor.exporter.export(spans)
            else:
                for span in spans:
                    processor.on_end(span)

    def start_span(
        self, name: str, parent: trace.Span | None, attributes: dict[str, Any] | None, start_time: int | None
    ) -> trace.Span:
        """A span under ``parent``, else under the rank's group in the job's trace; with the rank among its
        attributes, which Jaeger's Trace Statistics groups by (not by a resource's)."""
        context = trace.set_span_in_context(parent) if parent is not None else self.job_context()
        if self.rank is not None:
            attributes = {semconv.RANK: self.rank, **(attributes or {})}
        return self.tracer.start_span(name, context=context, attributes=attributes, start_time=start_time)

    @staticmethod
    def set_error(span: trace.Span, description: str) -> None:
        span.set_status(Status(StatusCode.ERROR, description))

    def job_context(self) -> otel_context.Context:
        """The OTel context whose parent is the rank's group in the job's trace (the job's root span for a process
        without a rank): every rank derives its own, rank 0 writes them all (``write_structure``)."""
        job_id = self.job.id or self.job.fallback_id()
        trace_id, span_id = semconv.job_trace_ids(job_id)
        if self.rank is not None:
            span_id = semconv.rank_group_id(job_id, self.rank)
        parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return trace.set_span_in_context(NonRecordingSpan(parent))

    def shutdown(self) -> None:
        """Flush within ``LOADTRACE_EXIT_TIMEOUT``; a dead or slow collector must not hold the job's exit."""
        sdk, self._sdk = self._sdk, None
        progress, self.progress = self.progress, None
        metrics, self.startup_metrics = self.startup_metrics, None
        if sdk is None and progress is None and metrics is None:
            return
        timeout_s = self.settings.exit_timeout_s

        def flush() -> None:
            self.write_structure()
            if progress is not None:
                progress.shutdown(timeout_s * 0.3)
            if metrics is not None:
                metrics.shutdown(timeout_s * 0.3)
            if sdk is not None:
                sdk.force_flush(int(timeout_s * 900))
                sdk.shutdown()

        if not bounded(flush, timeout_s, "loadtrace-exit-flush"):
            self.gave_up(f"no answer within LOADTRACE_EXIT_TIMEOUT={timeout_s:g} s at exit")

    def gave_up(self, why: str) -> None:
        """A bounded flush stopped waiting: what was still on its way is lost, and said so (once for the node)."""
        if self.delivery is not None:
            self.delivery.gave_up = True
        export.failures.met("export", why)

    def send_failure(self) -> str | None:
        """Why spans meant for the OTLP endpoint did not all arrive; None when they did or none was set."""
        if self.delivery is not None:
            return self.delivery.failure()
        return "no exporter" if self.settings.otlp_endpoint and self._given is None else None

    def force_flush(self, timeout_s: float) -> None:
        """Send what has ended now (the caller bounds the wait: see ``bounded``); the SDK stays up."""
        deadline = time.monotonic() + timeout_s
        sdk, metrics = self._sdk, self.startup_metrics
        if sdk is not None:
            sdk.force_flush(max(1, int(timeout_s * 1000)))
        if metrics is not None:
            metrics.flush(max(0.0, deadline - time.monotonic()))

    def after_fork(self) -> None:
        """In a forked child: the parent's SDK, exporter threads, monitor and state file are not ours; build our own
        on first use (another thread may have held the lock at the fork)."""
        self._sdk = None
        self._tracer = None
        self.monitor = None
        self.state = None
        self.progress = None
        self.startup_metrics = None
        self.exporting, self.trace_file = False, None
        self.delivery = None
        self._lock = threading.Lock()


def describe(
    writer: statefile.Writer, identity: dict[statefile.HeaderField, int], texts: dict[statefile.TextField, str]
) -> None:
    for name, value in identity.items():
        writer[name] = value
    for text_field, text in texts.items():
        writer.set_text(text_field, text)
