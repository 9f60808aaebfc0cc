"""The report and comparison models → the text tables ``loadtrace report`` and ``loadtrace compare`` print.

The only place that formats for people; the JSON comes from ``loadtrace.analysis.model.to_json``, over the same
model, so the two say the same thing. docs/report.md shows the table's columns.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from loadtrace.analysis import alike
from loadtrace.analysis.alike import who
from loadtrace.analysis.jobs import GroupsReport, JobsReport
from loadtrace.analysis.model import (
    ComparedJob,
    Comparison,
    Finding,
    Forecast,
    JobSummary,
    NodeReads,
    NodeStartup,
    PartialFile,
    PhaseRow,
    RankLoad,
    Report,
    Startup,
)
from loadtrace.analysis.startup import MIN_RATE_SECONDS
from loadtrace.analysis.units import human_bytes

# "storage, all files": what the rank's process fetched from storage while it loaded, every file it read, library
# imports too (``/proc/self/io``; docs/report.md, Storage words); the ``Storage:`` line sums it per node.
RANK_COLUMNS = (
    *("rank", "host", "strategy", "load s", "files", "tensors", "read", "storage, all files", "conversions"),
    *("zeros/empty_like", "held at return", "peak RSS"),
)
# The columns of a table that fits WIDTH; ``--wide`` shows RANK_COLUMNS. Exact bytes are in ``--format json``.
NARROW_COLUMNS = tuple(name for name in RANK_COLUMNS if name not in ("files", "tensors", "conversions"))
FORECAST_COLUMNS = (
    *("rank", "fixed B", "+ once per job B", "+ own share B", "+ duplicated B", "+ not model B", "= peak RSS B"),
    "range B",
)
# The forecast's columns in human sizes, to fit WIDTH; ``--wide`` shows FORECAST_COLUMNS, in exact bytes.
FORECAST_NARROW_COLUMNS = tuple(name.removesuffix(" B") for name in FORECAST_COLUMNS)
COMPARE_COLUMNS = ("phase", "rank", "metric", "A", "B", "B - A", "B / A")
COMPARE_COUNTS = frozenset({"seconds", "count"})  # every other compare metric is bytes: a human size in the table
WIDTH = 120  # a line of prose (compare's "same:" names) wraps here


def table(headers: Sequence[str], rows: Sequence[Sequence[str] | str], left: int = 1) -> str:
    """Columns padded to their widest cell: the first ``left`` left-aligned, the rest (numbers) right-aligned. A row
    that is a string (a shared row's title) is a line as it is, outside the columns."""
    grid = [list(headers), *(row if isinstance(row, str) else list(row) for row in rows)]
    cells = [row for row in grid if not isinstance(row, str)]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]

    def pad(column: int, text: str) -> str:
        return text.ljust(widths[column]) if column < left else text.rjust(widths[column])

    return "\n".join(
        row if isinstance(row, str) else "  ".join(pad(column, text) for column, text in enumerate(row)).rstrip()
        for row in grid
    )


