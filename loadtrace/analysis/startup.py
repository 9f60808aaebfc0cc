"""A job's startup: how long each rank took to be ready, where that time went, and which rank or node held the job back.

A rank's startup is its ``loadtrace.startup`` span (process start, or ``init_process_group``, to the end of the
strategy's preparation). Without one (an older loadtrace's spans, or an instrumentation that is off) it is the rank's
own spans: from its first span to the end of its last load or startup phase. A job starts when its slowest
rank is ready.

The rank's time is split into phases by ``loadtrace.startup_split``, the definition the rank itself uses for the split
its startup span carries (docs/report.md, Startup, defines each phase by its spans).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from .. import semconv as sc
from ..startup_split import (
    STARTUP_PHASES,
    Interval,
    PhaseSpan,
    length,
    split,
    union,
)
from . import alike, summarized
from .hosts import natural_key
from .model import INFO, WARNING, Finding, NodeStartup, RankLoad, RankStartup, Startup
from .nodes import COLD, PARTLY_COLD, WARM, checkpoint_residency
from .ranks import Job, outermost
from .sources import Span
from .units import human_bytes

NOT_OWN = frozenset({sc.SPAN_JOB, sc.SPAN_RANK_EXIT})  # not the rank's own work: the job root, the launcher's witness


@dataclass(frozen=True)
class Thresholds:
    """The startup findings' thresholds (docs/report.md, Startup; ``loadtrace report`` options override them)."""

    slow_rank_ratio: float = 1.5  # a rank at least this many times the other ranks' median in a phase ...
    slow_rank_seconds: float = 1.0  # ... and at least this far behind their median in the whole startup
    slow_storage_ratio: float = 0.5  # a node reading from storage under this share of the job's median node
    rendezvous_wait_seconds: float = 5.0  # a rank that waited longer than this in init_process_group


# One rank ---------------------------------------------------------------------------------------------------------


def window(rank: RankLoad) -> tuple[Interval, str] | None:
    """The rank's startup (start, end) in ns and what measured it; None when the rank neither started nor loaded. A
    rank that died starting has the startup span the launcher's witness ended at its death: that long, never the
    shorter stretch its few finished spans cover."""
    own = [span for span in rank.spans if span.name not in NOT_OWN]
    startups = [span for span in own if span.name == sc.SPAN_STARTUP]
    if startups:
        return (min(s.start_ns for s in startups), max(s.end_ns for s in startups)), "startup span"
    ends = [span.end_ns for span in own if span.name in sc.LOAD_SPANS or span.name in sc.STARTUP_PHASE_SPANS]
    if not ends:
        return None
    return (min(span.start_ns for span in own), max(ends)), "spans"


def phase_spans(spans: list[Span]) -> list[PhaseSpan]:
    return [PhaseSpan(s.name, s.start_ns, s.end_ns, s.span_id, s.parent_span_id, s.attributes) for s in spans]


def rank_startup(rank: RankLoad) -> RankStartup | None:
    measured = window(rank)
    if measured is None:
        return None
    bounds, source = measured
    # A rank whose file spans were left out (the span budget) split its startup in-job from all of them.
    nanoseconds = summarized.carried_split(rank, bounds) or split(bounds, phase_spans(rank.spans))
    return RankStartup(
        rank=rank.rank,
        host=rank.host,
        seconds=round(max(0, bounds[1] - bounds[0]) / 1e9, 6),
        measured_from=source,
        phases={phase: round(nanoseconds[phase] / 1e9, 6) for phase in STARTUP_PHASES},
        partial=rank.partial,
    )


# One node ---------------------------------------------------------------------------------------------------------


# A node's storage rate is given once its ranks fetched for this long: its fetching time is an upper bound by less than
# one reading interval (0.1 s) at each edge of a run of fetching, so from 1 s on the rate is within about 20% (and
# never above the truth); below it, the bytes and the time alone (docs/report.md, Storage words).
MIN_RATE_SECONDS = 1.0


