"""Findings rest on bytes read, converted, created and held per rank: the field-facts table reproduced, each threshold
at its edge, and no warning where the strategy expects the work."""

from __future__ import annotations

import pytest
from support.otlp_lines import (
    MODEL_BYTES,
    ZEROS_LIKE_512,
    field_fact_job,
    job_lines,
    line,
    rank_load,
    resource,
    trace_id_of,
)

from loadtrace import semconv as sc
from loadtrace.analysis.findings import find
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import decode_line
from loadtrace.analysis.units import human_bytes

TRACE = trace_id_of("findings")
FSDP, ZERO3 = "fsdp_cpu_ram_efficient", "zero3"


def findings_of(lines: list[str]):
    spans = [s for text in lines for s in decode_line(text.encode()) or []]
    return find(jobs_from_spans(spans))


def kinds(findings) -> set[tuple[str, str, tuple[int, ...]]]:
    return {(f.kind, f.severity, tuple(f.ranks)) for f in findings}


@pytest.mark.parametrize(
    "version, strategy, expected",
    [
        # 5.12 FSDP rank 1: reads everything, zeros_like fills a second model on CPU, converts again.
        (
            "5.12.0",
            FSDP,
            {
                ("duplicate_checkpoint_read", "warning", (1,)),
                ("nonzero_rank_materialization", "warning", (1,)),
                ("duplicate_conversion", "warning", (1,)),
            },
        ),
        # 5.24 FSDP rank 1: zeros_like only 64 B, but it reads everything and keeps the whole model on CPU.
        (
            "5.24.0",
            FSDP,
            {
                ("duplicate_checkpoint_read", "warning", (1,)),
                ("nonzero_rank_materialization", "warning", (1,)),
                ("duplicate_conversion", "warning", (1,)),
            },
        ),
        # 5.12 ZeRO-3 rank 1 reads the whole checkpoint it then throws away.
        ("5.12.0", ZERO3, {("duplicate_checkpoint_read", "warning", (1,))}),
        # 5.24 ZeRO-3 rank 1 opens the files but reads 0 B: nothing to report.
        ("5.24.0", ZERO3, set()),
        # Plain data parallel: every rank reads everything, as it should.
        ("5.12.0", "plain", {("replicated_load", "info", (1,))}),
        ("5.24.0", "plain", {("replicated_load", "info", (1,))}),
    ],
)
def test_the_field_facts_table(version, strategy, expected):
    assert kinds(findings_of(field_fact_job(version, strategy))) == expected


def test_5_12_fsdp_materialization_names_the_zeros_like_call_site():
    (finding,) = [f for f in findings_of(field_fact_job("5.12.0", FSDP)) if f.kind == "nonzero_rank_materialization"]
    assert finding.bytes == 1_009_216
    assert ZEROS_LIKE_512 in finding.detail
    (evidence,) = finding.evidence["per_rank"]
    assert evidence["sites"] == [{"site": ZEROS_LIKE_512, "bytes": 1_009_216}]
    assert (evidence["created"], evidence["held"]) == (True, True)


def test_5_24_fsdp_materialization_rests_on_what_rank_1_holds_not_on_zeros_like():
    (finding,) = [f for f in findings_of(field_fact_job("5.24.0", FSDP)) if f.kind == "nonzero_rank_materialization"]
    (evidence,) = finding.evidence["per_rank"]
    assert (evidence["created"], evidence["held"]) == (False, True)
    assert finding.bytes == MODEL_BYTES + 64 and "when from_pretrained returns" in finding.detail


