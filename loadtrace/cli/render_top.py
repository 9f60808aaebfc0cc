"""``loadtrace top``'s rows → the lines people read: a header, then each node's ranks as a table.

Pure text, the same lines whether they go to a terminal (cli/top.py draws them with curses) or to stdout
(``--once``); the JSON comes from the same rows (``to_json``).
"""

from __future__ import annotations

import time
from itertools import groupby

from loadtrace.analysis.top import TopRow
from loadtrace.cli.render import size, table

TOP_COLUMNS = (
    *("rank", "pid", "status", "phase", "files", "read", "of", "%", "rate/s", "eta s", "idle s"),
    *("rss", "peak", "limit", "marks"),
)
PHASE_WIDTH = 32


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _marks(item: TopRow) -> str:
    words = []
    for name in item.marks:
        if name == "oom_ahead" and item.oom_in_seconds is not None:
            words.append(f"oom_ahead in {item.oom_in_seconds:.0f}s")
        else:
            words.append(name)
    if item.exception and item.status in ("exited", "dead", "idle"):
        words.append(item.exception[:60])
    return ", ".join(words)


def _phase(item: TopRow) -> str:
    phase = item.phase or ("-" if item.status != "loading" else item.load or "-")
    return phase if len(phase) <= PHASE_WIDTH else "…" + phase[-(PHASE_WIDTH - 1) :]


def top_row(item: TopRow) -> list[str]:
    return [
        "?" if item.rank is None else str(item.rank),
        str(item.pid),
        item.status,
        _phase(item),
        str(item.files_opened),
        size(item.read_bytes),
        "?" if item.expected_bytes is None else size(item.expected_bytes),
        "-" if item.percent is None else f"{item.percent:.0f}",
        "-" if item.read_rate_bytes_per_s is None else size(round(item.read_rate_bytes_per_s)),
        _seconds(item.eta_seconds),
        _seconds(item.seconds_since_progress),
        size(item.rss_bytes),
        size(item.peak_rss_bytes),
        size(item.limit_bytes),
        _marks(item),
    ]


def top_lines(rows: list[TopRow], where: str, now_ns: int, live: bool = True) -> list[str]:
    """The whole screen: a header line, then one table per node (its ranks by job and rank)."""
    clock = time.strftime("%H:%M:%S", time.localtime(now_ns / 1e9))
    nodes = len({item.host for item in rows})
    loading = sum(item.status == "loading" for item in rows)
    ranks = f"{len(rows)} rank{'s' * (len(rows) != 1)} on {nodes} node{'s' * (nodes != 1)}"
    header = f"loadtrace top  {where}  {clock}  {ranks}, {loading} loading"
    lines = [header + ("  (q: quit)" if live else ""), ""]
    if not rows:
        lines.append("no rank has begun a load here yet (state files: *.state under this folder)")
    for host, members in groupby(rows, key=lambda item: item.host):
        lines.append(f"node {host or '?'}")
        text = table(TOP_COLUMNS, [top_row(item) for item in members], left=4)
        lines += ["  " + line for line in text.splitlines()]
        lines.append("")
    return lines
