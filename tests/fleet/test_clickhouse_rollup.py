"""``loadtrace rollup``: each ended job's ``jobs`` row kept beside its spans in ClickHouse, and ``jobs --clickhouse``
answering from those rows, on the real engine (chDB in-process; the official driver over HTTP through the loopback
front, which also shows what each query read).

Every answer must equal the files' (``jobs FOLDER``) whatever the rollup's state: rolled (twice at once; by another
version), rolled before a trace gained spans (a restart under the same trace id, inserted after the rollup or while
it read the trace), never rolled (still active), or rolled with other thresholds than asked. The recorded runs include
a failed load, a killed rank and a rank only the launcher's witness saw die."""

from __future__ import annotations

import json
import random
import statistics
import struct
from pathlib import Path

import pytest
from support import otel_traces
from support.cli import one_line, run, run_json
from support.clickhouse_fleet import SINCE, restart, trace_of, without_skipped
from support.paths import SPANS

chdb_session = pytest.importorskip("chdb.session")

ROLLUP_TABLES = ("otel_traces_loadtrace_traces", "otel_traces_loadtrace_jobs")


def _rollup(capsys, url: str, *args: str) -> str:
    code, out, err = run(capsys, "rollup", "--clickhouse", url, *SINCE, *args)
    assert code == 0 and err == "", err
    return out


def _same(capsys, files: Path, url: str, *args: str) -> None:
    from_table = run_json(capsys, "jobs", "--clickhouse", url, *SINCE, *args)
    assert without_skipped(from_table) == without_skipped(run_json(capsys, "jobs", str(files), *args))


def _tables(url: str) -> dict[str, int]:
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        answer = session.query(
            "SELECT name, total_rows FROM system.tables WHERE database = 'default_loadtrace'", "JSON"
        )
        return {row["name"]: int(row["total_rows"] or 0) for row in json.loads(answer.bytes())["data"]}


def test_jobs_from_the_rollup_equal_the_files(fleet, capsys):
    files, url = fleet
    before = run_json(capsys, "jobs", "--clickhouse", url, *SINCE, "--group-by", "cluster")  # no rollup: from spans
    out = _rollup(capsys, url, "--quiet", "1s")
    jobs = len(before["jobs"])
    assert out.startswith(
        f"loadtrace rollup: {jobs} jobs of {jobs} traces rolled up into default_loadtrace.otel_traces_"
    )
    assert "0 traces still active" in out
    assert set(ROLLUP_TABLES) <= set(_tables(url))
    for args in (
        ["--group-by", "cluster"],
        ["--where", "cluster=beta"],
        ["--where", "cluster=null", "--group-by", "strategy"],
        ["--where", "strategy=plain", "--where", "world_size=4", "--group-by", "cluster"],
    ):
        _same(capsys, files, url, *args)
    again = _rollup(capsys, url, "--quiet", "1s")
    assert again.startswith("loadtrace rollup: 0 jobs of 0 traces")  # nothing changed: nothing computed again
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        # Two rollups at once: an older roll at the same count. And a newer one by another loadtrace version.
        wrong = "replace(Row, 'startup_seconds', 'wrong') AS Row"
        table = "default_loadtrace.otel_traces_loadtrace_jobs"
        session.query(f"INSERT INTO {table} SELECT * REPLACE (RolledNs - 1 AS RolledNs, {wrong}) FROM {table}")
        session.query(
            f"INSERT INTO {table} SELECT * REPLACE (RolledNs + 1 AS RolledNs, '0.0.1' AS Made, {wrong}) FROM {table}"
        )
    _same(capsys, files, url, "--group-by", "cluster")
    again = _rollup(capsys, url, "--quiet", "1s")
    assert again.startswith("loadtrace rollup: 0 jobs of 0 traces")  # this version's rows are there


def _span_reads(front) -> list[str]:
    """The queries that read spans (``otel_traces`` rows), not the index, the rows or the table's columns."""
    return [sql for sql in front.queries if "FROM default.otel_traces WHERE" in sql]


def test_over_http_no_span_leaves_the_server_for_rolled_up_jobs(fleet, capsys):
    pytest.importorskip("clickhouse_connect")
    from support.clickhouse_front import Front

    files, url = fleet
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        front = Front(session)
        with front as http:
            _rollup(capsys, f"{http}/default", "--quiet", "1s")
            assert _span_reads(front)  # the rollup reads each job's spans once
            front.queries.clear()
            answer = run_json(capsys, "jobs", "--clickhouse", http, *SINCE, "--group-by", "cluster")
    assert _span_reads(front) == [], front.queries
    assert without_skipped(answer) == without_skipped(run_json(capsys, "jobs", str(files), "--group-by", "cluster"))


def test_a_trace_that_gained_spans_after_its_rollup_is_computed_from_its_spans_until_rolled_again(fleet, capsys):
    pytest.importorskip("clickhouse_connect")
    from support.clickhouse_front import Front

    files, url = fleet
    _rollup(capsys, url, "--quiet", "1s")
    # The launcher restarts plain524 under the same trace id: attempt 1's spans reach the table after the rollup.
    restart(SPANS / "plain524", files / "plain524-restart")
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        otel_traces.insert(session, otel_traces.rows_of_files(sorted((files / "plain524-restart").glob("*.jsonl"))))
        front = Front(session)
        with front as http:
            answer = run_json(capsys, "jobs", "--clickhouse", http, *SINCE, "--group-by", "cluster")
    reads = _span_reads(front)
    assert len(reads) == 1 and trace_of(files / "plain524") in reads[0], reads
    assert without_skipped(answer) == without_skipped(run_json(capsys, "jobs", str(files), "--group-by", "cluster"))
    out = _rollup(capsys, url, "--quiet", "1s")
    assert out.startswith("loadtrace rollup: 2 jobs of 1 traces"), out  # that trace again: both attempts
    _same(capsys, files, url, "--group-by", "cluster")


