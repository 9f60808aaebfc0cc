"""compare: per phase and rank, A's and B's time, bytes, peak RSS, memory and I/O with difference and ratio, and what
differs: every load parameter the spans carry. Picking one job of a source that holds several (``pick_job``)."""

from __future__ import annotations

import pytest
from support.compare_jobs import MINUTE, params_job
from support.otlp_lines import (
    MODEL_BYTES,
    T0,
    field_fact_job,
    job_lines,
    line,
    memory_attributes,
    rank_load,
    resource,
    trace_id_of,
)

from loadtrace import semconv as sc
from loadtrace.analysis import compare as comparing
from loadtrace.analysis.model import to_json
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import SourceError, decode_line

FSDP = "fsdp_cpu_ram_efficient"


def compare(*args):
    """The comparison as ``loadtrace compare --format json`` has it."""
    return to_json(comparing.compare(*args))


def job_of(lines: list[str]):
    (job,) = jobs_from_spans([s for text in lines for s in decode_line(text.encode()) or []])
    return job


def row(result, phase: str, rank: int, metric: str) -> dict:
    (found,) = [r for r in result["phases"] if (r["phase"], r["rank"], r["metric"]) == (phase, rank, metric)]
    return found


def test_5_12_against_5_24_fsdp_shows_what_changed_for_rank_1():
    result = compare(job_of(field_fact_job("5.12.0", FSDP)), job_of(field_fact_job("5.24.0", FSDP)))
    materialize = row(result, "materialize", 1, "bytes")
    assert (materialize["a"], materialize["b"], materialize["difference"]) == (1_009_216, 64, 64 - 1_009_216)
    assert materialize["ratio"] == round(64 / 1_009_216, 4)
    read = row(result, "read", 1, "bytes")
    assert (read["a"], read["b"], read["difference"], read["ratio"]) == (MODEL_BYTES, MODEL_BYTES, 0, 1.0)
    held = row(result, "load", 1, "bytes")
    assert (held["a"], held["b"]) == (1_009_216, MODEL_BYTES + 64)
    assert row(result, "load", 0, "peak_rss_bytes")["a"] == 600_000_000
    assert [r["name"] for r in result["resources"] if r["differs"]] == ["loadtrace.lib.transformers"]
    (version,) = [r for r in result["resources"] if r["name"] == "loadtrace.lib.transformers"]
    assert (version["a"], version["b"]) == ("5.12.0", "5.24.0")


def test_every_phase_has_rows_for_every_rank_in_order():
    result = compare(job_of(field_fact_job("5.12.0", "plain")), job_of(field_fact_job("5.12.0", "plain")))
    phases = list(dict.fromkeys(r["phase"] for r in result["phases"]))
    assert phases == ["open", "read", "convert", "materialize", "load", "memory", "io"]
    assert {r["rank"] for r in result["phases"]} == {0, 1}
    assert all(r["difference"] in (0, 0.0) for r in result["phases"] if r["a"] is not None)


