"""Promise (issue 42): a big job's outliers told as a person would. Ranks or nodes with the same cause and alike
figures share one sentence (their ranges, each figure's median, min and max where they differ); a node whose ranks
all stand out the same way is told as the node, with its storage's speed when that is slow too, apart from single
ranks on otherwise healthy nodes; the evidence keeps every rank's figures. Over startups built by hand (64 ranks on 8
nodes of 8), as ``startup.job_startup`` makes them; the report of generated 1,024-rank jobs:
tests/cli/test_outliers_told_as_a_person_would.py."""

from __future__ import annotations

import dataclasses

from support.paths import SPANS

from loadtrace import semconv as sc
from loadtrace.analysis import alike
from loadtrace.analysis.findings import incomplete_rank
from loadtrace.analysis.model import NodeStartup, RankStartup, Startup
from loadtrace.analysis.ranks import Job, jobs_from_spans, summarize_rank
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.startup import Thresholds, slow_rank, slow_storage
from loadtrace.analysis.units import human_bytes
from loadtrace.startup_split import STARTUP_PHASES

RANKS, PER_NODE = 64, 8
TAIL = ". The rank's row shows its finished spans plus these last known totals."
FAST_READ, STORAGE = 0.04, 2_000_000_000  # seconds reading; bytes each node's storage delivered


def host(rank: int) -> str:
    return f"node{rank // PER_NODE:03d}"


