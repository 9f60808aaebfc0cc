"""Per-rank records: totals come from the outermost load spans, a file span outside every load counts on its own, jobs
are traces and ranks are resources."""

from __future__ import annotations

from support.otlp_lines import MODEL_BYTES, T0, field_fact_job, line, rank_load, resource, span, span_id, trace_id_of

from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import decode_line

TRACE = trace_id_of("ranks")


def spans_of(*lines: str):
    return [s for text in lines for s in decode_line(text.encode()) or []]


def test_a_file_span_that_hangs_from_a_load_is_counted_by_it_even_when_it_began_first():
    """Four threads each ``open()`` a file and then ``load(f.read())`` it: the load of reads outside any load opens
    with whichever thread's read comes first, after other threads opened theirs. Their file spans hang from it; its
    totals count them, and the rank's reads are the load's, not the load's plus those files again."""
    load_id = span_id()
    load = span("loadtrace.load", TRACE, T0 + 500, T0 + 10_000, sid=load_id, **{
        "loadtrace.load.name": "reads outside any load", "loadtrace.read.bytes": 300, "loadtrace.read.tensors": 3,
    })  # fmt: skip
    early = span("safetensors.load", TRACE, T0, T0 + 2_000, parent=load_id, **{"loadtrace.read.bytes": 100})
    inside = span("safetensors.load", TRACE, T0 + 600, T0 + 3_000, parent=load_id, **{"loadtrace.read.bytes": 200})
    (job,) = jobs_from_spans(spans_of(line(resource(0, world_size=1, local_world_size=1), [load, early, inside])))
    assert job.ranks[0].read_bytes == 300


def test_a_rank_record_takes_the_load_span_totals_not_its_file_spans_again():
    (job,) = jobs_from_spans(spans_of(*field_fact_job("5.12.0", "fsdp_cpu_ram_efficient")))
    rank0, rank1 = job.ranks
    assert (rank0.rank, rank0.world_size, rank0.local_world_size, rank0.host) == (0, 2, 2, "node-0")
    assert (rank0.files_opened, rank0.tensors_read, rank0.read_bytes) == (5, 69, MODEL_BYTES)
    assert (rank0.conversions, rank0.conversion_bytes, rank0.strategy) == (25, MODEL_BYTES, "fsdp_cpu_ram_efficient")
    assert rank0.load_seconds == 1.5 and rank0.peak_rss_bytes == 600_000_000
    assert rank1.materialized_bytes == {"cpu": 1_009_216}
    assert rank1.materialized_sites == [("modeling_utils.py:4864 zeros_like cpu", 1_009_216)]
    assert rank1.held_bytes == {"cpu": 1_009_216}
    assert job.job_id == "job-1" and job.world_size == 2


def test_a_file_span_outside_every_load_is_counted_from_its_own_attributes():
    load = rank_load(TRACE, 0, "plain", 1000, files=1, tensors=2, start=T0)
    bare = span(
        "torch.load",
        TRACE,
        T0 + 5_000_000_000,
        T0 + 6_000_000_000,
        **{"loadtrace.read.tensors": 3, "loadtrace.read.bytes": 300, "loadtrace.file.path": "/x.bin"},
    )
    from_bytes = span(
        "safetensors.load",
        TRACE,
        T0 + 7_000_000_000,
        T0 + 8_000_000_000,
        **{"loadtrace.read.tensors": 1, "loadtrace.read.bytes": 40},
    )
    (job,) = jobs_from_spans(spans_of(line(resource(0), load + [bare, from_bytes])))
    (rank,) = job.ranks
    assert (rank.files_opened, rank.tensors_read, rank.read_bytes) == (2, 6, 1340)


def test_a_rank_without_any_load_span_is_summarised_from_its_file_spans():
    bare = span("safetensors.open", TRACE, T0, T0 + 10, **{"loadtrace.read.tensors": 4, "loadtrace.read.bytes": 64})
    (job,) = jobs_from_spans(spans_of(line(resource(3), [bare])))
    (rank,) = job.ranks
    assert (rank.rank, rank.files_opened, rank.read_bytes, rank.load_seconds, rank.peak_rss_bytes) == (
        3,
        1,
        64,
        None,
        None,
    )


def test_a_load_nested_in_another_counts_once():
    outer_id = span_id()
    inner = rank_load(TRACE, 0, "plain", 5000, start=T0 + 10)
    inner[0]["parentSpanId"] = outer_id
    outer = span(
        "loadtrace.load",
        TRACE,
        T0,
        T0 + 3_000_000_000,
        sid=outer_id,
        **{
            "loadtrace.load.name": "mine",
            "loadtrace.files.opened": 5,
            "loadtrace.read.tensors": 69,
            "loadtrace.read.bytes": 5000,
            "loadtrace.materialized.bytes.cpu": 10,
        },
    )
    (job,) = jobs_from_spans(spans_of(line(resource(0), [outer] + inner)))
    (rank,) = job.ranks
    assert (rank.loads, rank.files_opened, rank.read_bytes, rank.load_seconds) == (1, 5, 5000, 3.0)
    assert rank.materialized_bytes == {"cpu": 10}
    assert rank.strategy == "plain" and rank.held_bytes == {}


def test_spans_group_by_trace_then_by_rank_with_instance_id_as_fallback():
    other = trace_id_of("other-job")
    no_rank = {"attributes": [{"key": "service.instance.id", "value": {"stringValue": "host-a/77"}}]}
    lines = [
        line(resource(1), rank_load(TRACE, 1, "zero3", 10, start=T0 + 1)),
        line(resource(0), rank_load(TRACE, 0, "zero3", 10, start=T0)),
        line(resource(0), rank_load(other, 0, "plain", 20, start=T0 - 100)),
        line(no_rank, rank_load(other, 0, "plain", 20, start=T0 + 5)),
    ]
    jobs = jobs_from_spans(spans_of(*lines))
    assert [job.trace_id for job in jobs] == [other, TRACE]  # first span first
    assert [r.rank for r in jobs[1].ranks] == [0, 1]
    assert [(r.rank, r.instance) for r in jobs[0].ranks] == [(0, "job-1/rank-0"), (None, "host-a/77")]


def test_the_same_span_read_twice_counts_once():
    text = line(resource(0), rank_load(TRACE, 0, "plain", 123))
    (job,) = jobs_from_spans(spans_of(text, text))
    assert job.ranks[0].read_bytes == 123


def test_attributes_of_the_wrong_type_count_as_absent():
    odd = span(
        "transformers.from_pretrained",
        TRACE,
        T0,
        T0 + 1,
        **{
            "loadtrace.read.bytes": "lots",
            "loadtrace.files.opened": True,
            "loadtrace.strategy": 3,
            "loadtrace.materialized.sites": "not-a-list",
            "loadtrace.rss.peak": 1.5,
        },
    )
    (job,) = jobs_from_spans(spans_of(line(resource(0), [odd])))
    rank = job.ranks[0]
    assert (rank.read_bytes, rank.files_opened, rank.strategy, rank.materialized_sites) == (0, 0, None, [])