def number(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def signed(value: float | int | None) -> str:
    return "-" if value is None else ("+" if value > 0 else "") + number(value)


def devices(per_device: dict[str, int]) -> str:
    return " ".join(f"{device}={size:,}" for device, size in per_device.items()) or "-"


def size(value: int | None) -> str:
    """Bytes for a table cell: ``1.0 MB``, ``64 B``; ``-`` when unknown. Decimal units, as ``human_bytes``."""
    if value is None:
        return "-"
    for unit, scale in (("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def device_sizes(per_device: dict[str, int]) -> str:
    return " ".join(f"{device}={size(value)}" for device, value in per_device.items()) or "-"


_SIZE = re.compile(r"(\d) (?=(?:[kMGTP]?B|s)\b)")  # a size or seconds never broken from its number


def wrapped(text: str, indent: str, hanging: str | None = None) -> str:
    """Prose wrapped at WIDTH, every line indented (the second on by ``hanging`` where given); URLs, identifiers and
    sizes (``1.0 MB``) are never broken."""
    kept = _SIZE.sub("\\1\u00a0", text)
    lines = textwrap.fill(
        kept,
        width=WIDTH,
        initial_indent=indent,
        subsequent_indent=indent if hanging is None else hanging,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines.replace("\u00a0", " ")


# loadtrace report -------------------------------------------------------------------------------------------------


def report_table(report: Report, wide: bool = False, every_rank: bool = False) -> str:
    """Per job (one attempt of a trace): its header, a row per rank (the columns that fit WIDTH, or all with
    ``wide``), which ranks are missing, an ``I/O:`` note per node, its findings; then the forecast. Alike ranks and
    nodes share a row (``loadtrace.analysis.alike``) unless ``every_rank``."""
    columns = RANK_COLUMNS if wide else NARROW_COLUMNS
    keep = [RANK_COLUMNS.index(name) for name in columns]
    blocks = []
    for trace in report.traces:
        ranks, findings = of_job(report, trace)
        runs = sum(1 for other in report.traces if (other.trace_id, other.attempt) == (trace.trace_id, trace.attempt))
        # The launch id tells attempts of one trace apart; on a trace's only job it is noise (JSON keeps it).
        launch = trace.launch_id if sum(other.trace_id == trace.trace_id for other in report.traces) > 1 else None
        header = f"job {trace.job_id or '-'}  trace {trace.trace_id}"
        if trace.attempt is not None:
            header += f"  attempt {trace.attempt}" + (f" of launch {launch}" if launch else "")
        elif launch:
            header += f"  launch {launch}"
        if runs > 1:
            header += f"  run {trace.run + 1} of {runs} (the same ranks again, new pids)"
        model = size(trace.model_bytes) if trace.model_bytes > 0 else "unknown"
        header += f"  world size {number(trace.world_size)}  model {model}"
        missing = ""
        if trace.missing_ranks:
            present = (trace.world_size or 0) - len(trace.missing_ranks)
            listed = who(trace.missing_ranks).partition(" ")[2]
            missing = f"\n{number(present)} of {number(trace.world_size)} ranks present (missing: {listed})"
        missing += "".join("\n" + wrapped(partial_text(file), "", "  ") for file in trace.partial_files)
        rank_rows = [[rank] for rank in ranks] if every_rank else alike.rank_groups(ranks, findings)
        node_rows = [[node] for node in trace.nodes] if every_rank else alike.node_groups(trace.nodes, findings)
        io = "".join(
            "\n" + wrapped(sizes(f"I/O: {note}.", wide), "").replace("\n", "\n  ")
            for nodes in node_rows
            if (note := nodes[0].note if len(nodes) == 1 else nodes_note(nodes))
        )
        nodes = alike.node_outliers(findings)
        rows = [line for members in rank_rows for line in rank_lines(members, keep, nodes)]
        startup = ""
        if trace.startup is not None:
            storage = stored(trace.startup.nodes)
            storage_rows = [[node] for node in storage] if every_rank else alike.storage_groups(storage, findings)
            startup = "\n" + sizes(startup_text(trace.startup, rank_rows, storage_rows, nodes), wide)
        body = table(columns, rows, left=3) + missing + load_note(ranks) + io + startup
        blocks.append(header + "\n" + body + "\n\n" + findings_text(findings, wide))
    if report.skipped_lines:
        blocks.append(f"{report.skipped_lines} corrupt or truncated lines skipped")
    if report.skipped_state_files:
        blocks.append(f"{report.skipped_state_files} corrupt, truncated or foreign state files skipped")
    if report.forecast is not None:
        blocks.append(forecast_text(report.forecast, wide))
    return "\n\n".join(blocks)


CLASS_IMPORT_NOTED_S = 0.1  # a class import shorter than this surprises nobody who timed the call


def load_note(ranks: list[RankLoad]) -> str:
    """Under the ``load s`` column: where the caller of a load imported the model's class just before it
    (``class_import_seconds``, AutoModel's lazy import), that ``load s`` starts after it and where those seconds are."""
    seconds = [s for r in ranks if (s := r.class_import_seconds) is not None and s >= CLASS_IMPORT_NOTED_S]
    if not seconds:
        return ""
    took = number(seconds[0]) if len(set(seconds)) == 1 else f"{number(min(seconds))}-{number(max(seconds))}"
    note = (
        "load s starts at the model class's own from_pretrained: importing that class just before it (AutoModel does)"
        f" took {took} s, counted under Startup's imports."
    )
    return "\n" + wrapped(note, "", "  ")


def partial_text(file: PartialFile) -> str:
    """Which file lost spans, how, and what that means for its ranks' rows."""
    who = ", ".join(f"rank {rank}" if rank is not None else "a rank without a number" for rank in file.ranks)
    how = ["cut short mid-line"] if file.cut_short else []
    if file.skipped_lines:
        how.append(f"{file.skipped_lines} unreadable line{'s' if file.skipped_lines > 1 else ''} skipped")
    return (
        f"Partial: {who}: {file.path} lost spans ({', '.join(how)}); its rows show what survived, and no finding is"
        " drawn from what is missing."
    )


def stored(nodes: list[NodeStartup]) -> list[NodeStartup]:
    """The nodes with a ``Storage:`` line: those whose checkpoint residency or storage bytes are known."""
    return [node for node in nodes if node.checkpoint is not None or node.storage_bytes is not None]


def report_lines(report: Report) -> list[str]:
    """``loadtrace report --format line``: the one job's ``report_line``; of several, one line each, in start order,
    after the job it is of: ``job nightly, run 2, 2 ranks, 1 finding``. Never one line summed over several jobs."""
    if len(report.traces) <= 1:
        return [report_line(report)]
    lines = []
    for trace in report.traces:
        ranks, findings = of_job(report, trace)
        one = Report(traces=[trace], ranks=ranks, findings=findings, skipped_lines=0)
        lines.append(f"job {trace.job_id or trace.trace_id}, {report_line(one)}")
    return lines


def of_job(report: Report, trace: JobSummary) -> tuple[list[RankLoad], list[Finding]]:
    """The report's ranks and findings of one of its jobs (one attempt and run of a trace)."""
    key = (trace.trace_id, trace.attempt, trace.run)
    ranks = [rank for rank in report.ranks if (rank.trace_id, rank.attempt, rank.run) == key]
    return ranks, [f for f in report.findings if (f.trace_id, f.attempt, f.run) == key]


def report_line(report: Report) -> str:
    """Of one job (one attempt and run): ``2 ranks, 3 findings`` (``1 of 2 ranks here, ...`` when ranks of the job
    left nothing in the source; ``attempt 1, `` and ``run 2, `` before, for a restart and for a job id used again), then
    the ranks that stand out whatever their numbers (``alike.standouts``; alike ones together, the first few): ``; rank
    300 incomplete, rank 700 slow``. What rank 0's closing line says of its job (instrumentation/exporting/summary.py):
    the same function over the same job, so the two always count alike."""
    present = len({rank.rank for rank in report.ranks})
    world = max((trace.world_size or 0 for trace in report.traces), default=0)
    plural = "s" * (present != 1)
    text = "".join(
        f"attempt {trace.attempt}, " * bool(trace.attempt) + f"run {trace.run + 1}, " * bool(trace.run)
        for trace in report.traces[:1]
    )
    text += f"{number(present)} of {number(world)} ranks here" if world > present else f"{number(present)} rank{plural}"
    text += f", {number(len(report.findings))} finding{'s' * (len(report.findings) != 1)}"
    standing = alike.standouts(report.ranks, report.findings)
    kinds, nodes = alike.kinds_by_rank(report.findings), alike.node_outliers(report.findings)
    entries = []
    for members in alike.grouped(
        standing,
        lambda pair: (pair[0].rank is not None, tuple(pair[1]), tuple(sorted(kinds.get(pair[0].rank, ())))),  # type: ignore[arg-type]
        lambda key: 2 if any(whole for _, _, whole in key[2]) else alike.MIN_GROUP,  # type: ignore[index]
    ):
        numbers = [rank.rank for rank, _ in members if rank.rank is not None]
        told = nodes.get(numbers[0]) if len(numbers) > 1 else None
        name = alike.where(told) if told is not None else who(numbers) if numbers else members[0][0].label
        entries.append(" ".join([name, *members[0][1]]))
    if entries:
        more = len(entries) - MOST_STANDOUTS
        text += "; " + ", ".join(entries[:MOST_STANDOUTS]) + (f" and {more:,} more" if more > 0 else "")
    return text


MOST_STANDOUTS = 3  # the line names this many ranks (or sets of alike ranks) that stand out; the report names all


def startup_text(
    startup: Startup,
    rank_rows: list[list[RankLoad]] | None = None,
    storage: list[list[NodeStartup]] | None = None,
    nodes: dict[int, list[str]] | None = None,
) -> str:
    """``Startup:`` the slowest rank and the median, a row per rank split by phase (alike ranks together as in
    ``rank_rows``, whole nodes a finding tells so titled as in ``nodes``), a ``Storage:`` line per node whose
    checkpoint residency or storage bytes are known (alike nodes together as in ``storage``)."""
    lines = [f"Startup: {startup_headline(startup)}; in seconds:"]
    phases = list(startup.ranks[0].phases) if startup.ranks else []
    shared = {rank.rank: row for row, members in enumerate(rank_rows or []) if len(members) > 1 for rank in members}
    rows: list[list[str] | str] = []
    for members in alike.grouped(startup.ranks, lambda r: shared.get(r.rank)):
        cells = [
            [
                (str(r.rank) if r.rank is not None else "?") + (" partial" if r.partial else ""),
                number(r.seconds),
                *(number(r.phases[p]) for p in phases),
            ]
            for r in members
        ]
        values = [[None, r.seconds, *(r.phases[p] for p in phases)] for r in members]
        numbers = [r.rank for r in members if r.rank is not None]
        rows += cells if len(members) == 1 else [f"{title(numbers, nodes)}:", *shared_rows(cells, values)]
    lines.append(table(("rank", "startup", *phases), rows))  # one unit, said above: a unit per header is past 120
    for alike_nodes in storage if storage is not None else [[node] for node in stored(startup.nodes)]:
        lines.append(storage_line(alike_nodes))
    return "\n".join(lines)


def startup_headline(startup: Startup) -> str:
    """The slowest of the ranks judged and their median; where none is judged (every rank died, failed, was stopped
    or lost spans before it was ready), that, never a slowest rank that is no rank at all."""
    if startup.seconds is None:
        return "not judged (no rank was whole and ready: each died, failed, was stopped or lost spans first)"
    slowest = f"rank {startup.slowest_rank}" if startup.slowest_rank is not None else "a rank without a number"
    phase = f", {startup.slowest_phase} phase" if startup.slowest_phase else ""
    median = number(startup.median_rank_seconds)
    return f"{number(startup.seconds)} s (slowest: {slowest}{phase}), median rank {median} s"


def storage_line(nodes: list[NodeStartup]) -> str:
    """``Storage: vm: checkpoint cold; its 2 ranks fetched 439.7 MB from storage, all files, in 1.620 s of fetching,
    271.4 MB/s`` for one node; ``Storage: 128 nodes (...), each: ...`` for alike ones, a figure that differs between
    them as its min, median and max (docs/report.md, Storage words)."""
    node = nodes[0]
    where = (node.host or "an unnamed host") if len(nodes) == 1 else f"{hosts_text(nodes)}, each"
    text = f"Storage: {where}: checkpoint {(node.checkpoint or 'residency unknown').replace('_', ' ')}"
    its = f"its {len(node.ranks)} ranks" if len(node.ranks) > 1 else "its rank"
    if node.storage_bytes is None:
        return f"{text}; what {its} fetched from storage was not measured"
    if not any(n.storage_bytes for n in nodes):
        return f"{text}; {its} fetched nothing from storage"
    text += f"; {its} fetched {spread_text([n.storage_bytes for n in nodes], human_bytes)} from storage, all files"
    dead = [rank for rank in node.counted_to_last_reading if rank is not None]
    if dead and len(nodes) == 1:
        text += f" ({who(dead)} to {'its' if len(dead) == 1 else 'their'} last reading, before dying)"
    if node.fetch_seconds is None:
        return f"{text}; when, not measured"
    text += f", in {spread_text([n.fetch_seconds for n in nodes], number)} s of fetching"
    if node.storage_bytes_per_second is None:
        return f"{text} (under {MIN_RATE_SECONDS:g} s: too brief for a rate)"
    rates = [round(n.storage_bytes_per_second) for n in nodes if n.storage_bytes_per_second is not None]
    return f"{text}, {spread_text(rates, human_bytes)}/s"


def hosts_text(nodes: Sequence[NodeReads | NodeStartup]) -> str:
    """``128 nodes (node000 ... node127)``: how many, the first and the last."""
    names = [node.host or "an unnamed host" for node in nodes]
    return f"{len(names):,} nodes ({names[0]} ... {names[-1]})"


def spread_text(values: Sequence[float | int | None], text: Callable[[Any], str]) -> str:
    """One figure of alike nodes: as it is when all say the same, else ``min A, median M, max B``."""
    present = [value for value in values if value is not None]
    if not present:
        return "-"
    low, middle, high = alike.spread(present, float)
    if len({text(value) for value in present}) == 1:
        return text(middle)
    return f"min {text(low)}, median {text(middle)}, max {text(high)}"


def nodes_note(nodes: list[NodeReads]) -> str | None:
    """The ``I/O:`` note of alike nodes (as ``nodes.node_reads`` says it of one node), a figure that differs
    between them as its min, median and max; None when none of their ranks read anything."""
    node = nodes[0]
    if not node.readers:
        return None
    asked = spread_text([n.read_bytes for n in nodes], human_bytes)
    times = spread_text([n.times_asked for n in nodes], lambda value: f"{value:g}x")
    asked = f"{times} the checkpoint, {asked}" if node.times_asked is not None else asked
    who = f"{hosts_text(nodes)}, each: {node.readers} rank{'s' if node.readers > 1 else ''} asked for {asked}"
    if node.outcome is None:
        return f"{who}; whether the page cache held the checkpoint was not measured"
    total = spread_text([n.checkpoint_file_bytes for n in nodes], human_bytes)
    cold = spread_text([n.checkpoint_cold_bytes for n in nodes], human_bytes)
    if node.outcome == "warm":
        return f"{who}; the checkpoint was warm: the page cache held all of its checkpoint files, {total}"
    if node.outcome == "cold":
        return f"{who}; the checkpoint was cold: none of its checkpoint files, {total}, was in the page cache"
    return (
        f"{who}; the checkpoint was partly cold: {cold} of its checkpoint files, {total}, was not in the page cache"
        " when first opened"
    )


def rank_lines(
    members: list[RankLoad], keep: list[int], nodes: dict[int, list[str]] | None = None
) -> list[list[str] | str]:
    """A rank's row; or alike ranks' title line and their shared rows. ``nodes``: the ranks a finding tells as whole
    nodes (``alike.node_outliers``): such a row is titled as its nodes."""
    cells = [[row[i] for i in keep] for row in (rank_row(rank) for rank in members)]
    if len(members) == 1:
        return list(cells)
    values = [[row[i] for i in keep] for row in (rank_values(rank) for rank in members)]
    numbers = [rank.rank for rank in members if rank.rank is not None]
    hosts = {rank.host for rank in members}
    where = f"{len(hosts):,} nodes" if len(hosts) > 1 else (next(iter(hosts)) or "an unnamed host")
    named = title(numbers, nodes)
    on = f" on {where}" if named.startswith("rank") else ""  # a title of nodes says where already
    return [wrapped(" ".join([named, *members[0].marks()]) + on + ":", "", "  "), *shared_rows(cells, values)]


def title(numbers: list[int], nodes: dict[int, list[str]] | None) -> str:
    """A shared row's title: ``node077: all 8 ranks (616-623)`` for the ranks of whole nodes a finding tells as such
    (``alike.node_outliers``), else ``ranks 1-7 (7 ranks)``."""
    told = (nodes or {}).get(numbers[0]) if numbers else None
    if told is not None and sorted(numbers) == sorted(n for n, hosts in (nodes or {}).items() if hosts == told):
        return alike.whole_nodes(told, numbers)
    return who(numbers)


def shared_rows(cells: list[list[str]], values: list[list[float | int | None]]) -> list[list[str]]:
    """Under alike ranks' title: ``each``, when every number column holds the same for all of them; else ``min``,
    ``median`` and ``max``, each column's own (a column they agree on shows on the median row only). A column of text
    they differ in (the host) stays empty: the title says it."""
    columns = range(1, len(cells[0]))
    differ = [column for column in columns if len({row[column] for row in cells}) > 1]
    common = [("" if column in differ else text) for column, text in enumerate(cells[0])]
    numbered = [column for column in differ if any(value[column] is not None for value in values)]
    if not numbered:
        return [["  each", *common[1:]]]
    lines = {name: [f"  {name}", *[""] * len(columns)] for name in ("min", "median", "max")}
    lines["median"][1:] = common[1:]
    for column in numbered:
        known = [(value[column], row) for value, row in zip(values, cells, strict=True) if value[column] is not None]
        for name, (_, row) in zip(lines, alike.spread(known, lambda pair: pair[0] or 0), strict=True):
            lines[name][column] = row[column]
    return list(lines.values())


def rank_values(rank: RankLoad) -> list[float | int | None]:
    """The numbers behind ``rank_row``'s cells (None for a cell of text), to find a shared row's min and max."""
    return [
        None,
        None,
        None,
        rank.load_seconds,
        rank.files_opened,
        rank.tensors_read,
        rank.read_bytes,
        rank.storage_read_bytes,
        rank.conversions,
        sum(rank.materialized_bytes.values()),
        sum(rank.held_bytes.values()),
        rank.peak_rss_bytes,
    ]


def rank_row(rank: RankLoad) -> list[str]:
    name = str(rank.rank) if rank.rank is not None else (rank.instance or "?")
    return [
        " ".join([name, *rank.marks()]),
        rank.host or "-",
        rank.strategy or "-",
        number(rank.load_seconds),
        number(rank.files_opened),
        number(rank.tensors_read),
        size(rank.read_bytes),
        size(rank.storage_read_bytes),
        number(rank.conversions),
        device_sizes(rank.materialized_bytes),
        device_sizes(rank.held_bytes),
        size(rank.peak_rss_bytes),
    ]


def findings_text(findings: list[Finding], wide: bool = False) -> str:
    """One entry per cause: symptoms of one cause (``Finding.cause``) in one job show as one finding with a line each
    and one ``next:``. Sizes once, human (``1.0 MB``); ``wide`` keeps the exact bytes beside them, as the JSON has."""
    if not findings:
        return "findings: none"
    groups: dict[tuple, list[Finding]] = {}
    for finding in findings:
        key = (finding.trace_id, finding.attempt, finding.run, finding.cause) if finding.cause else (id(finding),)
        groups.setdefault(key, []).append(finding)
    lines = ["findings (warnings first, most bytes first):"]
    for group in groups.values():
        lines += cause_lines(group, wide) if len(group) > 1 else finding_lines(group[0], wide)
    return "\n".join(lines)


_EXACT_AND_HUMAN = re.compile(r"\b\d[\d,]* B \((\d+(?:\.\d)? [kMGTP]B)\)")


def sizes(text: str, wide: bool) -> str:
    """``1,009,152 B (1.0 MB)`` → ``1.0 MB`` for the table; as it is with ``wide``."""
    return text if wide else _EXACT_AND_HUMAN.sub(r"\1", text)


# The detail's per-node figures, shortened for the table: ``Projected host memory: 1.0 MB x 8 ranks per node = 8.1 MB
# per node`` → ``Per node: 1.0 MB x 8 = 8.1 MB``; a read finding's ``... read x 2 ranks per node = 2.0 MB read per
# node`` → ``... read x 2 = 2.0 MB read``.
_PROJECTION = re.compile(r"Projected (?:host memory|per node): ")
_PER_NODE = re.compile(r" x (\d+) ranks? per node = (.+?) per node")


def finding_lines(finding: Finding, wide: bool) -> list[str]:
    ranks = who(finding.ranks)
    amount = human_bytes(finding.bytes) if wide else size(finding.bytes)
    lines = [f"  {finding.severity.upper()} {finding.kind}  {ranks}  {amount}"]
    detail = (
        finding.detail
        if wide
        else _PER_NODE.sub(r" x \1 = \2", _PROJECTION.sub("Per node: ", sizes(finding.detail, wide)))
    )
    lines.append(wrapped(detail, "    "))
    return lines + next_lines(finding)


def next_lines(finding: Finding) -> list[str]:
    if not finding.next_step:
        return []
    end = "" if finding.next_step.rpartition(" ")[2].startswith("https://") else "."  # a URL stays clickable
    return [wrapped(f"next: {finding.next_step}{end}", "    ")]


def cause_lines(symptoms: list[Finding], wide: bool) -> list[str]:
    """``WARNING ranks 1-15 each loaded the whole model ...``, then each symptom's kind and numbers, then one next."""
    ranks = sorted({rank for finding in symptoms for rank in finding.ranks})
    strategies = sorted(
        {str(entry.get("strategy") or "none") for f in symptoms for entry in f.evidence.get("per_rank", [])}
    )
    whole = max(finding.model_share for finding in symptoms) >= 0.99
    did = ("each " if len(ranks) > 1 else "") + ("loaded the whole model" if whole else "repeated rank 0's loading")
    worst = max(symptoms, key=lambda finding: finding.projected_node_bytes)
    host = worst.projection.partition(" = ")[2].rstrip(".")
    headline = f"{symptoms[0].severity.upper()} {who(ranks)} {did} under {'/'.join(strategies)}"
    lines = [wrapped(sizes(headline + (f"; host memory {host}" if host else ""), wide), "  ", "    ")]
    for finding in symptoms:
        own = "" if finding.ranks == ranks else who(finding.ranks)
        text = f"{finding.kind}: {own + ' ' if own else ''}{finding.symptom or finding.detail}"
        lines.append(wrapped(sizes(text, wide), "    ", "      "))
    return lines + next_lines(symptoms[0])


def forecast_text(forecast: Forecast, wide: bool = False) -> str:
    """The forecast block: per rank, per node with its range, the node's memory and a verdict nobody can miss.
    The table in human sizes (exact bytes with ``wide``, and in the JSON); its prose wrapped at WIDTH."""
    cell = number if wide else size
    basis, node = forecast.basis, forecast.basis.node
    given = basis.target.given_as
    lines = [
        f"forecast: {human_bytes(forecast.model_bytes)} model"
        + (f" ({given})" if given and "parameters" in given else "")
        + f", {forecast.ranks_per_node} ranks per node, world size {basis.target.world_size}"
        + f" (scaled x{basis.model_scale:.4g} from {human_bytes(basis.measured.model_bytes)})"
    ]
    categories = basis.categories
    rows = []
    for rank, peak in forecast.per_rank_peak_bytes.items():
        cells = [str(rank), cell(categories.fixed.ranks[rank].to_bytes)]
        for category in categories.scaled:
            entry = category.ranks.get(rank)
            cells.append(cell(entry.to_growth_bytes) if entry else "-")
        low, high = forecast.per_rank_peak_range_bytes[rank]
        cells += [cell(basis.ranks[rank].not_model_bytes), cell(peak), f"{cell(low)} - {cell(high)}"]
        rows.append(cells)
    columns = FORECAST_COLUMNS if wide else FORECAST_NARROW_COLUMNS
    lines.append("  " + table(columns, rows).replace("\n", "\n  "))
    prose = len(lines)
    profiles = " + ".join(f"{profile.count} x rank {profile.rank}" for profile in node.profiles)
    low, high = forecast.per_node_peak_range_bytes
    lines.append(
        f"  per node: {profiles} = {human_bytes(forecast.per_node_peak_bytes)}, range {human_bytes(low)} -"
        f" {human_bytes(high)} (file-backed pages counted once; sum of rank peaks"
        f" {human_bytes(node.sum_of_rank_peaks_bytes)})"
    )
    lines.append(f"  confidence: {forecast.confidence.level}: {forecast.confidence.reason}")
    memory = forecast.node_memory_bytes
    if memory is None:
        lines.append("  node memory: unknown; give --node-memory-bytes")
        lines.append("  verdict: UNKNOWN")
    else:
        limit = node.memory_limit_source
        what = "node memory" if limit in (None, "node") else f"memory limit ({limit})"
        lines.append(f"  {what}: {human_bytes(memory)} ({node.node_memory_source})")
        lines.append("  verdict: " + verdict_text(forecast))
    lines.append("  basis: " + basis.text)
    lines = [sizes(line, wide) for line in lines]
    title = wrapped(lines[0], "", "    ")
    return "\n".join([title, *lines[1:prose], *(wrapped(line.lstrip(), "  ", "    ") for line in lines[prose:])])


def verdict_text(forecast: Forecast) -> str:
    """``WILL OOM: ...``, ``UNCERTAIN: ...`` or ``OK: ...``: the verdict in one line (also ``--fail-on-oom``'s)."""
    memory = forecast.node_memory_bytes or 0
    low, high = forecast.per_node_peak_range_bytes
    ratio = forecast.per_node_peak_bytes / memory if memory else math.inf
    if forecast.verdict == "oom":
        return (
            f"WILL OOM: a node needs {human_bytes(forecast.per_node_peak_bytes)}, {ratio:.2f}x its memory"
            f" (even the low end, {human_bytes(low)}, exceeds {human_bytes(memory)})"
        )
    if forecast.verdict == "uncertain":
        return (
            f"UNCERTAIN: the node's {human_bytes(memory)} lies inside the range {human_bytes(low)} -"
            f" {human_bytes(high)} (point {human_bytes(forecast.per_node_peak_bytes)}, {100 * ratio:.0f}%)"
        )
    headroom = human_bytes(forecast.basis.node.headroom_bytes or 0)
    return (
        f"OK: a node needs {100 * ratio:.0f}% of its memory ({headroom} to spare; the high end,"
        f" {human_bytes(high)}, fits)"
    )


# loadtrace compare ------------------------------------------------------------------------------------------------


def compared_job_text(side: ComparedJob) -> str:
    """``spans/a  trace T  job J``, and which attempt (and rerun) of it where that is known."""
    text = f"{side.source}  trace {side.trace_id}  job {side.job_id or '-'}"
    if side.attempt is not None:
        text += f"  attempt {side.attempt}"
    return text + (f"  run {side.run + 1}" if side.run else "")


def compare_table(comparison: Comparison, wide: bool = False, every_rank: bool = False) -> str:
    """The phase rows (bytes in human sizes; exact with ``wide``, and in the JSON), alike ranks sharing theirs unless
    ``every_rank``; then each parameter that differs with both values, then one line naming those that agree."""

    def cell(metric: str, value: float | int | None, sign: bool = False) -> str:
        if wide or metric in COMPARE_COUNTS or value is None or isinstance(value, float):
            return signed(value) if sign else number(value)
        return ("+" if sign and value > 0 else "") + size(value)

    def cells(row: PhaseRow, rank: str) -> list[str]:
        return [
            row.phase,
            rank,
            row.metric,
            cell(row.metric, row.a),
            cell(row.metric, row.b),
            cell(row.metric, row.difference, sign=True),
            "-" if row.ratio is None else f"{row.ratio:.2f}x",
        ]

    lines = [f"A: {compared_job_text(comparison.a)}", f"B: {compared_job_text(comparison.b)}", ""]
    shared = [] if every_rank else [ranks for ranks in comparison.rank_rows if len(ranks) > 1]
    if shared:
        lines.append("alike ranks share rows (min, median and max where they differ):")
        lines += [f"  {compact(ranks)} = {title(ranks, comparison.whole_nodes)}" for ranks in shared]
    rows: list[list[str]] = []
    for phase, ranks, members in compare_rows(comparison, every_rank):
        if len(ranks) == 1:
            rows += [cells(row, str(ranks[0])) for row in members]
            continue
        for metric in dict.fromkeys(row.metric for row in members):
            alike_rows = [cells(row, compact(ranks)) for row in members if row.metric == metric]
            values = [
                [None, None, None, row.a, row.b, row.difference, row.ratio] for row in members if row.metric == metric
            ]
            for stat in shared_rows(alike_rows, values):
                name = stat[0].strip()
                label = metric if name == "each" else f"{metric} {name}"
                rows.append([phase, compact(ranks), label, *stat[3:]])
    lines.append(table(COMPARE_COLUMNS, rows, left=3))
    differing = [[row.name, row.a or "-", row.b or "-"] for row in comparison.resources if row.differs]
    same = [row.name for row in comparison.resources if not row.differs]
    lines.append("")
    if differing:
        lines.append("what differs:")
        lines.append(table(["", "A", "B"], differing, left=3))
    else:
        lines.append("what differs: nothing recorded")
    if same:
        lines.append(
            textwrap.fill("same: " + ", ".join(same), width=WIDTH, subsequent_indent="  ", break_on_hyphens=False)
        )
    return "\n".join(lines)


def compact(ranks: list[int]) -> str:
    """A shared row's rank cell: ``1-1023 (1,021)``, its first and last rank and how many (the line above the table
    lists them)."""
    return f"{ranks[0]}-{ranks[-1]} ({len(ranks):,})"


def compare_rows(comparison: Comparison, every_rank: bool) -> list[tuple[str, list[int], list[PhaseRow]]]:
    """Per phase, per row of ranks (``Comparison.rank_rows``, or each rank): its phase rows with a value."""
    by_rank: dict[tuple[str, int], list[PhaseRow]] = {}
    for row in comparison.phases:
        if row.a is not None or row.b is not None:
            by_rank.setdefault((row.phase, row.rank), []).append(row)
    numbers = sorted({row.rank for row in comparison.phases})
    rank_rows = [[number] for number in numbers] if every_rank or not comparison.rank_rows else comparison.rank_rows
    result = []
    for phase in dict.fromkeys(row.phase for row in comparison.phases):
        for ranks in rank_rows:
            members = [row for number in ranks for row in by_rank.get((phase, number), [])]
            if members:
                result.append((phase, ranks, members))
    return result


# loadtrace jobs ---------------------------------------------------------------------------------------------------

JOB_COLUMNS = (
    *("start", "job", "cluster", "world", "model B", "transformers", "startup s", "median s", "slowest"),
    "findings",
)
GROUP_COLUMNS = ("jobs", "startup p50 s", "p95 s", "max s", "storage p50 B/s")


def jobs_table(report: JobsReport) -> str:
    """One row per job, oldest first; then one row per group and the differences between groups in words."""
    rows = []
    for job in report.jobs:
        slowest = "-" if job.slowest_rank is None else f"rank {job.slowest_rank}"
        if job.slowest_phase and job.slowest_rank is not None:
            slowest += f" {job.slowest_phase}"
        found = " ".join(f"{kind}={count}" for kind, count in job.findings.items()) or "-"
        rows.append(
            [
                (job.start_time or "-")[:19],
                job.job_id or job.trace_id,
                job.cluster or "-",
                number(job.world_size),
                number(job.model_bytes),
                job.versions.get("transformers", "-"),
                number(job.startup_seconds),
                number(job.median_rank_seconds),
                slowest,
                found,
            ]
        )
    return "\n\n".join([table(JOB_COLUMNS, rows, left=3), groups_table(report)])


def groups_table(report: JobsReport | GroupsReport) -> str:
    """One row per group; then the differences between groups in words (``jobs --groups-only``: these alone)."""
    group_rows = [
        [
            ", ".join(f"{k}={v if v is not None else 'null'}" for k, v in group.by.items()) or "all jobs",
            number(group.jobs),
            number(group.startup_seconds.p50),
            number(group.startup_seconds.p95),
            number(group.startup_seconds.max),
            number(group.storage_bytes_per_second.get("p50"), 0),
        ]
        for group in report.groups
    ]
    blocks = [table(("group", *GROUP_COLUMNS), group_rows)]
    if report.differences:
        blocks.append("differences:\n" + "\n".join(f"  {text}" for text in report.differences))
    if report.skipped_lines:
        blocks.append(f"{report.skipped_lines} corrupt or truncated lines skipped")
    return "\n\n".join(blocks)
