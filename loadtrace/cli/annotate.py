"""``loadtrace annotate``: the report's findings written into the job's own trace (and, for a job whose rank 0 died, the
trace's root and rank groups), and the job's loads view beside it (analysis/annotate.py says what each is). Read from
a folder of trace files or from Jaeger; written into the job's folder as a file of its own (``annotations-<host>-<pid>
.jsonl``, which a replay sends with the rest) and sent over OTLP where an endpoint is given (``--otlp``, else the
``OTEL_EXPORTER_OTLP_*`` variables, as the job's ranks read them). Rank 0 runs it at the end of a job over the files
it can see (instrumentation/exporting/trace_findings.py); a person runs it for a job rank 0 could not see whole (nodes
without shared storage) or that died.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from loadtrace import semconv as sc
from loadtrace.analysis.annotate import Annotations, annotate_job, existing, job_finds, trace_link
from loadtrace.analysis.model import Report
from loadtrace.analysis.report import report
from loadtrace.analysis.sources import SourceError, SpanSet, jaeger, read_files, source_files
from loadtrace.version import __version__

SEND_TIMEOUT_S = 10.0


def jaeger_url(given: str | None = None) -> str | None:
    """Where a person opens Jaeger's UI: ``given`` (``--jaeger``), else ``LOADTRACE_JAEGER_URL``."""
    return (given or os.environ.get(sc.ENV_JAEGER_URL, "")).strip().rstrip("/") or None


def jaeger_links(result: Report, url: str) -> list[str]:
    """``loadtrace report``'s last lines: each job's trace in Jaeger's UI, and its loads view (where ``loadtrace
    annotate`` or rank 0 wrote one), the flagged ranks' loads highlighted in both."""
    lines = []
    for trace_id, job_find, loads_id, loads_find in job_finds(result):
        lines.append(f"Jaeger: {trace_link(url, trace_id, job_find)}")
        lines.append(f"  its loads alone: {trace_link(url, loads_id, loads_find)}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="?", help="a folder of the job's trace files (not with --jaeger)")
    parser.add_argument("--job", help="the job id or trace id to annotate (default: every job in the source)")
    parser.add_argument("--latest", action="store_true", help="only the job that started last")
    parser.add_argument("--jaeger", metavar="URL", help="read the job from Jaeger's query API (http://HOST:16686)")
    parser.add_argument("--trace-id", help="with --jaeger: the job's trace id")
    parser.add_argument(
        "--otlp",
        metavar="URL",
        help="send to this OTLP endpoint (http://HOST:4318, or grpc://HOST:4317); default: OTEL_EXPORTER_OTLP_ENDPOINT",
    )
    parser.add_argument("--no-file", action="store_true", help="write no annotations file into the job's folder")
    parser.add_argument(
        "--send-timeout", type=float, default=SEND_TIMEOUT_S, metavar="S", help="seconds to wait for the endpoint"
    )
    parser.add_argument(
        "--format",
        choices=("text", "link"),
        default="text",
        help="text: what was written, and where (default); link: only the Jaeger link (rank 0's closing line)",
    )


def run(args: argparse.Namespace, default_folder: str) -> int:
    spans, documents, folder, source = _read(args, default_folder)
    result = report(spans, pick=args.job or args.trace_id, latest=args.latest, source=args.jaeger or folder or "")
    done = []
    for trace in result.traces:
        if trace.job_id is None:
            continue
        made = annotate_job(result, trace.job_id, existing(documents, trace.job_id), source)
        written = _write(made, args, folder)
        done.append((made, written))
    url = jaeger_url(args.jaeger)
    for made, written in done:
        if args.format == "link":
            if url:
                print(trace_link(url, made.loads_trace_id, made.loads_find))
            continue
        print(f"loadtrace annotate: job {made.job_id}: {made.findings} findings; {written}")
        if url:
            print(f"  the job: {trace_link(url, made.job_trace_id, made.job_find)}")
            print(f"  its loads: {trace_link(url, made.loads_trace_id, made.loads_find)}")
    return 0


def _read(args: argparse.Namespace, default_folder: str) -> tuple[SpanSet, list[dict[str, Any]], str | None, str]:
    """The spans, the documents they came in, the folder (None from Jaeger) and words for where they came from."""
    if args.jaeger is not None:
        if args.source is not None or not args.trace_id:
            raise SourceError("with --jaeger, give --trace-id ID (and no SOURCE)")
        spans, documents = jaeger.fetch_documents(jaeger.trace_url(args.jaeger, args.trace_id, raw=True))
        return spans, documents, None, "jaeger"
    if args.trace_id:
        raise SourceError("--trace-id goes with --jaeger")
    folder = str(args.source or default_folder)
    spans = read_files(folder)
    if not spans.spans:
        raise SourceError(f"{folder}: no spans found")
    hosts = sorted({str(s.resource.get(sc.HOST_NAME)) for s in spans.spans if s.resource.get(sc.HOST_NAME)})
    return spans, list(structure_lines(folder)), folder, f"the files of {', '.join(hosts) or 'this host'}"


def structure_lines(folder: str | Path) -> Any:
    """The lines of the folder's trace files that hold the job's structure (rank 0's root and groups, or the root an
    older loadtrace wrote)."""
    files, _ = source_files(folder)
    markers = (f'"{sc.SCOPE_STRUCTURE}"'.encode(), f'"name":"{sc.SPAN_JOB}"'.encode())
    for path in files:
        try:
            with open(path, "rb") as handle:
                for line in handle:
                    if any(marker in line for marker in markers):
                        try:
                            yield json.loads(line)
                        except ValueError:
                            continue
        except OSError:
            continue


def _write(made: Annotations, args: argparse.Namespace, folder: str | None) -> str:
    """Into the job's folder and over OTLP, as asked; what was done, in words."""
    said = []
    if folder is not None and not args.no_file:
        path = _job_folder(folder, made.job_trace_id) / f"annotations-{socket.gethostname()}-{os.getpid()}.jsonl"
        text = "".join(json.dumps(data, separators=(",", ":")) + "\n" for data in made.documents)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner-only, as the trace files
        with os.fdopen(fd, "w") as out:
            out.write(text)
        said.append(f"written to {path}")
    endpoint, protocol = otlp_target(args.otlp)
    if endpoint is not None:
        for data in made.documents:
            send(data, endpoint, protocol, args.send_timeout)
        said.append(f"sent to {sc.redact_secrets(endpoint)}")
    if args.jaeger is not None and endpoint is None:
        raise SourceError("nothing to send to: give --otlp URL (where Jaeger or its collector receives OTLP)")
    return ", ".join(said) or "nothing written (--no-file, and no OTLP endpoint)"


def _job_folder(folder: str, trace_id: str) -> Path:
    """The folder of the job's own trace files under ``folder`` (the first file whose first line is in its trace)."""
    files, _ = source_files(folder)
    for path in files:
        try:
            with open(path, "rb") as handle:
                if f'"traceId":"{trace_id}"'.encode() in handle.readline():
                    return path.parent
        except OSError:
            continue
    root = Path(folder)
    return root if root.is_dir() else root.parent


# OTLP, as the job's own exporters send it ----------------------------------------------------------------------------


def otlp_target(given: str | None) -> tuple[str | None, str]:
    """(the traces URL or gRPC address, the protocol: ``http/protobuf``, ``http/json`` or ``grpc``): ``given``, else
    OTel's variables, as the job's own exporters read them."""
    env = os.environ
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "").strip()
    if given:
        if given.startswith("grpc://"):
            return given.removeprefix("grpc://"), "grpc"
        return given.rstrip("/") + "/v1/traces", "http/protobuf"
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not (traces or base):
        return None, "http/protobuf"
    if protocol == "grpc":
        address = urllib.parse.urlsplit(traces or base)
        return address.netloc or (traces or base), "grpc"
    url = traces or base.rstrip("/") + "/v1/traces"
    return url, "http/json" if protocol == "http/json" else "http/protobuf"


