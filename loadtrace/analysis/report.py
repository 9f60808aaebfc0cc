"""Spans → the ``loadtrace report`` model: jobs, per-rank records, findings, and the forecast when asked for.

docs/report.md documents its schema; ``model.to_json`` gives its JSON and ``loadtrace.render`` its table, so both
outputs say the same thing.
"""

from __future__ import annotations

from typing import Any

from .findings import find, finding_order
from .forecast import ForecastError, Target, forecast
from .model import JobSummary, Report, to_json
from .nodes import job_nodes
from .ranks import Job, jobs_from_spans
from .sources import SpanSet, rfc3339_nanos
from .startup import Thresholds, job_startup, startup_findings


def job_summary(job: Job) -> JobSummary:
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
        startup=job_startup(job),
    )


def report(spans: SpanSet, target: Target | None = None, thresholds: Thresholds | None = None) -> Report:
    """The report; with a ``target``, also its forecast (the source must then hold exactly one job). ``thresholds``:
    the startup findings' (docs/report.md, Startup), their defaults when None."""
    jobs = jobs_from_spans(spans.spans, spans.states)
    summaries = [job_summary(job) for job in jobs]
    limits = thresholds or Thresholds()
    late = [
        f for job, summary in zip(jobs, summaries, strict=True) for f in startup_findings(job, summary.startup, limits)
    ]
    result = Report(
        traces=summaries,
        ranks=[rank for job in jobs for rank in job.ranks],
        findings=sorted(find(jobs) + late, key=finding_order),
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
