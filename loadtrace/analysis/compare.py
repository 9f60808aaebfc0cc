"""Two jobs side by side: per phase and per rank, time, bytes and peak RSS, plus every recorded parameter of the loads
that may explain them (world size, ranks, hosts, attempt, strategy, checkpoint, model class, dtype, device map, tensor
parallel plan, launcher, library versions).

Each side is one job (one attempt of a trace) of its source; ``pick_job`` picks it when the source holds several.

Phases, each from the spans named in docs/reference.md's span reference:
- ``open``: ``safetensors.open`` / ``torch.load`` spans (the time any was open, each instant once; the files' sizes,
  how many);
- ``read``: tensors and bytes read; its time (as every phase's: each instant once) only where spans of its own exist
  (``safetensors.read`` at tensor detail, ``transformers.load_state_dict``, ``safetensors.load``), since at default
  detail reads happen inside file spans;
- ``convert``: ``transformers.convert`` (time, ``loadtrace.convert.bytes``, ``loadtrace.convert.count``);
- ``materialize``: ``transformers.materialize_missing`` time, and the real (non-meta) bytes ``zeros_like`` /
  ``empty_like`` created during the load;
- ``load``: the whole load (outermost ``transformers.from_pretrained`` / ``loadtrace.load``), the real bytes the model
  holds when it returns, and peak RSS;
- ``memory``: RSS before the load, its growth to the load's peak (all of it, anonymous, file-backed), RSS after;
- ``io``: what the rank made storage deliver (``loadtrace.io.storage_read_bytes``) and the page cache held
  (``loadtrace.io.cached_bytes``).
"""

from __future__ import annotations

import re
from typing import Any

from .. import semconv as sc
from ..startup_split import length, union
from . import alike
from .attrs import int_attr, real_bytes
from .findings import find
from .model import ComparedJob, Comparison, Finding, PhaseRow, RankLoad, ResourceRow
from .ranks import Job, outermost
from .sources import SourceError, rfc3339_nanos
from .startup import Thresholds, job_startup, startup_findings
from .summarized import summarizing_loads

# Spans of their own for reading: only at tensor detail, or around a state dict (at default detail reads happen inside
# file spans, and the read phase has no time).
READ_SPANS = frozenset({sc.SPAN_SAFETENSORS_READ, sc.SPAN_LOAD_STATE_DICT, sc.SPAN_SAFETENSORS_LOAD})
# The load's parameters, from its ``transformers.from_pretrained`` spans (strategy and checkpoint have rows of their
# own, from the rank records); then the process's own, from its resource.
LOAD_KEYS = (sc.CHECKPOINT_BYTES, sc.MODEL_CLASS, sc.DTYPE, sc.DEVICE_MAP, sc.TP_PLAN)
RESOURCE_KEYS = (sc.VERSION, sc.LAUNCHER, sc.CLUSTER)
PRETRAINED = frozenset({sc.SPAN_FROM_PRETRAINED})


def _seconds(rank: RankLoad, names: frozenset[str]) -> float | None:
    """The time any of the rank's spans with these names was open: the union of their intervals, each instant once
    (files read in transformers' thread pool overlap, and their summed lengths outgrew the load); None when there are
    none (unknown is not zero)."""
    spans = [(span.start_ns, span.end_ns) for span in rank.spans if span.name in names]
    return round(length(union(spans)) / 1e9, 6) if spans else None


