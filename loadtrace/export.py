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
from typing import Any, Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from google.protobuf.json_format import MessageToDict

from ._log import warn_once
from .settings import Settings

DEFAULT_ROOT = "loadtrace-traces"
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any) -> None:
    """protobuf's JSON writes bytes as base64; OTLP JSON wants trace and span ids as hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """One OTLP JSON Lines line (``TracesData``) for these spans."""
    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    _hex_ids(data)
    return json.dumps(data, separators=(",", ":")) + "\n"


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
                    view = view[os.write(self._fd, view):]
            return SpanExportResult.SUCCESS
        except Exception as error:
            self._broken = True
            warn_once("file-export", f"cannot write traces to {self.path} ({type(error).__name__}: {error}); this process's spans are dropped")
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every line is written by the time export returns


def trace_file_path(settings: Settings, resource: dict[str, Any]) -> str:
    root = settings.trace_dir or os.path.join(DEFAULT_ROOT, safe_name(str(resource["loadtrace.job.id"])))
    rank = resource.get("loadtrace.rank")
    who = f"rank{rank:05d}" if isinstance(rank, int) else "process"
    return os.path.join(root, f"{who}-{safe_name(socket.gethostname())}-{os.getpid()}.jsonl")


def _otlp_exporter(settings: Settings) -> SpanExporter:
    # The standard exporters read OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout, certificates) themselves.
    if settings.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


class _OnceHandler(logging.Handler):
    """OpenTelemetry's exporters log each failed batch and retry, often with a traceback. In someone else's job that
    becomes one line per problem kind, said once: the job's owner needs to know, not to read a log flood."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            return
        kind = "export" if ".export" in record.name else "opentelemetry"
        try:
            message = record.getMessage().splitlines()[0]
        except Exception:
            message = str(record.msg)
        warn_once(kind, f"{'span export failing' if kind == 'export' else 'OpenTelemetry setup'}: {message}")


def route_otel_logs() -> None:
    otel = logging.getLogger("opentelemetry")
    if not any(isinstance(h, _OnceHandler) for h in otel.handlers):
        otel.addHandler(_OnceHandler())
        otel.propagate = False


def progress_path(trace_file: str) -> str:
    """Where the monitor keeps the open spans of a rank still loading (not ``*.jsonl``: collectors replay those)."""
    return trace_file[: -len(".jsonl")] + ".progress.json"


def span_processors(settings: Settings, trace_file: str | None) -> list[SpanProcessor]:
    processors: list[SpanProcessor] = []
    if trace_file is not None:
        processors.append(SimpleSpanProcessor(JsonLinesExporter(trace_file)))
    if settings.otlp_endpoint:
        try:
            # Export soon after each span ends (OTEL_BSP_SCHEDULE_DELAY still wins): a rank killed mid-load then
            # loses at most what ended in the last fraction of a second, besides the spans still open.
            delay = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else 200
            processors.append(BatchSpanProcessor(_otlp_exporter(settings), schedule_delay_millis=delay))
        except Exception as error:
            warn_once("otlp-export", f"cannot export to {settings.otlp_endpoint} ({type(error).__name__}: {error}); spans are not sent")
    return processors