def node_startup(host: str | None, ranks: list[RankLoad]) -> NodeStartup:
    """The checkpoint's residency at first open (nodes.py), and what the node's ranks fetched from storage while they
    loaded (``storage_read_bytes``: ``/proc/self/io``) over the union of their fetching stretches."""
    residency = checkpoint_residency(ranks)
    outcome: str | None = None
    if residency is not None:
        _, total, cold = residency
        outcome = WARM if cold == 0 else COLD if cold >= total else PARTLY_COLD
    # Every rank that loaded counts, one that died loading too: one without the figure makes the node's unknown.
    loaders = [r for r in ranks if r.loads or r.incomplete or r.read_bytes or r.storage_read_bytes is not None]
    fetched = [r.storage_read_bytes for r in loaders]
    storage = sum(b for b in fetched if b is not None) if loaders and None not in fetched else None
    stretches = [r.storage_read_intervals for r in loaders]
    seconds = length(union(s for found in stretches for s in found or [])) / 1e9 if stretches else None
    if None in stretches or storage is None:
        seconds = None
    rate = storage / seconds if storage and seconds and seconds >= MIN_RATE_SECONDS else None
    return NodeStartup(
        host=host,
        ranks=[r.rank for r in ranks],
        checkpoint=outcome,
        storage_bytes=storage,
        fetch_seconds=round(seconds, 6) if seconds is not None else None,
        storage_bytes_per_second=round(rate, 1) if rate is not None else None,
        counted_to_last_reading=[r.rank for r in loaders if r.incomplete and r.storage_read_as_of is not None],
    )


def _loads(rank: RankLoad) -> list[Span]:
    by_id = {span.span_id: span for span in rank.spans if span.span_id}
    return outermost(rank.spans, sc.LOAD_SPANS, by_id)


# One job ----------------------------------------------------------------------------------------------------------


def _median(values: Iterable[float]) -> float | None:
    known = list(values)
    return statistics.median(known) if known else None


class OthersMedian:
    """For each of ``values`` in turn, the median of all the others (``statistics.median``'s value exactly), from one
    sort: a median of the others per rank, each from scratch, is O(n² log n) (16 M steps at 4,096 ranks)."""

    def __init__(self, values: list[float]) -> None:
        order = sorted(range(len(values)), key=values.__getitem__)
        self.ordered = [values[index] for index in order]
        self.position = [0] * len(values)
        for at, index in enumerate(order):
            self.position[index] = at

    def without(self, index: int) -> float | None:
        """The median of every value but the ``index``-th; None when there is no other."""
        count, skip, ordered = len(self.ordered) - 1, self.position[index], self.ordered
        if count <= 0:
            return None
        middle = count // 2
        upper = ordered[middle if middle < skip else middle + 1]
        if count % 2:
            return upper
        return (ordered[middle - 1 if middle - 1 < skip else middle] + upper) / 2


def behind(rank: RankStartup, others: list[RankStartup]) -> dict[str, float]:
    """Per phase: the rank's seconds less the median of the other ranks'."""
    return {p: rank.phases[p] - (_median(o.phases[p] for o in others) or 0.0) for p in STARTUP_PHASES}


def _behind_enough(rank: RankStartup, others: list[RankStartup], limits: Thresholds) -> tuple[float, dict] | None:
    """(how far the rank's startup is behind the other ranks' median, ``behind`` per phase) when that is at least
    ``slow_rank_seconds``; None otherwise, or without others."""
    median = _median(o.seconds for o in others)
    if median is None or rank.seconds - median < limits.slow_rank_seconds:
        return None
    return rank.seconds - median, behind(rank, others)


def explaining_phase(rank: RankStartup, others: list[RankStartup], limits: Thresholds) -> str | None:
    """The phase that explains a real difference: the rank is at least ``slow_rank_seconds`` behind the others'
    median, and this phase, the one that put it furthest behind, is at least half of that."""
    found = _behind_enough(rank, others, limits)
    if found is None:
        return None
    ahead, excess = found
    phase = max(STARTUP_PHASES, key=lambda p: excess[p])
    return phase if excess[phase] >= ahead / 2 else None


