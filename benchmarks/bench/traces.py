"""Reading our own OTLP JSON Lines files (independently of loadtrace.analysis), and a local OTLP/HTTP receiver that
answers 200 to ``POST /v1/traces``, counting requests and spans."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def read_spans(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(every span of an OTLP JSON Lines file, its resource's attributes)."""
    spans, resource = [], {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line).get("resourceSpans", []):
            for attribute in rs.get("resource", {}).get("attributes", []):
                value = attribute["value"]
                resource[attribute["key"]] = next(iter(value.values()), None) if value else None
            for ss in rs.get("scopeSpans", []):
                spans.extend(ss.get("spans", []))
    return spans, resource


def spans_per_load(spans: list[dict[str, Any]]) -> list[dict[str, int]]:
    """For each ``transformers.from_pretrained`` span: spans in its subtree (itself included) and files opened."""
    by_id = {span["spanId"]: span for span in spans}
    loads: dict[str, dict[str, int]] = {}
    for span in spans:
        node = span
        while node is not None and node["name"] != "transformers.from_pretrained":
            node = by_id.get(node.get("parentSpanId", ""))
        if node is None:
            continue
        entry = loads.setdefault(node["spanId"], {"spans": 0, "files": 0})
        entry["spans"] += 1
        if span["name"] in ("safetensors.open", "torch.load"):
            entry["files"] += 1
    return list(loads.values())


def count_spans(body: bytes) -> int:
    """Spans in an ExportTraceServiceRequest (0 when opentelemetry-proto is missing: requests are still counted)."""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:  # pragma: no cover
        return 0
    request = ExportTraceServiceRequest.FromString(body)
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


class Receiver:
    """An OTLP/HTTP endpoint on 127.0.0.1, in a thread of this process."""

    def __init__(self) -> None:
        self.requests = 0
        self.spans = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="otlp-receiver").start()

    def received(self, body: bytes) -> None:
        count = count_spans(body)
        with self._lock:
            self.requests += 1
            self.spans += count
            self.bytes += len(body)

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.requests, self.spans, self.bytes

    def close(self) -> None:
        self.server.shutdown()


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.received(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
