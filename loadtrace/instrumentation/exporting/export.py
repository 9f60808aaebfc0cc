"""How spans leave the process: OTLP JSON Lines files (the default) and the standard OTLP exporters.

Files follow the OTLP File Exporter spec: one ``TracesData`` JSON object per line, ids as lowercase hex, enums as
numbers. Each span is written when it ends, so a rank the OOM killer takes keeps everything it finished.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ... import semconv, statefile
from .._log import warn_once
from ..settings import Settings, speaks_for_the_node

DEFAULT_ROOT = "loadtrace-traces"


# The JSON is written directly as text: building dicts for ``json.dumps`` tripled the cost of each span, which is paid
# on the loading thread as the span ends. The strings go through the encoder ``json.dumps`` uses, so the text is what
# ``json.dumps(..., separators=(",", ":"))`` of the same structure gives, byte for byte (tested).
_string = json.encoder.encode_basestring_ascii
_float = json.JSONEncoder(separators=(",", ":")).encode


def _value(value: Any) -> str:
    kind = type(value)
    if kind is int:  # most of a load's attributes: its digits need no escaping
        return '{"intValue":"' + str(value) + '"}'
    if kind is str:
        return '{"stringValue":' + _string(value) + "}"
    if isinstance(value, bool):
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, int):
        return '{"intValue":' + _string(str(value)) + "}"
    if isinstance(value, str):
        return '{"stringValue":' + _string(value) + "}"
    if isinstance(value, float):
        return '{"doubleValue":' + _float(value) + "}"
    if isinstance(value, bytes):
        return '{"bytesValue":' + _string(base64.b64encode(value).decode()) + "}"
    if isinstance(value, (list, tuple)):
        return '{"arrayValue":{"values":[' + ",".join(map(_value, value)) + "]}}" if value else '{"arrayValue":{}}'
    return '{"stringValue":' + _string(str(value)) + "}"


# ``{"key":"<key>","value":`` of each key seen: a process's spans use the same few dozen keys over and over.
_key_heads: dict[str, str] = {}


def _key_head(key: str) -> str:
    head = _key_heads.get(key)
    if head is None:
        head = '{"key":' + _string(key) + ',"value":'
        if len(_key_heads) < 4096:  # keys made from data (a device type, an operation name) stay few; bounded anyway
            _key_heads[key] = head
    return head


def _attributes(attributes: Any) -> str:
    """A JSON list of OTLP ``KeyValue``s."""
    items = (attributes or {}).items()
    return "[" + ",".join(_key_head(key) + _value(value) + "}" for key, value in items) + "]"


def _span_attributes(span: ReadableSpan) -> Any:
    """The span's attributes as a mapping to read: the SDK's own dict where it keeps one (``BoundedAttributes._dict``;
    its read-only view reads each item through two Python calls), else the public view."""
    plain = getattr(getattr(span, "_attributes", None), "_dict", None)
    return plain if type(plain) is dict else span.attributes


def _span(span: ReadableSpan) -> str:
    context, parent = span.context, span.parent
    text = f'{{"traceId":"{context.trace_id:032x}","spanId":"{context.span_id:016x}"'
    if parent is not None:
        text += f',"parentSpanId":"{parent.span_id:016x}"'
    text += (
        f',"name":{_string(span.name)},"kind":{span.kind.value + 1},'
        f'"startTimeUnixNano":"{span.start_time}","endTimeUnixNano":"{span.end_time}"'
    )
    attributes = _span_attributes(span)
    if attributes:
        text += ',"attributes":' + _attributes(attributes)
    if span.events:
        text += ',"events":[' + ",".join(map(_event, span.events)) + "]"
    status = span.status
    message = ',"message":' + _string(status.description) if status.description else ""
    code = f',"code":{status.status_code.value}' if status.status_code.value else ""
    text += ',"status":{' + (message + code)[1:] + "}"
    # "has is_remote" (0x100) and "is_remote" (0x200) of the parent, as OTel's OTLP encoder sets them.
    return text + f',"flags":{0x100 | (0x200 if parent is not None and parent.is_remote else 0)}}}'


def _event(event: Any) -> str:
    attributes = ',"attributes":' + _attributes(event.attributes) if event.attributes else ""
    return f'{{"timeUnixNano":"{event.timestamp}","name":{_string(event.name)}{attributes}}}'


def _scope(scope: Any) -> str:
    if not scope:
        return "{}"
    return '{"name":' + _string(scope.name) + (',"version":' + _string(scope.version) if scope.version else "") + "}"


_TAIL = "]}]}]}\n"  # what closes the spans' list, their scope's, their resource's and the line's


class _Encoder:
    """OTLP JSON straight from the SDK's spans; a process's resource and scope are encoded once."""

    def __init__(self) -> None:
        self._heads: dict[tuple[int, Any], tuple[Any, str]] = {}

    def line(self, spans: Sequence[ReadableSpan]) -> str:
        """One JSON Lines line (``TracesData``): the spans grouped by resource, then scope, in order of appearance.
        The common case, spans of one resource and scope (every span a process makes), is the cached text of both
        around the spans'."""
        if not spans:
            return '{"resourceSpans":[]}\n'
        resource, scope = spans[0].resource, spans[0].instrumentation_scope
        if all(span.resource is resource and span.instrumentation_scope == scope for span in spans):
            return self._head(resource, scope) + ",".join(map(_span, spans)) + _TAIL
        groups: dict[tuple[int, Any], list[str]] = {}
        for span in spans:
            groups.setdefault((id(span.resource), span.instrumentation_scope), []).append(_span(span))
        resources: dict[int, list[str]] = {}
        for (resource_id, scope), encoded in groups.items():
            resource = next(span.resource for span in spans if id(span.resource) == resource_id)
            scopes = resources.setdefault(resource_id, [_resource(resource)])
            scopes.append('{"scope":' + _scope(scope) + ',"spans":[' + ",".join(encoded) + "]}")
        entries = (head + ',"scopeSpans":[' + ",".join(scopes) + "]}" for head, *scopes in resources.values())
        return '{"resourceSpans":[' + ",".join(entries) + "]}\n"

    def _head(self, resource: Any, scope: Any) -> str:
        key = (id(resource), scope)
        cached = self._heads.get(key)
        if cached is None or cached[0] is not resource:
            text = (
                '{"resourceSpans":[' + _resource(resource) + ',"scopeSpans":[{"scope":' + _scope(scope) + ',"spans":['
            )
            cached = self._heads[key] = (resource, text)  # the resource held: its id is not reused while cached
        return cached[1]


