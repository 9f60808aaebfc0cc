"""Promise: ``loadtrace report --jaeger`` tells the same story as ``loadtrace report`` over the files, for spans that
went over OTLP to a collector and were stored by Jaeger.

The "Jaeger" here is this test's own server on 127.0.0.1: it stores what its OTLP receiver got from a real two-rank
run (``support/wire.py``) and answers Jaeger v2's query API from it, in Jaeger's shapes: ``GET /api/v3/traces/{id}`` and
``GET /api/v3/traces?query.service_name=...&query.start_time_min=...&query.start_time_max=...`` answer
``{"result": TracesData}`` (hex ids, nanoseconds as decimal strings, enums as numbers, several traces merged), nothing
found is 404 ``{"error": {"httpCode": 404, "message": "No traces found"}}``, a malformed parameter 400 in the same
envelope.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from support import loopback
from support.cli import one_line, run_json
from support.jaeger_query import NO_TRACES, error, parse_rfc3339_nanos
from support.venvs import discover, installed_problems
from support.wire import WireRun, traces_data_json, wire_run

from loadtrace import semconv as sc
from loadtrace.cli import main

VENVS = discover()


class JaegerStore(loopback.Loopback):
    """Jaeger v2's ``/api/v3`` over the spans one OTLP receiver stored."""

    def __init__(self, wire: WireRun):
        self.wire = wire
        self.requests: list[str] = []
        store = self

        class Handler(loopback.Handler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                store.requests.append(self.path)
                self.reply(*store.answer(urlparse(self.path)))

        super().__init__(Handler)

    def answer(self, url) -> tuple[int, bytes]:
        if url.path.startswith("/api/v3/traces/"):
            trace_id = url.path.rsplit("/", 1)[1].lower()
            return self.traces({trace_id})
        if url.path == "/api/v3/traces":
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            for key in ("query.start_time_min", "query.start_time_max"):
                try:
                    query[key] = parse_rfc3339_nanos(query[key])
                except (KeyError, ValueError):
                    return 400, error(400, f"malformed parameter {key}")
            if not query.get("query.num_traces"):  # Jaeger 2.12's memory storage: a search depth of 0
                return 500, error(500, "search depth must be greater than 0 and less than max traces")
            if not query.get("query.service_name"):
                return 400, error(400, "malformed parameter query.service_name")
            # Jaeger finds the traces with a span of that service starting in the window, and returns them whole.
            found = {
                s.trace_id
                for s in self.wire.spans
                if s.resource.get("service.name") == query["query.service_name"]
                and query["query.start_time_min"] <= s.start_ns <= query["query.start_time_max"]
            }
            return self.traces(found)
        return 404, b"404 page not found\n"

    def traces(self, trace_ids: set[str]) -> tuple[int, bytes]:
        data = traces_data_json(self.wire.arrivals, keep=lambda span: span.trace_id.hex() in trace_ids)
        if not data.get("resourceSpans"):
            return 404, NO_TRACES
        for resource_spans in data["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    span.setdefault("parentSpanId", "")  # Jaeger writes the empty id of a root span
        return 200, json.dumps({"result": data}).encode()


@pytest.fixture(scope="module")
def wire(checkpoint: Path, tmp_path_factory) -> WireRun:
    venv = VENVS[0]
    problems = installed_problems(venv)
    assert not problems, f"loadtrace is not installed (non-editable) in {venv.root}: {problems}"
    return wire_run(venv, "http/protobuf", checkpoint, tmp_path_factory, "fsdp")


@pytest.fixture(scope="module")
def jaeger(wire: WireRun):
    with JaegerStore(wire) as store:
        yield store


@pytest.fixture(scope="module")
def from_files(wire: WireRun) -> dict:
    """The report over the run's files, what every Jaeger answer must equal."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(wire.files_dir), "--format", "json"]) == 0
    return json.loads(out.getvalue())


def assert_same_report(got: dict, files: dict, where: str) -> None:
    assert got["skipped_lines"] == files["skipped_lines"] == 0, where
    assert len(files["traces"]) == 1 and len(files["ranks"]) == 2, files["traces"]
    assert got["traces"] == files["traces"], where
    for rank_got, rank_files in zip(got["ranks"], files["ranks"], strict=True):
        assert rank_got == rank_files, f"{where}: rank {rank_files['rank']}"
    assert got["findings"] == files["findings"], where


def test_report_by_trace_id_equals_report_over_files(wire: WireRun, jaeger: JaegerStore, from_files: dict, capsys):
    (trace_id,) = {s.trace_id for s in wire.spans if s.scope[0] != sc.SCOPE_LOADS_VIEW}  # not the job's loads view
    jaeger.requests.clear()
    got = run_json(capsys, "report", "--jaeger", jaeger.url, "--trace-id", trace_id)
    assert jaeger.requests == [f"/api/v3/traces/{trace_id}"]
    assert_same_report(got, from_files, f"--trace-id {trace_id}")
    ranks = {r["rank"]: r for r in got["ranks"]}
    assert ranks[1]["read_bytes"] == ranks[0]["read_bytes"] > 0  # FSDP cpu_ram_efficient: rank 1 reads it all too
    assert "duplicate_checkpoint_read" in {f["kind"] for f in got["findings"]}


def test_report_by_service_search_equals_report_over_files(jaeger: JaegerStore, from_files: dict, capsys):
    jaeger.requests.clear()
    got = run_json(capsys, "report", "--jaeger", jaeger.url, "--service", "loadtrace", "--since", "1h")
    (request,) = jaeger.requests
    query = parse_qs(urlparse(request).query)
    assert urlparse(request).path == "/api/v3/traces" and query["query.service_name"] == ["loadtrace"]
    window = parse_rfc3339_nanos(query["query.start_time_max"][0]) - parse_rfc3339_nanos(
        query["query.start_time_min"][0]
    )
    assert window == 3600 * 10**9
    assert_same_report(got, from_files, "--service loadtrace --since 1h")


def test_nothing_found_is_exit_2_with_one_line(jaeger: JaegerStore, capsys):
    for argv in (["--trace-id", "0" * 32], ["--service", "someone-else"]):
        assert one_line(capsys, "report", "--jaeger", jaeger.url, *argv).startswith("loadtrace: error: no traces found")
