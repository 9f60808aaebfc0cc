"""Promise: ``loadtrace top`` over a 1,024-rank job fits a terminal: the ranks that are behind, stuck, dead or near
their memory limit first, one row each, the rest summed by status and node; ``--once --format json`` lists every
rank. Nodes come in natural order (node2 before node10)."""

from __future__ import annotations

import json

import pytest
from support.big_job import NOT_A_PID, write_live_job

from loadtrace import semconv as sc
from loadtrace.analysis.hosts import host_ranges, natural_key
from loadtrace.analysis.top import rows
from loadtrace.cli.commands import main
from loadtrace.cli.render_top import ATTENTION_ROWS, top_lines
from loadtrace.cli.top import state_files

NOW = 1_800_000_000 * 10**9
RANKS = 1024
BEHIND, STUCK, DEAD, NEAR_LIMIT = (5, 300), (6,), (7,), (8,)
FINISHED = tuple(range(512, 520))  # node064, done


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_live_job(
        tmp_path_factory.mktemp("live") / "job",
        RANKS,
        NOW,
        behind=BEHIND,
        stuck=STUCK,
        dead=DEAD,
        near_limit=NEAR_LIMIT,
        finished=FINISHED,
        this_host="this-node",
    )


def not_a_pid_is_dead(pid: int, created_ns: int) -> bool:
    return pid != NOT_A_PID


@pytest.fixture(scope="module")
def found(folder):
    return rows(state_files(folder), NOW, "this-node", not_a_pid_is_dead)


def test_a_1024_rank_job_fits_a_terminal(found):
    lines = top_lines(found, "here", NOW, live=False)
    assert len(lines) <= 24, "\n".join(lines)
    assert lines[0].startswith("loadtrace top  here") and "1024 ranks on 129 nodes, 1015 loading" in lines[0]


def test_the_ranks_that_need_attention_come_first_one_row_each_the_dead_first(found):
    lines = top_lines(found, "here", NOW, live=False)
    assert lines[2] == "need attention: 5 ranks"
    flagged = [line.split()[:4] for line in lines[4:9]]
    assert [row[1] for row in flagged] == ["7", "8", "6", "5", "300"]  # dead, memory, stuck, behind
    assert flagged[0][3] == "dead" and flagged[0][0] == "this-node"
    by_rank = {item.rank: item for item in found}
    assert by_rank[8].marks == [sc.MARK_OOM_AHEAD, sc.MARK_NEAR_LIMIT]
    assert by_rank[6].marks == [sc.MARK_STUCK]
    assert by_rank[5].marks == by_rank[300].marks == [sc.MARK_BEHIND]  # equally late: neither is the slowest
    assert sorted(item.rank for item in found if item.marks or item.status == "dead") == [5, 6, 7, 8, 300]


def test_the_rest_are_summed_by_status_with_their_nodes_as_ranges(found):
    lines = top_lines(found, "here", NOW, live=False)
    start = lines.index("the other 1019 ranks, by status and node:")
    loading, idle = (line.split() for line in lines[start + 2 : start + 4])
    assert loading[:4] == ["loading", "1011", "node000-node063,", "node065-node127"]
    assert idle[:3] == ["idle", "8", "node064"]


def test_at_most_a_screenful_of_flagged_ranks_and_a_pointer_to_the_json(tmp_path):
    many = tuple(range(100, 220, 2))  # half of each node's ranks: no whole node
    folder = write_live_job(tmp_path / "job", 256, NOW, behind=many)
    found = rows(state_files(folder), NOW, "here", not_a_pid_is_dead)
    lines = top_lines(found, "here", NOW, live=False)
    # Alike, they share one row (issue 42), the slowest among them.
    assert "  ... and" not in "\n".join(lines) and sum(" (60) " in line for line in lines) == 1, lines
    for step, item in enumerate(item for item in found if item.rank in many):  # 60 ranks, none alike another
        item.read_bytes = 1000 * 2**step
    lines = top_lines(found, "here", NOW, live=False)
    assert f"  ... and {60 - ATTENTION_ROWS} more (--once --format json lists every rank)" in lines
    assert len(lines) <= 2 + 2 + ATTENTION_ROWS + 2 + 4


def test_json_lists_every_rank(folder, capsys):
    assert main(["top", str(folder), "--once", "--format", "json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["ranks"]
    assert sorted(item["rank"] for item in ranks) == list(range(RANKS))


def test_a_small_job_keeps_a_row_per_rank(tmp_path):
    folder = write_live_job(tmp_path / "job", 16, NOW, stuck=(3,))
    lines = top_lines(rows(state_files(folder), NOW, "here", not_a_pid_is_dead), "here", NOW, live=False)
    assert [line for line in lines if line.startswith("node ")] == ["node node000", "node node001"]
    assert sum(1 for line in lines if line.split()[:1] and line.split()[0].isdigit()) == 16


def test_nodes_in_natural_order():
    hosts = ["node10", "node2", "node1", "gpu-a100-3", "gpu-a100-12"]
    assert sorted(hosts, key=natural_key) == ["gpu-a100-3", "gpu-a100-12", "node1", "node2", "node10"]
    assert host_ranges([f"node{n}" for n in (1, 2, 3, 5, 10, 11)]) == "node1-node3, node5, node10-node11"
    assert host_ranges(["node09", "node10"]) == "node09-node10" and host_ranges(["n9", "n010"]) == "n9, n010"
