"""One job's spans → a timeline: a lane per rank, grouped by node, each span a bar (``loadtrace timeline``).

Generic over span names: every span a rank emitted becomes a bar, whatever its name (phases added later, such as
startup spans, appear without a change here), except the job's root span (the axis' zero) and the launcher's witness
span (the mark of a rank's death). A bar's bytes are the first of ``BYTES_KEYS`` its span carries. A rank killed with a
load open, whose load span never ended, gets a bar for that load from its state file or the witness: from the load's
start to its last sign of life, with the totals it had then. Times are nanoseconds from the job's start.

Nodes come in natural order (node2 before node10). Ranks that would draw alike (the same state, the same kinds of
finding, the same spans in the same order) form a ``LaneGroup`` once there are ``MIN_GROUP`` of them: the page shows
such a group as one lane (its median rank's, by load time) until asked for every rank, and a rank that stands out
(slow, failed, killed, or a finding of its own) keeps its lane under its node. The data keeps every lane.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc
from .attrs import META, by_device, opt_int_attr
from .findings import find
from .hosts import natural_key
from .model import WARNING, Exit, Finding, LastState, RankLoad, to_json
from .ranks import STATUS_ERROR, Job
from .sources import rfc3339_nanos

# The bytes a bar stands for: the first of these its span carries (a load's or file's reads, a conversion's output,
# a materialisation's tensors), else the real bytes it materialised per device.
BYTES_KEYS = (sc.READ_BYTES, sc.CONVERT_BYTES, sc.MATERIALIZE_BYTES)
# A rank is slow when its load took this many times the median load of the job's ranks that finished.
SLOW_FACTOR = 1.5
MIN_GROUP = 8  # fewer alike ranks keep their own lanes

REBUILT = "rebuilt"  # the id of a rebuilt load among span ids (hex, never this)
OK, ERROR, UNFINISHED = "ok", "error", "unfinished"  # a bar's status; unfinished: rebuilt from a dead rank's state
KILLED, FAILED, INCOMPLETE, SLOW = "killed", "failed", "incomplete", "slow"  # a lane's state, besides OK


@dataclass
class Bar:
    """One span of a rank: its name, times from the job's start, the row it sits in, its bytes and attributes."""

    name: str
    start_ns: int
    end_ns: int
    row: int  # 0 is the lane's top row; a span sits below its parent, overlapping spans side by side in rows
    bytes: int | None
    status: str  # ok | error | unfinished
    attributes: dict[str, Any]


@dataclass
class Lane:
    """One rank: its state (``ok``, ``slow``, ``incomplete``, ``failed``, ``killed``), what ended it, its bars."""

    rank: int | None
    label: str
    host: str | None
    state: str
    exit: Exit
    during: str | None  # the span a rank that died had open
    failed: str | None  # the exception its load raised
    load_seconds: float | None
    slow_factor: float | None  # its load time over the median of the job's finished ranks
    death_ns: int | None  # when a rank that died was last seen alive
    findings: list[str]  # kinds of the findings that name this rank
    warnings: list[str]  # those of them that are warnings: what marks the lane (an info finding is no alarm)
    rows: int
    bars: list[Bar]
    group: int | None = None  # its LaneGroup's index in Timeline.groups, when it is one of many alike ranks


@dataclass
class LaneGroup:
    """Ranks that draw alike: shown as one lane, its ``shown`` rank's (the median by load time)."""

    ranks: list[int | None]
    hosts: int
    state: str
    findings: list[str]
    shown: int | None


@dataclass
class Node:
    host: str | None
    lanes: list[Lane]


@dataclass
class Timeline:
    trace_id: str
    job_id: str | None
    attempt: int | None
    run: int
    start_time: str | None
    start_unix_nano: int
    duration_ns: int
    world_size: int | None
    missing_ranks: list[int]
    nodes: list[Node]
    findings: list[Finding] = field(default_factory=list)
    groups: list[LaneGroup] = field(default_factory=list)

    @property
    def lanes(self) -> list[Lane]:
        return [lane for node in self.nodes for lane in node.lanes]


