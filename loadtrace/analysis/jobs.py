"""``loadtrace jobs``: one row per job of many (a folder tree, a Jaeger search), filtered, grouped, and the groups
compared in words ("cluster beta: startup p50 2.4x alpha; read phase 3.1x").

Each row comes from the same analysis as ``loadtrace report`` (``startup.job_startup``, the findings), so a job reads
the same in both. docs/report.md, ``loadtrace jobs``, documents the keys, the statistics and the JSON.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import semconv as sc
from ..startup_split import STARTUP_PHASES
from .attrs import str_attr
from .findings import find
from .model import NOT_IN_JSON
from .processes import TRACE_ID_HEX, state_trace_id
from .ranks import Job, jobs_from_spans
from .sources import SourceError, SpanSet, read_sources, rfc3339_nanos, source_files
from .startup import Thresholds, job_startup, startup_findings

# A group is called out when its startup p50 is at least this many times the fastest group's.
DIFFERENCE_RATIO = 1.2
LIBRARIES = ("torch", "transformers", "accelerate", "deepspeed")


@dataclass
class JobRow:
    """One job: JSON keys in this order (docs/report.md, ``loadtrace jobs``)."""

    trace_id: str
    job_id: str | None
    attempt: int | None
    cluster: str | None
    start_time: str | None
    world_size: int | None
    model_bytes: int | None
    versions: dict[str, str]
    startup_seconds: float | None
    median_rank_seconds: float | None
    slowest_rank: int | None
    slowest_phase: str | None
    findings: dict[str, int]
    model: str | None  # the checkpoint, as the loads named it
    strategy: str | None
    hosts: list[str]
    storage_bytes_per_second: float | None
    start_ns: int = field(default=0, metadata=NOT_IN_JSON)
    phases: dict[str, float] = field(default_factory=dict, metadata=NOT_IN_JSON)  # the slowest rank's


@dataclass
class Statistic:
    p50: float | None
    p95: float | None = None
    max: float | None = None


@dataclass
class Group:
    by: dict[str, str | None]
    jobs: int
    startup_seconds: Statistic
    storage_bytes_per_second: dict[str, float | None]


@dataclass
class JobsReport:
    jobs: list[JobRow]
    groups: list[Group]
    differences: list[str]
    skipped_lines: int = 0


@dataclass
class GroupsReport:
    """``jobs --groups-only``: the groups and the differences between them, without the rows."""

    groups: list[Group]
    differences: list[str]
    skipped_lines: int = 0

    @classmethod
    def of(cls, report: JobsReport) -> GroupsReport:
        return cls(report.groups, report.differences, report.skipped_lines)


def _distinct(values: list[Any]) -> str | None:
    present = sorted({str(value) for value in values if value is not None and value != ""})
    return ", ".join(present) if present else None


def job_row(job: Job, limits: Thresholds) -> JobRow:
    startup = job_startup(job, limits)
    found = find([job]) + startup_findings(job, startup, limits)
    counts: dict[str, int] = {}
    for finding in found:
        counts[finding.kind] = counts.get(finding.kind, 0) + 1
    versions = {}
    for library in LIBRARIES:
        version = _distinct([rank.resource.get(sc.lib_key(library)) for rank in job.ranks])
        if version is not None:
            versions[library] = version
    slowest = next((r for r in startup.ranks if r.rank == startup.slowest_rank), None) if startup else None
    model = job.model_bytes()
    return JobRow(
        trace_id=job.trace_id,
        job_id=job.job_id,
        attempt=job.attempt,
        cluster=_distinct([str_attr(rank.resource, sc.CLUSTER) for rank in job.ranks]),
        start_time=rfc3339_nanos(job.start_ns),
        world_size=job.world_size,
        model_bytes=model or None,
        versions=versions,
        startup_seconds=startup.seconds if startup else None,
        median_rank_seconds=startup.median_rank_seconds if startup else None,
        slowest_rank=startup.slowest_rank if startup else None,
        slowest_phase=startup.slowest_phase if startup else None,
        findings=dict(sorted(counts.items(), key=lambda item: sc.FINDING_KINDS.index(item[0]))),
        model=_distinct([rank.checkpoint for rank in job.ranks]),
        strategy=_distinct([rank.strategy for rank in job.ranks]),
        hosts=sorted({rank.host for rank in job.ranks if rank.host}),
        storage_bytes_per_second=startup.storage_bytes_per_second if startup else None,
        start_ns=job.start_ns,
        phases=dict(slowest.phases) if slowest is not None else {},
    )


# Keys of --where and --group-by: a job's value of each, as text (None: the job does not say).
KEYS: dict[str, Callable[[JobRow], str | None]] = {
    "cluster": lambda row: row.cluster,
    "transformers": lambda row: row.versions.get("transformers"),
    "torch": lambda row: row.versions.get("torch"),
    "accelerate": lambda row: row.versions.get("accelerate"),
    "deepspeed": lambda row: row.versions.get("deepspeed"),
    "model": lambda row: row.model,
    "host": lambda row: ", ".join(row.hosts) or None,
    "strategy": lambda row: row.strategy,
    "world_size": lambda row: str(row.world_size) if row.world_size is not None else None,
    "job_id": lambda row: row.job_id,
}
NULL = "null"  # --where cluster=null: jobs that do not say


def check_keys(where: list[str], group_by: list[str]) -> list[tuple[str, str]]:
    """Parsed ``--where KEY=VALUE`` items; an unknown key or a malformed item raises ``SourceError`` (exit 2)."""
    known = ", ".join(KEYS)
    pairs = []
    for item in where:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise SourceError(f"--where {item!r}: expected KEY=VALUE, KEY one of {known}")
        if key.strip() not in KEYS:
            raise SourceError(f"--where: unknown key {key.strip()!r}; known keys: {known}")
        pairs.append((key.strip(), value.strip()))
    for key in group_by:
        if key not in KEYS:
            raise SourceError(f"--group-by: unknown key {key!r}; known keys: {known}")
    return pairs


def matches(row: JobRow, pairs: list[tuple[str, str]]) -> bool:
    for key, wanted in pairs:
        value = KEYS[key](row)
        if (value is None and wanted != NULL) or (value is not None and value != wanted):
            return False
    return True


def percentile(values: list[float], share: float) -> float:
    """Linear interpolation between the closest ranks (``statistics.quantiles(method="inclusive")``; one value is
    every percentile of itself). ``rollup.percentile_sql`` is the same arithmetic, step for step, in the server."""
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def group_of(by: dict[str, str | None], rows: list[JobRow]) -> Group:
    startups = [row.startup_seconds for row in rows if row.startup_seconds is not None]
    rates = [row.storage_bytes_per_second for row in rows if row.storage_bytes_per_second is not None]
    return group_from(
        by,
        len(rows),
        (percentile(startups, 0.5), percentile(startups, 0.95), max(startups)) if startups else None,
        percentile(rates, 0.5) if rates else None,
    )


def group_from(
    by: dict[str, str | None], jobs: int, startup: tuple[float, float, float] | None, rate_p50: float | None
) -> Group:
    """A group as shown, from its statistics (computed here from rows, or in the server): startup (p50, p95, max)
    and the storage rate's p50, None where no job has one."""
    return Group(
        by=by,
        jobs=jobs,
        startup_seconds=Statistic(p50=round(startup[0], 6), p95=round(startup[1], 6), max=startup[2])
        if startup is not None
        else Statistic(None, None, None),
        storage_bytes_per_second={"p50": round(rate_p50, 1) if rate_p50 is not None else None},
    )


