"""``--clickhouse``: the collector's ``otel_traces`` table, on the real engine (chDB in-process, and the official driver
over HTTP through a loopback front), gives the same answers as the files it was filled from.

The table is the clickhouseexporter's DDL, filled through a port of its mapping (``support/otel_traces.py``) from
recorded traces: the real runs of tests/fixtures/spans (plain, FSDP, ZeRO-3, a failed load, a killed rank: its spans
only, as a collector receives them), a restart of one of them (new processes, attempt 1), and a tree of jobs on
three clusters (``support/jobtree.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import otel_traces
from support.cli import one_line, run, run_json
from support.clickhouse_fleet import RUNS, SINCE, fleet_of, trace_of, without_skipped
from support.dead_rank_jobs import TRACE as WITNESSED_TRACE

from loadtrace.analysis.sources import clickhouse

chdb_session = pytest.importorskip("chdb.session")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> tuple[Path, str]:
    """(a folder of trace files, ``chdb:`` URL of a database filled from exactly those files)."""
    return fleet_of(tmp_path_factory.mktemp("fleet"))


# The mapping ------------------------------------------------------------------------------------------------------


def test_values_are_written_as_the_exporter_writes_them():
    s = otel_traces.as_string
    assert s({"intValue": "1009152"}) == "1009152" and s({"intValue": "-3"}) == "-3"
    assert s({"boolValue": True}) == "true" and s({"boolValue": False}) == "false"
    assert [s({"doubleValue": v}) for v in (0.1, 2.0, 1e21, 1.5e-7, -0.0)] == [
        "0.1",
        "2",
        "1000000000000000000000",
        "0.00000015",
        "-0",
    ]
    assert s({"doubleValue": float("inf")}) == "+Inf" and s({"doubleValue": float("nan")}) == "NaN"
    array = {"arrayValue": {"values": [{"stringValue": "a<b"}, {"intValue": "2"}, {"boolValue": True}]}}
    assert s(array) == '["a\\u003cb",2,true]'
    kvlist = {"kvlistValue": {"values": [{"key": "z", "value": {"intValue": "1"}}, {"key": "a", "value": {}}]}}
    assert s(kvlist) == '{"a":null,"z":1}'
    assert s({"bytesValue": "AAE="}) == "AAE=" and s({}) == ""
    row = next(
        otel_traces.rows(
            {
                "resourceSpans": [
                    {
                        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "loadtrace"}}]},
                        "scopeSpans": [
                            {
                                "scope": {"name": "loadtrace", "version": "0.1.0"},
                                "spans": [
                                    {
                                        "traceId": "AB" * 16,
                                        "spanId": "0" * 16,
                                        "name": "x",
                                        "kind": 1,
                                        "startTimeUnixNano": "20",
                                        "endTimeUnixNano": "10",
                                        "status": {"code": 2, "message": "SIGKILL"},
                                    }
                                ],
                            }
                        ],
                    }
                ]
            }
        )
    )
    assert (row["TraceId"], row["SpanId"], row["SpanKind"], row["StatusCode"]) == (
        "ab" * 16,
        "",
        "Internal",
        "Error",
    )
    assert (row["ServiceName"], row["ScopeName"], row["Duration"]) == ("loadtrace", "loadtrace", 2**64 - 10)


def test_text_comes_back_as_the_span_carried_it():
    typed = clickhouse.typed
    assert typed("loadtrace.read.bytes", "1009152") == 1009152 and typed("loadtrace.job.id", "1234") == "1234"
    assert typed("loadtrace.lib.torch", "2") == "2" and typed("loadtrace.exit.oom_killed", "false") is False
    assert typed("loadtrace.materialized.sites", '["a","b"]') == ["a", "b"] and typed("x", "0.25") == 0.25
    assert typed("x", "007") == "007" and typed("x", "[not json") == "[not json"


def test_the_table_is_the_exporters_and_holds_every_span(fleet):
    files, url = fleet
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        columns = session.query("DESCRIBE TABLE default.otel_traces", "TSV").bytes().decode()
        count = int(session.query("SELECT count() FROM default.otel_traces", "TSV").bytes())
        kinds = session.query("SELECT DISTINCT SpanKind FROM default.otel_traces", "TSV").bytes().decode().split()
    assert "SpanAttributes\tMap(LowCardinality(String), String)" in columns and "Duration\tUInt64" in columns
    assert count == sum(1 for _ in otel_traces.rows_of_files(sorted(files.rglob("*.jsonl"))))
    assert kinds == ["Internal"]


# The same answers -------------------------------------------------------------------------------------------------


def test_jobs_grouped_by_cluster_equal_the_files(fleet, capsys):
    files, url = fleet
    from_files = run_json(capsys, "jobs", str(files), "--group-by", "cluster")
    from_table = run_json(capsys, "jobs", "--clickhouse", url, *SINCE, "--group-by", "cluster")
    assert len(from_files["jobs"]) == len(RUNS) + 1 + 9 + 1
    assert {row["cluster"] for row in from_files["jobs"]} == {"alpha", "beta", None}
    assert without_skipped(from_table) == without_skipped(from_files)


@pytest.mark.parametrize(
    "args",
    [
        ["--where", "cluster=beta"],
        ["--where", "cluster=null", "--group-by", "strategy"],
        ["--where", "strategy=plain", "--where", "world_size=4", "--group-by", "cluster"],
        ["--where", "model=/tmp/golden/ckpt", "--where", "transformers=5.24.0"],
    ],
)
def test_jobs_where_equal_the_files(fleet, capsys, args):
    files, url = fleet
    assert without_skipped(run_json(capsys, "jobs", "--clickhouse", url, *SINCE, *args)) == without_skipped(
        run_json(capsys, "jobs", str(files), *args)
    )


@pytest.mark.parametrize("run", RUNS)
def test_report_of_one_job_equals_the_files(fleet, capsys, run):
    files, url = fleet
    trace = trace_of(files / run)
    picks = [trace[:12]] if run != "plain524" else [f"{trace}@1.1", f"{trace}@1.2"]  # a prefix; every run
    for pick in picks:
        source = files / run if run != "plain524" else files
        from_files = run_json(capsys, "report", str(source), "--job", pick)
        from_table = run_json(capsys, "report", "--clickhouse", url, "--job", pick)
        assert without_skipped(from_table) == without_skipped(from_files)
    if run == "killed524":
        assert from_table["traces"][0]["missing_ranks"] == [1]  # the killed rank sent nothing


def test_a_rank_the_launcher_saw_die_is_in_the_report_from_the_table(fleet, capsys):
    files, url = fleet
    from_table = run_json(capsys, "report", "--clickhouse", url, "--job", WITNESSED_TRACE)
    assert without_skipped(from_table) == without_skipped(run_json(capsys, "report", str(files / "oom-witness")))
    (dead,) = [f for f in from_table["findings"] if f["kind"] == "incomplete_rank"]
    assert dead["ranks"] == [1] and "OOM-killed during transformers.convert" in dead["detail"]


def test_compare_equals_the_files(fleet, capsys):
    files, url = fleet
    a, b = trace_of(files / "fsdp512"), trace_of(files / "fsdp524")
    from_files = run_json(capsys, "compare", str(files / "fsdp512"), str(files / "fsdp524"))
    from_table = run_json(capsys, "compare", "--clickhouse", url, a, b)
    for side in ("a", "b"):  # the sources are named as given
        from_files.pop(side, None), from_table.pop(side, None)
    assert json.dumps(from_table, sort_keys=True).replace(a, "A").replace(b, "B") == json.dumps(
        from_files, sort_keys=True
    ).replace(a, "A").replace(b, "B")


def test_timeline_of_one_job_equals_the_files(fleet, capsys, tmp_path):
    files, url = fleet
    trace = trace_of(files / "zero3_524")
    outputs = []
    for source in ([str(files / "zero3_524")], ["--clickhouse", url, "--job", trace]):
        out = tmp_path / f"{len(outputs)}.json"
        code, _, err = run(capsys, "timeline", *source, "--format", "chrome", "-o", str(out))
        assert code == 0, err
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]


# The HTTP path: the official driver against the engine ------------------------------------------------------------


def test_the_driver_over_http_gives_the_same_answers(fleet, capsys):
    pytest.importorskip("clickhouse_connect")
    from support.clickhouse_front import Front

    files, url = fleet
    trace = trace_of(files / "fsdp524")
    with chdb_session.Session(url.removeprefix("chdb:")) as session, Front(session) as http:
        from_http = run_json(capsys, "jobs", "--clickhouse", f"{http}/default", *SINCE, "--group-by", "cluster")
        report = run_json(capsys, "report", "--clickhouse", http, "--job", trace)
        missing = run(capsys, "report", "--clickhouse", http, "--clickhouse-table", "nope", "--job", trace)
    assert without_skipped(from_http) == without_skipped(run_json(capsys, "jobs", str(files), "--group-by", "cluster"))
    assert without_skipped(report) == without_skipped(run_json(capsys, "report", str(files / "fsdp524")))
    assert missing[0] == 2 and "no table default.nope" in missing[2]


# Bad input: one line, exit 2 --------------------------------------------------------------------------------------


def test_bad_input_is_one_line_and_exit_2(fleet, capsys, tmp_path):
    files, url = fleet
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        session.query("CREATE TABLE IF NOT EXISTS default.other (TraceId String) ENGINE = MergeTree ORDER BY TraceId")
    assert "expected http(s)://HOST:8123" in one_line(capsys, "jobs", "--clickhouse", "ftp://host/x")
    assert "not a chDB database directory" in one_line(capsys, "jobs", "--clickhouse", f"chdb:{tmp_path}/none")
    assert "cannot reach ClickHouse" in one_line(capsys, "jobs", "--clickhouse", "http://127.0.0.1:9")
    assert "no table default.nope" in one_line(capsys, "jobs", "--clickhouse", url, "--clickhouse-table", "nope")
    other = one_line(capsys, "jobs", "--clickhouse", url, "--clickhouse-table", "other")
    assert "not the clickhouseexporter's otel_traces table" in other
    assert "matches --job feedface" in one_line(capsys, "report", "--clickhouse", url, "--job", "feedface")
    assert "give --job ID" in one_line(capsys, "report", "--clickhouse", url)
    assert "give one source" in one_line(capsys, "report", str(files), "--clickhouse", url, "--job", "x")
    assert "began in the last" in one_line(capsys, "jobs", "--clickhouse", url, "--since", "1s")
    assert "match --where cluster=nowhere" in one_line(
        capsys, "jobs", "--clickhouse", url, *SINCE, "--where", "cluster=nowhere"
    )
    assert "bad --clickhouse-table" in one_line(capsys, "jobs", "--clickhouse", url, "--clickhouse-table", "a;b")
