"""``loadtrace top``'s rows → the lines people read: a header, then each node's ranks as a table.

Past ``FULL_VIEW_RANKS`` ranks the screen would scroll, so it shows the ranks that need attention first (dead,
signalled, raised, or marked: behind, stuck, near or heading for their memory limit, the slowest), one row each up to
``ATTENTION_ROWS`` (grouped as the report groups its outliers: a whole node's alike ranks share one row, as do
``alike.MIN_GROUP`` or more alike ones), then the rest summed by status and node: one row per status and node while that
fits ``SUMMARY_ROWS``, else one per status with its nodes as ranges. ``--once --format json`` lists every rank whatever
the screen shows. Pure text, the same lines whether they go to a terminal (cli/top.py draws them with curses) or to
stdout (``--once``); the JSON comes from the same rows (``to_json``)."""

from __future__ import annotations

import time
from collections import Counter
from itertools import groupby

from loadtrace import semconv as sc
from loadtrace.analysis import alike
from loadtrace.analysis.hosts import host_ranges, natural_key
from loadtrace.analysis.top import TopRow, needs_attention
from loadtrace.cli.render import size, table

TOP_COLUMNS = (
    *("rank", "pid", "status", "phase", "files", "read", "of", "%", "rate/s", "eta s", "idle s"),
    *("rss", "peak", "limit", "marks"),
)
PHASE_WIDTH = 32
FULL_VIEW_RANKS = 16  # up to this many ranks, every one has its row
ATTENTION_ROWS = 20
SUMMARY_ROWS = 12
SUMMARY_COLUMNS = (
    "status",
    "ranks",
    "nodes",
    "files",
    "read",
    "of",
    "%",
    "rate/s",
    "max eta s",
    "max idle s",
    "max rss",
)


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


def job_of(item: TopRow) -> str:
    """A rank's job as the ``job`` column shows it: its id, and ``@ATTEMPT`` for a restart of it."""
    job = item.job_id or "?"
    return f"{job}@{item.attempt}" if item.attempt else job


def top_lines(
    rows: list[TopRow], where: str, now_ns: int, live: bool = True, foreign: int = 0, elsewhere: str | None = None
) -> list[str]:
    """The whole screen: a header line, then one table per node (its ranks by job and rank); a ``job`` column first
    where the folder holds several jobs (a rank number alone would not say whose it is); ``foreign``: state files of
    other users skipped, said under the header; ``elsewhere``: where jobs sending spans only over OTLP keep their
    state (``statefile.state_root``), said when there is nothing here."""
    clock = time.strftime("%H:%M:%S", time.localtime(now_ns / 1e9))
    nodes = len({item.host for item in rows})
    jobs = len({job_of(item) for item in rows})
    loading = sum(item.status == "loading" for item in rows)
    of_jobs = f" of {jobs} jobs" if jobs > 1 else ""
    ranks = f"{len(rows)} rank{'s' * (len(rows) != 1)}{of_jobs} on {nodes} node{'s' * (nodes != 1)}"
    header = f"loadtrace top  {where}  {clock}  {ranks}, {loading} loading"
    lines = [header + ("  (q: quit)" if live else ""), ""]
    if foreign:
        files = f"{foreign:,} state file{'s' * (foreign != 1)}"
        lines[1:1] = [f"{files} of other users skipped here: top reads and probes only yours"]
    if not rows:
        lines.append("no rank has begun a load here yet (state files: *.state under this folder)")
        if elsewhere:
            lines.append(f"a job whose spans go only over OTLP keeps its ranks' state in {elsewhere}/<job id>")
    if len(rows) > FULL_VIEW_RANKS:
        return lines + _at_scale(rows, jobs > 1)
    columns = ("job", *TOP_COLUMNS) if jobs > 1 else TOP_COLUMNS
    for host, members in groupby(rows, key=lambda item: item.host):
        lines.append(f"node {host or '?'}")
        text = table(columns, [[job_of(item)] * (jobs > 1) + top_row(item) for item in members], left=4 + (jobs > 1))
        lines += ["  " + line for line in text.splitlines()]
        lines.append("")
    return lines