def group_order(values: tuple[str | None, ...], jobs: int) -> tuple[Any, ...]:
    """Groups most jobs first, then by their values (a group without a value after those with one)."""
    return (-jobs, [value is None for value in values], [value or "" for value in values])


def label(by: dict[str, str | None]) -> str:
    return ", ".join(f"{key} {value if value is not None else NULL}" for key, value in by.items()) or "all jobs"


def differences(groups: list[Group], phase_medians: list[dict[str, float]]) -> list[str]:
    """Groups at least ``DIFFERENCE_RATIO`` x the fastest group's startup p50, largest first, each with the phase of
    the slowest ranks that grew most (``phase_medians``, each group's: the median over its jobs, against the fastest
    group's)."""
    known = [(i, g) for i, g in enumerate(groups) if g.startup_seconds.p50]
    if len(known) < 2:
        return []
    base_index, base = min(known, key=lambda item: (item[1].startup_seconds.p50, item[0]))
    base_phases = phase_medians[base_index]
    called = []
    for index, group in known:
        ratio = (group.startup_seconds.p50 or 0.0) / (base.startup_seconds.p50 or 1.0)
        if index == base_index or ratio < DIFFERENCE_RATIO:
            continue
        text = f"{label(group.by)}: startup p50 {ratio:.1f}x {_short(group.by, base.by)}"
        phases = phase_medians[index]
        grown = [(phases[p] / base_phases[p], p) for p in STARTUP_PHASES if base_phases.get(p) and phases.get(p)]
        if grown:
            factor, phase = max(grown)
            if factor > 1:
                text += f"; {phase} phase {factor:.1f}x"
        called.append((ratio, text))
    return [text for _, text in sorted(called, key=lambda item: -item[0])]


