"""Hand-built OTLP JSON Lines, exactly as the OTLP JSON spec writes them (hex ids, nanoseconds and 64-bit integers as
decimal strings): resources, spans, one rank's load with exact counters, whole jobs (the field-facts jobs of
docs/field-facts.md), written to files for the readers (analysis/test_analysis_otlp.py checks they read back exactly).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

TENSORS, SHARDS = 69, 5
MODEL_BYTES = 1_009_152  # the field-facts tiny Qwen3-MoE: 5 shards, 69 tensors


T0 = 1_764_493_200_000_000_000  # 2025-11-30T09:00:00Z in nanoseconds


_ids = itertools.count(1)


def any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": any_value(value)} for key, value in values.items()]


def span_id() -> str:
    return f"{next(_ids):016x}"


def span(
    name: str, trace_id: str, start: int, end: int, parent: str = "", sid: str | None = None, **attrs: Any
) -> dict:
    return {
        "traceId": trace_id,
        "spanId": sid or span_id(),
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attributes({key.replace("__", "."): value for key, value in attrs.items()}),
        "status": {},
    }


def resource(
    rank: int, world_size: int = 2, local_world_size: int | None = 2, host: str = "node-0", **extra: Any
) -> dict:
    values: dict[str, Any] = {
        "service.name": "loadtrace",
        "service.instance.id": f"job-1/rank-{rank}",
        "host.name": host,
        "process.pid": 1000 + rank,
        "loadtrace.rank": rank,
        "loadtrace.local_rank": rank % (local_world_size or world_size),
        "loadtrace.world_size": world_size,
        "loadtrace.job.id": "job-1",
        "loadtrace.lib.transformers": "5.24.0",
        "loadtrace.lib.torch": "2.13.0",
    }
    if local_world_size is not None:
        values["loadtrace.local_world_size"] = local_world_size
    values.update(extra)
    return {"attributes": attributes(values)}


def traces_data(res: dict, spans: list[dict]) -> dict:
    return {"resourceSpans": [{"resource": res, "scopeSpans": [{"scope": {"name": "loadtrace"}, "spans": spans}]}]}


def line(res: dict, spans: list[dict]) -> str:
    return json.dumps(traces_data(res, spans)) + "\n"


def rank_load(
    trace_id: str,
    rank: int,
    strategy: str,
    read_bytes: int,
    *,
    materialized: dict[str, int] | None = None,
    sites: list[tuple[str, int]] | None = None,
    held: dict[str, int] | None = None,
    conversion_bytes: int = 0,
    conversions: int = 0,
    peak_rss: int = 600_000_000,
    seconds: float = 1.5,
    files: int = SHARDS,
    tensors: int = TENSORS,
    start: int = T0,
    memory: dict[str, int] | None = None,
) -> list[dict]:
    """One rank's spans for one ``from_pretrained``, shaped like loadtrace's: the load span with its totals, one
    ``safetensors.open`` per shard, a convert and a materialize_missing phase span. ``memory`` adds or replaces
    attributes of the load span (see ``memory_attributes``)."""
    end = start + int(seconds * 1e9)
    load_id = span_id()
    totals: dict[str, Any] = {
        "loadtrace.model.class": "Qwen3MoeForCausalLM",
        "loadtrace.checkpoint": "/ckpt/tiny-qwen3-moe",
        "loadtrace.strategy": strategy,
        "loadtrace.files.opened": files,
        "loadtrace.read.tensors": tensors if read_bytes else 0,
        "loadtrace.read.bytes": read_bytes,
        "loadtrace.rss.before": 100_000_000,
        "loadtrace.rss.peak": peak_rss,
        "loadtrace.materialized.calls": len(sites or []),
        "loadtrace.hook_errors": 0,
    }
    for device, size in (materialized or {}).items():
        totals[f"loadtrace.materialized.bytes.{device}"] = size
    if sites:
        totals["loadtrace.materialized.sites"] = [site for site, _ in sites]
        totals["loadtrace.materialized.site_bytes"] = [size for _, size in sites]
    for device, size in (held or {}).items():
        totals[f"loadtrace.model.held_bytes.{device}"] = size
    if conversions or conversion_bytes:  # a load carries its conversions, as its convert phase does
        totals.update({"loadtrace.convert.count": conversions, "loadtrace.convert.bytes": conversion_bytes})
    totals.update(memory or {})
    result = [span("transformers.from_pretrained", trace_id, start, end, sid=load_id, **totals)]
    step = (end - start) // (files + 3)
    for index in range(files):
        share = read_bytes // files + (read_bytes % files if index == files - 1 else 0)
        result.append(
            span(
                "safetensors.open",
                trace_id,
                start + step * (index + 1),
                start + step * (index + 2),
                parent=load_id,
                **{
                    "loadtrace.file.path": f"/ckpt/tiny-qwen3-moe/model-{index + 1:05d}-of-{files:05d}.safetensors",
                    "loadtrace.file.size": MODEL_BYTES // files + 4096,
                    "loadtrace.file.tensors": TENSORS // files,
                    "loadtrace.read.tensors": (tensors // files) if read_bytes else 0,
                    "loadtrace.read.bytes": share,
                },
            )
        )
    result.append(
        span(
            "transformers.convert",
            trace_id,
            start + step,
            end - step,
            parent=load_id,
            **{
                "loadtrace.calls": 1,
                "loadtrace.convert.count": conversions,
                "loadtrace.convert.bytes": conversion_bytes,
            },
        )
    )
    phase = {"loadtrace.calls": 1}
    phase.update({f"loadtrace.materialized.bytes.{d}": size for d, size in (materialized or {}).items()})
    result.append(
        span("transformers.materialize_missing", trace_id, end - step, end - step // 2, parent=load_id, **phase)
    )
    return result


def memory_attributes(
    before: int,
    peak: int,
    *,
    anon: tuple[int, int] | None = None,
    file: tuple[int, int] | None = None,
    after: int | None = None,
    storage_read: int | None = None,
    cached: int | None = None,
    node_total: int | None = None,
    node_available: int | None = None,
    cgroup_current: int | None = None,
    cgroup_max: int | None = None,
) -> dict[str, int]:
    """The memory and I/O attributes loadtrace puts on a load span: RSS before / after / peak, by kind (anon and file
    as (before, peak); after = peak unless given), storage reads, node and cgroup memory. None leaves one out."""
    values: dict[str, int | None] = {
        "loadtrace.rss.before": before,
        "loadtrace.rss.after": peak if after is None else after,
        "loadtrace.rss.peak": peak,
        "loadtrace.io.storage_read_bytes": storage_read,
        "loadtrace.io.cached_bytes": cached,
        "loadtrace.node.memory_total": node_total,
        "loadtrace.node.memory_available": node_available,
        "loadtrace.cgroup.memory_current": cgroup_current,
        "loadtrace.cgroup.memory_max": cgroup_max,
    }
    for kind, pair in (("anon", anon), ("file", file)):
        if pair is not None:
            values[f"loadtrace.rss_{kind}.before"], values[f"loadtrace.rss_{kind}.peak"] = pair
            values[f"loadtrace.rss_{kind}.after"] = pair[1]
    if anon is not None:
        values.update(
            {"loadtrace.rss_shmem.before": 4096, "loadtrace.rss_shmem.after": 4096, "loadtrace.rss_shmem.peak": 4096}
        )
    return {key: value for key, value in values.items() if value is not None}


def job_lines(trace_id: str, ranks: dict[int, list[dict]], world_size: int = 2, **resource_extra: Any) -> list[str]:
    """One JSONL line per rank (rank 0 also writes the job root), as each rank's exporter would."""
    lines = []
    for rank, spans in ranks.items():
        if rank == 0:
            spans = [span("loadtrace.job", trace_id, T0, T0, **{"loadtrace.job.id": "job-1"})] + spans
        lines.append(line(resource(rank, world_size=world_size, **resource_extra), spans))
    return lines