def job_of(read: dict[int, float], slow_nodes: dict[str, float] | None = None) -> tuple[Job, Startup]:
    """Every rank 11.1 s to start, 0.04 s of it reading, but ``read``'s ranks (their read seconds instead);
    ``slow_nodes``: the storage rate of those nodes (the others read at 1 GB/s)."""
    ranks = [
        summarize_rank("t", number, None, [], {sc.RANK: number, sc.HOST_NAME: host(number)}) for number in range(RANKS)
    ]
    startups = []
    for number in range(RANKS):
        reading = read.get(number, FAST_READ)
        phases = dict.fromkeys(STARTUP_PHASES, 0.0) | {"read": reading, "imports": 11.06}
        startups.append(RankStartup(number, host(number), round(11.06 + reading, 6), "startup span", phases))
    rates = slow_nodes or {}
    nodes = [
        NodeStartup(name, list(range(n * PER_NODE, (n + 1) * PER_NODE)), "cold", STORAGE, STORAGE / rate, rate)
        for n in range(RANKS // PER_NODE)
        for name in [f"node{n:03d}"]
        for rate in [rates.get(name, 1e9)]
    ]
    return Job("t", ranks, 0), Startup(None, None, None, None, None, startups, nodes)


def test_alike_slow_ranks_share_one_sentence_and_the_json_keeps_each():
    slow = {number: 20.04 + number / 1000 for number in (3, 12, 21, 30, 39, 45, 50, 61)}  # one per node, alike
    job, startup = job_of(slow)
    finding = slow_rank(job, startup, Thresholds())
    assert finding is not None and finding.ranks == sorted(slow)
    first, rest = finding.detail.split(". ", 1)
    assert first == (
        "ranks 3, 12, 21, 30, 39, 45, 50, 61 (8 ranks) took 31.13 s (min 31.10 s, max 31.16 s) to start, 20.03 s"
        " (min 20.00 s, max 20.06 s) behind the median of the other ranks (11.10 s); their read phase made the"
        " difference: 20.07 s (min 20.04 s, max 20.10 s) against the others' 0.04 s (501.9x), 20.03 s (min 20.00 s,"
        " max 20.06 s) more"
    ), first
    assert rest == "The job starts when its slowest rank is ready."
    assert [entry["rank"] for entry in finding.evidence["per_rank"]] == sorted(slow)
    assert finding.evidence["groups"] == [{"ranks": sorted(slow), "whole_nodes": False, "hosts": None}]


def test_ranks_far_apart_in_their_figures_are_told_apart():
    job, startup = job_of({3: 20.04, 12: 20.5, 21: 200.0})
    finding = slow_rank(job, startup, Thresholds())
    assert finding is not None
    assert [group["ranks"] for group in finding.evidence["groups"]] == [[3, 12], [21]]
    assert finding.detail.startswith("ranks 3, 12 took ")
    assert "; rank 21 took 211.06 s to start, 199.96 s behind" in finding.detail


def test_a_node_whose_ranks_are_all_slow_is_told_as_the_node_apart_from_a_single_rank():
    """node005's eight ranks (40-47) and its storage 20 s slow in read; rank 3 slow on an otherwise healthy node."""
    slow = dict.fromkeys(range(40, 48), 20.04) | {3: 20.04}
    job, startup = job_of(slow, {"node005": 3_800.0})
    finding = slow_rank(job, startup, Thresholds())
    assert finding is not None and finding.ranks == [3, *range(40, 48)]
    single, node, _ = finding.detail.split("; ", 2)[0], *finding.detail.split("more; ", 1)[1].split("; its ")
    assert single.startswith("rank 3 took 31.10 s to start, 20.00 s behind the median of the other ranks (11.10 s)")
    assert node.startswith("node005: all 8 ranks (40-47) took 31.10 s to start, 20.00 s behind the median")
    assert finding.detail.endswith(
        "; its storage read at 3,800 B (3.8 kB)/s. The job starts when its slowest rank is ready."
    ), finding.detail
    assert finding.evidence["groups"] == [
        {"ranks": [3], "whole_nodes": False, "hosts": None},
        {"ranks": list(range(40, 48)), "whole_nodes": True, "hosts": ["node005"]},
    ]
    # The table's rows follow: the node's ranks share one (from two ranks on), rank 3 keeps its own.
    assert alike.node_outliers([finding]) == dict.fromkeys(range(40, 48), ["node005"])


def test_alike_slow_nodes_share_one_storage_sentence():
    job, startup = job_of({}, {"node002": 4_000.0, "node003": 5_000.0, "node006": 4_500.0, "node007": 400_000.0})
    finding = slow_storage(job, startup, Thresholds())
    assert finding is not None
    assert finding.detail.startswith(
        "nodes node002-node003, node006 (3 nodes) each read 2,000,000,000 B (2.0 GB) of checkpoint from storage in"
        " 444444.44 s (min 400000.00 s, max 500000.00 s), 4,500 B (4.5 kB)/s (min 4,000 B (4.0 kB)/s, max 5,000 B"
        " (5.0 kB)/s); node007 read 2,000,000,000 B (2.0 GB) of checkpoint from storage in 5000.00 s,"
    ), finding.detail
    assert [group["hosts"] for group in finding.evidence["groups"]] == [["node002", "node003", "node006"], ["node007"]]
    assert len(finding.evidence["per_node"]) == 4
    # A node-level finding sets no rank apart: its ranks keep the row of the ranks that behaved like them.
    assert alike.kinds_by_rank([finding]) == {}


def test_a_sentence_stays_short_however_many_ranks_it_names():
    slow = {number: 20.04 for number in range(1, RANKS, 3) if host(number) not in ("node000",)}
    job, startup = job_of(slow)
    finding = slow_rank(job, startup, Thresholds())
    assert finding is not None and len(finding.ranks) == len(slow)
    assert len(finding.detail) < 400 and "..." in finding.detail, finding.detail


def test_ranks_that_died_alike_share_one_sentence_a_whole_node_as_the_node():
    """Copies of a real job's rank SIGKILLed mid-load (``fixtures/spans/killed524``, no witness): all of node001
    (ranks 8-15) and ranks 3, 20, 30 on otherwise healthy nodes; the others copies of its finished rank."""
    spans = read_files(SPANS / "killed524")
    (recorded,) = jobs_from_spans(spans.spans, spans.states)
    finished, dead = sorted(recorded.ranks, key=lambda rank: rank.rank or 0)
    died = {3, 20, 30, *range(8, 16)}
    ranks = [
        dataclasses.replace(dead if number in died else finished, rank=number, host=host(number))
        for number in range(RANKS)
    ]
    finding = incomplete_rank(Job("t", ranks, 0), recorded.model_bytes())
    assert finding is not None and finding.ranks == sorted(died)
    singles, node = finding.detail.removesuffix(TAIL).split("; ")[::2][:2]
    read = human_bytes(dead.read_bytes)
    assert singles == (
        f"ranks 3, 20, 30 died during transformers.convert after reading {read} (no launcher witness: how it ended is"
        " unknown)"
    ), finding.detail
    assert node.startswith("node001: all 8 ranks (8-15) died during transformers.convert after reading"), node
    assert len(finding.detail) < 600 and len(finding.evidence["per_rank"]) == len(died)