def _at_scale(rows: list[TopRow], several_jobs: bool = False) -> list[str]:
    """The ranks that need attention, one row each (the worst first), then the others summed by status and node."""
    flagged = sorted((item for item in rows if needs_attention(item)), key=_urgency)
    others = [item for item in rows if not needs_attention(item)]
    lines = []
    if flagged:
        sets = attention_sets(flagged, rows)
        shown = sets[:ATTENTION_ROWS]
        lines.append(f"need attention: {len(flagged)} rank{'s' * (len(flagged) != 1)}")
        if any(len(members) > 1 for members, _ in shown):
            lines.append("  (alike ranks share a row: the figures of its median rank by bytes read)")
        columns = ("node", "job", *TOP_COLUMNS) if several_jobs else ("node", *TOP_COLUMNS)
        found = []
        for members, hosts in shown:
            row = attention_row(members, hosts)
            found.append([row[0], *[job_of(members[0])] * several_jobs, *row[1:]])
        text = table(columns, found, left=5 + several_jobs)
        lines += ["  " + line for line in text.splitlines()]
        if len(sets) > len(shown):
            left = sum(len(members) for members, _ in sets[len(shown) :])
            lines.append(f"  ... and {left} more (--once --format json lists every rank)")
        lines.append("")
    if others:
        by_node = _summed(others, by_node=True)
        groups = by_node if len(by_node) <= SUMMARY_ROWS else _summed(others, by_node=False)
        lines.append(f"the other {len(others)} rank{'s' * (len(others) != 1)}, by status and node:")
        lines += ["  " + line for line in table(SUMMARY_COLUMNS, groups, left=3).splitlines()]
    return lines


def attention_sets(flagged: list[TopRow], rows: list[TopRow]) -> list[tuple[list[TopRow], list[str] | None]]:
    """The flagged ranks (most urgent first) as the report groups its outliers (``alike.outlier_groups``): those with
    the same status and marks and alike bytes read share a row from ``alike.MIN_GROUP`` on, the ranks of a whole node
    from two on (with the node's hosts); every other one a row of its own."""
    per_host = Counter(item.host for item in rows)
    groups = alike.outlier_groups(
        flagged,
        lambda item: (item.status, tuple(m for m in item.marks if m != sc.MARK_SLOWEST), bool(item.exception)),
        lambda item: float(item.read_bytes) + 1.0,
        host=lambda item: item.host,
        per_host=dict(per_host),
    )
    sets: list[tuple[list[TopRow], list[str] | None]] = []
    for group in groups:
        if group.hosts is not None or len(group.members) >= alike.MIN_GROUP:
            sets.append((group.members, group.hosts))
        else:
            sets += [([item], None) for item in group.members]
    return sorted(sets, key=lambda found: min(_urgency(item) for item in found[0]))


def attention_row(members: list[TopRow], hosts: list[str] | None) -> list[str]:
    """A flagged rank's row; alike ones share the row of their median rank by bytes read, its rank cell their ranges
    and count, its node cell the whole nodes (``node077``) or their hosts as ranges."""
    if len(members) == 1:
        return [members[0].host or "?", *top_row(members[0])]
    _, median, _ = alike.spread(members, lambda item: item.read_bytes)
    numbers = [item.rank for item in members if item.rank is not None]
    where = alike.where(hosts).removeprefix("nodes ") if hosts else host_ranges(item.host for item in members)
    return [where or "?", f"{alike.numbers_text(numbers)} ({len(members)})", "-", *top_row(median)[2:]]


# Which flagged rank comes first: the dead and dying, then memory, then the stalled, then the slow.
_ORDER = ("dead", "signalled", "oom_ahead", "near_limit", "stuck", "behind", "slowest")


def _urgency(item: TopRow) -> tuple[int, tuple[tuple[int, int | str], ...], int]:
    """The first of ``_ORDER`` the rank is (a rank that only raised comes after them), then node and rank."""
    first = min((_ORDER.index(word) for word in (item.status, *item.marks) if word in _ORDER), default=len(_ORDER))
    return first, natural_key(item.host), item.rank if item.rank is not None else 1 << 30


def _summed(rows: list[TopRow], by_node: bool) -> list[list[str]]:
    """One table row per status (and node): ranks, files, bytes read of the bytes expected, summed rates, the worst
    ETA, idle time and RSS."""
    groups: dict[tuple[str, str | None], list[TopRow]] = {}
    for item in rows:  # in node order already
        groups.setdefault((item.status, item.host if by_node else None), []).append(item)
    result = []
    for (status, _), members in sorted(groups.items(), key=lambda group: _STATUS_ORDER.get(group[0][0], 9)):
        read = sum(item.read_bytes for item in members)
        expected = [item.expected_bytes for item in members]
        of = sum(e for e in expected if e is not None) if all(e is not None for e in expected) else None
        rates = [item.read_rate_bytes_per_s for item in members if item.read_rate_bytes_per_s is not None]
        result.append(
            [
                status,
                str(len(members)),
                host_ranges(item.host for item in members) or "?",
                str(sum(item.files_opened for item in members)),
                size(read),
                "?" if of is None else size(of),
                "-" if not of else f"{100 * read / of:.0f}",
                size(round(sum(rates))) if rates else "-",
                _seconds(max((i.eta_seconds for i in members if i.eta_seconds is not None), default=None)),
                _seconds(
                    max(
                        (i.seconds_since_progress for i in members if i.seconds_since_progress is not None),
                        default=None,
                    )
                ),
                size(max((item.rss_bytes for item in members if item.rss_bytes is not None), default=None)),
            ]
        )
    return result


_STATUS_ORDER = {"loading": 0, "idle": 1, "exited": 2}