def _short(by: dict[str, str | None], base: dict[str, str | None]) -> str:
    """The baseline group by its values only where the keys are the same ("alpha")."""
    return (
        ", ".join(str(value) if value is not None else NULL for value in base.values())
        if by.keys() == base.keys()
        else label(base)
    )


def phase_medians_of(rows: list[JobRow]) -> dict[str, float]:
    """Each phase's median over the jobs whose slowest rank's phases are known (``rollup.GROUPS`` the same in SQL)."""
    with_phases = [row.phases for row in rows if row.phases]
    return {p: statistics.median(phases[p] for phases in with_phases) for p in STARTUP_PHASES} if with_phases else {}


def jobs_report(
    spans: SpanSet, where: list[str] | None = None, group_by: list[str] | None = None, limits: Thresholds | None = None
) -> JobsReport:
    """Rows (oldest first), groups (one per distinct value of the ``group_by`` keys, most jobs first; one group of all
    jobs without keys) and the differences between them. Raises ``SourceError`` when no job is left to show."""
    found = jobs_from_spans(spans.spans, spans.states, spans.damaged_files)
    return report_of_rows([job_row(job, limits or Thresholds()) for job in found], where, group_by, spans.skipped_lines)


def no_jobs(pairs: list[tuple[str, str]], jobs: int) -> SourceError:
    """Why there is nothing to show: no job at all, or none of ``jobs`` matching ``--where``."""
    if not jobs:
        return SourceError("no jobs found in this source")
    wanted = " ".join(f"{key}={value}" for key, value in pairs)
    return SourceError(f"no job matches --where {wanted} (of {jobs} jobs)")


def report_of_rows(
    all_rows: list[JobRow],
    where: list[str] | None,
    group_by: list[str] | None,
    skipped_lines: int,
    filtered_out: int = 0,
) -> JobsReport:
    """``jobs_report`` of the rows of every job of a source, in job order (``jobs_from_spans``); ``filtered_out``:
    jobs the source already left out for ``where``."""
    pairs = check_keys(where or [], group_by or [])
    keys = group_by or []
    rows = [row for row in all_rows if matches(row, pairs)]
    if not rows:
        raise no_jobs(pairs, len(all_rows) + filtered_out)
    rows.sort(key=lambda row: (row.start_ns, row.trace_id, row.attempt or 0))
    members: dict[tuple[str | None, ...], list[JobRow]] = {}
    for row in rows:
        members.setdefault(tuple(KEYS[key](row) for key in keys), []).append(row)
    ordered = sorted(members.items(), key=lambda item: group_order(item[0], len(item[1])))
    groups = [group_of(dict(zip(keys, values, strict=True)), members_) for values, members_ in ordered]
    medians = [phase_medians_of(members_) for _, members_ in ordered]
    return JobsReport(rows, groups, differences(groups, medians), skipped_lines)


