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
from collections.abc import Iterable
from dataclasses import dataclass

from .. import semconv as sc
from ..startup_split import READ_SPANS, STARTUP_PHASES, Interval, PhaseSpan, length, split, union
from . import summarized
from .attrs import opt_int_attr
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


def node_startup(host: str | None, ranks: list[RankLoad]) -> NodeStartup:
    residency = checkpoint_residency(ranks)
    if residency is not None:
        _, total, cold = residency
        outcome: str | None = WARM if cold == 0 else COLD if cold >= total else PARTLY_COLD
        storage: int | None = cold
    else:  # no file spans with residency: the loads' own count (each rank's files at its first open), the most of any
        colds = [opt_int_attr(s.attributes, sc.IO_CHECKPOINT_COLD_BYTES) for r in ranks for s in _loads(r)]
        storage = max((c for c in colds if c is not None), default=None)
        outcome = None
    reading = union(
        [(span.start_ns, span.end_ns) for r in ranks for span in r.spans if span.name in READ_SPANS | sc.FILE_SPANS]
        + summarized.reading(ranks)
    )
    seconds = length(reading) / 1e9 if reading else None
    rate = storage / seconds if storage and seconds else None
    return NodeStartup(
        host=host,
        ranks=[r.rank for r in ranks],
        checkpoint=outcome,
        storage_bytes=storage,
        reading_seconds=round(seconds, 6) if seconds is not None else None,
        storage_bytes_per_second=round(rate, 1) if rate is not None else None,
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
    """Whether the rank died before it was ready: the launcher's witness ended its startup span at its death."""
    return any(
        s.name == sc.SPAN_STARTUP and s.attributes.get(sc.EXIT_SOURCE) == sc.EXIT_SOURCE_LAUNCHER for s in rank.spans
    )


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


def slow_rank(job: Job, startup: Startup, limits: Thresholds) -> Finding | None:
    """Ranks that ``slow_phase`` names a phase for, among the ranks ``judged`` (the others are never judged, nor
    counted among the others)."""
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
        slow.append((rank, median, phase, rank.phases[phase] - theirs, theirs))
    if not slow:
        return None
    sentences = [
        f"{_name(r.rank)} took {r.seconds:.2f} s to start, {r.seconds - m:.2f} s behind the median of the other ranks "
        f"({m:.2f} s); its {phase} phase made the difference: {r.phases[phase]:.2f} s against their {theirs:.2f} s"
        + (f" ({r.phases[phase] / theirs:.1f}x)" if theirs > 0 else "")
        + f", {more:.2f} s more"
        for r, m, phase, more, theirs in slow
    ]
    return job.finding(
        sc.FINDING_SLOW_RANK,
        WARNING,
        [r.rank for r, *_ in slow],
        0,
        "; ".join(sentences) + ". The job starts when its slowest rank is ready.",
        {
            "ratio": limits.slow_rank_ratio,
            "seconds": limits.slow_rank_seconds,
            "per_rank": [
                {
                    "rank": r.rank,
                    "host": r.host,
                    "startup_seconds": r.seconds,
                    "others_median_seconds": round(m, 6),
                    "phase": phase,
                    "phase_seconds": r.phases[phase],
                    "others_phase_seconds": round(theirs, 6),
                    "phase_difference_seconds": round(more, 6),
                }
                for r, m, phase, more, theirs in slow
            ],
        },
    )


def rate_text(rate: float) -> str:
    return f"{human_bytes(round(rate))}/s"


def slow_storage(job: Job, startup: Startup, limits: Thresholds) -> Finding | None:
    """Nodes reading from storage under ``slow_storage_ratio`` × the job's median node (nodes that read from it; not a
    node with a partial rank, whose reading may be among the spans its file lost)."""
    lost = {rank.host for rank in job.ranks if rank.partial}
    measured = [n for n in startup.nodes if n.storage_bytes_per_second is not None and n.host not in lost]
    median = _median(n.storage_bytes_per_second or 0.0 for n in measured)
    if len(measured) < 2 or not median:
        return None
    slow = [n for n in measured if (n.storage_bytes_per_second or 0.0) < limits.slow_storage_ratio * median]
    if not slow:
        return None
    sentences = [
        f"{n.host or 'an unnamed host'} read {human_bytes(n.storage_bytes or 0)} of checkpoint from storage in "
        f"{n.reading_seconds:.2f} s, {rate_text(n.storage_bytes_per_second or 0.0)}"
        for n in slow
    ]
    return job.finding(
        sc.FINDING_SLOW_STORAGE,
        WARNING,
        [r for n in slow for r in n.ranks],
        sum(n.storage_bytes or 0 for n in slow),
        "; ".join(sentences)
        + f": under {limits.slow_storage_ratio:g}x the job's median node ({rate_text(median)}). Its ranks waited on"
        " storage.",
        {
            "ratio": limits.slow_storage_ratio,
            "median_bytes_per_second": round(median, 1),
            "per_node": [
                {
                    "host": n.host,
                    "ranks": n.ranks,
                    "storage_bytes": n.storage_bytes,
                    "reading_seconds": n.reading_seconds,
                    "storage_bytes_per_second": n.storage_bytes_per_second,
                }
                for n in slow
            ],
        },
    )


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
    whom = ", ".join(_name(r) for r in latest)
    sentences = [
        f"{_name(r)} waited {waits[r]:.2f} s in torch.init_process_group, arriving {(last - arrivals[r]) / 1e9:.2f} s "
        f"before {whom}"
        for r in waited
    ]
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
