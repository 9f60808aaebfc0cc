"""Reading from Jaeger v2's query API (``/api/v3``), against a small server on 127.0.0.1 that answers in Jaeger's
shapes: ``{"result": TracesData}``, the 404 "No traces found" envelope, and 400 for malformed parameters."""

from __future__ import annotations

import json
import socket
from urllib.parse import parse_qs, urlparse

import pytest
from support import loopback
from support.cli import run
from support.jaeger_query import NO_TRACES, error, parse_rfc3339_nanos
from support.otlp_lines import field_fact_job, trace_id_of

from loadtrace.analysis.sources import SourceError, jaeger

JOBS = {
    trace_id_of(f"{v}-fsdp_cpu_ram_efficient"): field_fact_job(v, "fsdp_cpu_ram_efficient")
    for v in ("5.12.0", "5.24.0")
}


def merged(lines: list[str]) -> dict:
    """Jaeger merges every matching span into one TracesData (resourceSpans appended)."""
    return {"resourceSpans": [rs for text in lines for rs in json.loads(text)["resourceSpans"]]}


class JaegerQuery(loopback.Handler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        JaegerQuery.requests.append(self.path)
        url = urlparse(self.path)
        if url.path.startswith("/behind-a-login-page/"):
            return self.reply(200, b"<html>please log in</html>")
        if url.path.startswith("/api/v3/traces/"):
            trace_id = url.path.rsplit("/", 1)[1]
            if trace_id in JOBS:
                return self.reply(200, json.dumps({"result": merged(JOBS[trace_id])}).encode())
            return self.reply(404, NO_TRACES)
        if url.path == "/api/v3/traces":
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            try:
                for key in ("query.start_time_min", "query.start_time_max"):
                    parse_rfc3339_nanos(query[key])
            except (KeyError, ValueError):
                return self.reply(400, error(400, "malformed parameter query.start_time_min"))
            if query.get("query.service_name") != "trainer":
                return self.reply(404, NO_TRACES)
            return self.reply(
                200, json.dumps({"result": merged([t for lines in JOBS.values() for t in lines])}).encode()
            )
        return self.reply(404, b"404 page not found")


@pytest.fixture
def server():
    JaegerQuery.requests = []
    with loopback.Loopback(JaegerQuery) as running:
        yield running.url


def test_report_by_trace_id(server, capsys):
    trace = trace_id_of("5.12.0-fsdp_cpu_ram_efficient")
    code, out, err = run(
        capsys, "report", "--jaeger", server + "/", "--trace-id", trace, "--format", "json", "--fail-on-findings"
    )
    report = json.loads(out)
    assert code == 1 and err == ""
    assert JaegerQuery.requests == [f"/api/v3/traces/{trace}"]
    assert [t["trace_id"] for t in report["traces"]] == [trace] and len(report["ranks"]) == 2
    assert {f["kind"] for f in report["findings"]} >= {"duplicate_checkpoint_read", "nonzero_rank_materialization"}


def test_report_by_service_and_time_window_reports_each_trace(server, capsys):
    code, out, _ = run(
        capsys, "report", "--jaeger", server, "--service", "trainer", "--since", "2h", "--format", "json"
    )
    assert code == 0 and len(json.loads(out)["traces"]) == 2
    (request,) = JaegerQuery.requests
    query = parse_qs(urlparse(request).query)
    assert query["query.service_name"] == ["trainer"]
    start, end = (parse_rfc3339_nanos(query[key][0]) for key in ("query.start_time_min", "query.start_time_max"))
    assert end - start == 7200 * 10**9


def test_latest_reports_the_job_that_started_last_of_the_service(server, capsys):
    """Issue 15: ``--latest`` over Jaeger, as over a folder; the service defaults to loadtrace's own."""
    code, out, _ = run(capsys, "report", "--jaeger", server, "--service", "trainer", "--latest", "--format", "json")
    starts = {
        t["trace_id"]: t["start_time"]
        for t in json.loads(run(capsys, "report", "--jaeger", server, "--service", "trainer", "--format", "json")[1])[
            "traces"
        ]
    }
    assert code == 0 and [t["trace_id"] for t in json.loads(out)["traces"]] == [max(starts, key=starts.__getitem__)]
    JaegerQuery.requests = []
    code, _, err = run(capsys, "report", "--jaeger", server, "--latest")
    assert code == 2 and err.startswith("loadtrace: error: no traces found")
    assert parse_qs(urlparse(JaegerQuery.requests[0]).query)["query.service_name"] == ["loadtrace"]


def test_jaeger_404_envelope_is_no_traces_found(server, capsys):
    code, out, err = run(capsys, "report", "--jaeger", server, "--trace-id", "0" * 32)
    assert (code, out) == (2, "") and err.startswith("loadtrace: error: no traces found") and err.count("\n") == 1
    code, _, err = run(capsys, "report", "--jaeger", server, "--service", "nobody")
    assert code == 2 and "no traces found" in err


def test_jaeger_400_envelope_message_is_shown(server):
    with pytest.raises(SourceError, match="HTTP 400: malformed parameter query.start_time_min"):
        jaeger.fetch(server + "/api/v3/traces?query.service_name=trainer")


def test_a_connection_refused_is_one_line_exit_2(capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once closed
    code, out, err = run(capsys, "report", "--jaeger", f"http://127.0.0.1:{port}", "--trace-id", "ab")
    assert (code, out) == (2, "") and err.startswith("loadtrace: error: cannot reach Jaeger") and err.count("\n") == 1


def test_a_200_that_is_not_otlp_json_is_an_error(server, capsys):
    code, _, err = run(capsys, "report", "--jaeger", server + "/behind-a-login-page", "--trace-id", "ab")
    assert code == 2 and "Jaeger's answer is not OTLP JSON" in err and err.count("\n") == 1


def test_compare_two_trace_ids_from_jaeger(server, capsys):
    a, b = (trace_id_of(f"{v}-fsdp_cpu_ram_efficient") for v in ("5.12.0", "5.24.0"))
    code, out, _ = run(capsys, "compare", a, b, "--jaeger", server, "--format", "json")
    result = json.loads(out)
    assert code == 0 and (result["a"]["trace_id"], result["b"]["trace_id"]) == (a, b)
    (row,) = [r for r in result["phases"] if (r["phase"], r["rank"], r["metric"]) == ("materialize", 1, "bytes")]
    assert (row["a"], row["b"]) == (1_009_216, 64)


def test_rfc3339_nanos_and_durations():
    assert jaeger.rfc3339_nanos(1_764_493_200_123_456_789) == "2025-11-30T09:00:00.123456789Z"
    assert jaeger.parse_duration("90s") == 90 and jaeger.parse_duration("1.5h") == 5400
    url = jaeger.page_url("http://j:16686/", "svc", 1_764_489_600_000_000_000, 1_764_493_200_000_000_000)
    assert url == (
        "http://j:16686/api/v3/traces?query.service_name=svc&query.start_time_min=2025-11-30T08%3A00%3A00.000000000Z"
        "&query.start_time_max=2025-11-30T09%3A00%3A00.000000000Z&query.num_traces=100"
    )
