"""Promise (issue 42): a big job's outliers told as a person would. Ranks or nodes with the same cause and alike
figures share one sentence (their ranges, each figure's median, min and max where they differ); a node whose ranks
all stand out the same way is told as the node, with its storage's speed when that is slow too, apart from single
ranks on otherwise healthy nodes; the evidence keeps every rank's figures. Over startups built by hand (64 ranks on 8
nodes of 8), as ``startup.job_startup`` makes them; the report of generated 1,024-rank jobs:
tests/cli/test_outliers_told_as_a_person_would.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from support.paths import SPANS

from loadtrace import semconv as sc
from loadtrace.analysis import alike
from loadtrace.analysis.findings import failed_load, incomplete_rank
from loadtrace.analysis.model import Exit, NodeStartup, RankLoad, RankStartup, Startup
from loadtrace.analysis.ranks import Job, jobs_from_spans, summarize_rank
from loadtrace.analysis.skew import collective_timeout
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.sources.files import Span
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
        "; its ranks fetched from storage at 3,800 B (3.8 kB)/s. The job starts when its slowest rank is ready."
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
        "nodes node002-node003, node006 (3 nodes) each fetched 2,000,000,000 B (2.0 GB) from storage in"
        " 444444.44 s (min 400000.00 s, max 500000.00 s) of fetching, 4,500 B (4.5 kB)/s (min 4,000 B (4.0 kB)/s,"
        " max 5,000 B (5.0 kB)/s); node007 fetched 2,000,000,000 B (2.0 GB) from storage in 5000.00 s of fetching,"
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


def _copies(changed: dict[int, Callable[[RankLoad], RankLoad]]) -> tuple[Job, int]:
    """64 copies of a real job's finished rank (``fixtures/spans/killed524``'s rank 0) on 8 nodes, ``changed``'s
    ranks as their function makes them; the job and its model's bytes."""
    spans = read_files(SPANS / "killed524")
    (recorded,) = jobs_from_spans(spans.spans, spans.states)
    finished = next(rank for rank in recorded.ranks if not rank.incomplete)
    ranks = []
    for number in range(RANKS):
        rank = dataclasses.replace(finished, rank=number, host=host(number), spans=list(finished.spans))
        ranks.append(changed[number](rank) if number in changed else rank)
    return Job("t", ranks, 0), recorded.model_bytes()


def _raised(error: str, code: int) -> Callable[[RankLoad], RankLoad]:
    def made(rank: RankLoad) -> RankLoad:
        spans = [dataclasses.replace(s, status_code=2) if s.name == sc.SPAN_FROM_PRETRAINED else s for s in rank.spans]
        return dataclasses.replace(rank, spans=spans, failed=error, exit=Exit(code=code, source="launcher"))

    return made


def test_ranks_whose_loads_raised_alike_share_one_sentence_a_whole_node_as_the_node():
    """All of node002 (ranks 16-23) and ranks 3, 40 raised FileNotFoundError and exited 1; rank 50 raised OSError."""
    failed = {3: _raised("FileNotFoundError", 1), 40: _raised("FileNotFoundError", 1), 50: _raised("OSError", 1)}
    failed |= dict.fromkeys(range(16, 24), _raised("FileNotFoundError", 1))
    job, model = _copies(failed)
    finding = failed_load(job, model)
    assert finding is not None and finding.ranks == sorted(failed)
    read = human_bytes(job.ranks[0].read_bytes)
    assert finding.detail == (
        f"ranks 3, 40 each raised FileNotFoundError in transformers.from_pretrained after reading {read}; each process"
        f" exited with code 1; node002: all 8 ranks (16-23) each raised FileNotFoundError in"
        f" transformers.from_pretrained after reading {read}; each process exited with code 1; rank 50's"
        f" transformers.from_pretrained raised OSError after reading {read}; the process exited with code 1. Their"
        " numbers are those of a load that did not complete."
    ), finding.detail
    assert [entry["rank"] for entry in finding.evidence["per_rank"]] == sorted(failed)
    assert [(group["ranks"], group["hosts"]) for group in finding.evidence["groups"]] == [
        ([3, 40], None),
        (list(range(16, 24)), ["node002"]),
        ([50], None),
    ]
    # The rows follow: the node's ranks share one, titled as the node; ranks 3 and 40 are fewer than a shared row's.
    rows = [[rank.rank for rank in members] for members in alike.rank_groups(job.ranks, [finding])]
    assert list(range(16, 24)) in rows and [3] in rows and [40] in rows and [50] in rows
    assert alike.node_outliers([finding]) == dict.fromkeys(range(16, 24), ["node002"])


