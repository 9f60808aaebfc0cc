"""``loadtrace ingest FOLDER --clickhouse URL``: a folder's spans and state files in the exporter's ``otel_traces``
table give the answers the folder gives (the real engine: chDB in-process, and the official driver over HTTP through
the loopback front), twice over without a row more, and a job that gained spans since gains only those.

The folder: jobs on two clusters and one without (``support/jobtree.py``), the recorded runs with their state files
(a rank killed before it exported anything: only its state file tells of it), and a rank only the launcher's witness
saw die (witness file and state file)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from support import otel_traces
from support.cli import one_line, run, run_json
from support.clickhouse_fleet import RUNS, SINCE, restart, trace_of
from support.dead_rank_jobs import oom_killed_job
from support.jobtree import write_tree
from support.paths import SPANS

from loadtrace.analysis.sources import clickhouse
from loadtrace.cli import main

chdb_session = pytest.importorskip("chdb.session")

INGESTED = re.compile(
    r"loadtrace ingest: (\d+) spans? and (\d+) state files? of (\d+) traces? written into default\.otel_traces"
    r"( \(created\))?; (\d+) (?:was|were) there already\n"
)


def folder_of(root: Path) -> Path:
    files = root / "files"
    for name in RUNS:
        shutil.copytree(SPANS / name, files / name)  # state files included
    write_tree(files / "tree", 6, 2)
    (files / "oom-witness").mkdir()
    oom_killed_job(files / "oom-witness")
    return files


def _ingest(capsys, files: Path, url: str) -> tuple[int, int, int, bool, int]:
    code, out, err = run(capsys, "ingest", str(files), "--clickhouse", url)
    assert code == 0 and err == "", err
    return _numbers(out)


def _spans_in(files: Path) -> int:
    return sum(1 for _ in otel_traces.rows_of_files(sorted(files.rglob("*.jsonl"))))


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> tuple[Path, str, list[tuple[int, int, int, bool, int]]]:
    """(the folder, ``chdb:`` URL it was ingested into twice, each ingest's numbers)."""
    root = tmp_path_factory.mktemp("ingest")
    files, url = folder_of(root), f"chdb:{root / 'db'}"
    return files, url, [_numbers(_ingest_line(files, url)) for _ in range(2)]


def _ingest_line(files: Path, url: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ingest", str(files), "--clickhouse", url]) == 0
    return out.getvalue()


def _numbers(line: str) -> tuple[int, int, int, bool, int]:
    """(spans, state files, traces, created, present) of one ``loadtrace ingest``'s line."""
    found = INGESTED.fullmatch(line)
    assert found, line
    spans, states, traces, created, present = found.groups()
    return int(spans), int(states), int(traces), created is not None, int(present)


def test_ingest_writes_every_span_and_state_file_once(ingested):
    files, url, (first, second) = ingested
    spans, states = _spans_in(files), len(list(files.rglob("*.state")))
    traces = len({row["TraceId"] for row in otel_traces.rows_of_files(sorted(files.rglob("*.jsonl")))})
    assert states == 3 and first == (spans, states, traces, True, 0)
    assert second == (0, 0, traces, False, spans + states)  # the second ingest adds nothing
    with chdb_session.Session(url.removeprefix("chdb:")) as session:
        count = int(session.query("SELECT count() FROM default.otel_traces", "TSV").bytes())
    assert count == spans + states


def test_jobs_from_the_table_equal_the_folder(ingested, capsys):
    files, url, _ = ingested
    from_files = run_json(capsys, "jobs", str(files), "--group-by", "cluster")
    assert {row["cluster"] for row in from_files["jobs"]} == {"alpha", "beta", None}
    assert from_files["skipped_lines"] == 0
    assert run_json(capsys, "jobs", "--clickhouse", url, *SINCE, "--group-by", "cluster") == from_files


GROUPINGS = (
    ["--group-by", "cluster"],
    [],
    ["--group-by", "cluster,strategy", "--where", "world_size=2"],
    ["--where", "cluster=beta", "--group-by", "model"],
)


def folder_groups(capsys, files: Path) -> dict[tuple[str, ...], tuple[int, str, str]]:
    """The folder's ``--groups-only`` answers, as JSON and as a table, to each of ``GROUPINGS`` (exit code, stdout,
    stderr), each JSON one the groups and differences of the whole report. Read once a folder: it does not change
    while its table is rolled up."""
    answers = {}
    for args in GROUPINGS:
        for form in ("json", "table"):
            answers[(*args, form)] = run(capsys, "jobs", str(files), *args, "--groups-only", "--format", form)
        code, out, _ = answers[(*args, "json")]
        if code == 0:
            whole = run_json(capsys, "jobs", str(files), *args)
            assert json.loads(out) == {key: whole[key] for key in ("groups", "differences", "skipped_lines")}
    return answers


def _groups_equal(capsys, url: str, folder: dict[tuple[str, ...], tuple[int, str, str]]) -> None:
    """The table's ``--groups-only`` answers are the folder's (or the same one line, exit 2)."""
    for args in GROUPINGS:
        for form in ("json", "table"):
            from_table = run(capsys, "jobs", "--clickhouse", url, *SINCE, *args, "--groups-only", "--format", form)
            assert from_table == folder[(*args, form)], args


def test_groups_only_are_the_same_from_the_folder_and_the_table(ingested, capsys):
    """From spans (no rollup), then from the rollup's rows in the server."""
    files, url, _ = ingested
    grouped = run_json(capsys, "jobs", str(files), "--group-by", "cluster", "--groups-only")
    assert [group["by"]["cluster"] for group in grouped["groups"]] == [None, "alpha", "beta"]
    assert grouped["differences"] and set(grouped) == {"groups", "differences", "skipped_lines"}
    folder = folder_groups(capsys, files)
    _groups_equal(capsys, url, folder)
    code, _, err = run(capsys, "rollup", "--clickhouse", url, *SINCE, "--quiet", "1s")
    assert code == 0, err
    _groups_equal(capsys, url, folder)
    for source in ([str(files)], ["--clickhouse", url, *SINCE]):
        assert "no job matches --where cluster=nowhere (of 13 jobs)" in one_line(
            capsys, "jobs", *source, "--where", "cluster=nowhere", "--groups-only"
        )


@pytest.mark.parametrize("run", ["killed524", "oom-witness"])
def test_a_dead_rank_is_in_the_table_as_in_the_folder(ingested, capsys, run):
    """The killed rank exported nothing: from spans alone it is a missing rank; its state file, ingested, tells."""
    files, url, _ = ingested
    from_table = run_json(capsys, "report", "--clickhouse", url, "--job", trace_of(files / run))
    assert from_table == run_json(capsys, "report", str(files / run))
    assert from_table["traces"][0]["missing_ranks"] == []


def test_a_job_that_gained_spans_gains_only_those_and_the_rollup_reads_state_files(tmp_path, capsys):
    files, url = tmp_path / "files", f"chdb:{tmp_path / 'db'}"
    shutil.copytree(SPANS / "killed524", files / "killed524")
    shutil.copytree(SPANS / "plain524", files / "plain524")
    first = _ingest(capsys, files, url)
    code, out, err = run(capsys, "rollup", "--clickhouse", url, *SINCE, "--quiet", "1s")
    assert code == 0 and out.startswith("loadtrace rollup: 2 jobs of 2 traces"), err
    restart(SPANS / "plain524", files / "plain524-restart")  # the same trace again: attempt 1's spans
    gained = _spans_in(files / "plain524-restart")
    assert _ingest(capsys, files, url) == (gained, 0, 2, False, first[0] + first[1])
    jobs, groups = run_json(capsys, "jobs", str(files), "--group-by", "cluster"), folder_groups(capsys, files)
    for _ in range(2):  # the trace that gained spans from its spans, then rolled again: the folder's answer
        assert run_json(capsys, "jobs", "--clickhouse", url, *SINCE, "--group-by", "cluster") == jobs
        _groups_equal(capsys, url, groups)  # that trace's rows sent with the query
        code, out, err = run(capsys, "rollup", "--clickhouse", url, *SINCE, "--quiet", "1s")
        assert code == 0, err
    killed = trace_of(files / "killed524")
    assert run_json(capsys, "report", "--clickhouse", url, "--job", killed) == run_json(
        capsys, "report", str(files / "killed524")
    )


def test_ingest_over_http_with_the_official_driver(tmp_path, capsys):
    pytest.importorskip("clickhouse_connect")
    from support.clickhouse_front import Front

    files = tmp_path / "files"
    shutil.copytree(SPANS / "killed524", files / "killed524")
    write_tree(files / "tree", 3, 2)
    (tmp_path / "db").mkdir()
    with chdb_session.Session(str(tmp_path / "db")) as session:
        front = Front(session)
        with front as http:
            first = _ingest(capsys, files, f"{http}/default")
            second = _ingest(capsys, files, http)
            from_http = run_json(capsys, "jobs", "--clickhouse", http, *SINCE, "--group-by", "cluster")
            assert run(capsys, "rollup", "--clickhouse", http, *SINCE, "--quiet", "1s")[0] == 0
            front.queries.clear()
            groups = run_json(capsys, "jobs", "--clickhouse", http, *SINCE, "--group-by", "cluster", "--groups-only")
    assert first == (_spans_in(files), 2, 4, True, 0) and second == (0, 0, 4, False, first[0] + 2)
    assert from_http == run_json(capsys, "jobs", str(files), "--group-by", "cluster")
    assert groups == run_json(capsys, "jobs", str(files), "--group-by", "cluster", "--groups-only")
    assert not [sql for sql in front.queries if "FROM default.otel_traces WHERE" in sql]  # no span left the server
    assert not [sql for sql in front.queries if "arrayStringConcat" in sql]  # nor a row


def test_lines_the_reader_skips_are_skipped_and_counted(tmp_path, capsys):
    files = tmp_path / "files"
    shutil.copytree(SPANS / "plain524", files)
    good = (files / next(p.name for p in files.glob("*.jsonl"))).read_text().splitlines()[0]
    span = json.loads(good)
    span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = str(2**63)  # after 2262
    (files / "hostile.jsonl").write_text('{"resourceSpans": [{"scopeSpans": 5}]}\n{"trunc\n' + json.dumps(span) + "\n")
    (files / "rank00009-x-1.state").write_bytes(b"not a state file")
    code, out, err = run(capsys, "ingest", str(files), "--clickhouse", f"chdb:{tmp_path / 'db'}")
    assert code == 0 and out.endswith("; 3 unreadable lines skipped; 1 unreadable state file skipped\n"), out


def test_a_state_row_that_does_not_decode_is_a_skipped_state_file():
    assert clickhouse.state_of_row({}) is None
    assert clickhouse.state_of_row({"loadtrace.state_file.data": "not base64!"}) is None
    assert clickhouse.state_of_row({"loadtrace.state_file.data": clickhouse.state_file_data(b"LTSTATE1")}) is None
    row = ("ab" * 16, "cd" * 8, "", "loadtrace.state_file", 0, 0, {"loadtrace.state_file.data": "eJw="}, {}, "", "", {})
    assert clickhouse.spans_of_rows([row]).skipped_state_files == 1


def test_ingest_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    files = tmp_path / "files"
    shutil.copytree(SPANS / "plain524", files)
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "x.jsonl").write_text("not json\n")
    url = f"chdb:{tmp_path / 'db'}"
    assert "ingest needs --clickhouse URL" in one_line(capsys, "ingest", str(files))
    assert "no *.jsonl trace files or *.state files" in one_line(
        capsys, "ingest", str(tmp_path / "empty"), "--clickhouse", url
    )
    assert "no such file or directory" in one_line(capsys, "ingest", str(tmp_path / "none"), "--clickhouse", url)
    assert "no spans or state files to ingest (1 unreadable lines" in one_line(
        capsys, "ingest", str(tmp_path / "garbage"), "--clickhouse", url
    )
    assert "cannot reach ClickHouse" in one_line(capsys, "ingest", str(files), "--clickhouse", "http://127.0.0.1:9")
    (tmp_path / "a-file").write_text("")
    assert "not a chDB database directory" in one_line(
        capsys, "ingest", str(files), "--clickhouse", f"chdb:{tmp_path / 'a-file'}"
    )
    with chdb_session.Session(str(tmp_path / "db")) as session:
        session.query("CREATE TABLE default.other (TraceId String, SpanId String) ENGINE = MergeTree ORDER BY TraceId")
        session.query(
            otel_traces.DDL.format(database="default", table="older").replace("    Links Nested", "    X Nested")
        )
    other = one_line(capsys, "ingest", str(files), "--clickhouse", url, "--clickhouse-table", "other")
    assert "default.other is not the clickhouseexporter's otel_traces table (it lacks Timestamp" in other
    older = one_line(capsys, "ingest", str(files), "--clickhouse", url, "--clickhouse-table", "older")
    assert "(it lacks Links.TraceId Array(String)" in older  # a column only the writer needs


def test_a_long_driver_error_is_its_first_line_cut_at_a_word_with_an_ellipsis(tmp_path, capsys):
    """The driver's first line, whole where it is short; else cut after a whole word and marked "…" (a message cut
    mid-word, "Unknown tab", reads as another error). The real one: the official driver's, at a dead port."""
    words = "Code: 60. DB::Exception: Unknown table expression identifier 'default.otel_traces' in scope. " * 5
    line = clickhouse._first_line(RuntimeError(words + "\nStack trace: ..."))
    assert line.endswith("…") and len(line) <= clickhouse.FIRST_LINE_CHARS and words[len(line) - 1] == " "
    assert words.startswith(line[:-1])
    short = "Code: 81. DB::Exception: Database nowhere does not exist."
    assert clickhouse._first_line(RuntimeError(f"{short}\nStack trace: ...")) == short
    pytest.importorskip("clickhouse_connect")
    shutil.copytree(SPANS / "plain524", tmp_path / "files")
    said = one_line(capsys, "ingest", str(tmp_path / "files"), "--clickhouse", "http://127.0.0.1:9").rstrip("\n")
    assert "cannot reach ClickHouse at http://127.0.0.1:9: " in said and "Connection refused" in said
    assert not said.endswith("…") or said[-2].isalnum() or said[-2] in ")'\"", said  # after a whole word


def test_rows_sent_with_the_query_may_exceed_the_servers_default_query_size(tmp_path, capsys):
    """A trace not rolled up yet goes to the server as a row in the query; a row of 300 kB (a checkpoint named at
    length) is over ClickHouse's default ``max_query_size`` (256 KiB): the query says how large it is."""
    pytest.importorskip("clickhouse_connect")
    from support.clickhouse_front import Front

    files, url = tmp_path / "files", f"chdb:{tmp_path / 'db'}"
    shutil.copytree(SPANS / "plain524", files / "plain524")
    _ingest(capsys, files, url)
    assert run(capsys, "rollup", "--clickhouse", url, *SINCE, "--quiet", "1s")[0] == 0
    (files / "long").mkdir()
    for path in (SPANS / "fsdp524").glob("*.jsonl"):
        (files / "long" / path.name).write_text(
            path.read_text().replace('"/tmp/golden/ckpt"', '"/' + "c" * 300_000 + '"')
        )
    _ingest(capsys, files / "long", url)
    expected = run(capsys, "jobs", str(files), "--group-by", "model", "--groups-only")
    assert expected[0] == 0 and len(expected[1]) > 300_000
    assert run(capsys, "jobs", "--clickhouse", url, *SINCE, "--group-by", "model", "--groups-only") == expected
    with chdb_session.Session(str(tmp_path / "db")) as session, Front(session) as http:
        assert run(capsys, "jobs", "--clickhouse", http, *SINCE, "--group-by", "model", "--groups-only") == expected