def test_memory_and_io_per_rank_are_compared():
    """Per rank: RSS before the load, its growth (all, anonymous, file-backed), RSS after; storage reads and cached
    bytes. Exact numbers from the load spans' ``loadtrace.rss*`` and ``loadtrace.io.*`` attributes."""

    def one(name: str, growth: int, storage: int):
        trace = trace_id_of(name)
        memory = memory_attributes(
            300_000_000, 300_000_000 + growth, anon=(200_000_000, 200_000_000 + growth // 4),
            file=(100_000_000, 100_000_000 + 3 * growth // 4), after=300_000_000 + growth // 2,
            storage_read=storage, cached=MODEL_BYTES - storage,
        )  # fmt: skip
        return job_of(job_lines(trace, {0: rank_load(trace, 0, "plain", MODEL_BYTES, memory=memory)}, world_size=1))

    result = compare(one("a", 40_000_000, MODEL_BYTES), one("b", 8_000_000, 0))
    values = {(r["phase"], r["metric"]): (r["a"], r["b"]) for r in result["phases"] if r["phase"] in ("memory", "io")}
    assert values == {
        ("memory", "rss_before"): (300_000_000, 300_000_000),
        ("memory", "rss_growth"): (40_000_000, 8_000_000),
        ("memory", "anon_growth"): (10_000_000, 2_000_000),
        ("memory", "file_growth"): (30_000_000, 6_000_000),
        ("memory", "rss_after"): (320_000_000, 304_000_000),
        ("io", "storage_bytes"): (MODEL_BYTES, 0),
        ("io", "cached_bytes"): (0, MODEL_BYTES),
    }
    assert row(result, "memory", 0, "rss_growth")["ratio"] == 0.2


def test_a_rank_present_on_one_side_only_has_null_differences():
    a = job_of(job_lines(trace_id_of("a"), {0: rank_load(trace_id_of("a"), 0, "plain", 100)}, world_size=1))
    b = job_of(job_lines(trace_id_of("b"), {r: rank_load(trace_id_of("b"), r, "plain", 100) for r in (0, 1)}))
    result = compare(a, b, "run-a", "run-b")
    rank1 = row(result, "read", 1, "bytes")
    assert (rank1["a"], rank1["b"], rank1["difference"], rank1["ratio"]) == (None, 100, None, None)
    differs = {r["name"]: (r["a"], r["b"]) for r in result["resources"] if r["differs"]}
    assert differs == {"world_size": ("1", "2"), "ranks": ("1", "2")}
    assert (result["a"]["source"], result["b"]["trace_id"]) == ("run-a", trace_id_of("b"))


def test_a_zero_baseline_has_a_difference_but_no_ratio():
    a = job_of(job_lines(trace_id_of("a"), {0: rank_load(trace_id_of("a"), 0, "plain", 0)}))
    b = job_of(job_lines(trace_id_of("b"), {0: rank_load(trace_id_of("b"), 0, "plain", 50)}))
    read = row(compare(a, b), "read", 0, "bytes")
    assert (read["difference"], read["ratio"]) == (50, None)


def jobs_of(lines: list[str]):
    return jobs_from_spans([s for text in lines for s in decode_line(text.encode()) or []])


def differing(result) -> dict[str, tuple[str | None, str | None]]:
    return {r["name"]: (r["a"], r["b"]) for r in result["resources"] if r["differs"]}


def test_fp32_against_bf16_says_the_dtype_differs():
    result = compare(job_of(params_job("fp32")), job_of(params_job("bf16", dtype="torch.bfloat16")))
    assert differing(result) == {sc.DTYPE: ("default", "torch.bfloat16")}
    same = {r["name"]: r["a"] for r in result["resources"] if not r["differs"]}
    assert same[sc.MODEL_CLASS] == "Qwen3MoeForCausalLM" and same["checkpoint"] == "/ckpt/tiny-qwen3-moe"
    assert {"world_size", "ranks", "hosts", "strategy", "loadtrace.lib.torch"} <= set(same)


def test_every_load_parameter_the_spans_carry_is_compared():
    a = params_job("a", load={sc.TP_PLAN: "auto", sc.CHECKPOINT_BYTES: 1_016_648, sc.MODEL_CLASS: "Qwen3MoeModel"})
    b = params_job(
        "b", load={sc.TP_PLAN: "auto", sc.CHECKPOINT_BYTES: 2_033_296, sc.DEVICE_MAP: "{'': 'cuda:0'}"}, attempt=1
    )
    result = compare(job_of(a), job_of(b))
    assert differing(result) == {
        "attempt": (None, "1"),
        sc.CHECKPOINT_BYTES: ("1016648", "2033296"),  # from the load span (it is not a resource attribute)
        sc.MODEL_CLASS: ("Qwen3MoeModel", "Qwen3MoeForCausalLM"),
        sc.DEVICE_MAP: (None, "{'': 'cuda:0'}"),  # absent when not given
    }
    (tp_plan,) = [r for r in result["resources"] if r["name"] == sc.TP_PLAN]
    assert (tp_plan["a"], tp_plan["b"], tp_plan["differs"]) == ("auto", "auto", False)
    names = [r["name"] for r in result["resources"]]
    assert (
        names.index("checkpoint") < names.index(sc.DTYPE) < names.index(sc.TP_PLAN) < names.index("loadtrace.lib.torch")
    )


def test_ranks_that_disagree_within_a_job_show_both_values():
    mixed = params_job("mixed", dtype={0: "torch.bfloat16", 1: "default"})
    result = compare(job_of(params_job("fp32")), job_of(mixed))
    assert differing(result) == {sc.DTYPE: ("default", "default, torch.bfloat16")}


def test_a_plain_python_run_without_a_rank_is_compared_as_rank_0():
    def rankless(job_id: str, dtype: str) -> list[str]:
        trace = format(sc.job_trace_ids(job_id)[0], "032x")
        spans = rank_load(trace, 0, "plain", MODEL_BYTES, memory={sc.DTYPE: dtype})
        res = resource(0, world_size=1, local_world_size=None, **{sc.JOB_ID: job_id, sc.SERVICE_INSTANCE_ID: "vm/7"})
        res["attributes"] = [a for a in res["attributes"] if a["key"] not in (sc.RANK, sc.LOCAL_RANK, sc.WORLD_SIZE)]
        return [line(res, spans)]

    a, b = job_of(rankless("vm-7", "default")), job_of(rankless("vm-8", "torch.bfloat16"))
    assert a.ranks[0].rank is None
    result = compare(a, b)
    assert {r["rank"] for r in result["phases"]} == {0}
    assert row(result, "read", 0, "bytes")["a"] == MODEL_BYTES
    assert differing(result) == {sc.DTYPE: ("default", "torch.bfloat16")}


FOLDER = [*params_job("vm-3378-94c4", start=T0), *params_job("vm-3409-047d", dtype="torch.bfloat16", start=T0 + MINUTE)]


def picked(lines: list[str], pick: str | None):
    return comparing.pick_job(jobs_of(lines), pick, "traces", "--a-job")


def refused(lines: list[str], pick: str | None) -> str:
    with pytest.raises(SourceError) as error:
        picked(lines, pick)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_one_job_needs_no_pick_and_a_pick_must_name_it():
    (only,) = jobs_of(params_job("solo"))
    assert picked(params_job("solo"), None) is not None and picked(params_job("solo"), "so").job_id == "solo"
    assert "no job of traces matches --a-job other; it holds solo (trace " in refused(params_job("solo"), "other")
    assert only.trace_id in refused(params_job("solo"), "other")


@pytest.mark.parametrize("how", ["job id", "trace id", "job id prefix", "trace id prefix"])
def test_two_jobs_in_one_folder_are_picked_by_job_id_trace_id_or_a_prefix(how):
    jobs = jobs_of(FOLDER)
    trace = {job.job_id: job.trace_id for job in jobs}["vm-3409-047d"]
    pick = {"job id": "vm-3409-047d", "trace id": trace, "job id prefix": "vm-340", "trace id prefix": trace[:6]}[how]
    assert picked(FOLDER, pick).job_id == "vm-3409-047d"
    assert picked(FOLDER, pick.upper() if how.startswith("trace") else pick).job_id == "vm-3409-047d"


def test_several_jobs_and_no_pick_list_each_id_start_time_and_how_to_pick():
    message = refused(FOLDER, None)
    traces = [job.trace_id for job in jobs_of(FOLDER)]
    assert message.startswith("traces holds 2 jobs: vm-3378-94c4 (trace ")
    assert f"vm-3378-94c4 (trace {traces[0]}, started 2025-11-30T09:00:00Z)" in message
    assert f"vm-3409-047d (trace {traces[1]}, started 2025-11-30T09:01:00Z)" in message
    assert message.endswith("; pick one with --a-job ID (" + comparing.PICK_HELP + ")")


def test_an_ambiguous_prefix_lists_the_jobs_it_fits():
    message = refused(FOLDER, "vm-3")
    assert message.startswith("--a-job vm-3 matches 2 jobs of traces: vm-3378-94c4 (trace ")
    assert "vm-3409-047d (trace " in message and message.endswith("give more of the id")


def test_an_exact_id_wins_over_a_longer_one_it_begins():
    lines = [*params_job("run"), *params_job("run-2", start=T0 + MINUTE)]
    assert picked(lines, "run").job_id == "run" and picked(lines, "run-").job_id == "run-2"


def test_an_attempt_is_picked_with_id_at_attempt():
    lines = [*params_job("job-r", attempt=0), *params_job("job-r", dtype="torch.bfloat16", attempt=1, pid=2000)]
    lines = [*lines, *params_job("other", start=T0 + 2 * MINUTE)]
    assert (picked(lines, "job-r@1").attempt, picked(lines, "job-r@0").attempt) == (1, 0)
    trace = jobs_of(lines)[0].trace_id
    assert picked(lines, trace[:8] + "@1").attempt == 1
    message = refused(lines, "job-r")
    assert message.startswith("--a-job job-r names a trace of traces with 2 jobs: job-r@0 (trace ")
    assert "attempt 0, started" in message and "job-r@1 (trace " in message and "ID@ATTEMPT" in message
    assert refused(lines, "job-r@2").startswith("no job of traces matches --a-job job-r@2; that trace holds job-r@0 (")
    assert "other (trace" in refused(lines, None) and "job-r@1 (trace" in refused(lines, None)


def test_a_rerun_within_one_attempt_is_picked_with_its_run():
    lines = [*params_job("again", pid=1000), *params_job("again", dtype="torch.bfloat16", pid=3000, start=T0 + MINUTE)]
    assert [(job.attempt, job.run) for job in jobs_of(lines)] == [(None, 0), (None, 1)]
    assert picked(lines, "again@.2").run == 1 and picked(lines, "again@.1").run == 0
    assert "again@.1 (trace " in refused(lines, None) and "again@.2 (trace " in refused(lines, None)


def test_overlapping_file_spans_are_open_once_never_longer_than_the_load():
    """Issue 48, point 5: transformers reads files in a thread pool, so their spans overlap; their summed lengths
    (5 files x 1.0 s = 5.0 s) were the open time of a 1.2 s load. Open is the time any file was open: 1.0 s."""
    spans = rank_load(trace_id_of("threads"), 0, "plain", MODEL_BYTES, seconds=1.2)
    for found in spans:
        if found["name"] == sc.SPAN_SAFETENSORS_OPEN:
            found["startTimeUnixNano"], found["endTimeUnixNano"] = str(T0 + 100_000_000), str(T0 + 1_100_000_000)
    job = job_of([line(resource(0, world_size=1), spans)])
    result = compare(job, job)
    opened, loaded = row(result, "open", 0, "seconds"), row(result, "load", 0, "seconds")
    assert (opened["a"], loaded["a"]) == (1.0, 1.2)