def bar_bytes(attributes: dict[str, Any]) -> int | None:
    for key in BYTES_KEYS:
        if (value := opt_int_attr(attributes, key)) is not None:
            return value
    made = by_device(attributes, sc.MATERIALIZED_BYTES_PREFIX)
    return sum(size for device, size in made.items() if device != META) if made else None


def pack(bars: list[Bar], parents: dict[int, int | None]) -> int:
    """Give each bar (in start order) the first row below its parent's where it overlaps nothing; the rows used."""
    row_ends: list[int] = []
    for index, bar in enumerate(bars):
        parent = parents[index]
        row = bars[parent].row + 1 if parent is not None else 0
        while row < len(row_ends) and row_ends[row] > bar.start_ns:
            row += 1
        if row == len(row_ends):
            row_ends.append(0)
        row_ends[row] = max(row_ends[row], bar.end_ns)
        bar.row = row
    return len(row_ends)


def rebuilt_load(rank: RankLoad, zero: int) -> Bar | None:
    """The load a rank died in, from its last state, when no span of its own covers it."""
    last = rank.last_state
    if not rank.incomplete or not isinstance(last, LastState) or not last.load_start_unix_nano:
        return None
    start = last.load_start_unix_nano
    if any(s.name in sc.LOAD_SPANS and s.start_ns <= start <= s.end_ns for s in rank.spans):
        return None
    attributes = {key: value for key, value in to_json(last).items() if value not in (None, {}, "")}
    name = last.load or sc.SPAN_LOAD
    return Bar(name, start - zero, max(start, last.time_unix_nano) - zero, 0, last.read_bytes, UNFINISHED, attributes)


def lane_of(
    rank: RankLoad, zero: int, kinds: dict[int, list[str]], warned: dict[int, list[str]], median: float | None
) -> Lane:
    """The rank's lane; ``kinds``: the kinds of the findings that name each rank, ``warned``: of its warnings."""
    entries = _entries(rank, zero)
    entries.sort(key=lambda entry: (entry[0].start_ns, -entry[0].end_ns, entry[1]))
    index = {span_id: i for i, (_, span_id, _) in enumerate(entries) if span_id}
    bars = [bar for bar, _, _ in entries]
    parents = {i: index.get(parent) for i, (_, _, parent) in enumerate(entries)}
    last = rank.last_state
    slow = round(rank.load_seconds / median, 2) if median and rank.load_seconds and not rank.incomplete else None
    return Lane(
        rank=rank.rank,
        label=rank.label,
        host=rank.host,
        state=_lane_state(rank, slow),
        exit=rank.exit,
        during=last.during if isinstance(last, LastState) else None,
        failed=rank.failed,
        load_seconds=rank.load_seconds,
        slow_factor=slow,
        death_ns=_death(rank, bars, zero),
        findings=kinds.get(rank.rank, []) if rank.rank is not None else [],
        warnings=warned.get(rank.rank, []) if rank.rank is not None else [],
        rows=pack(bars, parents),
        bars=bars,
    )


def _entries(rank: RankLoad, zero: int) -> list[tuple[Bar, str, str]]:
    """(bar, its span id, its parent's) for each of the rank's spans, and its rebuilt load: a rebuilt load has no id
    of its own, and "" never names a span."""
    spans = [s for s in rank.spans if s.name not in (sc.SPAN_JOB, sc.SPAN_RANK_EXIT)]
    entries = [
        (
            Bar(
                s.name,
                s.start_ns - zero,
                max(s.start_ns, s.end_ns) - zero,
                0,
                bar_bytes(s.attributes),
                ERROR if s.status_code == STATUS_ERROR else OK,
                s.attributes,
            ),
            s.span_id,
            s.parent_span_id,
        )
        for s in spans
    ]
    if (rebuilt := rebuilt_load(rank, zero)) is not None:
        ids = {span_id for _, span_id, _ in entries}
        # Its spans that began inside it and hang from nothing in the lane hang from it.
        entries = [
            (
                bar,
                span_id,
                REBUILT if parent not in ids and rebuilt.start_ns <= bar.start_ns <= rebuilt.end_ns else parent,
            )
            for bar, span_id, parent in entries
        ]
        entries.append((rebuilt, REBUILT, ""))
    return entries