def phase_metrics(rank: RankLoad) -> dict[str, dict[str, float | int | None]]:
    """{phase: {metric: value}} for one rank."""
    file_spans = [span for span in rank.spans if span.name in sc.FILE_SPANS]
    left_out = bool(summarizing_loads(rank))  # not all its file spans were exported: their time and bytes unknown
    return {
        "open": {
            "seconds": None if left_out else _seconds(rank, sc.FILE_SPANS),
            "count": rank.files_opened,
            "bytes": None if left_out else sum(int_attr(span.attributes, sc.FILE_SIZE) for span in file_spans),
        },
        "read": {"seconds": _seconds(rank, READ_SPANS), "count": rank.tensors_read, "bytes": rank.read_bytes},
        "convert": {
            "seconds": _seconds(rank, frozenset({sc.SPAN_CONVERT})),
            "count": rank.conversions,
            "bytes": rank.conversion_bytes,
        },
        "materialize": {
            "seconds": _seconds(rank, frozenset({sc.SPAN_MATERIALIZE_MISSING})),
            "bytes": real_bytes(rank.materialized_bytes),
        },
        "load": {
            "seconds": rank.load_seconds,
            "bytes": real_bytes(rank.held_bytes),
            "peak_rss_bytes": rank.peak_rss_bytes,
        },
        # Bytes, named to fit the table's metric column as it was.
        "memory": {
            "rss_before": rank.rss_before_bytes,
            "rss_growth": _growth(rank.peak_rss_bytes, rank.rss_before_bytes),
            "anon_growth": _growth(rank.peak_rss_anon_bytes, rank.rss_anon_before_bytes),
            "file_growth": _growth(rank.peak_rss_file_bytes, rank.rss_file_before_bytes),
            "rss_after": rank.rss_after_bytes,
        },
        "io": {"storage_bytes": rank.storage_read_bytes, "cached_bytes": rank.cached_bytes},
    }


def _growth(peak: int | None, before: int | None) -> int | None:
    """Peak less before; None when either is unknown."""
    return None if peak is None or before is None else peak - before


PHASES = ("open", "read", "convert", "materialize", "load", "memory", "io")


def _difference(a: float | int | None, b: float | int | None) -> tuple[float | int | None, float | None]:
    if a is None or b is None:
        return None, None
    difference = b - a
    if isinstance(difference, float):
        difference = round(difference, 6)
    return difference, (round(b / a, 4) if a else None)


def numbered(job: Job) -> dict[int, RankLoad]:
    """The job's ranks by number; a job of one process that has no rank (a plain ``python`` run, no launcher) is rank
    0, as torch.distributed would number it."""
    if len(job.ranks) == 1 and job.ranks[0].rank is None:
        return {0: job.ranks[0]}
    return {rank.rank: rank for rank in job.ranks if rank.rank is not None}


def phase_rows(a: Job, b: Job) -> list[PhaseRow]:
    """One row per (phase, rank, metric): A's value, B's, B − A and B / A (null where either is unknown or A is 0)."""
    ranks_a, ranks_b = numbered(a), numbered(b)
    numbers = sorted({*ranks_a, *ranks_b})
    metrics_a = {number: phase_metrics(rank) for number, rank in ranks_a.items()}
    metrics_b = {number: phase_metrics(rank) for number, rank in ranks_b.items()}
    rows = []
    for phase in PHASES:
        for number in numbers:
            side_a = metrics_a.get(number, {}).get(phase, {})
            side_b = metrics_b.get(number, {}).get(phase, {})
            for metric in dict.fromkeys([*side_a, *side_b]):
                value_a, value_b = side_a.get(metric), side_b.get(metric)
                difference, ratio = _difference(value_a, value_b)
                rows.append(PhaseRow(phase, number, metric, value_a, value_b, difference, ratio))
    return rows


def _distinct(values: list[Any]) -> str | None:
    """Several ranks' values of one property as one string: ``5.24.0``, or ``a, b`` when ranks disagree."""
    present = sorted({str(value) for value in values if value is not None})
    return ", ".join(present) if present else None


def load_values(rank: RankLoad, key: str) -> list[Any]:
    """An attribute of the rank's outermost ``transformers.from_pretrained`` spans (every model it loaded)."""
    by_id = {span.span_id: span for span in rank.spans if span.span_id}
    return [span.attributes.get(key) for span in outermost(rank.spans, PRETRAINED, by_id)]


