"""A job's timeline (``loadtrace.analysis.timeline``) → one self-contained HTML page, or Chrome trace-event JSON.

The page is ``timeline.html`` beside this module with the timeline's data inlined as JSON: its script and style are
inline and it loads nothing (no network, no fonts, no images), so it opens from a file, offline, or as a CI artifact.
Lanes are drawn on a canvas, only the rows in view, so a 512-rank job stays quick; the rank labels are DOM elements.

The Chrome trace-event JSON (the format ``torch.profiler`` exports; Perfetto and ``chrome://tracing`` open it) has a
process per node and a thread per rank: each span a complete (``X``) event with its attributes as ``args``, times in
microseconds from the job's start. Spans of one rank that overlap without nesting (files read on several threads) go
to extra threads of that rank, since the format needs the events of one thread to nest.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from importlib import resources
from typing import Any

from loadtrace.analysis.model import to_json
from loadtrace.analysis.timeline import FAILED, INCOMPLETE, KILLED, SLOW, Bar, Lane, Timeline
from loadtrace.analysis.units import human_bytes

PAGE = "timeline.html"
DATA_MARK = "/*TIMELINE_DATA*/"
STATUS_CODES = {"ok": 0, "error": 1, "unfinished": 2}  # a bar's status, as the page's data spells it


def lane_detail(lane: Lane) -> str:
    """One line on how a rank ended or why it stands out; empty for a rank that finished in time."""
    during = f" during {lane.during}" if lane.during else ""
    if lane.state == KILLED:
        return f"killed: {lane.exit.describe()}{during}"
    if lane.state == INCOMPLETE:
        return f"incomplete: died{during}, how it ended is unknown"
    if lane.state == FAILED:
        return f"failed: {lane.failed}" if lane.failed else f"failed: exit {lane.exit.code}"
    if lane.state == SLOW:
        return f"slow: load {lane.load_seconds:.3f} s, {lane.slow_factor:g}x the median"
    return ""


def job_title(timeline: Timeline) -> str:
    title = f"job {timeline.job_id or timeline.trace_id}"
    if timeline.attempt:
        title += f" attempt {timeline.attempt}"
    return title + (f" run {timeline.run + 1}" if timeline.run else "")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float as text: JSON has no such numbers (a span may carry one)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return value


def _bar(bar: Bar, names: dict[str, int]) -> list[Any]:
    return [names.setdefault(bar.name, len(names)), bar.start_ns, bar.end_ns, bar.row, bar.bytes, bar.attributes]


def page_data(timeline: Timeline) -> dict[str, Any]:
    """What the page draws: compact lists (a bar is [name index, start, end, row, bytes, attributes], a lane's bars
    by status), so a 512-rank job's page stays a few megabytes; the groups of alike ranks it collapses by default."""
    names: dict[str, int] = {}
    nodes = []
    for node in timeline.nodes:
        lanes = []
        for lane in node.lanes:
            lanes.append(
                {
                    "rank": lane.rank,
                    "label": lane.label,
                    "host": lane.host,
                    "state": lane.state,
                    "detail": lane_detail(lane),
                    "load_seconds": lane.load_seconds,
                    "death_ns": lane.death_ns,
                    "findings": lane.findings,
                    "warnings": lane.warnings,
                    "rows": lane.rows,
                    "bars": [_bar(bar, names) + [STATUS_CODES[bar.status]] for bar in lane.bars],
                    "group": lane.group,
                }
            )
        nodes.append({"host": node.host, "lanes": lanes})
    findings = [
        {
            "severity": f.severity,
            "kind": f.kind,
            "ranks": f.ranks,
            "bytes": f.bytes,
            "bytes_text": human_bytes(f.bytes),
            "detail": f.detail,
        }
        for f in timeline.findings
    ]
    return {
        "title": job_title(timeline),
        "trace_id": timeline.trace_id,
        "job_id": timeline.job_id,
        "attempt": timeline.attempt,
        "start_time": timeline.start_time,
        "duration_ns": timeline.duration_ns,
        "world_size": timeline.world_size,
        "missing_ranks": timeline.missing_ranks,
        "names": list(names),
        "nodes": nodes,
        "findings": findings,
        "groups": to_json(timeline.groups),
    }


