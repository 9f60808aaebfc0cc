"""Promise: ranks that read disjoint slices are a sharded read, never a replica; the model's size is the checkpoint's
tensor bytes, not what one rank read; a rename alone is no conversion work. Hand-built spans (test_analysis_otlp)."""

from __future__ import annotations

from support.otlp_lines import MODEL_BYTES, SHARDS, attributes, job_lines, rank_load, trace_id_of

from loadtrace.analysis.findings import find
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import decode_line

TRACE = trace_id_of("tensor-parallel")
HALF = MODEL_BYTES // 2
REPLICATED = 8_192  # norms: every tensor-parallel rank reads them whole


def tp_rank(rank: int, strategy: str = "tp", *, partial: int = HALF - REPLICATED, **more) -> list[dict]:
    """A tensor-parallel rank: half the model read, most of it as slices; holds its half."""
    extra = {"loadtrace.read.partial_tensors": 14, "loadtrace.read.partial_bytes": partial}
    extra.update(more)
    return rank_load(TRACE, rank, strategy, HALF + REPLICATED, held={"cpu": HALF + REPLICATED}, memory=extra)


def job_of(ranks: dict[int, list[dict]]):
    spans = [s for text in job_lines(TRACE, ranks) for s in decode_line(text.encode()) or []]
    (job,) = jobs_from_spans(spans)
    return job, find([job])


def by_kind(findings) -> dict[str, object]:
    return {f.kind: f for f in findings}


def test_tensor_parallel_ranks_are_a_sharded_read_of_the_checkpoints_size():
    checkpoint = {"loadtrace.checkpoint.tensor_bytes": MODEL_BYTES}
    job, findings = job_of({0: tp_rank(0, **checkpoint), 1: tp_rank(1, **checkpoint)})
    assert job.model_bytes() == MODEL_BYTES  # not rank 0's read, half of it
    found = by_kind(findings)
    assert set(found) == {"sharded_read"}
    sharded = found["sharded_read"]
    assert (sharded.severity, sharded.ranks, sharded.bytes) == ("info", [0, 1], 2 * (HALF + REPLICATED))
    assert [r["partial_bytes"] for r in sharded.evidence["per_rank"]] == [HALF - REPLICATED] * 2
    assert "partly as tensor slices" in sharded.detail and "under strategy tp" in sharded.detail


def test_a_slice_reading_loader_without_transformers_takes_the_model_size_from_its_files():
    """No ``from_pretrained``: no strategy, no checkpoint tensor bytes; the distinct files the ranks opened."""
    ranks = {}
    for rank in (0, 1):
        spans = tp_rank(rank)
        spans[0]["name"] = "loadtrace.load"
        spans[0]["attributes"] = [a for a in spans[0]["attributes"] if a["key"] != "loadtrace.strategy"]
        ranks[rank] = spans
    job, findings = job_of(ranks)
    assert job.model_bytes() == MODEL_BYTES - MODEL_BYTES % SHARDS + SHARDS * 4096  # each file counted once
    assert set(by_kind(findings)) == {"sharded_read"}


def test_reading_slices_is_no_replica_and_a_whole_read_still_is():
    sliced = {
        0: tp_rank(0, "plain"),
        1: rank_load(
            TRACE,
            1,
            "plain",
            MODEL_BYTES,
            memory={"loadtrace.read.partial_tensors": 30, "loadtrace.read.partial_bytes": HALF},
        ),
    }
    assert "replicated_load" not in by_kind(job_of(sliced)[1])
    whole = {0: rank_load(TRACE, 0, "plain", MODEL_BYTES), 1: rank_load(TRACE, 1, "plain", MODEL_BYTES)}
    assert set(by_kind(job_of(whole)[1])) == {"replicated_load"}


def test_parts_that_do_not_make_up_the_model_are_no_sharded_read():
    checkpoint = {"loadtrace.checkpoint.tensor_bytes": 4 * MODEL_BYTES}  # four ranks' worth, two reported
    job, findings = job_of({0: tp_rank(0, **checkpoint), 1: tp_rank(1, **checkpoint)})
    assert job.model_bytes() == 4 * MODEL_BYTES and not findings


def with_renames(spans: list[dict], rename_bytes: int) -> list[dict]:
    """The load and its convert span say how many of their bytes were plain renames
    (``loadtrace.convert.op.Rename.bytes``)."""
    for span in spans:
        if span["name"] in ("transformers.convert", "transformers.from_pretrained"):
            span["attributes"] += attributes({"loadtrace.convert.op.Rename.bytes": rename_bytes})
    return spans


def test_duplicate_conversion_rests_on_bytes_real_operations_produced():
    fsdp = "fsdp_cpu_ram_efficient"
    rank0 = with_renames(
        rank_load(TRACE, 0, fsdp, MODEL_BYTES, conversions=21, conversion_bytes=MODEL_BYTES), MODEL_BYTES
    )
    renamed_only = with_renames(rank_load(TRACE, 1, fsdp, 0, conversions=21, conversion_bytes=MODEL_BYTES), MODEL_BYTES)
    assert "duplicate_conversion" not in by_kind(job_of({0: rank0, 1: renamed_only})[1])
    ops = 393_216
    rank0 = with_renames(
        rank_load(TRACE, 0, fsdp, MODEL_BYTES, conversions=25, conversion_bytes=MODEL_BYTES), MODEL_BYTES - ops
    )
    converted = with_renames(
        rank_load(TRACE, 1, fsdp, 0, conversions=25, conversion_bytes=MODEL_BYTES), MODEL_BYTES - ops
    )
    finding = by_kind(job_of({0: rank0, 1: converted})[1])["duplicate_conversion"]
    assert finding.bytes == ops
    assert finding.evidence["per_rank"][0]["rename_bytes"] == MODEL_BYTES - ops