def job_resources(job: Job) -> dict[str, str | None]:
    """The properties of a job that may explain a difference in its load."""
    resources: dict[str, str | None] = {
        "world_size": _distinct([job.world_size]),
        "ranks": _distinct([len(job.ranks)]),
        "hosts": _distinct([rank.host for rank in job.ranks]),
        "attempt": _distinct([job.attempt]),
        "strategy": _distinct([rank.strategy for rank in job.ranks]),
        "checkpoint": _distinct([rank.checkpoint for rank in job.ranks]),
    }
    for key in LOAD_KEYS:
        resources[key] = _distinct([value for rank in job.ranks for value in load_values(rank, key)])
    libraries = sorted({key for rank in job.ranks for key in rank.resource if key.startswith(sc.LIB_PREFIX)})
    for key in [*RESOURCE_KEYS, *libraries]:
        resources[key] = _distinct([rank.resource.get(key) for rank in job.ranks])
    return resources


def resource_rows(a: Job, b: Job) -> list[ResourceRow]:
    """Every property present on at least one side, and whether the two sides differ."""
    resources_a, resources_b = job_resources(a), job_resources(b)
    names = dict.fromkeys([*resources_a, *resources_b])
    pairs = [(name, resources_a.get(name), resources_b.get(name)) for name in names]
    return [
        ResourceRow(name, in_a, in_b, in_a != in_b)
        for name, in_a, in_b in pairs
        if in_a is not None or in_b is not None
    ]


def compared_job(job: Job, source: str, skipped: int) -> ComparedJob:
    return ComparedJob(source, job.trace_id, job.job_id, job.attempt, job.run, rfc3339_nanos(job.start_ns), skipped)


def job_findings(job: Job) -> list[Finding]:
    """The report's findings of the job (its startup's included), with their default thresholds."""
    return find([job]) + startup_findings(job, job_startup(job), Thresholds())


def rank_keys(job: Job, findings: list[Finding]) -> dict[int, object]:
    """Rank number → what alike ranks of the job share (``alike.rank_key``, with the report's findings)."""
    kinds = alike.kinds_by_rank(findings)
    return {number: alike.rank_key(rank, kinds.get(number, frozenset())) for number, rank in numbered(job).items()}


def rank_rows(a: Job, b: Job, found: tuple[list[Finding], list[Finding]]) -> list[list[int]]:
    """The table's rows of ranks: ranks alike in A and alike in B together (``alike.grouped``; a whole node a finding
    of A or B (``found``) tells as such shares one from two ranks on, as in the report)."""
    keys_a, keys_b = rank_keys(a, found[0]), rank_keys(b, found[1])
    numbers = sorted({*keys_a, *keys_b})
    return alike.grouped(
        numbers,
        lambda number: (keys_a.get(number), keys_b.get(number)),
        lambda pair: min(alike.least(key) for key in pair),  # type: ignore[attr-defined]
    )


def compare(
    a: Job, b: Job, source_a: str = "A", source_b: str = "B", skipped_a: int = 0, skipped_b: int = 0
) -> Comparison:
    found = job_findings(a), job_findings(b)
    return Comparison(
        a=compared_job(a, source_a, skipped_a),
        b=compared_job(b, source_b, skipped_b),
        phases=phase_rows(a, b),
        resources=resource_rows(a, b),
        rank_rows=rank_rows(a, b, found),
        # A whole node B's findings tell as such is titled as B tells it, else as A does (the report's titles).
        whole_nodes=alike.node_outliers(found[0]) | alike.node_outliers(found[1]),
    )


# Picking one job of a source ----------------------------------------------------------------------------------------

# ``ID``, ``ID@ATTEMPT`` or ``ID@ATTEMPT.RUN`` (RUN from 1, as the report's "run 2 of 2"; ATTEMPT empty where no process
# recorded one). ID is a job id, a trace id or a unique prefix of either, and may be empty after ``@`` (the only job).
PICK = re.compile(r"(?P<id>.*)@(?P<attempt>\d*)(?:\.(?P<run>[1-9]\d*))?")
PICK_HELP = "a job id, a trace id or a unique prefix of either; ID@ATTEMPT for one attempt of a restarted job"