def _resource(resource: Any) -> str:
    """A resource entry's ``{"resource":{...}`` (its ``scopeSpans`` follow)."""
    return '{"resource":{"attributes":' + _attributes(resource.attributes) + "}"


_encoder = _Encoder()


def otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """One OTLP JSON Lines line (``TracesData``) for these spans."""
    return _encoder.line(spans)


def traces_data(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """``TracesData`` for these spans, as the line holds it."""
    result: dict[str, Any] = json.loads(otlp_json(spans))
    return result


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120] or "_"


class JsonLinesExporter(SpanExporter):
    """Appends spans to one file per process, created owner-only on first use. A write error is said once and the
    spans are dropped: a full disk must not fail the job."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._broken = False
        self._lock = threading.Lock()

    def _open(self) -> int:
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._broken:
            return SpanExportResult.FAILURE
        try:
            line = otlp_json(spans).encode()
            with self._lock:
                if self._fd is None:
                    self._fd = self._open()
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view) :]
            return SpanExportResult.SUCCESS
        except Exception as error:
            self._broken = True
            problem = f"{type(error).__name__}: {error}"
            dropped = "this process's spans are dropped"
            warn_once("file-export", f"cannot write traces to {self.path} ({problem}); {dropped}")
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every line is written by the time export returns


class WriteAsItEnds(SpanProcessor):
    """Each span written to the file as it ends, by the thread that ends it: what the SDK's ``SimpleSpanProcessor``
    does, without its per-span context switch and metrics, which cost more than the write itself."""

    def __init__(self, exporter: JsonLinesExporter):
        self.exporter = exporter

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            self.exporter.export((span,))  # never raises: a write error is said once and the spans dropped

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def trace_file_path(settings: Settings, resource: dict[str, Any]) -> str:
    root = settings.trace_dir or os.path.join(DEFAULT_ROOT, safe_name(str(resource[semconv.JOB_ID])))
    rank = resource.get(semconv.RANK)
    who = f"rank{rank:05d}" if isinstance(rank, int) else "process"
    name = f"{who}-{safe_name(socket.gethostname())}-{os.getpid()}{semconv.TRACE_FILE_SUFFIX}"
    return os.path.join(root, name)


def _otlp_exporter(settings: Settings) -> SpanExporter:
    # The standard exporters read OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout, certificates) themselves.
    if settings.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


ONCE_PREFIX = {
    "export": "span export failing",
    "metrics-export": "metrics export failing",
    "opentelemetry": "OpenTelemetry setup",
}

# What the exporters' own lines say went wrong, made short: the first pattern that matches gives the cause.
CAUSES = (
    (re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)"), r"\1"),  # Connection refused, Name or service not known
    (re.compile(r"code: (\d+), reason: ([^,\n]+)"), r"HTTP \1 \2"),  # a refusal: HTTP 500 Internal Server Error
    (re.compile(r"code: None, reason: (.+)"), r"\1"),  # no answer at all: why not
    (re.compile(r"StatusCode\.([A-Z_]+).*: ([^:]+)$", re.S), r"\1: \2"),  # gRPC: UNAVAILABLE: Connection refused
    (re.compile(r"(?i)(read timed out|timed out)"), "no answer (timed out)"),
)
NO_CAUSE = ("due to timeout, max retries or shutdown", "aborting retry", "already shutdown")  # say what, not why
CAUSE_CHARS = 120


def cause(message: str) -> str | None:
    """The cause in an exporter's line, short: ``Connection refused``, ``HTTP 503 Service Unavailable``, ...; None
    for a line that says only that it gave up."""
    line = message.strip()
    for pattern, template in CAUSES:
        found = pattern.search(line)
        if found:
            line = found.expand(template).strip()
            break
    else:
        if any(words in line for words in NO_CAUSE):
            return None
        first = line.splitlines()[0] if line else ""
        line = re.sub(r"^Transient error |,? ?(encountered while|retrying in) .*$", "", first)
    return line if len(line) <= CAUSE_CHARS else line[: CAUSE_CHARS - 1].rstrip() + "…"


class Failures:
    """What this process's exports met (the first cause of each kind) and who says it: one short line with the
    endpoint and the cause, for the whole node, by the process that speaks for it (settings.speaks_for_the_node; a
    forked child never: its parent speaks for it), not one long line from each of 1,024 ranks."""

    def __init__(self) -> None:
        self.causes: dict[str, str] = {}
        self.endpoints: dict[str, str] = {}
        self.forked = False

    def configure(self, settings: Settings) -> None:
        endpoint = settings.otlp_endpoint or ""
        metrics = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        self.endpoints = {"export": endpoint, "metrics-export": metrics or endpoint}

    def met(self, kind: str, why: str | None) -> None:
        """An export of ``kind`` (``export``: spans, ``metrics-export``) failed, or is retrying, because of ``why``."""
        if why is not None:
            self.causes.setdefault(kind, why)
        said = self.causes.get(kind, why or "gave up")
        where = self.endpoints.get(kind) or "the OTLP endpoint"
        try:
            speaks = not self.forked and speaks_for_the_node()
        except Exception:
            speaks = True
        # One problem, a collector down or refusing, whichever of its spans or metrics meets it first. Said from the
        # exporter's thread: never through the environment (``say_for_the_job``), which another thread may be reading.
        if speaks:
            warn_once("export", f"{ONCE_PREFIX[kind]}: {where}: {said}")

    def cause(self) -> str | None:
        return self.causes.get("export") or self.causes.get("metrics-export")


failures = Failures()


def _after_fork_in_child() -> None:
    failures.forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class _OnceHandler(logging.Handler):
    """OpenTelemetry's exporters log each failed batch and retry, often with a traceback. In someone else's job that
    becomes one short line per problem kind: the job's owner needs to know, not to read a log flood."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            return
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        if ".export" in record.name:  # the metrics SDK's reader and exporters too: progress and startup metrics
            failures.met("metrics-export" if "metric" in record.name else "export", cause(message))
            return
        warn_once("opentelemetry", f"{ONCE_PREFIX['opentelemetry']}: {message.splitlines()[0] if message else ''}")


