"""OTLP on the wire: receivers on 127.0.0.1 (http/protobuf and grpc) decoding what arrives with opentelemetry-proto,
and two-rank ``examples/load.py`` runs that send to them while also writing files (``LOADTRACE_DIR``).

Shared by ``test_wire_otlp.py`` and ``test_wire_jaeger.py``: each (venv, protocol) run happens once per session.
Nothing here uses loadtrace's own encoding: protobuf bytes → messages → plain values, and messages → OTLP JSON.
"""

from __future__ import annotations

import base64
import gzip
import threading
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from loadtrace import semconv
from support import loopback
from support.multirank import EXAMPLE_WORKER, MODE_ENV
from support.otlp_reference import _hex_ids
from support.shared import once
from support.torchrun import TorchrunResult, torchrun
from support.venvs import Venv

PROTOCOLS = ("http/protobuf", "grpc")
TRACES_PATH, METRICS_PATH = "/v1/traces", "/v1/metrics"
GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@dataclass
class Arrival:
    """One export call as it arrived: the decoded request and how it was sent."""

    request: trace_service_pb2.ExportTraceServiceRequest
    path: str  # HTTP path, or the gRPC method
    content_type: str | None
    user_agent: str | None


class Received:
    """Thread-safe list of arrivals (a receiver's worker threads append), and of the metrics export requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrivals: list[Arrival] = []
        self.rejected: list[str] = []
        self.metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self._lock:
            self.metrics.append(request)

    def add(self, arrival: Arrival) -> None:
        with self._lock:
            self._arrivals.append(arrival)

    def reject(self, why: str) -> None:
        with self._lock:
            self.rejected.append(why)

    @property
    def arrivals(self) -> list[Arrival]:
        with self._lock:
            return list(self._arrivals)


class HttpReceiver(loopback.Loopback):
    """``POST /v1/traces`` (and ``/v1/metrics``) with an ``application/x-protobuf`` body (gzip allowed), answered as an
    OTLP/HTTP collector answers: 200 and a protobuf ``Export...ServiceResponse``."""

    def __init__(self) -> None:
        self.received = Received()
        received = self.received

        class Handler(loopback.Handler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                content_type = self.headers.get("Content-Type")
                if self.path == METRICS_PATH and content_type == "application/x-protobuf":
                    received.add_metrics(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
                    reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                    return self.reply(200, reply, "application/x-protobuf")
                if self.path != TRACES_PATH or content_type != "application/x-protobuf":
                    received.reject(f"POST {self.path} Content-Type {content_type}")
                    return self.reply(404 if self.path != TRACES_PATH else 415, b"", "text/plain")
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.add(Arrival(request, self.path, content_type, self.headers.get("User-Agent")))
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.reply(200, reply, "application/x-protobuf")

        super().__init__(Handler)


class GrpcReceiver:
    """A ``grpc.server`` implementing ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` (and the metrics
    service's)."""

    def __init__(self) -> None:
        self.received = Received()
        received = self.received

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 (the generated name)
                metadata = dict(context.invocation_metadata())
                received.add(Arrival(request, GRPC_METHOD, metadata.get("content-type"), metadata.get("user-agent")))
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802 (the generated name)
                received.add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> GrpcReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop(grace=None)


# Decoding ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WireSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: tuple[str, str]


def any_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which) if which else None


def attributes(items: Iterable) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in items}


def span_attributes(span: Any) -> dict[str, Any]:
    """A span's attributes as the analysis reads them: with its ``loadtrace.data`` event's (the values for machines,
    docs/reference.md)."""
    found = attributes(span.attributes)
    for event in span.events:
        if event.name == semconv.DATA_EVENT:
            found.update(attributes(event.attributes))
    return found


def wire_spans(arrivals: Iterable[Arrival]) -> list[WireSpan]:
    spans = []
    for arrival in arrivals:
        for resource_spans in arrival.request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                scope = (scope_spans.scope.name, scope_spans.scope.version)
                for span in scope_spans.spans:
                    spans.append(
                        WireSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            status_code=span.status.code,
                            attributes=span_attributes(span),
                            resource=resource,
                            scope=scope,
                        )
                    )
    return spans


def traces_data_json(arrivals: Iterable[Arrival], keep: Callable[[trace_pb2.Span], bool] = lambda span: True) -> dict:
    """The kept spans as one OTLP JSON ``TracesData`` (hex ids, 64-bit numbers as strings, enums as numbers)."""
    data = trace_pb2.TracesData()
    for arrival in arrivals:
        for resource_spans in arrival.request.resource_spans:
            out = trace_pb2.ResourceSpans(resource=resource_spans.resource, schema_url=resource_spans.schema_url)
            for scope_spans in resource_spans.scope_spans:
                kept = [span for span in scope_spans.spans if keep(span)]
                if kept:
                    out.scope_spans.add(scope=scope_spans.scope, schema_url=scope_spans.schema_url, spans=kept)
            if out.scope_spans:
                data.resource_spans.append(out)
    result = MessageToDict(data, use_integers_for_enums=True)
    _hex_ids(result)
    return result


# Runs --------------------------------------------------------------------------------------------------------------


@dataclass
class WireRun:
    venv: Venv
    protocol: str
    mode: str
    run: TorchrunResult
    files_dir: Path  # LOADTRACE_DIR
    arrivals: list[Arrival]
    rejected: list[str]
    metrics: list[metrics_service_pb2.ExportMetricsServiceRequest]
    _spans: list[WireSpan] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"{self.venv.id} {self.mode} OTLP {self.protocol}"

    @property
    def spans(self) -> list[WireSpan]:
        if self._spans is None:
            self._spans = wire_spans(self.arrivals)
        return self._spans


WIRE_CLUSTER = "wire-cluster"  # LOADTRACE_CLUSTER of these runs: on their Resource and their startup metrics


def wire_env(mode: str, files_dir: Path, endpoint: str, protocol: str) -> dict[str, str]:
    """A traced ``examples/load.py`` run's variables: files in ``files_dir`` and OTLP to ``endpoint`` at once."""
    return {
        **MODE_ENV[mode],
        "LOADTRACE": "1",
        "LOADTRACE_DIR": str(files_dir),
        "LOADTRACE_CLUSTER": WIRE_CLUSTER,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        # What arrives is tested here, not the exit's bound (test_never_breaks_the_job has dead collectors): on 2
        # busy cores a gRPC flush at exit has taken over the default 1 s, which loadtrace then says, as it should.
        "LOADTRACE_EXIT_TIMEOUT": "10",
    }


def wire_run(
    venv: Venv, protocol: str, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, mode: str = "fsdp"
) -> WireRun:
    """``torchrun --nproc_per_node 2 examples/load.py CKPT --mode MODE`` with ``LOADTRACE=1``, the OTLP endpoint of a
    receiver started here, and ``LOADTRACE_DIR``; run once per (venv, protocol, mode) and session."""

    def run_it() -> WireRun:
        receiver = GrpcReceiver() if protocol == "grpc" else HttpReceiver()
        cwd = tmp_path_factory.mktemp(f"wire-{venv.name}-{mode}-{protocol.replace('/', '-')}")
        files_dir = cwd / "files"
        env = wire_env(mode, files_dir, f"http://127.0.0.1:{receiver.port}", protocol)
        with receiver:
            run = torchrun(venv, EXAMPLE_WORKER, [str(checkpoint), "--mode", mode], cwd=cwd, env=env)
        print(
            f"[wire] {venv.id} {mode} {protocol}: rc {run.returncode} in {run.seconds:.1f}s, "
            f"{len(receiver.received.arrivals)} export calls, cwd {cwd}"
        )
        got = receiver.received
        return WireRun(venv, protocol, mode, run, files_dir, got.arrivals, got.rejected, got.metrics)

    result = once(tmp_path_factory, ("wire", str(venv.root), str(checkpoint), protocol, mode), run_it)
    result.run.check()
    return result