def _named(jobs: list[Job], ident: str, exact: bool) -> list[Job]:
    trace = ident.lower()
    if exact:
        return [job for job in jobs if ident == job.job_id or trace == job.trace_id]
    return [job for job in jobs if (job.job_id or "").startswith(ident) or job.trace_id.startswith(trace)]


def pick_text(job: Job, jobs: list[Job]) -> str:
    """What picks ``job`` among ``jobs``: its job id (its trace id where it has none, or shares it with another trace),
    then ``@ATTEMPT`` where its trace holds several jobs, and ``.RUN`` where its attempt ran more than once."""
    ident = job.job_id
    if ident is None or any(other.job_id == ident and other.trace_id != job.trace_id for other in jobs):
        ident = job.trace_id
    same_trace = [other for other in jobs if other.trace_id == job.trace_id]
    if len(same_trace) == 1:
        return ident
    attempt = "" if job.attempt is None else str(job.attempt)
    runs = sum(1 for other in same_trace if other.attempt == job.attempt)
    return f"{ident}@{attempt}" + (f".{job.run + 1}" if runs > 1 else "")


def job_list(jobs: list[Job], among: list[Job]) -> str:
    """``ID (trace T, attempt N, started 2026-12-01T00:39:17Z), ...``: each job as picked, and what tells it apart."""
    entries = []
    for job in jobs:
        text, started = pick_text(job, among), rfc3339_nanos(job.start_ns)
        facts = [f"trace {job.trace_id}"] if not text.startswith(job.trace_id) else []
        facts += [f"attempt {job.attempt}"] if job.attempt is not None else []
        facts += [f"run {job.run + 1}"] if job.run else []
        facts += [f"started {started[:19]}Z"] if started else []
        entries.append(f"{text} ({', '.join(facts)})" if facts else text)
    return ", ".join(entries)


def pick_job(jobs: list[Job], pick: str | None, source: str, flag: str, both: str | None = None) -> Job:
    """The job of ``source`` that ``pick`` (the value of ``flag``) names, or its only job when ``pick`` is None.

    Raises ``SourceError``, one line listing the candidates and how to pick one, where that is not exactly one job.
    ``both`` (``--b-job``) is the other side's flag when both sides read this source and neither picked a job."""
    how = f"pick one with {flag} ID" if both is None else f"pick each side's with {flag} ID {both} ID"
    how += f" ({PICK_HELP})"
    if not jobs:
        raise SourceError(f"{source} holds no job")
    if pick is None:
        if len(jobs) == 1:
            return jobs[0]
        raise SourceError(f"{source} holds {len(jobs)} jobs: {job_list(jobs, jobs)}; {how}")
    attempt: str | None = None
    run: str | None = None
    named = _named(jobs, pick, exact=True)  # a job id may itself hold an @
    if not named:
        match = PICK.fullmatch(pick)
        ident = match.group("id") if match else pick
        if match:
            attempt, run = match.group("attempt"), match.group("run")
        named = _named(jobs, ident, exact=True) or _named(jobs, ident, exact=False)
    if not named:
        raise SourceError(f"no job of {source} matches {flag} {pick}; it holds {job_list(jobs, jobs)}")
    if len({job.trace_id for job in named}) > 1:
        raise SourceError(
            f"{flag} {pick} matches {len(named)} jobs of {source}: {job_list(named, jobs)}; give more of the id"
        )
    if attempt is not None:
        wanted = int(attempt) if attempt else None
        picked = [job for job in named if job.attempt == wanted and (run is None or job.run == int(run) - 1)]
        if not picked:
            raise SourceError(f"no job of {source} matches {flag} {pick}; that trace holds {job_list(named, jobs)}")
        named = picked
    if len(named) > 1:
        raise SourceError(
            f"{flag} {pick} names a trace of {source} with {len(named)} jobs: {job_list(named, jobs)}; {how}"
        )
    return named[0]