def _headers() -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS``: ``key=value,...``, URL-encoded, as the OTel exporters read them."""
    text = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {urllib.parse.unquote(k).strip(): urllib.parse.unquote(v).strip() for k, v in pairs}


def send(data: dict[str, Any], endpoint: str, protocol: str, timeout_s: float = SEND_TIMEOUT_S) -> None:
    """One ``TracesData`` to the endpoint in the job's protocol: OTLP/HTTP with protobuf (OTel's default) or JSON, or
    OTLP/gRPC."""
    try:
        if protocol == "grpc":
            _send_grpc(data, endpoint, timeout_s)
            return
        if protocol == "http/json":
            body, kind = json.dumps(data).encode(), "application/json"
        else:
            body, kind = _request(data).SerializeToString(), "application/x-protobuf"
        headers = {"Content-Type": kind, "User-Agent": f"loadtrace/{__version__}", **_headers()}
        request = urllib.request.Request(endpoint, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read()
    except (OSError, ValueError, urllib.error.URLError) as error:
        raise SourceError(f"cannot send to {sc.redact_secrets(endpoint)}: {getattr(error, 'reason', error)}") from None


def _request(data: dict[str, Any]) -> Any:
    """The OTLP protobuf request of a ``TracesData`` in OTLP JSON (ids in hex there, base64 in protobuf's JSON)."""
    from google.protobuf.json_format import ParseDict  # with opentelemetry-exporter-otlp, as the job's exporters
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    def ids(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _b64(v) if k in ("traceId", "spanId", "parentSpanId") else ids(v) for k, v in value.items()}
        return [ids(item) for item in value] if isinstance(value, list) else value

    return ParseDict(ids(data), trace_service_pb2.ExportTraceServiceRequest())


def _send_grpc(data: dict[str, Any], address: str, timeout_s: float) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    request = _request(data)
    options = [("grpc.primary_user_agent", f"loadtrace/{__version__}")]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        try:
            stub.Export(request, timeout=timeout_s, metadata=list(_headers().items()))
        except grpc.RpcError as error:
            raise OSError(f"gRPC {error.code().name}") from None


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode() if hex_id else ""