def slow_phase(rank: RankStartup, others: list[RankStartup], limits: Thresholds) -> str | None:
    """The phase that makes the rank a ``slow_rank``: it is at least ``slow_rank_seconds`` behind the others' median
    in the whole startup, and in this phase at least ``slow_rank_ratio`` × their median and at least half of that lead
    behind it (of such phases, the furthest behind); None when it is not slow. Judged per phase, so the seconds every
    rank spends alike (imports) do not hide a phase that took several times theirs."""
    found = _behind_enough(rank, others, limits)
    if found is None:
        return None
    ahead, excess = found
    ratio = limits.slow_rank_ratio
    slow = [
        p for p in STARTUP_PHASES if excess[p] >= ahead / 2 and rank.phases[p] >= ratio * (rank.phases[p] - excess[p])
    ]
    return max(slow, key=lambda p: excess[p]) if slow else None


def judged(job: Job, ranks: list[RankStartup]) -> list[RankStartup]:
    """The ranks whose startups are measures of the job's: not a partial rank (its file lost spans), not one that
    died or never finished its load (its startup ended at its death). The others are shown, never judged, and never
    among "the other ranks" a rank is judged against."""
    ended = {r.rank for r in job.ranks if r.incomplete or r.failed is not None or died_starting(r)}
    return [r for r in ranks if not r.partial and r.rank not in ended]


def died_starting(rank: RankLoad) -> bool:
    """Whether the rank died before it was ready: the launcher's witness ended its startup span at its death, or an
    exception nobody caught ended the process first (``raised_starting``)."""
    return raised_starting(rank) or any(
        s.name == sc.SPAN_STARTUP and s.attributes.get(sc.EXIT_SOURCE) == sc.EXIT_SOURCE_LAUNCHER for s in rank.spans
    )


def raised_starting(rank: RankLoad) -> bool:
    """Whether an exception nobody caught (its span, else its state file's word) ended the process of a rank whose
    startup was still waiting for its end (a load, or a preparation): the startup ended only at the exit, at the rank's
    last activity before it, and no load finished after the exception. The job's own code failed before the rank was
    ready (a crash after the rendezvous), so its startup measures nothing of the job's."""
    raised = [s.start_ns for s in rank.spans if s.name == sc.SPAN_EXCEPTION]
    if not raised and rank.exception is not None:
        raised = [rank.exception[1]]
    if not raised:
        return False
    at = min(raised)
    at_exit = any(
        s.name == sc.SPAN_STARTUP and s.attributes.get(sc.STARTUP_END) == sc.STARTUP_END_EXIT for s in rank.spans
    )
    return at_exit and not any(s.end_ns > at for s in _loads(rank))


def job_startup(job: Job, limits: Thresholds | None = None) -> Startup | None:
    """None when no rank of the job started or loaded anything. The slowest rank, the median and the phase named are
    of the ranks ``judged`` (whole, and alive when their load ended)."""
    ranks = [found for rank in job.ranks if (found := rank_startup(rank)) is not None]
    if not ranks:
        return None
    hosts: dict[str | None, list[RankLoad]] = {}
    for rank in job.ranks:
        hosts.setdefault(rank.host, []).append(rank)
    nodes = [
        node_startup(host, members) for host, members in sorted(hosts.items(), key=lambda item: natural_key(item[0]))
    ]
    whole = judged(job, ranks)
    slowest = max(whole, key=lambda r: (r.seconds, -(r.rank or 0)), default=None)
    others = [r for r in whole if r is not slowest]
    median = _median(r.seconds for r in whole)
    rates = [n.storage_bytes_per_second for n in nodes if n.storage_bytes_per_second is not None]
    rate = _median(rates)
    return Startup(
        seconds=slowest.seconds if slowest is not None else None,
        slowest_rank=slowest.rank if slowest is not None else None,
        slowest_phase=explaining_phase(slowest, others, limits or Thresholds()) if slowest is not None else None,
        median_rank_seconds=round(median, 6) if median is not None else None,
        storage_bytes_per_second=round(rate, 1) if rate is not None else None,
        ranks=ranks,
        nodes=nodes,
    )


# Findings ---------------------------------------------------------------------------------------------------------