def test_active_traces_and_other_thresholds_are_computed_from_spans(fleet, capsys):
    files, url = fleet
    traces = len(run_json(capsys, "jobs", str(files))["jobs"])  # one job each
    out = _rollup(capsys, url, "--quiet", "36500d")  # every span "ended just now": no job has ended
    assert out.startswith("loadtrace rollup: 0 jobs of 0 traces") and f"; {traces} traces still active" in out
    _same(capsys, files, url, "--group-by", "cluster")
    _rollup(capsys, url, "--quiet", "1s")
    _same(capsys, files, url, "--group-by", "cluster", "--slow-rank-ratio", "1.01", "--slow-rank-seconds", "0")
    _rollup(capsys, url, "--quiet", "1s", "--slow-rank-ratio", "1.01", "--slow-rank-seconds", "0")  # kept beside
    _same(capsys, files, url, "--group-by", "cluster", "--slow-rank-ratio", "1.01", "--slow-rank-seconds", "0")
    _same(capsys, files, url, "--group-by", "cluster")


def test_rollup_bad_input_is_one_line_and_exit_2(fleet, capsys, tmp_path):
    _, url = fleet
    assert "rollup needs --clickhouse URL" in one_line(capsys, "rollup")
    assert "not a chDB database directory" in one_line(capsys, "rollup", "--clickhouse", f"chdb:{tmp_path}/none")
    assert "cannot reach ClickHouse" in one_line(capsys, "rollup", "--clickhouse", "http://127.0.0.1:9")
    assert "no table default.nope" in one_line(capsys, "rollup", "--clickhouse", url, "--clickhouse-table", "nope")
    assert "bad duration" in one_line(capsys, "rollup", "--clickhouse", url, "--quiet", "soon")
    _rollup(capsys, url, "--quiet", "1s")
    assert "no job matches --where cluster=nowhere" in one_line(
        capsys, "jobs", "--clickhouse", url, *SINCE, "--where", "cluster=nowhere"
    )
    assert "began in the last" in one_line(capsys, "jobs", "--clickhouse", url, "--since", "1s")


def test_spans_that_land_while_a_trace_is_rolled_up_leave_its_rows_stale_not_wrong(fleet, capsys, monkeypatch):
    """The hostile order: the rollup has read a trace's span count, the restart's spans land, then it reads the spans.
    Its rows then carry the count from before, so `jobs` computes that trace from its spans until the next rollup."""
    from loadtrace.analysis import rollup

    files, url = fleet
    restart(SPANS / "plain524", files / "plain524-restart")
    landed = []

    def read_after_a_late_insert(connection, where):
        if not landed and trace_of(files / "plain524") in where:
            landed.append(where)
            late = otel_traces.rows_of_files(sorted((files / "plain524-restart").glob("*.jsonl")))
            otel_traces.insert(connection._chdb, late)  # through the rollup's own chDB session
        return read(connection, where)

    read = rollup.read
    monkeypatch.setattr(rollup, "BATCH", 1)  # that trace's read alone
    monkeypatch.setattr(rollup, "read", read_after_a_late_insert)
    _rollup(capsys, url, "--quiet", "1s")
    assert landed
    monkeypatch.setattr(rollup, "read", read)
    _same(capsys, files, url, "--group-by", "cluster")  # attempt 1 included, from the spans
    assert _rollup(capsys, url, "--quiet", "1s").startswith("loadtrace rollup: 2 jobs of 1 traces")
    _same(capsys, files, url, "--group-by", "cluster")


def _u64(value: float) -> int:
    return int.from_bytes(struct.pack("<d", value), "little")


def test_the_percentile_and_median_in_sql_are_the_same_bits_as_in_python():
    """``--groups-only`` from the rollup computes p50/p95 and the phase medians in the server: the same definition,
    the same arithmetic (``quantileExactInclusive`` is the same definition, not always the same last bit). Values
    go in as their bits, so no decimal text is parsed on the way."""
    from loadtrace.analysis.jobs import percentile
    from loadtrace.analysis.rollup import median_sql, percentile_sql

    draw = random.Random(35)
    arrays = [[1.5], [2.0, 1.0], [0.1, 0.1, 0.1]]
    arrays += [[draw.lognormvariate(0, 2) for _ in range(draw.randint(1, 60))] for _ in range(2000)]
    arrays += [[round(draw.uniform(0, 30), 6) for _ in range(draw.randint(1, 60))] for _ in range(1000)]
    bits = "[" + ", ".join("[" + ", ".join(str(_u64(v)) for v in values) + "]" for values in arrays) + "]"
    sql = (
        f"SELECT {percentile_sql('v', 0.5)}, {percentile_sql('v', 0.95)}, {median_sql('v')} FROM (SELECT "
        f"arraySort(arrayMap(b -> reinterpretAsFloat64(b), a)) AS v, n FROM (SELECT arrayJoin(arrayZip(CAST({bits}, "
        "'Array(Array(UInt64))'), range(length(CAST({bits}, 'Array(Array(UInt64))'))))) AS pair, pair.1 AS a, "
        "pair.2 AS n)) ORDER BY n"
    ).replace("{bits}", bits)
    with chdb_session.Session() as session:
        session.query(f"SET max_query_size = {len(sql) + 1024}")
        answers = json.loads(session.query(sql, "JSONCompact").bytes())["data"]
    got = [[_u64(float(x)) for x in answer] for answer in answers]
    expected = [[_u64(percentile(v, 0.5)), _u64(percentile(v, 0.95)), _u64(statistics.median(v))] for v in arrays]
    assert got == expected
