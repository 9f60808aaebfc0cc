"""Two jobs side by side: per phase and per rank, time, bytes and peak RSS, plus the resource differences that may
explain them (world size, hosts, library versions, strategy, checkpoint).

Phases, each from the spans named in README.md's span reference:
- ``open``: ``safetensors.open`` / ``torch.load`` spans (their time, the files' sizes, how many);
- ``read``: tensors and bytes read; its time only where spans of its own exist (``safetensors.read`` at tensor detail,
  ``transformers.load_state_dict``, ``safetensors.load``), since at default detail reads happen inside file spans;
- ``convert``: ``transformers.convert`` (time, ``loadtrace.convert.bytes``, ``loadtrace.convert.count``);
- ``materialize``: ``transformers.materialize_missing`` time, and the real (non-meta) bytes ``zeros_like`` /
  ``empty_like`` created during the load;
- ``load``: the whole load (outermost ``transformers.from_pretrained`` / ``loadtrace.load``), the real bytes the model
  holds when it returns, and peak RSS.
"""

from __future__ import annotations

from typing import Any

from .. import semconv as sc
from .model import ComparedJob, Comparison, PhaseRow, RankLoad, ResourceRow
from .ranks import Job, int_attr, real_bytes

# Spans of their own for reading: only at tensor detail, or around a state dict (at default detail reads happen inside
# file spans, and the read phase has no time).
READ_SPANS = frozenset({sc.SPAN_SAFETENSORS_READ, sc.SPAN_LOAD_STATE_DICT, sc.SPAN_SAFETENSORS_LOAD})
RESOURCE_KEYS = (sc.VERSION, sc.LAUNCHER, sc.CLUSTER, sc.CHECKPOINT_BYTES)


def _seconds(rank: RankLoad, names: frozenset[str]) -> float | None:
    """Summed duration of the rank's spans with these names; None when there are none (unknown is not zero)."""
    spans = [span for span in rank.spans if span.name in names]
    return round(sum(span.seconds for span in spans), 6) if spans else None


def phase_metrics(rank: RankLoad) -> dict[str, dict[str, float | int | None]]:
    """{phase: {metric: value}} for one rank."""
    file_spans = [span for span in rank.spans if span.name in sc.FILE_SPANS]
    return {
        "open": {
            "seconds": _seconds(rank, sc.FILE_SPANS),
            "count": rank.files_opened,
            "bytes": sum(int_attr(span.attributes, sc.FILE_SIZE) for span in file_spans),
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
    }


PHASES = ("open", "read", "convert", "materialize", "load")


def _difference(a: float | int | None, b: float | int | None) -> tuple[float | int | None, float | None]:
    if a is None or b is None:
        return None, None
    difference = b - a
    if isinstance(difference, float):
        difference = round(difference, 6)
    return difference, (round(b / a, 4) if a else None)


def phase_rows(a: Job, b: Job) -> list[PhaseRow]:
    """One row per (phase, rank, metric): A's value, B's, B − A and B / A (null where either is unknown or A is 0)."""
    numbers = sorted({rank.rank for rank in a.ranks + b.ranks if rank.rank is not None})
    metrics_a = {rank.rank: phase_metrics(rank) for rank in a.ranks if rank.rank is not None}
    metrics_b = {rank.rank: phase_metrics(rank) for rank in b.ranks if rank.rank is not None}
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


def job_resources(job: Job) -> dict[str, str | None]:
    """The properties of a job that may explain a difference in its load."""
    resources: dict[str, str | None] = {
        "world_size": _distinct([job.world_size]),
        "ranks": _distinct([len(job.ranks)]),
        "hosts": _distinct([rank.host for rank in job.ranks]),
        "strategy": _distinct([rank.strategy for rank in job.ranks]),
        "checkpoint": _distinct([rank.checkpoint for rank in job.ranks]),
    }
    keys = sorted({key for rank in job.ranks for key in rank.resource if key.startswith(sc.LIB_PREFIX)})
    for key in [*RESOURCE_KEYS, *keys]:
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


def compare(
    a: Job, b: Job, source_a: str = "A", source_b: str = "B", skipped_a: int = 0, skipped_b: int = 0
) -> Comparison:
    return Comparison(
        a=ComparedJob(source_a, a.trace_id, a.job_id, skipped_a),
        b=ComparedJob(source_b, b.trace_id, b.job_id, skipped_b),
        phases=phase_rows(a, b),
        resources=resource_rows(a, b),
    )