def _name(rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else "a rank without a number"


@dataclass(frozen=True)
class Slow:
    """A slow rank: its startup, the median of the other ranks' startups, the phase that made the difference, its
    seconds there more than theirs, and their median there."""

    rank: RankStartup
    median: float
    phase: str
    more: float
    theirs: float

    @property
    def behind(self) -> float:
        return self.rank.seconds - self.median


def slow_rank(job: Job, startup: Startup, limits: Thresholds) -> Finding | None:
    """Ranks that ``slow_phase`` names a phase for, among the ranks ``judged`` (the others are never judged, nor
    counted among the others). Told as a person would (``alike.outlier_groups``): one sentence per set of ranks slow
    in the same phase by alike seconds, a node whose ranks are all slow so as a node, with its storage's speed when
    that is slow too; the evidence keeps every rank's figures."""
    whole = judged(job, startup.ranks)
    slow = []
    medians = OthersMedian([r.seconds for r in whole])
    for index, rank in enumerate(whole):
        median = medians.without(index)
        if median is None or rank.seconds - median < limits.slow_rank_seconds:
            continue  # the cheap test first: only a rank this far behind is judged phase by phase
        others = whole[:index] + whole[index + 1 :]
        phase = slow_phase(rank, others, limits)
        if phase is None:
            continue
        theirs = _median(o.phases[phase] for o in others) or 0.0
        slow.append(Slow(rank, median, phase, rank.phases[phase] - theirs, theirs))
    if not slow:
        return None
    per_host = Counter(rank.host for rank in job.ranks)
    groups = alike.outlier_groups(
        slow, lambda s: s.phase, lambda s: s.behind, host=lambda s: s.rank.host, per_host=dict(per_host)
    )
    storage = {node.host: node for node in slow_nodes(job, startup, limits)[0]}
    return job.finding(
        sc.FINDING_SLOW_RANK,
        WARNING,
        [s.rank.rank for s in slow],
        0,
        "; ".join(_slow_sentence(group, storage) for group in groups)
        + ". The job starts when its slowest rank is ready.",
        {
            "ratio": limits.slow_rank_ratio,
            "seconds": limits.slow_rank_seconds,
            "groups": alike.groups_evidence(groups, lambda s: [s.rank.rank]),
            "per_rank": [
                {
                    "rank": s.rank.rank,
                    "host": s.rank.host,
                    "startup_seconds": s.rank.seconds,
                    "others_median_seconds": round(s.median, 6),
                    "phase": s.phase,
                    "phase_seconds": s.rank.phases[s.phase],
                    "others_phase_seconds": round(s.theirs, 6),
                    "phase_difference_seconds": round(s.more, 6),
                }
                for s in slow
            ],
        },
    )


def _seconds(values: list[float]) -> str:
    return alike.spread_figure(values, lambda value: f"{value:.2f} s")


def _slow_sentence(group: alike.Outliers[Slow], storage: dict[str | None, NodeStartup]) -> str:
    """One set of alike slow ranks in one sentence: a rank as it always was, alike ranks with their figures' median
    (min and max where they differ), whole nodes as nodes."""
    members, phase = group.members, group.members[0].phase
    if len(members) == 1 and group.hosts is None:
        (s,) = members
        r, m, theirs = s.rank, s.median, s.theirs
        return (
            f"{_name(r.rank)} took {r.seconds:.2f} s to start, {s.behind:.2f} s behind the median of the other ranks "
            f"({m:.2f} s); its {phase} phase made the difference: {r.phases[phase]:.2f} s against their {theirs:.2f} s"
            + (f" ({r.phases[phase] / theirs:.1f}x)" if theirs > 0 else "")
            + f", {s.more:.2f} s more"
        )
    numbers = [s.rank.rank for s in members if s.rank.rank is not None]
    mine = statistics.median(s.rank.phases[phase] for s in members)
    theirs = statistics.median(s.theirs for s in members)
    if group.hosts is None:
        who = alike.who(numbers)
    else:
        who = alike.whole_nodes(group.hosts, numbers)
    text = (
        f"{who} took {_seconds([s.rank.seconds for s in members])} to start, {_seconds([s.behind for s in members])}"
        f" behind the median of the other ranks ({_seconds([s.median for s in members])}); their {phase} phase made the"
        f" difference: {_seconds([s.rank.phases[phase] for s in members])} against the others'"
        f" {_seconds([s.theirs for s in members])}"
        + (f" ({mine / theirs:.1f}x)" if theirs > 0 else "")
        + f", {_seconds([s.more for s in members])} more"
    )
    nodes = [storage[host] for host in group.hosts or [] if host in storage]
    if nodes and len(nodes) == len(group.hosts or []):
        rates = [node.storage_bytes_per_second or 0.0 for node in nodes]
        text += f"; {'its' if len(nodes) == 1 else 'their'} ranks fetched from storage at"
        text += f" {alike.spread_figure(rates, rate_text)}"
    return text


def rate_text(rate: float) -> str:
    return f"{human_bytes(round(rate))}/s"


def rate_at_least(node: NodeStartup) -> float | None:
    """The node's storage rate; where it fetched checkpoint bytes too briefly for one (under ``MIN_RATE_SECONDS``),
    a lower bound of it: those bytes over its fetching time, an upper bound of the time. None otherwise (a warm node
    fetched only what else its ranks read)."""
    if node.storage_bytes_per_second is not None:
        return node.storage_bytes_per_second
    if node.checkpoint in (COLD, PARTLY_COLD) and node.storage_bytes and node.fetch_seconds:
        return node.storage_bytes / node.fetch_seconds
    return None


def slow_nodes(job: Job, startup: Startup, limits: Thresholds) -> tuple[list[NodeStartup], float, bool]:
    """The nodes fetching from storage under ``slow_storage_ratio`` x the job's median node, that median, and whether
    it is a lower bound. The median is of the nodes that fetched checkpoint bytes (``rate_at_least``: a node too brief
    for a rate was faster than its lower bound), two at least; only a node with a rate is judged; never a node with a
    partial rank, whose loads may be among the spans its file lost."""
    lost = {rank.host for rank in job.ranks if rank.partial}
    pool = [(n, rate) for n in startup.nodes if n.host not in lost and (rate := rate_at_least(n)) is not None]
    median = _median(rate for _, rate in pool)
    if len(pool) < 2 or not median:
        return [], 0.0, False
    limit = limits.slow_storage_ratio * median
    slow = [n for n, rate in pool if n.storage_bytes_per_second is not None and rate < limit]
    return slow, median, any(n.storage_bytes_per_second is None for n, _ in pool)


def slow_storage(job: Job, startup: Startup, limits: Thresholds) -> Finding | None:
    """Nodes fetching from storage under ``slow_storage_ratio`` x the job's median node (``slow_nodes``); nodes that
    fetched alike told in one sentence."""
    slow, median, bound = slow_nodes(job, startup, limits)
    if not slow:
        return None
    groups = alike.outlier_groups(slow, lambda _: None, lambda n: 1 / max(n.storage_bytes_per_second or 0.0, 1e-9))
    return job.finding(
        sc.FINDING_SLOW_STORAGE,
        WARNING,
        [r for n in slow for r in n.ranks],
        sum(n.storage_bytes or 0 for n in slow),
        "; ".join(_storage_sentence(group.members) for group in groups)
        + f": under {limits.slow_storage_ratio:g}x the job's median node ({'at least ' * bound}{rate_text(median)})."
        " Its ranks waited on storage.",
        {
            "ratio": limits.slow_storage_ratio,
            "median_bytes_per_second": round(median, 1),
            "median_is_lower_bound": bound,
            "groups": alike.groups_evidence(
                [alike.Outliers(group.members, [n.host or "" for n in group.members]) for group in groups],
                lambda n: n.ranks,
            ),
            "per_node": [
                {
                    "host": n.host,
                    "ranks": n.ranks,
                    "storage_bytes": n.storage_bytes,
                    "fetch_seconds": n.fetch_seconds,
                    "storage_bytes_per_second": n.storage_bytes_per_second,
                }
                for n in slow
            ],
        },
    )


def _storage_sentence(nodes: list[NodeStartup]) -> str:
    """``node7 fetched 1.0 MB from storage in 2.00 s of fetching, 500.0 kB/s``; alike nodes together, each figure
    their median (min and max where they differ)."""
    if len(nodes) == 1:
        n = nodes[0]
        return (
            f"{n.host or 'an unnamed host'} fetched {human_bytes(n.storage_bytes or 0)} from storage in "
            f"{n.fetch_seconds or 0.0:.2f} s of fetching, {rate_text(n.storage_bytes_per_second or 0.0)}"
        )
    hosts = sorted((n.host or "an unnamed host" for n in nodes), key=natural_key)
    stored = alike.spread_figure([n.storage_bytes or 0 for n in nodes], lambda value: human_bytes(int(value)))
    seconds = _seconds([n.fetch_seconds or 0.0 for n in nodes])
    rates = alike.spread_figure([n.storage_bytes_per_second or 0.0 for n in nodes], rate_text)
    return f"{alike.where(hosts)} each fetched {stored} from storage in {seconds} of fetching, {rates}"


def rendezvous_wait(job: Job, startup: Startup, limits: Thresholds) -> Finding | None:
    """Ranks whose ``torch.init_process_group`` took longer than ``rendezvous_wait_seconds``, and the rank(s) they
    waited for: those that arrived last (the latest ``init_process_group`` start, to the millisecond). None when a
    partial rank's arrival is unknown: it may be the last, among the spans its file lost."""
    arrivals: dict[int | None, int] = {}
    waits: dict[int | None, float] = {}
    for rank in job.ranks:
        spans = [s for s in rank.spans if s.name == sc.SPAN_INIT_PROCESS_GROUP]
        if spans:
            arrivals[rank.rank] = min(s.start_ns for s in spans)
            waits[rank.rank] = sum(s.seconds for s in spans)
        elif rank.partial:
            return None
    if len(arrivals) < 2:
        return None
    last = max(arrivals.values())
    latest = sorted((r for r, at in arrivals.items() if last - at < 1_000_000), key=lambda r: r or 0)
    waited = sorted(
        (r for r, seconds in waits.items() if seconds > limits.rendezvous_wait_seconds and r not in latest),
        key=lambda r: r or 0,
    )
    if not waited:
        return None
    numbered = [r for r in latest if r is not None]
    whom = alike.who(numbered) if len(numbered) == len(latest) else ", ".join(_name(r) for r in latest)
    sentences = []
    # Ranks that waited alike in one sentence, their figures' median (min and max where they differ).
    for group in alike.outlier_groups(waited, lambda _: None, waits.__getitem__):
        members = group.members
        numbers = [r for r in members if r is not None]
        if len(members) == 1 or len(numbers) < len(members):
            sentences += [
                f"{_name(r)} waited {waits[r]:.2f} s in torch.init_process_group, arriving "
                f"{(last - arrivals[r]) / 1e9:.2f} s before {whom}"
                for r in members
            ]
            continue
        early = [(last - arrivals[r]) / 1e9 for r in members]
        sentences.append(
            f"{alike.who(numbers)} waited {_seconds([waits[r] for r in members])} in torch.init_process_group, "
            f"arriving {_seconds(early)} before {whom}"
        )
    return job.finding(
        sc.FINDING_RENDEZVOUS_WAIT,
        INFO,
        waited,
        0,
        "; ".join(sentences) + f" (the last to arrive: the rendezvous completes when {whom} joins).",
        {
            "seconds": limits.rendezvous_wait_seconds,
            "waited_for": [r for r in latest],
            "per_rank": [
                {"rank": r, "wait_seconds": round(waits[r], 6), "arrived_before_seconds": (last - arrivals[r]) / 1e9}
                for r in waited
            ],
        },
    )


RULES = (slow_rank, slow_storage, rendezvous_wait)


def startup_findings(job: Job, startup: Startup | None, limits: Thresholds) -> list[Finding]:
    if startup is None:
        return []
    return [finding for rule in RULES if (finding := rule(job, startup, limits)) is not None]