def test_each_finding_projects_host_memory_per_node():
    (finding,) = findings_of(field_fact_job("5.12.0", ZERO3))
    assert finding.projected_node_bytes == MODEL_BYTES * 2
    assert "x 2 ranks per node = 2,018,304 B" in finding.detail
    # Eight ranks per node, three of them reading: the worst rank's bytes × 8.
    ranks = {r: rank_load(TRACE, r, ZERO3, MODEL_BYTES if r in (0, 2, 5) else 0) for r in range(8)}
    lines = [line(resource(r, world_size=8, local_world_size=8), spans) for r, spans in ranks.items()]
    (finding,) = findings_of(lines)
    assert (finding.ranks, finding.bytes, finding.projected_node_bytes) == ([2, 5], 2 * MODEL_BYTES, 8 * MODEL_BYTES)
    assert "ranks 2, 5 read" in finding.detail and " each " in finding.detail


def test_without_local_world_size_ranks_per_node_are_counted_by_host():
    ranks = {r: rank_load(TRACE, r, ZERO3, MODEL_BYTES) for r in range(4)}
    lines = [line(resource(r, world_size=4, local_world_size=None, host=f"node-{r // 2}"), s) for r, s in ranks.items()]
    (finding,) = findings_of(lines)
    assert finding.evidence["ranks_per_node"] == 2 and finding.projected_node_bytes == 2 * MODEL_BYTES