# ``jobs_report_of_tree``: worth starting processes from this many job folders on.
TREE_MIN_FOLDERS = 16
TREE_PARTS_PER_WORKER = 4  # smaller parts even out folders of different sizes


@dataclass
class _TreePart:
    """What one worker hands back for its folders: rows (tiny) instead of spans (what reading costs)."""

    rows: list[tuple[tuple[int, str, int, int], JobRow]]  # (job order key, row)
    traces: set[str]
    skipped_lines: int
    empty: bool  # no span and no state file
    short_ids: bool  # a state file naming its trace by a prefix: which trace it is depends on every trace read


def _rows_of_folders(files: list[Path], states: list[Path], limits: Thresholds) -> _TreePart:
    spans = read_sources(files, states)
    found = jobs_from_spans(spans.spans, spans.states, spans.damaged_files)
    traces = {span.trace_id for span in spans.spans} | {state_trace_id(s.state) for s in spans.states}
    rows = [((job.start_ns, job.trace_id, job.attempt or 0, job.run), job_row(job, limits)) for job in found]
    short = any(len(s.state.trace_id.strip()) < TRACE_ID_HEX for s in spans.states)
    return _TreePart(rows, traces, spans.skipped_lines, not spans.spans and not spans.states, short)


def _part_worker(part: tuple[list[Path], list[Path], Thresholds]) -> _TreePart:
    return _rows_of_folders(*part)


def _start_worker(parent: int) -> None:
    # Ctrl-C reaches every process of the terminal's group: the parent alone answers it (and ends the workers).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent is gone (killed, say) would wait for work forever: it ends within half a second."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _workers() -> int:
    return min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 16)


def jobs_report_of_tree(
    path: str | os.PathLike[str],
    where: list[str] | None = None,
    group_by: list[str] | None = None,
    limits: Thresholds | None = None,
    workers: int | None = None,
) -> JobsReport | None:
    """``jobs_report(read_files(path))``, the same report, by one forked process per CPU, each reading whole folders
    and handing back only their jobs' rows (map), grouped here (reduce). None where that cannot give the same rows or
    gains nothing, for the caller to read the source in one process: a file, one CPU, few folders, no ``fork``, a
    job whose files lie in folders of different parts, a state file naming its trace only in part, or no span at all.
    """
    workers = workers or _workers()
    root = Path(path)
    if workers < 2 or not root.is_dir() or "fork" not in multiprocessing.get_all_start_methods():
        return None
    files, states = source_files(root)
    folders: dict[Path, tuple[list[Path], list[Path]]] = {}
    for file in files:
        folders.setdefault(file.parent, ([], []))[0].append(file)
    for state in states:
        folders.setdefault(state.parent, ([], []))[1].append(state)
    if len(folders) < TREE_MIN_FOLDERS:
        return None
    count = min(len(folders), workers * TREE_PARTS_PER_WORKER)
    parts: list[tuple[list[Path], list[Path], Thresholds]] = [([], [], limits or Thresholds()) for _ in range(count)]
    for index, folder in enumerate(sorted(folders)):
        parts[index % count][0].extend(folders[folder][0])
        parts[index % count][1].extend(folders[folder][1])
    for part in parts:
        part[0].sort()  # the order read_files reads them in
        part[1].sort()
    # Ctrl-C held back while the workers are forked: a worker must not die of it before it ignores it, and the pool
    # must be whole (and so ended by ``with``) when the parent answers it.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pool = multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker, initargs=(os.getpid(),))
    except (OSError, multiprocessing.ProcessError):
        return None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        with pool:
            done = pool.map(_part_worker, parts, chunksize=1)
    except (OSError, multiprocessing.ProcessError):
        return None
    if all(part.empty for part in done) or any(part.short_ids for part in done):
        return None
    seen: set[str] = set()
    for answer in done:
        if answer.traces & seen:
            return None  # a job across parts: only one process sees it whole
        seen |= answer.traces
    rows = [row for _, row in sorted((item for part in done for item in part.rows), key=lambda item: item[0])]
    return report_of_rows(rows, where, group_by, sum(part.skipped_lines for part in done))
