"""A rank's startup split into phases: the one definition both halves use.

The rank computes it in-job when its ``loadtrace.startup`` span ends and carries it there
(``loadtrace.startup.phases``), so a store that holds the spans (ClickHouse, the fleet dashboard) reads the split from
one row per rank; ``loadtrace report`` computes it from the spans it reads. Both call ``split`` on the same spans.

The rank's time is split into phases by the spans open at each instant; where spans overlap (transformers 5.24 reads
files while it converts), the instant goes to the first phase of ``PRIORITY`` that is open, so the phases add up to the
startup exactly (docs/report.md, Startup, defines each phase by its spans). Standard library and ``semconv`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from . import semconv as sc

# Phases, in the order they are shown (and carried).
STARTUP_PHASES = (
    "open",
    "read",
    "convert",
    "materialize",
    "broadcast",
    "wait",
    "prepare",
    "imports",
    "construct",
    "other",
)
READ_SPANS = frozenset({sc.SPAN_SAFETENSORS_READ, sc.SPAN_SAFETENSORS_LOAD, sc.SPAN_LOAD_STATE_DICT})
PHASE_OF_SPAN = {
    sc.SPAN_INIT_PROCESS_GROUP: "wait",
    sc.SPAN_FSDP2_LOAD_FULL_STATE_DICT: "broadcast",
    sc.SPAN_GATHERED_PARAMETERS: "broadcast",
    sc.SPAN_ZERO3_LOAD: "broadcast",
    sc.SPAN_MATERIALIZE_MISSING: "materialize",
    sc.SPAN_TORCH_MATERIALIZE: "materialize",
    sc.SPAN_CONVERT: "convert",
    sc.SPAN_ACCELERATE_PREPARE: "prepare",
    sc.SPAN_DEEPSPEED_INITIALIZE: "prepare",
    sc.SPAN_ZERO_INIT: "prepare",
    **{name: "read" for name in READ_SPANS | sc.FILE_SPANS},
}
# Which phase an instant belongs to when several are open: waiting for others and moving weights between ranks first
# (they stall everything else), then the checkpoint's own work, then the strategy's preparation around it.
# Then the hooked libraries' imports (one may run inside a load: the model class's module), the model's construction.
PRIORITY = ("wait", "broadcast", "materialize", "open", "read", "convert", "imports", "construct", "prepare")
# The spans a split looks at: the in-job recorder keeps only these.
SPLIT_SPANS = frozenset(PHASE_OF_SPAN) | sc.LOAD_SPANS | {sc.SPAN_STARTUP}

Interval = tuple[int, int]


class PhaseSpan(NamedTuple):
    """What the split needs of a span; ids only need to be equal within one rank's spans."""

    name: str
    start_ns: int
    end_ns: int
    span_id: Any
    parent_span_id: Any
    attributes: Mapping[str, Any]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same instants."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(intervals: list[Interval]) -> int:
    return sum(end - start for start, end in intervals)


def overlap(a: list[Interval], b: list[Interval]) -> int:
    """Nanoseconds two disjoint sorted interval lists share."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, end - start)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The instants of the disjoint sorted intervals ``a`` that are in none of ``b`` (disjoint and sorted too)."""
    found: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > start:
                found.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if end > start:
            found.append((start, end))
    return found


def cast_intervals(spans: Iterable[PhaseSpan]) -> list[Interval]:
    """When the loads among ``spans`` cast or copied read tensors (``loadtrace.cast.intervals``): not reading."""
    found: list[Interval] = []
    for span in spans:
        if span.name in sc.LOAD_SPANS:
            found += pairs(span.attributes.get(sc.CAST_INTERVALS)) or []
    return union(found)


def clip(intervals: list[Interval], bounds: Interval) -> list[Interval]:
    return [(max(s, bounds[0]), min(e, bounds[1])) for s, e in intervals if min(e, bounds[1]) > max(s, bounds[0])]