def _json(data: Any) -> str:
    """Compact JSON; NaN and infinite numbers (rare: a span may carry one) as text, where a walk of every attribute
    first would cost a second at 4,096 ranks."""
    try:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def html_page(timeline: Timeline) -> str:
    """The page: the template with the data inlined (``<`` escaped, so no text in it can end the script)."""
    template = resources.files("loadtrace.cli").joinpath(PAGE).read_text(encoding="utf-8")
    data = _json(page_data(timeline))
    data = data.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return template.replace(DATA_MARK, data, 1)


# Chrome trace-event JSON --------------------------------------------------------------------------------------------


def nested_tracks(bars: list[Bar]) -> list[int]:
    """A track per bar, such that the bars of one track nest (or follow one another): the format's rule for a thread."""
    tracks: list[list[Bar]] = []  # each track's open bars, outermost first
    chosen = []
    for bar in sorted(bars, key=lambda b: (b.start_ns, -b.end_ns)):
        for number, open_bars in enumerate(tracks):
            while open_bars and open_bars[-1].end_ns <= bar.start_ns:
                open_bars.pop()
            if not open_bars or bar.end_ns <= open_bars[-1].end_ns:
                open_bars.append(bar)
                chosen.append((bar, number))
                break
        else:
            tracks.append([bar])
            chosen.append((bar, len(tracks) - 1))
    track_of = {id(bar): number for bar, number in chosen}
    return [track_of[id(bar)] for bar in bars]


def _micros(ns: int) -> float:
    return ns / 1000


def _lane_events(lane: Lane, pid: int, position: int, extra_tids: Iterator[int]) -> list[dict[str, Any]]:
    """One rank's thread names, bars and death as trace events; overlapping bars go on extra threads, numbered by
    ``extra_tids`` (one count for the whole trace)."""
    events: list[dict[str, Any]] = []
    detail = lane_detail(lane)
    name = lane.label + (f" ({detail})" if detail else "")
    base = lane.rank if lane.rank is not None else 900_000 + position
    tracks = nested_tracks(lane.bars)
    tids = {0: base}
    for track in sorted(set(tracks) - {0}):
        tids[track] = next(extra_tids)
    for track, tid in tids.items():
        label = name if track == 0 else f"{lane.label} (overlapping {track})"
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": base}})
    for bar, track in zip(lane.bars, tracks, strict=True):
        args: dict[str, Any] = finite(bar.attributes)
        if bar.bytes is not None:
            args["bytes"] = bar.bytes
        args["status"] = bar.status
        events.append(
            {
                "name": bar.name,
                "cat": "loadtrace",
                "ph": "X",
                "pid": pid,
                "tid": tids[track],
                "ts": _micros(bar.start_ns),
                "dur": _micros(bar.end_ns - bar.start_ns),
                "args": args,
            }
        )
    if lane.death_ns is not None:
        events.append(
            {
                "name": detail or "died",
                "cat": "loadtrace",
                "ph": "i",
                "s": "t",
                "pid": pid,
                "tid": base,
                "ts": _micros(lane.death_ns),
                "args": {"rank": lane.rank, "exit": to_json(lane.exit)},
            }
        )
    return events


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    """The timeline as a Chrome trace-event JSON object (``{"traceEvents": [...], ...}``)."""
    events: list[dict[str, Any]] = []
    extra_tids = itertools.count(1_000_000)  # threads beyond a rank's first: clear of any rank number
    for pid, node in enumerate(timeline.nodes, start=1):
        host = node.host or "unknown host"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"node {host}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for position, lane in enumerate(node.lanes):
            events.extend(_lane_events(lane, pid, position, extra_tids))
    for finding in timeline.findings:
        events.append(
            {
                "name": f"{finding.severity} {finding.kind}",
                "cat": "finding",
                "ph": "i",
                "s": "g",
                "pid": 0,
                "tid": 0,
                "ts": 0,
                "args": {"ranks": finding.ranks, "bytes": finding.bytes, "detail": finding.detail},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "job": job_title(timeline),
            "trace_id": timeline.trace_id,
            "start_time": timeline.start_time,
            "world_size": timeline.world_size,
            "missing_ranks": timeline.missing_ranks,
        },
    }
