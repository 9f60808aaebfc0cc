"""Spans → the ``loadtrace report`` object: jobs, per-rank records, findings. docs/report.md documents its schema.

The object is plain JSON data (dicts, lists, numbers, strings, null), built once and rendered by the CLI either as
JSON or as a table, so both outputs say the same thing.
"""

from __future__ import annotations

from typing import Any

from .findings import Finding, find, model_bytes
from .forecast import ForecastError, Target, forecast
from .nodes import job_nodes
from .ranks import Job, RankLoad, jobs_from_spans
from .sources import SpanSet, rfc3339_nanos


def rank_json(rank: RankLoad) -> dict[str, Any]:
    return {
        "trace_id": rank.trace_id,
        "rank": rank.rank,
        "instance": rank.instance,
        "world_size": rank.world_size,
        "local_world_size": rank.local_world_size,
        "host": rank.host,
        "strategy": rank.strategy,
        "checkpoint": rank.checkpoint,
        "load_seconds": None if rank.load_seconds is None else round(rank.load_seconds, 6),
        "loads": rank.loads,
        "files_opened": rank.files_opened,
        "tensors_read": rank.tensors_read,
        "read_bytes": rank.read_bytes,
        "conversions": rank.conversions,
        "conversion_bytes": rank.conversion_bytes,
        "materialized_bytes": rank.materialized_bytes,
        "materialized_sites": [{"site": site, "bytes": size} for site, size in rank.materialized_sites],
        "held_bytes": rank.held_bytes,
        "peak_rss_bytes": rank.peak_rss_bytes,
        "hook_errors": rank.hook_errors,
        "node_memory_bytes": rank.node_memory_bytes,
        "rss_before_bytes": rank.rss_before_bytes,
        "rss_after_bytes": rank.rss_after_bytes,
        "peak_rss_anon_bytes": rank.peak_rss_anon_bytes,
        "peak_rss_file_bytes": rank.peak_rss_file_bytes,
        "peak_rss_shmem_bytes": rank.peak_rss_shmem_bytes,
        "storage_read_bytes": rank.storage_read_bytes,
        "cached_bytes": rank.cached_bytes,
        "node_available_bytes": rank.node_available_bytes,
        "cgroup_memory_current_bytes": rank.cgroup_memory_current_bytes,
        "cgroup_memory_max_bytes": rank.cgroup_memory_max_bytes,
        "incomplete": rank.incomplete,
        "last_state": rank.last_state,
    }


def job_json(job: Job) -> dict[str, Any]:
    model = model_bytes(job)
    return {
        "trace_id": job.trace_id,
        "job_id": job.job_id,
        "start_time": rfc3339_nanos(job.start_ns),
        "world_size": job.world_size,
        "ranks": [rank.rank for rank in job.ranks],
        "model_bytes": model,
        "spans": sum(len(rank.spans) for rank in job.ranks),
        "nodes": job_nodes(job, model),
    }


def build_report(spans: SpanSet, target: Target | None = None) -> dict[str, Any]:
    """The report object; with a ``target``, also its ``forecast`` (the source must then hold exactly one job)."""
    jobs = jobs_from_spans(spans.spans, spans.progress)
    findings: list[Finding] = find(jobs)
    report: dict[str, Any] = {
        "traces": [job_json(job) for job in jobs],
        "ranks": [rank_json(rank) for job in jobs for rank in job.ranks],
        "findings": [finding.as_json() for finding in findings],
        "skipped_lines": spans.skipped_lines,
    }
    if target is not None:
        if len(jobs) != 1:
            ids = ", ".join(job.trace_id for job in jobs)
            raise ForecastError(f"a forecast scales one job; this source holds {len(jobs)} (traces {ids})")
        report["forecast"] = forecast(jobs[0], target)
    return report


def has_warnings(report: dict[str, Any]) -> bool:
    return any(finding["severity"] == "warning" for finding in report["findings"])