@pytest.mark.parametrize("rank1_read, expected", [(MODEL_BYTES // 100, False), (MODEL_BYTES // 100 + 1, True)])
def test_duplicate_read_tolerates_one_percent_of_the_loading_ranks_bytes(rank1_read, expected):
    lines = job_lines(TRACE, {0: rank_load(TRACE, 0, ZERO3, MODEL_BYTES), 1: rank_load(TRACE, 1, ZERO3, rank1_read)})
    assert any(f.kind == "duplicate_checkpoint_read" for f in findings_of(lines)) is expected


@pytest.mark.parametrize("created, expected", [(MODEL_BYTES // 2 - 1, False), (MODEL_BYTES // 2, True)])
def test_materialization_counts_from_half_the_model(created, expected):
    rank1 = rank_load(TRACE, 1, FSDP, 0, materialized={"cpu": created, "meta": 10 * MODEL_BYTES})
    lines = job_lines(TRACE, {0: rank_load(TRACE, 0, FSDP, MODEL_BYTES), 1: rank1})
    assert kinds(findings_of(lines)) == ({("nonzero_rank_materialization", "warning", (1,))} if expected else set())


def test_meta_tensors_are_never_a_materialization():
    rank1 = rank_load(
        TRACE,
        1,
        FSDP,
        0,
        materialized={"meta": MODEL_BYTES},
        held={"meta": MODEL_BYTES},
        sites=[("modeling_utils.py:1 empty_like meta", MODEL_BYTES)],
    )
    assert findings_of(job_lines(TRACE, {0: rank_load(TRACE, 0, FSDP, MODEL_BYTES), 1: rank1})) == []


def test_a_zero3_rank_holding_its_own_partition_is_not_a_finding_but_the_whole_model_is():
    rank0 = rank_load(TRACE, 0, ZERO3, MODEL_BYTES)
    partition = rank_load(TRACE, 1, ZERO3, 0, held={"cuda": MODEL_BYTES // 2})
    assert findings_of(job_lines(TRACE, {0: rank0, 1: partition})) == []
    whole = rank_load(TRACE, 1, ZERO3, 0, held={"cuda": MODEL_BYTES})
    assert kinds(findings_of(job_lines(TRACE, {0: rank0, 1: whole}))) == {
        ("nonzero_rank_materialization", "warning", (1,))
    }


def test_rank_0_may_do_everything():
    rank0 = rank_load(
        TRACE,
        0,
        FSDP,
        MODEL_BYTES,
        materialized={"cpu": MODEL_BYTES},
        held={"cpu": MODEL_BYTES},
        conversion_bytes=MODEL_BYTES,
        conversions=3,
    )
    assert findings_of(job_lines(TRACE, {0: rank0, 1: rank_load(TRACE, 1, FSDP, 0)})) == []


def test_plain_fsdp_and_an_unknown_strategy_are_replicated_not_warned():
    for strategy in ("plain", "fsdp", ""):
        lines = job_lines(TRACE, {r: rank_load(TRACE, r, strategy, MODEL_BYTES, conversion_bytes=10) for r in (0, 1)})
        assert kinds(findings_of(lines)) == {("replicated_load", "info", (1,))}


def test_a_partial_replicated_read_is_not_reported():
    lines = job_lines(
        TRACE, {0: rank_load(TRACE, 0, "plain", MODEL_BYTES), 1: rank_load(TRACE, 1, "plain", MODEL_BYTES // 2)}
    )
    assert findings_of(lines) == []


def test_duplicate_conversion_rests_on_conversion_bytes():
    rank0 = rank_load(TRACE, 0, ZERO3, MODEL_BYTES, conversions=2, conversion_bytes=1000)
    counted_only = rank_load(TRACE, 1, ZERO3, 0, conversions=2, conversion_bytes=0)
    assert findings_of(job_lines(TRACE, {0: rank0, 1: counted_only})) == []
    converted = rank_load(TRACE, 1, ZERO3, 0, conversions=2, conversion_bytes=1000)
    (finding,) = findings_of(job_lines(TRACE, {0: rank0, 1: converted}))
    assert (finding.kind, finding.bytes, finding.evidence["per_rank"][0]["conversions"]) == (
        "duplicate_conversion",
        1000,
        2,
    )


def test_without_rank_0_the_model_size_comes_from_held_bytes():
    lines = [
        line(resource(1), rank_load(TRACE, 1, FSDP, 0, held={"cpu": 4000})),
        line(resource(2), rank_load(TRACE, 2, FSDP, 0, held={"cpu": 10, "meta": 4000})),
    ]
    (job,) = jobs_from_spans([s for text in lines for s in decode_line(text.encode())])
    assert job.model_bytes() == 4000
    assert kinds(find([job])) == {("nonzero_rank_materialization", "warning", (1,))}


def test_findings_are_warnings_first_then_most_bytes_first_across_jobs():
    findings = findings_of(
        field_fact_job("5.12.0", FSDP) + field_fact_job("5.12.0", "plain") + field_fact_job("5.12.0", ZERO3)
    )
    order = [(f.severity, f.bytes) for f in findings]
    assert order == sorted(order, key=lambda item: (item[0] != "warning", -item[1]))
    assert findings[-1].kind == "replicated_load"
    assert {f.trace_id for f in findings} == {trace_id_of(f"5.12.0-{s}") for s in (FSDP, "plain", ZERO3)}


def test_a_read_finding_s_per_node_figure_says_it_counts_reads_and_what_the_ranks_held():
    """Issue 48, point 5, on a recorded real run (a plain fp32 load of a bf16 checkpoint, 2 ranks): each rank read
    18.8 MB and held 37.6 MB, and the per-node figure read "18.8 MB x 2 = 37.6 MB" as if it were the node's memory."""
    from support.paths import FIXTURES

    from loadtrace.analysis.report import report
    from loadtrace.analysis.sources import read_files
    from loadtrace.cli.render import report_table

    result = report(read_files(str(FIXTURES / "forecast-mistral" / "524-plain-bf16as32-small" / "spans")))
    (finding,) = [f for f in result.findings if f.kind == sc.FINDING_REPLICATED_LOAD]
    (rank1,) = [r for r in result.ranks if r.rank == 1]
    held = rank1.held_bytes["cpu"]
    assert held > 1.9 * rank1.read_bytes and finding.projected_node_bytes == 2 * held
    assert f"Projected per node: {human_bytes(rank1.read_bytes)} read x 2 ranks per node" in finding.detail
    assert f"held at return: {human_bytes(held)} x 2 ranks per node = {human_bytes(2 * held)} of host memory" in (
        finding.detail
    )
    table = " ".join(report_table(result).split())
    assert "Per node: 18.8 MB read x 2 = 37.6 MB read; held at return: 37.6 MB x 2 = 75.3 MB of host memory" in table