def trace_id_of(name: str) -> str:
    return (name.encode().hex() + "0" * 32)[:32]


# The field-facts table: each transformers version x strategy, two ranks, what each rank really did. The numbers are
# those loadtrace recorded for the 2-rank torchrun runs of tests/workers/count_load.py on this machine.
ZEROS_LIKE_512 = "modeling_utils.py:4864 zeros_like cpu"


ZEROS_LIKE_BUFFERS = "modeling_utils.py:5120 zeros_like cpu"


BUFFER_BYTES = 64  # the non-persistent buffers every rank creates


HELD_BYTES = MODEL_BYTES + BUFFER_BYTES  # parameters and buffers of a whole model


ZERO3_PARTITION = 504_640  # what a ZeRO-3 rank of two holds: its own partition, about half the model


FSDP = "fsdp_cpu_ram_efficient"


def field_fact_job(version: str, strategy: str) -> list[str]:
    trace = trace_id_of(f"{version}-{strategy}")
    if strategy == "zero3":
        rank0 = rank_load(trace, 0, strategy, MODEL_BYTES, held={"cpu": ZERO3_PARTITION})
        # 5.12: rank 1 reads everything it then throws away; 5.24: get_slice with map_location="meta", 0 B read.
        rank1_reads = MODEL_BYTES if version == "5.12.0" else 0
        rank1 = rank_load(trace, 1, strategy, rank1_reads, held={"cpu": ZERO3_PARTITION})
        return job_lines(trace, {0: rank0, 1: rank1}, **{"loadtrace.lib.transformers": version})

    def full_load(rank: int, created: int = BUFFER_BYTES, site: str = ZEROS_LIKE_BUFFERS) -> list[dict]:
        return rank_load(
            trace, rank, strategy, MODEL_BYTES, materialized={"cpu": created}, sites=[(site, created)],
            held={"cpu": HELD_BYTES}, conversions=25, conversion_bytes=MODEL_BYTES,
        )  # fmt: skip

    if strategy == FSDP and version == "5.12.0":
        # Rank 1 reads everything too, then zeros_like fills a whole second model on CPU.
        rank1 = full_load(1, created=1_009_216, site=ZEROS_LIKE_512)
    else:
        # Plain: as expected. 5.24 FSDP: zeros_like only for buffers, but rank 1 reads all and keeps it on CPU.
        rank1 = full_load(1)
    return job_lines(trace, {0: full_load(0), 1: rank1}, **{"loadtrace.lib.transformers": version})


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path