def test_a_failed_sentence_stays_short_however_many_ranks_raised():
    failed = dict.fromkeys(range(1, RANKS, 2), _raised("FileNotFoundError", 1))  # every other rank: no whole node
    job, model = _copies(failed)
    finding = failed_load(job, model)
    assert finding is not None and len(finding.evidence["per_rank"]) == len(failed)
    assert len(finding.detail) < 400 and "..." in finding.detail, finding.detail


def _timed_out(load_end: int, seconds: float) -> Callable[[RankLoad], RankLoad]:
    """The rank's DistBackendError ``seconds`` after its load ended (its message names the rank, as gloo's do)."""

    def made(rank: RankLoad) -> RankLoad:
        at = load_end + int(seconds * 1e9)
        attributes = {
            sc.EXCEPTION_TYPE: "DistBackendError",
            sc.EXCEPTION_MESSAGE: f"[Rank {rank.rank}] Timed out waiting 5000ms for recv operation to complete",
        }
        raised = Span("t", f"x{rank.rank}", "", sc.SPAN_EXCEPTION, at, at, attributes, {})
        return dataclasses.replace(rank, spans=[*rank.spans, raised])

    return made


def _still_loading(by: float) -> Callable[[RankLoad], RankLoad]:
    """The rank's load (and every span after its start) ``by`` seconds longer; the launcher stopped it (SIGTERM)."""

    def made(rank: RankLoad) -> RankLoad:
        load = next(s for s in rank.spans if s.name == sc.SPAN_FROM_PRETRAINED)
        late = int(by * 1e9)
        spans = [dataclasses.replace(s, end_ns=s.end_ns + late) if s.end_ns >= load.end_ns else s for s in rank.spans]
        return dataclasses.replace(rank, spans=spans, exit=Exit(signal="SIGTERM", source="launcher"))

    return made


def test_ranks_that_timed_out_alike_and_those_still_loading_alike_share_a_sentence_each():
    """node005 (ranks 40-47) and rank 3 load 60 s longer; every other rank times out 5 s after its own load."""
    spans = read_files(SPANS / "killed524")
    (recorded,) = jobs_from_spans(spans.spans, spans.states)
    end = next(s.end_ns for r in recorded.ranks for s in r.spans if s.name == sc.SPAN_FROM_PRETRAINED)
    slow = [3, *range(40, 48)]
    changed = {n: _still_loading(60.0) if n in slow else _timed_out(end, 5.0 + n / 1000) for n in range(RANKS)}
    job, model = _copies(changed)
    finding = collective_timeout(job, model)
    assert finding is not None and finding.ranks == [n for n in range(RANKS) if n not in slow]
    timed, waiting = finding.detail.split(", while ")
    # Where every rank of a node timed out, that is told as the nodes, as a slow node is.
    assert timed == (
        "ranks 0-2, 4-7 timed out in a collective 5.004 s (min 5 s, max 5.007 s) after their own load ended (the"
        " process group's timeout: 5 s): DistBackendError: [Rank 0] Timed out waiting 5000ms for recv operation to"
        " complete (rank 0's; theirs alike); nodes node001-node004, node006-node007 (6 nodes): all 48 ranks (8-39,"
        " 48-63) timed out in a collective 5.031 s (min 5.008 s, max 5.063 s) after their own load ended (the process"
        " group's timeout: 5 s): DistBackendError: [Rank 8] Timed out waiting 5000ms for recv operation to complete"
        " (rank 8's; theirs alike)"
    ), timed
    assert waiting.startswith("rank 3 was still loading (in its load: "), waiting
    assert "; node005: all 8 ranks (40-47) were still loading (in their load: " in waiting, waiting
    assert "/s; SIGTERM " in waiting.partition("; node005")[2], waiting
    assert waiting.endswith(". Rank 0 failed first (DistBackendError); ranks 3, 40-47 (9 ranks) were stopped after it.")
    assert len(finding.detail) < 1000  # a few lines, however many ranks
    assert [entry["rank"] for entry in finding.evidence["per_rank"]] == finding.ranks
    assert sorted(entry["rank"] for entry in finding.waiting_for or []) == slow
    hosts = [f"node00{n}" for n in (1, 2, 3, 4, 6, 7)]
    assert [group["hosts"] for group in finding.evidence["groups"]] == [None, hosts]
