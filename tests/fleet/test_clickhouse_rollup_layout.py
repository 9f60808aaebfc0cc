"""Where the rollup's tables live: in a chDB directory, a database of their own (``default_loadtrace``), which ``jobs``
opens alone, so a fleet's span table (its parts' metadata read when chDB opens a directory) is not loaded; on a server,
beside the span table. A directory an older loadtrace rolled up (its tables beside the span table) is still read, and
the next ``rollup`` moves them, the view feeding the moved index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import otel_traces
from support.cli import run, run_json
from support.clickhouse_fleet import SINCE, copy_of, restart, without_skipped
from support.paths import SPANS

from loadtrace.analysis import rollup
from loadtrace.analysis.sources.clickhouse import Connection, open_database_alone, parse_target
from loadtrace.analysis.startup import Thresholds

chdb_session = pytest.importorskip("chdb.session")

GROUPS = ("--group-by", "cluster", "--groups-only")


def _rollup(capsys, url: str) -> str:
    code, out, err = run(capsys, "rollup", "--clickhouse", url, *SINCE, "--quiet", "1s")
    assert code == 0 and err == "", err
    return out


def _same(capsys, files: Path, url: str, *args: str) -> None:
    from_table = run_json(capsys, "jobs", "--clickhouse", url, *SINCE, *args)
    assert without_skipped(from_table) == without_skipped(run_json(capsys, "jobs", str(files), *args))


def _tables(url: str) -> set[str]:
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        answer = session.query("SELECT database, name FROM system.tables WHERE name LIKE 'otel_traces%'", "JSON")
        return {f"{row['database']}.{row['name']}" for row in json.loads(answer.bytes())["data"]}


def _insert_restart(files: Path, url: str) -> None:
    """plain524 restarted under the same trace id: its attempt 1's spans land after the rollup."""
    restart(SPANS / "plain524", files / "plain524-restart")
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        otel_traces.insert(session, otel_traces.rows_of_files(sorted((files / "plain524-restart").glob("*.jsonl"))))


def test_a_chdb_rollup_lives_in_its_own_database_which_jobs_opens_alone(fleet, capsys):
    files, url = fleet
    _rollup(capsys, url)
    assert _tables(url) == {
        "default.otel_traces",
        "default.otel_traces_loadtrace_traces_view",  # the view stays with the spans it reads
        "default_loadtrace.otel_traces_loadtrace_traces",
        "default_loadtrace.otel_traces_loadtrace_jobs",
    }
    alone = open_database_alone(parse_target(url), "default_loadtrace")
    assert alone is not None and not alone.reads_spans
    try:
        loaded = {name for (name,) in alone.rows("SELECT concat(database, '.', name) FROM system.tables")}
        assert "default.otel_traces" not in loaded and "default_loadtrace.otel_traces_loadtrace_jobs" in loaded
        assert alone.rows("SELECT count() FROM system.parts WHERE table = 'otel_traces'") == [(0,)]
    finally:
        alone.close()
    _same(capsys, files, url, *GROUPS)
    _same(capsys, files, url, "--group-by", "cluster")
    # Proof that the answer came from that database alone: with the span table gone, the whole directory's open
    # would say "no table"; the rollup's rows still answer.
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        session.query("DROP VIEW default.otel_traces_loadtrace_traces_view SYNC")
        session.query("DROP TABLE default.otel_traces SYNC")
    _same(capsys, files, url, *GROUPS)


def test_a_trace_that_gained_spans_opens_the_whole_directory_and_is_computed_from_its_spans(fleet, capsys):
    files, url = fleet
    _rollup(capsys, url)
    _insert_restart(files, url)  # the view indexes them into default_loadtrace's index: that trace is not current
    _same(capsys, files, url, *GROUPS)
    _same(capsys, files, url, "--group-by", "cluster")
    assert _rollup(capsys, url).startswith("loadtrace rollup: 2 jobs of 1 traces rolled up into default_loadtrace.")


