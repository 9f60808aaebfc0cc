"""Two runs of one job to compare, built by hand: the same model under other parameters, a minute apart."""

from __future__ import annotations

from loadtrace import semconv as sc
from support.otlp_lines import (
    MODEL_BYTES,
    T0,
    line,
    rank_load,
    resource,
    span,
)

MINUTE = 60 * 10**9


def params_job(
    job_id: str = "job-1",
    *,
    dtype: str | dict[int, str] = "default",
    load: dict | None = None,
    start: int = T0,
    attempt: int | None = None,
    pid: int = 1000,
    ranks: tuple[int, ...] = (0, 1),
) -> list[str]:
    """A plain job under its own job id (its trace id derived from it, as every rank derives it): one JSONL line per
    rank, each with a ``transformers.from_pretrained`` span carrying ``dtype`` (per rank when a dict) and ``load``."""
    trace, root = (format(n, f"0{width}x") for n, width in zip(sc.job_trace_ids(job_id), (32, 16), strict=True))
    lines = []
    for rank in ranks:
        value = dtype[rank] if isinstance(dtype, dict) else dtype
        spans = rank_load(trace, rank, "plain", MODEL_BYTES, start=start, memory={sc.DTYPE: value, **(load or {})})
        if rank == 0:
            spans = [span(sc.SPAN_JOB, trace, start, start, sid=root, **{"loadtrace__job__id": job_id})] + spans
        extra = {sc.JOB_ID: job_id, sc.PROCESS_PID: pid + rank, sc.SERVICE_INSTANCE_ID: f"{job_id}/rank-{rank}"}
        if attempt is not None:
            extra[sc.ATTEMPT] = attempt
        lines.append(line(resource(rank, world_size=len(ranks), **extra), spans))
    return lines
