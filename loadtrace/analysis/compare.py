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

from .ranks import FILE_SPANS, Job, RankLoad, int_attr, real_bytes

READ_SPANS = frozenset({"safetensors.read", "transformers.load_state_dict", "safetensors.load"})
RESOURCE_KEYS = ("loadtrace.version", "loadtrace.launcher", "loadtrace.cluster", "loadtrace.checkpoint.bytes")
LIB_PREFIX = "loadtrace.lib."


def _seconds(rank: RankLoad, names: frozenset[str]) -> float | None:
    """Summed duration of the rank's spans with these names; None when there are none (unknown is not zero)."""
    spans = [span for span in rank.spans if span.name in names]
    return round(sum(span.seconds for span in spans), 6) if spans else None


def phase_metrics(rank: RankLoad) -> dict[str, dict[str, float | int | None]]:
    """{phase: {metric: value}} for one rank."""
    file_spans = [span for span in rank.spans if span.name in FILE_SPANS]
    return {
        "open": {
            "seconds": _seconds(rank, FILE_SPANS),
            "count": rank.files_opened,
            "bytes": sum(int_attr(span.attributes, "loadtrace.file.size") for span in file_spans),
        },
        "read": {"seconds": _seconds(rank, READ_SPANS), "count": rank.tensors_read, "bytes": rank.read_bytes},
        "convert": {
            "seconds": _seconds(rank, frozenset({"transformers.convert"})),
            "count": rank.conversions,
            "bytes": rank.conversion_bytes,
        },
        "materialize": {
            "seconds": _seconds(rank, frozenset({"transformers.materialize_missing"})),
            "bytes": real_bytes(rank.materialized_bytes),
        },
        "load": {
            "seconds": None if rank.load_seconds is None else round(rank.load_seconds, 6),
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


def phase_rows(a: Job, b: Job) -> list[dict[str, Any]]:
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
                rows.append(
                    {
                        "phase": phase,
                        "rank": number,
                        "metric": metric,
                        "a": value_a,
                        "b": value_b,
                        "difference": difference,
                        "ratio": ratio,
                    }
                )
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
    keys = sorted({key for rank in job.ranks for key in rank.resource if key.startswith(LIB_PREFIX)})
    for key in [*RESOURCE_KEYS, *keys]:
        resources[key] = _distinct([rank.resource.get(key) for rank in job.ranks])
    return resources


def resource_rows(a: Job, b: Job) -> list[dict[str, Any]]:
    resources_a, resources_b = job_resources(a), job_resources(b)
    names = list(dict.fromkeys([*resources_a, *resources_b]))
    rows = [{"name": name, "a": resources_a.get(name), "b": resources_b.get(name)} for name in names]
    return [{**row, "differs": row["a"] != row["b"]} for row in rows if row["a"] is not None or row["b"] is not None]


def side(job: Job, source: str, skipped_lines: int) -> dict[str, Any]:
    return {"source": source, "trace_id": job.trace_id, "job_id": job.job_id, "skipped_lines": skipped_lines}


def compare(
    a: Job, b: Job, source_a: str = "A", source_b: str = "B", skipped_a: int = 0, skipped_b: int = 0
) -> dict[str, Any]:
    return {
        "a": side(a, source_a, skipped_a),
        "b": side(b, source_b, skipped_b),
        "phases": phase_rows(a, b),
        "resources": resource_rows(a, b),
    }