def _older_rollup(url: str) -> None:
    """The rollup as a loadtrace before this layout made it: its tables and view beside the span table."""
    target = parse_target(url)
    names = rollup.tables_in(target, target.database)
    connection = Connection(target)
    try:
        for statement in rollup.TABLES_DDL:
            connection.execute(statement.format(traces=names.traces, jobs=names.jobs, keys=rollup._key_columns()))
        index = rollup.INDEX.format(spans=names.spans)
        connection.execute(rollup.VIEW_DDL.format(view=names.view, traces=names.traces, index=index))
        connection.execute(f"INSERT INTO {names.traces} {index}")
        counts = {
            trace: int(n) for trace, n in connection.rows(f"SELECT TraceId, sum(Spans) FROM {names.traces} GROUP BY 1")
        }
        rollup.roll_traces(connection, names, counts, Thresholds())
    finally:
        connection.close()


def test_a_directory_an_older_loadtrace_rolled_up_is_read_then_moved_by_the_next_rollup(fleet, capsys):
    files, url = fleet
    _older_rollup(url)
    assert "default.otel_traces_loadtrace_jobs" in _tables(url)
    _same(capsys, files, url, *GROUPS)  # read where it is
    _same(capsys, files, url, "--group-by", "cluster")
    out = _rollup(capsys, url)
    assert out.startswith("loadtrace rollup: 0 jobs of 0 traces rolled up into default_loadtrace."), out  # moved
    assert _tables(url) == {
        "default.otel_traces",
        "default.otel_traces_loadtrace_traces_view",
        "default_loadtrace.otel_traces_loadtrace_traces",
        "default_loadtrace.otel_traces_loadtrace_jobs",
    }
    _same(capsys, files, url, *GROUPS)
    _insert_restart(files, url)  # the view now feeds the moved index
    _same(capsys, files, url, *GROUPS)
    assert _rollup(capsys, url).startswith("loadtrace rollup: 2 jobs of 1 traces")


def test_over_http_a_servers_rollup_is_beside_its_spans_and_a_chdb_directorys_is_read_where_it_is(
    filled, tmp_path, capsys
):
    pytest.importorskip("clickhouse_connect")
    from support.clickhouse_front import Front

    files, url = copy_of(filled, tmp_path / "server")
    folder = run_json(capsys, "jobs", str(files), *GROUPS)
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        with Front(session) as http:
            out = _rollup(capsys, f"{http}/default")  # a server's: no second database to create
            assert "rolled up into default.otel_traces_loadtrace_jobs" in out, out
            assert run_json(capsys, "jobs", "--clickhouse", http, *SINCE, *GROUPS) == folder
    files, url = copy_of(filled, tmp_path / "directory")
    _rollup(capsys, url)  # chDB's layout, then served
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        front = Front(session)
        with front as http:
            assert run_json(capsys, "jobs", "--clickhouse", http, *SINCE, *GROUPS) == folder
    assert not [sql for sql in front.queries if "FROM default.otel_traces WHERE" in sql], front.queries


def test_a_move_that_stopped_half_way_is_done_again_whole(fleet, capsys):
    files, url = fleet
    _older_rollup(url)
    with chdb_session.Session(url.removeprefix("chdb:")) as session:  # stopped after copying the index alone
        session.query("SET allow_deprecated_database_ordinary = 1")
        session.query("CREATE DATABASE default_loadtrace ENGINE = Ordinary")
        for name in ("traces", "jobs"):
            older = f"default.otel_traces_loadtrace_{name}"
            session.query(f"CREATE TABLE default_loadtrace.otel_traces_loadtrace_{name} AS {older}")
        index = "otel_traces_loadtrace_traces"
        session.query(f"INSERT INTO default_loadtrace.{index} SELECT * FROM default.{index}")
    out = _rollup(capsys, url)
    assert out.startswith("loadtrace rollup: 0 jobs of 0 traces rolled up into default_loadtrace."), out  # copied
    assert "default.otel_traces_loadtrace_jobs" not in _tables(url)
    _same(capsys, files, url, *GROUPS)
    _insert_restart(files, url)
    _same(capsys, files, url, *GROUPS)
