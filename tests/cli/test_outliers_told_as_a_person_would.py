"""Promise (issue 42): a big job's outliers told as a person would, in the report, ``compare``, rank 0's closing
line and ``loadtrace top``. Findings are grouped like the rows: ranks slow alike share one sentence, a node whose ranks
are all slow is told as the node on a row of its own, apart from single ranks on otherwise healthy nodes; the ranks that
behaved like the job's alike group keep sharing its row, whatever node they are on; ``--format json`` keeps every rank's
figures; the report stays within 80 lines.

Over a recorded 2-rank FSDP job replicated to 1,024 ranks on 128 nodes of 8 (``support/big_job.py``), with 0, 1, 8,
9, 65 and 512 ranks 20 s slower, in mixes of whole nodes and single ranks; and several causes at once: a node whose
storage read slowly, whole nodes and a single rank slow, two ranks that never finished. The sentences themselves, built
by hand: tests/analysis/test_outliers_grouped.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.big_job import FIRST_PID, RECORDED, write_big_job, write_live_job
from support.cli import ok, rank_rows

from loadtrace import semconv as sc
from loadtrace.analysis.top import rows
from loadtrace.cli.render_top import top_lines
from loadtrace.cli.top import state_files

NODE77 = list(range(616, 624))
# name → (the slow ranks, the titles of their rows, the closing line's entries after its counts)
MIXES = {
    "none": ([], [], ""),
    "one rank": ([700], [], "; rank 700 slow"),
    "one node": (NODE77, ["node077: all 8 ranks (616-623):"], "; node077 slow"),
    "a node and a rank": ([3, *NODE77], ["node077: all 8 ranks (616-623):"], "; rank 3 slow, node077 slow"),
    "65 ranks": (
        [*range(100, 164), 500],
        [
            "ranks 100-103, 160-163, 500 (9 ranks) on 3 nodes:",
            "nodes node013-node019 (7 nodes): all 56 ranks (104-159):",
        ],
        "; ranks 100-103, 160-163, 500 (9 ranks) slow, nodes node013-node019 (7 nodes) slow",
    ),
    "512 ranks": (
        [*range(8, 504), *(515 + 8 * k for k in range(16))],
        [
            "nodes node001-node062 (62 nodes): all 496 ranks (8-503):",
            "ranks 515, 523, 531, 539, 547, ..., 627, 635 (16 ranks) on 16 nodes:",
        ],
        "; nodes node001-node062 (62 nodes) slow, ranks 515, 523, 531, 539, 547, ..., 627, 635 (16 ranks) slow",
    ),
}


@pytest.fixture(scope="module", params=list(MIXES))
def mix(request, tmp_path_factory) -> tuple[str, Path]:
    slow = MIXES[request.param][0]
    folder = tmp_path_factory.mktemp("outliers") / "job"
    return request.param, write_big_job(folder, ranks=1024, slow=slow or -1, killed=-1, slow_by=20.0, source=RECORDED)


def test_the_report_groups_its_findings_like_its_rows_within_80_lines(mix, capsys):
    name, job = mix
    slow, titles, _ = MIXES[name]
    table = ok(capsys, "report", str(job))
    assert len(table.splitlines()) <= 80, table
    rows = rank_rows(table)
    healthy = [row for row in rows if row.startswith("ranks 1-")]
    assert len(healthy) == 1, rows  # every rank that behaved alike, on whatever node, shares one row
    assert f"({1023 - len(slow):,} ranks)" in healthy[0], healthy
    assert [row for row in rows if row.endswith(":") and row not in healthy] == titles, rows
    finding = table.partition("WARNING slow_rank")[2].partition("\n  WARNING")[0].partition("\n  INFO")[0]
    assert bool(finding) == bool(slow)
    assert len(finding.splitlines()) <= 6, finding  # a few lines, however many ranks it names
    if slow:
        for title in titles:  # a sentence per row of outliers, named as the row is
            assert title.removesuffix(":").split(" on ")[0] in " ".join(finding.split()), (title, finding)


def test_the_json_keeps_every_slow_ranks_figures(mix, capsys):
    name, job = mix
    slow = MIXES[name][0]
    data = json.loads(ok(capsys, "report", str(job), "--format", "json"))
    found = [f for f in data["findings"] if f["kind"] == sc.FINDING_SLOW_RANK]
    if not slow:
        assert found == []
        return
    (finding,) = found
    assert finding["ranks"] == sorted(slow)
    assert [entry["rank"] for entry in finding["evidence"]["per_rank"]] == sorted(slow)
    assert all(entry["phase_difference_seconds"] > 18 for entry in finding["evidence"]["per_rank"])
    assert sorted(r for group in finding["evidence"]["groups"] for r in group["ranks"]) == sorted(slow)


def test_the_closing_line_names_the_outliers_as_the_rows_do(mix, capsys):
    name, job = mix
    line = ok(capsys, "report", str(job), "--format", "line").strip()
    assert line.endswith(MIXES[name][2]) and line.startswith("1,024 ranks, "), line


def test_compare_keeps_a_whole_slow_node_on_rows_of_its_own(tmp_path, capsys):
    base = write_big_job(tmp_path / "a", ranks=64, slow=-1, killed=-1, slow_by=20.0, source=RECORDED)
    node = write_big_job(tmp_path / "b", ranks=64, slow=[3, *range(40, 48)], killed=-1, slow_by=20.0, source=RECORDED)
    table = ok(capsys, "compare", str(base), str(node))
    assert "  40-47 (8) = node005: all 8 ranks (40-47)" in table, table
    assert "  1-63 (54) = ranks 1-2, 4-39, 48-63 (54 ranks)" in table, table
    assert any(line.startswith("load ") and line.split()[1] == "3" for line in table.splitlines()), table


def test_top_shows_a_whole_node_behind_on_one_row_apart_from_a_single_rank(tmp_path):
    now = 1_800_000_000 * 10**9
    folder = write_live_job(tmp_path / "live", 1024, now, behind=(3, *NODE77), stuck=(5,))
    lines = top_lines(rows(state_files(folder), now, "this-node", lambda pid, created: True), "here", now, live=False)
    assert "need attention: 10 ranks" in lines, lines
    cells = [line.split() for line in lines if line.startswith("  node0")]
    assert [row[:3] for row in cells] == [["node000", "5", str(FIRST_PID + 5)], ["node000", "3", str(FIRST_PID + 3)],
                                          ["node077", "616-623", "(8)"]], lines  # fmt: skip
    assert cells[2][4] == "loading" and cells[2][-1] == "behind", cells


# name → the rank cells of ``top``'s rows that need attention, as the report's rows group them (a whole node's ranks
# one row, titled by its nodes; alike single ranks one row from alike.MIN_GROUP on).
TOP_ROWS = {
    "none": [],
    "one rank": [("node087", "700")],
    "one node": [("node077", "616-623 (8)")],
    "a node and a rank": [("node000", "3"), ("node077", "616-623 (8)")],
    "65 ranks": [
        ("node012, node020, node062", "100-103, 160-163, 500 (9)"),
        ("node013-node019 (7 nodes)", "104-159 (56)"),
    ],
    "512 ranks": [
        ("node001-node062 (62 nodes)", "8-503 (496)"),
        ("node064-node079", "515, 523, 531, 539, 547, ..., 627, 635 (16)"),
    ],
}


@pytest.mark.parametrize("name", list(TOP_ROWS))
def test_top_groups_the_ranks_behind_as_the_report_groups_its_outliers(name, tmp_path):
    now = 1_800_000_000 * 10**9
    behind = tuple(MIXES[name][0])
    folder = write_live_job(tmp_path / "live", 1024, now, behind=behind)
    lines = top_lines(rows(state_files(folder), now, "this-node", lambda pid, created: True), "here", now, live=False)
    assert len(lines) <= 80, lines
    said = f"need attention: {len(behind)} rank{'s' * (len(behind) != 1)}"
    assert (said in lines) == bool(behind), lines
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines if line.startswith("  node") and "behind" in line]
    assert [tuple(row[:2]) for row in cells] == TOP_ROWS[name], lines


# Several causes at once (67 outliers): node077's storage read its cold checkpoint 20 s slowly (its ranks 20 s longer
# in read); nodes node013-node019 and rank 3 20 s slower throughout (their reading too, a little); rank 300 lost its
# load span (a SIGKILL), rank 700 died mid-read.
MIXED_ROWS = ["nodes node013-node019 (7 nodes): all 56 ranks (104-159):", "node077: all 8 ranks (616-623):"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mixed") / "job"
    slow = [3, *range(104, 160)]
    return write_big_job(
        folder, 1024, slow, 300, 20.0, dead=700, source=RECORDED, slow_read=NODE77, cold=True
    )  # fmt: skip


def findings_of(table: str) -> dict[str, str]:
    """Each finding's text (its lines joined) by its kind, from a report's table."""
    found = re.findall(r"^  (?:WARNING|INFO) (\w+)  .*\n((?:    .*(?:\n|$))+)", table, re.MULTILINE)
    return {kind: " ".join(text.split()) for kind, text in found}


def test_a_node_with_slow_storage_is_told_as_the_node_on_a_row_of_its_own(mixed, capsys):
    table = ok(capsys, "report", str(mixed))
    assert len(table.splitlines()) <= 80, table
    rows = rank_rows(table)
    titles = [row for row in rows if row.endswith(":")]
    # Only suspects get a row: node000's and node037's other ranks share the alike row, whatever their node's finding.
    healthy = "ranks 1-2, 4-103, 160-299, 301-615, 624-699, 701-1023 (956 ranks) on 120 nodes:"
    assert titles == [healthy, *MIXED_ROWS], rows
    assert [row.split()[0] for row in rows if not row.endswith(":") and not row.startswith("  ")] == [
        "0", "3", "300", "700"
    ], rows  # fmt: skip
    found = findings_of(table)
    assert (
        "node077: all 8 ranks (616-623) took 29.57 s to start, 20.00 s behind the median of the other ranks"
        in (found["slow_rank"])
    ), found
    assert found["slow_rank"].split("; node077: ")[1].split("; ")[1:] == [
        "their read phase made the difference: 20.04 s against the others' 0.04 s (467.5x), 20.00 s more",
        "its ranks fetched from storage at 50.7 kB/s. The job starts when its slowest rank is ready.",
    ], found["slow_rank"]
    assert (
        "node077 fetched 1.0 MB from storage in 20.04 s of fetching, 50.7 kB/s: under 0.5x the job's median node"
        " (at least" in found["slow_storage"]
    ), found
    assert "rank 3 took 29.57 s to start" in found["slow_rank"] and "ranks 300, 700" not in found["slow_rank"]
    # The slow node's storage on a line of its own, apart from the slow nodes that read alike and the healthy ones.
    storage = [line for line in table.splitlines() if line.startswith("Storage: ")]
    assert (
        "Storage: node077: checkpoint cold; its 8 ranks fetched 1.0 MB from storage, all files, in 20.043 s of"
        " fetching, 50.7 kB/s" in storage
    ), storage
    # Issue 48: the other nodes fetched their 1.0 MB in under 0.15 s, too briefly for a rate (their lower bound is the
    # median node's, "at least"): never told slow for it, as node000 and node013-node019 were on 0.05-0.25 s of reading.
    # Rank 300 left no figure (its load span lost, no state file): its node's is unknown, and said so.
    assert len(storage) == 4, storage
    assert storage[0].startswith("Storage: 125 nodes (node000 ... node127), each: checkpoint cold")
    assert "(under 1 s: too brief for a rate)" in storage[0]
    assert "Storage: node037: checkpoint cold; what its 8 ranks fetched from storage was not measured" in storage
    assert any("(rank 700 to its last reading, before dying)" in line for line in storage)
    for kind, text in found.items():  # a few lines each, however many ranks it names
        assert len(text) < 1000, (kind, text)


def test_several_causes_keep_every_rank_s_figures_in_the_json(mixed, capsys):
    data = json.loads(ok(capsys, "report", str(mixed), "--format", "json"))
    found = {f["kind"]: f for f in data["findings"]}
    slow = found[sc.FINDING_SLOW_RANK]
    assert [entry["rank"] for entry in slow["evidence"]["per_rank"]] == [3, *range(104, 160), *NODE77]
    assert [group["hosts"] for group in slow["evidence"]["groups"]] == [
        None, [f"node{n:03d}" for n in range(13, 20)], ["node077"]
    ]  # fmt: skip
    (node77,) = [n for n in found[sc.FINDING_SLOW_STORAGE]["evidence"]["per_node"] if n["host"] == "node077"]
    assert node77["ranks"] == NODE77 and node77["storage_bytes_per_second"] < 60_000
    assert [entry["rank"] for entry in found[sc.FINDING_INCOMPLETE_RANK]["evidence"]["per_rank"]] == [300, 700]


def test_several_causes_in_the_closing_line(mixed, capsys):
    line = ok(capsys, "report", str(mixed), "--format", "line").strip()
    assert line == (
        "1,024 ranks, 7 findings; rank 3 slow, nodes node013-node019 (7 nodes) slow, rank 300 incomplete and 2 more"
    ), line


# Loads that raised among slow ranks (68 outliers): all of nodes node013-node019 and ranks 3, 40, 900 raised
# FileNotFoundError; node025 and rank 5 20 s slower.
FAILED = [3, 40, *range(104, 160), 900]


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("failing") / "job"
    return write_big_job(folder, 1024, [5, *range(200, 208)], -1, 20.0, source=RECORDED, failed=FAILED)


def test_loads_that_raised_alike_are_told_as_the_rows_group_them(failing, capsys):
    table = ok(capsys, "report", str(failing))
    assert len(table.splitlines()) <= 80, table
    rows = rank_rows(table)
    assert [row for row in rows if row.endswith(":")] == [
        "ranks 1-2, 4, 6-39, 41-103, 160-199, 208-899, 901-1023 (955 ranks) on 120 nodes:",
        "nodes node013-node019 (7 nodes): all 56 ranks (104-159) failed:",
        "node025: all 8 ranks (200-207):",
    ], rows
    assert [" ".join(row.split()[:2]) for row in rows if row[0].isdigit()] == [
        "0 node000", "3 failed", "5 node000", "40 failed", "900 failed"
    ], rows  # fmt: skip
    found = findings_of(table)
    assert found["failed_load"] == (
        "ranks 3, 40, 900 each raised FileNotFoundError in transformers.from_pretrained after reading 1.0 MB; nodes"
        " node013-node019 (7 nodes): all 56 ranks (104-159) each raised FileNotFoundError in"
        " transformers.from_pretrained after reading 1.0 MB. Their numbers are those of a load that did not complete."
        " next: the job's own exception: its type is the rank's failed mark; run the load alone to see its traceback."
    ), found
    assert (
        found["slow_rank"].startswith("rank 5 took 29.57 s to start") and "; node025: all 8 ranks" in found["slow_rank"]
    )


def test_loads_that_raised_keep_every_rank_s_figures_in_the_json(failing, capsys):
    data = json.loads(ok(capsys, "report", str(failing), "--format", "json"))
    (finding,) = [f for f in data["findings"] if f["kind"] == sc.FINDING_FAILED_LOAD]
    assert finding["ranks"] == FAILED
    assert [(entry["rank"], entry["error_type"]) for entry in finding["evidence"]["per_rank"]] == [
        (rank, "FileNotFoundError") for rank in FAILED
    ]
    assert [group["hosts"] for group in finding["evidence"]["groups"]] == [
        None,
        [f"node{n:03d}" for n in range(13, 20)],
    ]