def _death(rank: RankLoad, bars: list[Bar], zero: int) -> int | None:
    """When a rank that died (or failed) did, relative to ``zero``: its last state's time, else its last bar's end."""
    if not (rank.incomplete or rank.exit.signal is not None or rank.exit.code not in (None, 0)):
        return None
    if isinstance(rank.last_state, LastState):
        return rank.last_state.time_unix_nano - zero
    return max(bar.end_ns for bar in bars) if bars else None


def _lane_state(rank: RankLoad, slow: float | None) -> str:
    if rank.incomplete or rank.exit.signal is not None:
        return KILLED if rank.exit.signal is not None else INCOMPLETE  # incomplete: died, how is unknown
    if rank.failed is not None or rank.exit.code not in (None, 0):
        return FAILED
    return SLOW if slow is not None and slow >= SLOW_FACTOR else OK


def timeline(job: Job) -> Timeline:
    """The job's timeline: nodes in natural host order, lanes in rank order, the job's findings, alike ranks' groups."""
    findings = find([job])
    finished = [r.load_seconds for r in job.ranks if r.load_seconds and not r.incomplete and r.failed is None]
    median = statistics.median(finished) if len(finished) >= 2 else None
    zero = job.start_ns
    kinds: dict[int, list[str]] = {}  # one pass: asking each finding's rank list for each rank is quadratic
    warned: dict[int, list[str]] = {}
    for finding in findings:
        for number in finding.ranks:
            kinds.setdefault(number, []).append(finding.kind)
            if finding.severity == WARNING:
                warned.setdefault(number, []).append(finding.kind)
    hosts: dict[str | None, list[Lane]] = {}
    for rank in job.ranks:
        hosts.setdefault(rank.host, []).append(lane_of(rank, zero, kinds, warned, median))
    nodes = [Node(host, lanes) for host, lanes in sorted(hosts.items(), key=lambda item: natural_key(item[0]))]
    ends = [bar.end_ns for node in nodes for lane in node.lanes for bar in lane.bars]
    ends += [lane.death_ns for node in nodes for lane in node.lanes if lane.death_ns is not None]
    present = {rank.rank for rank in job.ranks}
    world = job.world_size
    lanes = [lane for node in nodes for lane in node.lanes]
    return Timeline(
        trace_id=job.trace_id,
        job_id=job.job_id,
        attempt=job.attempt,
        run=job.run,
        start_time=rfc3339_nanos(zero),
        start_unix_nano=zero,
        duration_ns=max(ends, default=0),
        world_size=world,
        missing_ranks=[r for r in range(world) if r not in present] if world else [],
        nodes=nodes,
        findings=findings,
        groups=group_alike(lanes, findings),
    )


def group_alike(lanes: list[Lane], findings: list[Finding]) -> list[LaneGroup]:
    """Sets of at least ``MIN_GROUP`` lanes that draw alike, each lane told its set (``Lane.group``). A rank that a
    finding names alone (``slow_rank`` of one rank, say) stands out, and so does any lane not ``ok``."""
    alone = {f.ranks[0] for f in findings if len(f.ranks) == 1}
    sets: dict[tuple[object, ...], list[Lane]] = {}
    for lane in lanes:
        if lane.state != OK or lane.rank in alone:
            continue
        shape = (tuple(sorted(set(lane.findings))), tuple(bar.name for bar in lane.bars))
        sets.setdefault(shape, []).append(lane)
    groups: list[LaneGroup] = []
    for members in sets.values():
        if len(members) < MIN_GROUP:
            continue
        for lane in members:
            lane.group = len(groups)
        by_load = sorted(members, key=lambda lane: (lane.load_seconds or 0.0, lane.rank or 0))
        groups.append(
            LaneGroup(
                ranks=[lane.rank for lane in members],
                hosts=len({lane.host for lane in members}),
                state=members[0].state,
                findings=sorted(set(members[0].findings)),
                shown=by_load[len(by_load) // 2].rank,
            )
        )
    return groups
