"""Promise (issue 49): the advice fits the job. An inference job's replicas are told how a serving engine reads a
checkpoint once (a sharded state, a distributed loader), in the words of the engine it imported, never FSDP or
ZeRO-3; a training job keeps the training strategies; a trace that does not say (an older loadtrace) keeps them too.
A whole model built on every rank before a ZeRO-3 ``deepspeed.initialize`` is a warning with the bytes per node and
the fix; ZeRO-3 done right, another stage, or a load under ZeRO-3 is none. A ZeRO-3 partition is judged against the
model as built (issue 48.1: a bf16 checkpoint built as fp32). The real jobs: e2e/test_advice_fits_the_job.py and
e2e/test_zero3_told_right.py."""

from __future__ import annotations

from support.otlp_lines import MODEL_BYTES, T0, job_lines, rank_load, span, trace_id_of

from loadtrace import semconv
from loadtrace.analysis.findings import find
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.report import with_next_step
from loadtrace.analysis.sources import decode_line

TRACE = trace_id_of("advice")


def findings_of(lines: list[str]):
    spans = [s for text in lines for s in decode_line(text.encode()) or []]
    return [with_next_step(finding) for finding in find(jobs_from_spans(spans))]


def startup(workload: str | None, engine: str | None = None) -> dict:
    attrs = {}
    if workload is not None:
        attrs["loadtrace.workload"] = workload
    if engine is not None:
        attrs["loadtrace.serving_engine"] = engine
    return span("loadtrace.startup", TRACE, T0 - 10**9, T0 + 2 * 10**9, **attrs)


def replicas(workload: str | None, engine: str | None = None) -> list[str]:
    ranks = {r: [*rank_load(TRACE, r, "plain", MODEL_BYTES), startup(workload, engine)] for r in (0, 1)}
    return job_lines(TRACE, ranks)


def replicated(lines: list[str]):
    (finding,) = [f for f in findings_of(lines) if f.kind == semconv.FINDING_REPLICATED_LOAD]
    return finding


def test_an_inference_job_is_told_the_serving_engines_options_never_fsdp_or_zero3():
    for engine, named in ((None, "vLLM: its save_sharded_state"), ("vllm", "vLLM's"), ("sglang", "save_sharded_model")):
        finding = replicated(replicas(semconv.WORKLOAD_INFERENCE, engine))
        advice = finding.next_step or ""
        assert "--load-format sharded_state" in advice and "fastsafetensors" in advice and named in advice, advice
        assert "FSDP" not in advice and "ZeRO" not in advice, advice
        assert "vllm-project/vllm/issues/5405" in advice
        assert finding.evidence["per_rank"][0]["workload"] == semconv.WORKLOAD_INFERENCE
        assert "inference job" in finding.detail
    assert (replicated(replicas(semconv.WORKLOAD_INFERENCE, "vllm")).next_step or "").startswith("vLLM: ")


def test_a_training_job_and_an_unknown_one_keep_the_training_strategies():
    for workload in (semconv.WORKLOAD_TRAINING, None):
        finding = replicated(replicas(workload))
        assert "use FSDP with cpu_ram_efficient_loading or ZeRO-3" in (finding.next_step or ""), workload
        assert "every rank loads its own replica" in finding.detail


def test_a_training_sign_after_the_startup_makes_the_rank_a_training_one():
    ranks = {
        r: [
            *rank_load(TRACE, r, "plain", MODEL_BYTES),
            startup(semconv.WORKLOAD_INFERENCE),
            span(
                "loadtrace.training_sign", TRACE, T0 + 3 * 10**9, T0 + 3 * 10**9, **{"loadtrace.workload": "training"}
            ),
        ]
        for r in (0, 1)
    }
    (job,) = jobs_from_spans([s for text in job_lines(TRACE, ranks) for s in decode_line(text.encode()) or []])
    assert [rank.workload for rank in job.ranks] == [semconv.WORKLOAD_TRAINING] * 2


def initialize(stage: int, start: int) -> dict:
    return span("deepspeed.initialize", TRACE, start, start + 10**9, **{"loadtrace.deepspeed.zero_stage": stage})


def zero3_late(stage: int = 3, strategy: str = "plain", held: int = MODEL_BYTES) -> list[str]:
    after_load = T0 + 2 * 10**9  # rank_load's load ends 1.5 s after T0
    ranks = {
        r: [*rank_load(TRACE, r, strategy, MODEL_BYTES, held={"cpu": held}), initialize(stage, after_load)]
        for r in (0, 1)
    }
    return job_lines(TRACE, ranks)


def test_a_whole_model_on_every_rank_before_a_zero3_initialize_is_a_warning_with_the_fix():
    found = findings_of(zero3_late())
    (finding,) = found  # no replicated_load beside it: no "expected"
    assert (finding.kind, finding.severity, finding.ranks) == (
        semconv.FINDING_WHOLE_MODEL_BEFORE_ZERO3,
        "warning",
        [0, 1],
    )
    assert finding.bytes == 2 * MODEL_BYTES and finding.projected_node_bytes == 2 * MODEL_BYTES
    assert "Projected host memory: " in finding.detail and " per node" in finding.detail
    advice = finding.next_step or ""
    assert "HfDeepSpeedConfig" in advice and "zero.Init" in advice and "Roblox/FAI-RL/issues/66" in advice


def test_zero3_done_right_another_stage_or_a_partial_model_is_no_such_warning():
    for lines in (
        zero3_late(stage=2),
        zero3_late(strategy="zero3", held=MODEL_BYTES // 2),
        zero3_late(held=MODEL_BYTES // 4),
    ):
        assert semconv.FINDING_WHOLE_MODEL_BEFORE_ZERO3 not in {f.kind for f in findings_of(lines)}


def test_a_zero3_partition_is_judged_against_the_model_as_built():
    """A bf16 checkpoint under a ZeRO-3 config without bf16 is built as fp32: rank 1's partition is half the fp32
    model, as many bytes as the whole checkpoint, and no finding."""
    built = 2 * MODEL_BYTES  # fp32 from a bf16 checkpoint
    partition = {"loadtrace.model.bytes": built}
    ranks = {
        0: rank_load(TRACE, 0, "zero3", MODEL_BYTES, held={"cpu": built // 2}, memory=partition),
        1: rank_load(TRACE, 1, "zero3", 0, held={"cpu": built // 2}, memory=partition),
    }
    assert findings_of(job_lines(TRACE, ranks)) == []
    ranks[1] = rank_load(TRACE, 1, "zero3", 0, held={"cpu": built}, memory=partition)
    assert {f.kind for f in findings_of(job_lines(TRACE, ranks))} == {semconv.FINDING_NONZERO_RANK_MATERIALIZATION}