def close_shortest_gaps(intervals: list[Interval], most: int) -> list[Interval]:
    """Disjoint sorted ``intervals`` as at most ``most``: the shortest gaps between them closed first, so the time they
    cover only grows, by as little as it can."""
    while len(intervals) > most:
        gaps = sorted(later[0] - earlier[1] for earlier, later in zip(intervals, intervals[1:], strict=False))
        closed = gaps[len(intervals) - most - 1]
        merged = [intervals[0]]
        for start, end in intervals[1:]:
            if start - merged[-1][1] <= closed:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        intervals = merged
    return intervals


def pairs(value: Any) -> list[Interval] | None:
    """A span attribute of flat (start, end) pairs in ns (``loadtrace.cast.intervals``,
    ``loadtrace.io.storage_read_intervals``); None when absent or not one."""
    if not isinstance(value, (list, tuple)) or len(value) % 2:
        return None
    times = [whole_int(t) for t in value]
    if any(t is None for t in times):
        return None
    found = [(int(times[i] or 0), int(times[i + 1] or 0)) for i in range(0, len(times), 2)]
    return found


def whole_int(value: Any) -> int | None:
    """An integer attribute (an integral float too, as JSON may give it); None when absent or not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def imports(start_ns: int, times: Any) -> list[Interval]:
    """``imports``: from the process's start to the end of the first hooked library's import, and every later import
    of a hooked library's module during the startup (``loadtrace.startup.imports``, pairs of start and end)."""
    if not isinstance(times, list) or len(times) < 2 or not all(type(t) is int for t in times):
        return []
    pairs = [(times[i], times[i + 1]) for i in range(0, len(times) - 1, 2)]
    return [(start_ns, pairs[0][1]), *pairs[1:]]


def phase_intervals(spans: Iterable[PhaseSpan]) -> dict[str, list[Interval]]:
    """Each phase's instants on one rank. ``open``: a file span's time before its first read span (only at tensor
    detail do reads have spans; at default detail a file's whole span is read time, its tensors read inside it, but
    for the instants its load cast or copied tensors, which are ``convert``)."""
    spans = list(spans)
    found: dict[str, list[Interval]] = {phase: [] for phase in PRIORITY}
    first_read: dict[Any, int] = {}
    for span in spans:
        if span.name in READ_SPANS and span.parent_span_id:
            first_read[span.parent_span_id] = min(first_read.get(span.parent_span_id, span.start_ns), span.start_ns)
    for span in spans:
        phase = PHASE_OF_SPAN.get(span.name)
        if phase is not None:
            found[phase].append((span.start_ns, span.end_ns))
        if span.name in sc.FILE_SPANS and span.span_id in first_read:
            found["open"].append((span.start_ns, first_read[span.span_id]))
        if span.name == sc.SPAN_STARTUP:
            found["imports"] += imports(span.start_ns, span.attributes.get(sc.STARTUP_IMPORTS))
        if span.name in sc.LOAD_SPANS and (opened := whole_int(span.attributes.get(sc.LOAD_FIRST_FILE_OPEN))):
            found["construct"].append((span.start_ns, min(opened, span.end_ns)))
    # A cast or device copy runs while its file is open: its instants are ``convert``, taken out of ``read``.
    casts = cast_intervals(spans)
    found["convert"] += casts
    merged = {phase: union(intervals) for phase, intervals in found.items()}
    merged["read"] = subtract(merged["read"], casts)
    return merged


def split(bounds: Interval, spans: Iterable[PhaseSpan]) -> dict[str, int]:
    """Nanoseconds of the startup ``bounds`` in each phase, ``STARTUP_PHASES`` order; ``other`` is what no phase's
    span covers, so the phases add up to the startup."""
    found: dict[str, int] = dict.fromkeys(STARTUP_PHASES, 0)
    covered: list[Interval] = []
    for phase, intervals in phase_intervals(spans).items():  # PRIORITY order
        mine = clip(intervals, bounds)
        found[phase] = length(mine) - overlap(mine, covered)
        covered = union(covered + mine)
    found["other"] = bounds[1] - bounds[0] - length(covered)
    return found
