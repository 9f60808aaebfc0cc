"""Spans → the ``loadtrace report`` model: jobs, per-rank records, findings, and the forecast when asked for.

docs/report.md documents its schema; ``model.to_json`` gives its JSON and ``loadtrace.render`` its table, so both
outputs say the same thing.
"""

from __future__ import annotations

from typing import Any

from .advice import next_step
from .compare import PICK, _named, pick_job
from .findings import find, finding_order
from .forecast import ForecastError, Target, forecast
from .model import Finding, JobSummary, PartialFile, Report, to_json
from .nodes import job_nodes
from .ranks import Job, jobs_from_spans
from .sources import DamagedFile, SourceError, SpanSet, rfc3339_nanos
from .sources.files import process_key
from .startup import Thresholds, job_startup, startup_findings

MAX_WORLD_SIZE = 1 << 20


def job_summary(job: Job, limits: Thresholds | None = None, damaged: list[DamagedFile] | None = None) -> JobSummary:
    model = job.model_bytes()
    return JobSummary(
        trace_id=job.trace_id,
        attempt=job.attempt,
        launch_id=job.launch_id,
        run=job.run,
        job_id=job.job_id,
        start_time=rfc3339_nanos(job.start_ns),
        world_size=job.world_size,
        ranks=[rank.rank for rank in job.ranks],
        model_bytes=model,
        spans=sum(len(rank.spans) for rank in job.ranks),
        nodes=job_nodes(job, model),
        startup=job_startup(job, limits),
        missing_ranks=missing_ranks(job),
        partial_files=partial_files(job, damaged or []),
    )


def partial_files(job: Job, damaged: list[DamagedFile]) -> list[PartialFile]:
    """The damaged trace files that speak for ranks of this job, with those ranks."""
    found = []
    for file in damaged:
        ranks = [
            r.rank for r in job.ranks if r.partial and any(process_key(s.resource) in file.processes for s in r.spans)
        ]
        if ranks:
            found.append(PartialFile(file.path, file.skipped_lines, file.cut_short, ranks))
    return found


def with_next_step(finding: Finding) -> Finding:
    finding.next_step = next_step(finding)
    return finding


def missing_ranks(job: Job) -> list[int]:
    """Ranks below the job's world size that none of its processes speaks for (none past ``MAX_WORLD_SIZE``: a corrupt
    span's world size must not make a list of billions)."""
    world = job.world_size or 0
    present = {rank.rank for rank in job.ranks}
    return [number for number in range(world) if number not in present] if world <= MAX_WORLD_SIZE else []


def select_jobs(jobs: list[Job], pick: str | None, latest: bool, source: str) -> list[Job]:
    """The jobs to report: all, or those of the trace ``pick`` names (``--job``: every attempt and run of it, or one
    with ``ID@ATTEMPT[.RUN]``); with ``latest`` (``--latest``), of those the one that started last: the job just run,
    one attempt and run, never the earlier launches of a job id used again."""
    chosen = jobs if pick is None else _picked(jobs, pick, source)
    if not latest:
        return chosen
    if not chosen:
        raise SourceError(f"{source} holds no job")
    return [max(chosen, key=lambda job: job.start_ns)]


def _picked(jobs: list[Job], pick: str, source: str) -> list[Job]:
    if PICK.fullmatch(pick) is None:
        named = _named(jobs, pick, exact=True) or _named(jobs, pick, exact=False)
        if named and len({job.trace_id for job in named}) == 1:
            return named
    return [pick_job(jobs, pick, source, "--job")]  # one attempt, or the one-line error naming the candidates


def report(
    spans: SpanSet,
    target: Target | None = None,
    thresholds: Thresholds | None = None,
    pick: str | None = None,
    latest: bool = False,
    source: str = "",
) -> Report:
    """The report; with a ``target``, also its forecast (the source must then hold exactly one job). ``thresholds``:
    the startup findings' (docs/report.md, Startup), their defaults when None. ``pick`` and ``latest`` narrow it to
    one job (``select_jobs``)."""
    damaged = spans.damaged_files
    jobs = select_jobs(jobs_from_spans(spans.spans, spans.states, damaged), pick, latest, source or "the source")
    limits = thresholds or Thresholds()
    summaries = [job_summary(job, limits, damaged) for job in jobs]
    late = [
        f for job, summary in zip(jobs, summaries, strict=True) for f in startup_findings(job, summary.startup, limits)
    ]
    result = Report(
        traces=summaries,
        ranks=[rank for job in jobs for rank in job.ranks],
        findings=[with_next_step(finding) for finding in sorted(find(jobs) + late, key=finding_order)],
        skipped_lines=spans.skipped_lines,
        skipped_state_files=spans.skipped_state_files,
    )
    if target is not None:
        if len(jobs) != 1:
            ids = ", ".join(job.label for job in jobs)
            raise ForecastError(f"a forecast scales one job; this source holds {len(jobs)} (traces {ids})")
        result.forecast = forecast(jobs[0], target)
    return result


def build_report(spans: SpanSet, target: Target | None = None) -> dict[str, Any]:
    """The report as the JSON data ``loadtrace report --format json`` prints (for scripts and tests)."""
    return to_json(report(spans, target))
