"""Promise (issue 33): a report for people at any world size. Ranks that behaved alike share one row (its title names
them, then ``each`` or each column's min / median / max), every outlier keeps a row of its own (the dead, the failed,
the flagged, the slow), nodes are grouped the same way, and so are the startup table, ``compare`` and the line rank 0
says at the end of a job. ``--ranks all`` lists every rank; ``--format json`` always does. A small job reads as before
(tests/test_report_golden.py): alike ranks share a row only from ``alike.MIN_GROUP`` ranks on.

Over a recorded 2-rank FSDP job replicated to 1,024 ranks on 128 nodes (``support/big_job.py``), rank 700 made 20 s
slower and rank 300 cut short as a SIGKILL cuts its file.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
from support.big_job import write_big_job
from support.cli import ok, rank_rows
from support.paths import SPANS

from loadtrace import semconv as sc
from loadtrace.analysis import alike
from loadtrace.analysis.model import Finding, NodeReads, NodeStartup
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import read_files
from loadtrace.cli import render
from loadtrace.cli.render import who
from loadtrace.instrumentation.exporting import summary

SLOW, KILLED = 700, 300
JOB_ID = "cc2eef90-40e1-446d-ac10-d780c6600db0"  # the recorded job's (tests/fixtures/spans/fsdp524)
ALIKE_TITLE = "ranks 1-299, 301-699, 701-1023 (1,021 ranks) on 128 nodes:"


@pytest.fixture(scope="module")
def big_job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("big") / "job"
    return write_big_job(folder, ranks=1024, slow=SLOW, killed=KILLED, slow_by=20.0)


def test_the_report_of_1024_ranks_fits_80_lines_with_a_row_for_each_outlier(big_job, capsys):
    table = ok(capsys, "report", str(big_job))
    lines = table.splitlines()
    assert len(lines) <= 80, table
    rows = rank_rows(table)
    assert len(rows) == 5 and rows[1] == ALIKE_TITLE, table
    assert rows[0].startswith("0 ") and rows[2].startswith("  each ")  # rank 0 loads alone under FSDP
    assert rows[3].startswith(f"{KILLED} incomplete ") and rows[4].startswith(f"{SLOW} ")
    assert re.search(r"\b20\.\d{3}\b", rows[4]), rows[4]  # the slow rank's own load seconds
    io = [line for line in lines if line.startswith("I/O: ")]
    assert len(io) == 1 and io[0].startswith("I/O: 128 nodes (node000 ... node127), each: 8 ranks asked for 8x"), io
    startup = lines[lines.index(next(line for line in lines if line.startswith("Startup: "))) + 2 :]
    assert startup[:4] == [startup[0], "ranks 1-299, 301-699, 701-1023 (1,021 ranks):", startup[2], startup[3]]
    assert startup[0].startswith("0 ") and startup[2].startswith("  each ") and startup[3].startswith(f"{SLOW} ")
    assert f"WARNING slow_rank  rank {SLOW}  " in table


def test_the_json_lists_every_rank_and_the_slow_rank_finding(big_job, capsys):
    data = json.loads(ok(capsys, "report", str(big_job), "--format", "json"))
    assert sorted(rank["rank"] for rank in data["ranks"]) == list(range(1024))
    assert len(data["traces"][0]["nodes"]) == 128
    startup = {rank["rank"] for rank in data["traces"][0]["startup"]["ranks"]}
    assert startup == set(range(1024)) - {KILLED}  # the killed rank ended no load: no startup to measure
    (slow,) = [finding for finding in data["findings"] if finding["kind"] == sc.FINDING_SLOW_RANK]
    assert slow["ranks"] == [SLOW]


def test_ranks_all_prints_every_rank_and_node(big_job, capsys):
    table = ok(capsys, "report", str(big_job), "--ranks", "all")
    assert len(rank_rows(table)) == 1024
    assert sum(line.startswith("I/O: ") for line in table.splitlines()) == 128
    assert "(1,021 ranks)" not in table.split("findings (")[0]


def test_compare_shares_rows_of_alike_ranks_and_keeps_the_outliers(big_job, capsys):
    table = ok(capsys, "compare", str(big_job), str(big_job))  # the job with itself: read once
    assert "  1-1023 (1,021) = ranks 1-299, 301-699, 701-1023 (1,021 ranks)" in table
    rows = [re.split(r"\s{2,}", line) for line in table.splitlines() if line.startswith("load ")]
    assert [row[1] for row in rows if row[2] == "seconds"] == ["0", "1-1023 (1,021)", str(SLOW)], rows  # 300: no load
    (slow_load,) = [row for row in rows if row[1] == str(SLOW) and row[2] == "seconds"]
    assert float(slow_load[3]) > 20 and len(table.splitlines()) < 120
    data = json.loads(ok(capsys, "compare", str(big_job), str(big_job), "--format", "json"))
    assert {row["rank"] for row in data["phases"]} == set(range(1024))
    every = ok(capsys, "compare", str(big_job), str(big_job), "--ranks", "all")
    assert sum(line.startswith("load ") for line in every.splitlines()) > 3000


def test_the_line_at_the_end_of_the_job_names_the_ranks_that_stand_out(big_job, capsys):
    line = ok(capsys, "report", str(big_job), "--format", "line").strip()
    assert line == f"1,024 ranks, 6 findings; rank {KILLED} incomplete, rank {SLOW} slow", line
    # Rank 0's closing line, as the job prints it: the installed CLI in a child process.
    said = summary.report_counts(str(big_job), JOB_ID, time.monotonic() + 120)
    assert said == f", {line}"


def test_a_small_job_keeps_a_row_per_rank_and_alike_ranks_share_one_from_min_group_on(tmp_path, capsys):
    small = write_big_job(tmp_path / "small", ranks=alike.MIN_GROUP, slow=0, killed=-1)  # ranks 1-7: 7 alike
    assert len(rank_rows(ok(capsys, "report", str(small)))) == alike.MIN_GROUP
    enough = write_big_job(tmp_path / "enough", ranks=alike.MIN_GROUP + 1, slow=0, killed=-1)  # ranks 1-8: 8 alike
    rows = rank_rows(ok(capsys, "report", str(enough)))
    assert rows[1:] == ["ranks 1-8 (8 ranks) on 2 nodes:", rows[2]] and rows[2].startswith("  each "), rows


def test_alike_ranks_that_differ_show_each_columns_min_median_and_max(tmp_path, capsys):
    job = write_big_job(tmp_path / "job", ranks=16, slow=9, killed=-1)  # rank 9 3x slower: not past the threshold
    rows = rank_rows(ok(capsys, "report", str(job)))
    assert rows[1] == "ranks 1-15 (15 ranks) on 2 nodes:", rows
    low, middle, high = (row.split() for row in rows[2:])
    assert (low[0], middle[0], high[0]) == ("min", "median", "max"), rows
    # rank 9 is the max of load seconds; the other columns agree, so they show on the median row only
    assert (low[1:], middle[2], high[1:]) == (["0.121"], "0.121", ["0.362"]), rows


@pytest.mark.parametrize("killed", [alike.MIN_GROUP - 1, alike.MIN_GROUP])
def test_outliers_alike_share_a_row_of_their_own_from_min_group_on(killed):
    """Copies of the two ranks of a real job, one SIGKILLed mid-load (``fixtures/spans/killed524``): the finished
    ranks share a row; the killed ones each have their own, until there are ``MIN_GROUP`` of them."""
    spans = read_files(SPANS / "killed524")
    (job,) = jobs_from_spans(spans.spans, spans.states)
    finished, dead = sorted(job.ranks, key=lambda rank: rank.rank or 0)
    assert dead.marks() == ["incomplete"] and finished.marks() == []
    ranks = [dataclasses.replace(dead if number % 3 == 0 else finished, rank=number) for number in range(3 * killed)]
    rows = [[rank.rank for rank in row] for row in alike.rank_groups(ranks, [])]
    others = [number for number in range(3 * killed) if number % 3]
    if killed < alike.MIN_GROUP:
        assert rows == [[0], others, *([number] for number in range(3, 3 * killed, 3))]
    else:
        assert rows == [list(range(0, 3 * killed, 3)), others]
        title = render.rank_lines([ranks[number] for number in rows[0]], list(range(len(render.RANK_COLUMNS))))[0]
        assert title == f"ranks 0, 3, 6, 9, 12, 15, 18, 21 ({killed} ranks) incomplete on vm:"


def test_alike_nodes_share_their_io_and_storage_lines_and_a_slow_one_keeps_its_own():
    """Ten nodes read the checkpoint cold from storage, at different speeds; node 9's ranks are named by
    ``slow_storage``."""
    storage = [
        NodeStartup(f"n{i}", [2 * i, 2 * i + 1], "cold", 1_000_000, 1 + i / 10, 1e6 / (1 + i / 10)) for i in range(10)
    ]
    slow = Finding("t", 0, 0, sc.FINDING_SLOW_STORAGE, "warning", [18, 19], 0, 0, "node n9 read slowly")
    rows = alike.storage_groups(storage, [slow])
    assert [[node.host for node in row] for row in rows] == [[f"n{i}" for i in range(9)], ["n9"]]
    assert render.storage_line(rows[0]) == (
        "Storage: 9 nodes (n0 ... n8), each: checkpoint cold; its 2 ranks fetched 1,000,000 B (1.0 MB) from storage,"
        " all files, in min 1.000, median 1.400, max 1.800 s of fetching, min 555,556 B (555.6 kB), median 714,286 B"
        " (714.3 kB), max 1,000,000 B (1.0 MB)/s"
    )
    reads = [
        NodeReads(f"n{i}", [2 * i, 2 * i + 1], 2, 2_000_000, None, None, 2.0, None, 1_000_000, 0, "warm")
        for i in range(8)
    ]
    (row,) = alike.node_groups(reads, [])
    assert render.nodes_note(row) == (
        "8 nodes (n0 ... n7), each: 2 ranks asked for 2x the checkpoint, 2,000,000 B (2.0 MB); the checkpoint was"
        " warm: the page cache held all of its checkpoint files, 1,000,000 B (1.0 MB)"
    )
    assert len(alike.node_groups(reads[:7], [])) == 7  # fewer than MIN_GROUP: a line each, as before


def test_grouped_keeps_every_item_in_its_place_and_only_sets_of_min_group_together():
    keys = ["a", "b"] * 3 + ["c"] * alike.MIN_GROUP + [None, "a"]
    rows = alike.grouped(list(range(len(keys))), lambda index: keys[index])
    assert rows == [[0], [1], [2], [3], [4], [5], list(range(6, 6 + alike.MIN_GROUP)), [14], [15]]
    assert alike.grouped([], lambda item: item) == []
    assert alike.grouped(list(range(20)), lambda item: None) == [[item] for item in range(20)]


def test_long_lists_of_ranks_stay_short():
    assert who([3]) == "rank 3" and who([1, 2, 3, 5]) == "ranks 1-3, 5"
    assert who(list(range(8))) == "ranks 0-7 (8 ranks)"
    scattered = list(range(0, 400, 2))
    assert who(scattered) == "ranks 0, 2, 4, 6, 8, ..., 396, 398 (200 ranks)"