def route_otel_logs(settings: Settings) -> None:
    failures.configure(settings)
    otel = logging.getLogger("opentelemetry")
    if not any(isinstance(h, _OnceHandler) for h in otel.handlers):
        otel.addHandler(_OnceHandler())
        otel.propagate = False


class Delivery(SpanExporter):
    """The OTLP span exporter, watched: whether every batch it was given arrived, so that rank 0's closing line never
    says "sent" when sending failed (``failure``)."""

    def __init__(self, exporter: SpanExporter):
        self.exporter = exporter
        self.sent = 0
        self.failed = 0
        self.gave_up = False  # a bounded flush (exit, signal) stopped waiting for it

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception as error:  # the SDK's exporters return FAILURE; any other must not reach the job either
            failures.met("export", f"{type(error).__name__}: {error}")
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.sent += 1
        else:
            self.failed += 1
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def failure(self) -> str | None:
        """Why some spans did not arrive (the first cause the exporter gave); None when every batch did."""
        if not (self.failed or self.gave_up):
            return None
        return failures.cause() or ("no answer in time" if self.gave_up else "refused")


def state_file_path(settings: Settings, resource: dict[str, Any], trace_file: str | None) -> str:
    """Where the process keeps its state (``statefile.py``): beside its trace file, else (spans only over OTLP) in its
    job's own owner-only folder under this user's state root (``statefile.state_root``:
    ``$XDG_RUNTIME_DIR/loadtrace/<job id>/``, else ``<temp dir>/loadtrace-<uid>/<job id>/``), where the launcher's
    witness can still find it and no other user can reach it; refused (``OSError``) when either folder is someone
    else's or a link."""
    if trace_file is not None:
        return trace_file.removesuffix(semconv.TRACE_FILE_SUFFIX) + semconv.STATE_SUFFIX
    name = os.path.basename(trace_file_path(settings, resource)).removesuffix(semconv.TRACE_FILE_SUFFIX)
    root = statefile.private_dir(statefile.state_root())
    job = statefile.private_dir(os.path.join(root, safe_name(str(resource[semconv.JOB_ID]))))
    return os.path.join(job, name + semconv.STATE_SUFFIX)


def span_processors(settings: Settings, trace_file: str | None) -> tuple[list[SpanProcessor], Delivery | None]:
    """The span processors, and the OTLP exporter's ``Delivery`` (None without one)."""
    processors: list[SpanProcessor] = []
    delivery = None
    if trace_file is not None:
        processors.append(WriteAsItEnds(JsonLinesExporter(trace_file)))
    if settings.otlp_endpoint:
        try:
            delivery = Delivery(_otlp_exporter(settings))
            processors.append(
                BatchSpanProcessor(
                    delivery,
                    schedule_delay_millis=settings.bsp_schedule_delay_ms,
                    max_export_batch_size=settings.bsp_max_export_batch_size,
                    max_queue_size=settings.bsp_max_queue_size,
                )
            )
        except Exception as error:
            warn_once(
                "otlp-export",
                f"cannot export to {settings.otlp_endpoint} ({type(error).__name__}: {error}); spans are not sent",
            )
    return processors, delivery
