"""compare: per phase and rank, A's and B's time, bytes and peak RSS with difference and ratio, and what differs."""

from __future__ import annotations

from test_analysis_otlp import MODEL_BYTES, field_fact_job, job_lines, rank_load, trace_id_of

from loadtrace.analysis import compare as comparing
from loadtrace.analysis.model import to_json
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import decode_line

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
    assert phases == ["open", "read", "convert", "materialize", "load"]
    assert {r["rank"] for r in result["phases"]} == {0, 1}
    assert all(r["difference"] in (0, 0.0) for r in result["phases"] if r["a"] is not None)


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
