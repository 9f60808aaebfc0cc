"""Promise: from one small job, loadtrace forecasts each rank's and each node's peak host memory for a bigger model
(and more ranks), scaling what the strategy says scales and nothing else, with a range and a confidence, and says
OK, WILL OOM or UNCERTAIN.

The hand-built jobs below use round numbers (docs/report.md has the formulas): a 1,000,000-byte model, RSS before the
load 100 MB on every rank, a target 1000x larger, and a calibration (``CALIBRATION``) of 2 B of RSS per load byte, of
which anonymous 1 B on the loading rank and 1.5 B on the others, for transformers 5.24.0 (what the spans say they ran),
whose runs grew at most 10 MB beyond their load bytes: a rank must read 20 MB to be forecast with its own rate, so
the 1 MB jobs are forecast with the calibration's.
"""

from __future__ import annotations

import dataclasses

import pytest
from support.forecast_spans import BEFORE, FSDP, M, rank_spans
from support.otlp_lines import line, rank_load, resource, trace_id_of

from loadtrace.analysis import forecast as forecasting
from loadtrace.analysis.forecast import ForecastError, Target
from loadtrace.analysis.model import to_json
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import decode_line

NOT_MODEL = 10 * M  # the most growth the calibration runs showed beyond their load bytes


def entry(anon: float, rss: tuple[float, float, float] = (2.0, 2.0, 2.0), not_model: int = 0) -> dict:
    return {
        "rss_per_load_byte": list(rss),
        "anon_per_load_byte": [anon, anon, anon],
        "not_model_bytes": {"rss": not_model, "anon": 0},
        "runs": {"tiny": {"load_bytes": M, "rss": round(rss[1] * M) + NOT_MODEL, "anon": round(anon * M)}},
    }


CALIBRATION = {
    "about": "test",
    "explained_threshold": 0.5,
    "widen": 0.25,
    "releases": {
        "5.24.0": {
            f"{strategy}/{role}": entry(1.0 if role == "loading" else 1.5)
            for strategy in ("plain", FSDP, "zero3")
            for role in ("loading", "other")
        }
    },
}


def forecast(measured, target, calibration=CALIBRATION):
    """The ``forecast`` object as the report's JSON has it (with ``CALIBRATION`` unless the target has one)."""
    if target.calibration is None:
        target = dataclasses.replace(target, calibration=calibration)
    return to_json(forecasting.forecast(measured, target))


def job(name: str, ranks: dict[int, list[dict]], world_size: int | None = None, local_world_size: int | None = None):
    size = world_size or len(ranks)
    lines = [line(resource(r, world_size=size, local_world_size=local_world_size or size), s) for r, s in ranks.items()]
    (result,) = jobs_from_spans([s for text in lines for s in decode_line(text.encode())])
    return result


def fsdp_512(**rank1: int):
    """Rank 0 loads (2 B of RSS growth per model byte, half of it file-backed); rank 1 reads the model too AND fills a
    second one with zeros_like (the transformers 5.12 FSDP case): 4,000,000 B of growth, a quarter file-backed."""
    trace = trace_id_of("fsdp-512" + repr(rank1))
    return job(
        "fsdp",
        {
            0: rank_spans(trace, 0, FSDP, M, 2 * M, file_growth=M, **rank1),
            1: rank_spans(trace, 1, FSDP, M, 4 * M, file_growth=M, created=M, **rank1),
        },
    )


def test_forecasting_the_measured_size_gives_back_the_measured_peaks():
    result = forecast(fsdp_512(), Target(model_bytes=M))
    assert result["per_rank_peak_bytes"] == {"0": BEFORE + 2 * M, "1": BEFORE + 4 * M}


def test_load_growth_scales_with_the_model_and_the_fixed_part_does_not():
    result = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2))
    assert result["model_bytes"] == 1000 * M and result["ranks_per_node"] == 2
    assert result["per_rank_peak_bytes"] == {"0": BEFORE + 2_000_000_000, "1": BEFORE + 4_000_000_000}
    categories = result["basis"]["categories"]
    assert categories["fixed"]["ranks"]["1"] == {"from_bytes": BEFORE, "to_bytes": BEFORE}
    # Rank 0 read the model once: its copy scales with the model.
    assert categories["once_per_job"]["ranks"]["0"] == {
        "from_bytes": M, "to_bytes": 1000 * M, "from_growth_bytes": 2 * M, "to_growth_bytes": 2000 * M,
    }  # fmt: skip
    # Rank 1: read + created = 2 M of load bytes; its share is M / 2, the rest is duplicated.
    assert categories["per_rank"]["ranks"]["1"]["from_bytes"] == M // 2
    assert categories["per_rank"]["ranks"]["1"]["to_bytes"] == 500 * M
    assert categories["duplicated"]["ranks"]["1"] == {
        "from_bytes": 3 * M // 2, "to_bytes": 1500 * M, "from_growth_bytes": 3 * M, "to_growth_bytes": 3000 * M,
    }  # fmt: skip
    assert result["basis"]["ranks"]["1"]["rss_per_load_byte"] == [2.0, 2.0, 2.0]
    assert result["basis"]["ranks"]["1"]["calibration"] == "5.24.0 fsdp_cpu_ram_efficient/other"


def test_the_node_sums_its_ranks_and_counts_shared_file_pages_once():
    result = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2))
    node = result["basis"]["node"]
    # File-backed: RSS less anonymous: 20 MB before + (2 - 1) x 1e9 (rank 0), + (2 - 1.5) x 2e9 (rank 1) = 1.02e9.
    assert result["basis"]["ranks"]["0"]["target_file_backed_bytes"] == 1_020_000_000
    assert result["basis"]["ranks"]["1"]["target_file_backed_bytes"] == 1_020_000_000
    assert node["sum_of_rank_peaks_bytes"] == 2_100_000_000 + 4_100_000_000
    assert node["file_backed_bytes_counted_once"] == 1_020_000_000
    assert result["per_node_peak_bytes"] == 6_200_000_000 - 1_020_000_000
    assert node["profiles"] == [{"rank": 0, "count": 1}, {"rank": 1, "count": 1}]


def test_sixteen_ranks_per_node_use_rank_0_once_and_the_worst_other_rank_for_the_rest():
    trace = trace_id_of("four-ranks")
    ranks = {
        0: rank_spans(trace, 0, FSDP, M, 2 * M),
        1: rank_spans(trace, 1, FSDP, M, 3 * M),
        2: rank_spans(trace, 2, FSDP, M, 5 * M),  # the worst
        3: rank_spans(trace, 3, FSDP, M, 4 * M),
    }
    result = forecast(job("four", ranks), Target(model_bytes=1000 * M, ranks_per_node=16))
    assert result["basis"]["node"]["profiles"] == [{"rank": 0, "count": 1}, {"rank": 2, "count": 15}]
    assert result["basis"]["target"]["world_size"] == 16  # no fewer ranks than one node holds
    # Each read the model (2 B per byte at the target); rank 2's 3 MB of growth beyond that does not scale.
    ranks_ = result["basis"]["ranks"]
    assert (ranks_["0"]["target_peak_bytes"], ranks_["2"]["target_peak_bytes"]) == (
        BEFORE + 2000 * M,
        BEFORE + 3 * M + 2000 * M,
    )
    # File-backed pages (the checkpoint, the libraries) are the same pages on every rank: counted once for the node.
    files = [ranks_["0"]["target_file_backed_bytes"]] + 15 * [ranks_["2"]["target_file_backed_bytes"]]
    peaks = [ranks_["0"]["target_peak_bytes"]] + 15 * [ranks_["2"]["target_peak_bytes"]]
    assert result["per_node_peak_bytes"] == sum(peaks) - sum(files) + max(files)
    assert "rank 2's (the worst other rank) 15 times" in result["basis"]["text"]


def test_a_sharded_rank_holding_its_partition_shrinks_with_more_ranks():
    """ZeRO-3 on transformers 5.24: rank 1 reads nothing and holds only its partition (M / 2 of two ranks)."""
    trace = trace_id_of("zero3")
    ranks = {
        0: rank_spans(trace, 0, "zero3", M, 2 * M, held=M // 2),
        1: rank_spans(trace, 1, "zero3", 0, M, held=M // 2),
    }
    result = forecast(job("zero3", ranks), Target(model_bytes=1000 * M, ranks_per_node=8, world_size=16))
    per_rank = result["basis"]["categories"]["per_rank"]["ranks"]["1"]
    # Its share goes from M / 2 to 1000 M / 16; so does its growth (2 B per byte).
    assert (per_rank["from_bytes"], per_rank["to_bytes"]) == (M // 2, 1000 * M // 16)
    assert result["per_rank_peak_bytes"]["1"] == BEFORE + 2 * 1000 * M // 16
    assert result["per_rank_peak_bytes"]["0"] == BEFORE + 2000 * M  # the loading rank still reads it all
    assert result["basis"]["categories"]["per_rank"]["scaled_by"].startswith("model size / world size (125.0)")


def test_a_duplicate_does_not_shrink_with_more_ranks():
    """A non-loading rank that reads the whole model reads the whole model at any world size: its share shrinks
    and its duplicate grows by as much."""
    same = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2))
    more = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=8, world_size=64))
    assert more["per_rank_peak_bytes"]["1"] == same["per_rank_peak_bytes"]["1"]
    moved = more["basis"]["categories"]
    assert moved["per_rank"]["ranks"]["1"]["to_bytes"] == 1000 * M // 64  # the target's partition
    assert moved["duplicated"]["ranks"]["1"]["to_bytes"] == 2000 * M - 1000 * M // 64


def test_a_replica_does_not_shrink_with_more_ranks():
    trace = trace_id_of("plain")
    ranks = {0: rank_spans(trace, 0, "plain", M, 2 * M), 1: rank_spans(trace, 1, "plain", M, 2 * M)}
    result = forecast(job("plain", ranks), Target(model_bytes=1000 * M, ranks_per_node=8, world_size=64))
    assert result["per_rank_peak_bytes"] == {"0": BEFORE + 2000 * M, "1": BEFORE + 2000 * M}
    assert result["basis"]["categories"]["per_rank"]["ranks"]["1"]["to_bytes"] == 1000 * M
    assert (
        "once_per_job" not in result["basis"]["categories"]
        or not result["basis"]["categories"]["once_per_job"]["ranks"]
    )


def test_more_nodes_than_one_forecast_the_other_nodes_too():
    result = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2, world_size=4))
    node = result["basis"]["node"]
    # Rank 1 is worse than rank 0, so a node of two rank-1 profiles is the worst node: the verdict is about it.
    assert node["other_nodes_peak_bytes"] == 2 * 4_100_000_000 - 1_020_000_000
    assert result["per_node_peak_bytes"] == node["other_nodes_peak_bytes"] > node["node_0_peak_bytes"]
    assert node["sum_of_rank_peaks_bytes"] == 2 * 4_100_000_000
    assert "Other nodes: the worst other rank's profile on every rank." in result["basis"]["text"]


EXACT = {**CALIBRATION, "widen": 0.0}  # a range as wide as the point: the verdict depends on the point alone


def test_the_verdict_is_uncertain_when_the_nodes_memory_lies_inside_the_range():
    ranged = {"5.24.0": {key: entry(1.0, (1.8, 2.0, 2.2)) for key in CALIBRATION["releases"]["5.24.0"]}}
    calibration = {**CALIBRATION, "releases": ranged}
    result = forecast(fsdp_512(), Target(1000 * M, 2, node_memory_bytes=5_000_000_000), calibration)
    low, high = result["per_node_peak_range_bytes"]
    assert low < 5_000_000_000 < high and result["verdict"] == "uncertain"
    assert forecast(fsdp_512(), Target(1000 * M, 2, node_memory_bytes=low - 1), calibration)["verdict"] == "oom"
    assert forecast(fsdp_512(), Target(1000 * M, 2, node_memory_bytes=high), calibration)["verdict"] == "ok"


@pytest.mark.parametrize(
    "target, rank1, verdict, memory, source",
    [
        (Target(1000 * M, 2), {}, "ok", 64_000_000_000, "loadtrace.node.memory_total"),
        (Target(1000 * M, 2), {"node_total": 5_000_000_000}, "oom", 5_000_000_000, "loadtrace.node.memory_total"),
        (Target(1000 * M, 2), {"cgroup_max": 4_000_000_000}, "oom", 4_000_000_000, "loadtrace.cgroup.memory_max"),
        (Target(1000 * M, 2), {"cgroup_max": 128_000_000_000}, "ok", 64_000_000_000, "loadtrace.node.memory_total"),
        (Target(1000 * M, 2, node_memory_bytes=6_000_000_000), {"node_total": 1}, "ok", 6_000_000_000,
         "--node-memory-bytes"),
        (Target(1000 * M, 2), {"node_total": None}, None, None, None),
    ],
)  # fmt: skip
def test_the_verdict_weighs_the_node_peak_against_the_nodes_memory(target, rank1, verdict, memory, source):
    result = forecast(fsdp_512(**rank1), target, EXACT)
    assert result["per_node_peak_bytes"] == 5_180_000_000
    assert (result["verdict"], result["node_memory_bytes"], result["basis"]["node"]["node_memory_source"]) == (
        verdict,
        memory,
        source,
    )
    if memory is not None:
        assert result["basis"]["node"]["headroom_bytes"] == memory - 5_180_000_000


def test_the_basis_says_what_was_scaled_from_and_to():
    result = forecast(
        fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2, given_as="500,000,000 parameters x bf16 (2 B)")
    )
    basis = result["basis"]
    assert basis["measured"] == {"model_bytes": M, "world_size": 2, "ranks_per_node": 2}
    assert basis["target"] == {
        "model_bytes": 1000 * M, "given_as": "500,000,000 parameters x bf16 (2 B)", "world_size": 2,
        "world_size_given": False, "ranks_per_node": 2,
    }  # fmt: skip
    assert basis["model_scale"] == 1000.0
    assert "RSS before the load (not scaled)" in basis["text"] and "x1000" in basis["text"]
    assert set(basis["categories"]) == {"fixed", "once_per_job", "per_rank", "duplicated"}


def test_growth_without_load_bytes_does_not_scale():
    """Growth the load bytes do not explain (lazily imported code, allocator pools) stays what it was."""
    trace = trace_id_of("no-bytes")
    ranks = {0: rank_spans(trace, 0, "plain", M, 2 * M), 1: rank_spans(trace, 1, "plain", 0, M, held=0)}
    result = forecast(job("no-bytes", ranks), Target(model_bytes=1000 * M))
    assert result["per_rank_peak_bytes"]["1"] == BEFORE + M
    assert result["basis"]["ranks"]["1"]["not_model_bytes"] == M


def test_only_the_growth_model_bytes_do_not_explain_is_kept_fixed():
    """A tiny run: 1 MB of model, 11 MB of growth. At 2 B per load byte, 2 MB is model; 9 MB is not, and stays."""
    trace = trace_id_of("tiny")
    ranks = {0: rank_spans(trace, 0, "plain", M, 11 * M), 1: rank_spans(trace, 1, "plain", M, 11 * M)}
    result = forecast(job("tiny", ranks), Target(model_bytes=1000 * M, node_memory_bytes=10**12))
    assert result["per_rank_peak_bytes"]["0"] == BEFORE + 9 * M + 2000 * M  # not BEFORE + 11,000 M
    assert result["basis"]["ranks"]["0"]["load_bytes_explain"] == pytest.approx(2 / 11, abs=1e-4)
    # Too small for its growth to be mostly model bytes: low confidence, said in one line, and a wider range.
    confidence = result["confidence"]
    assert confidence["level"] == "low"
    assert "the measured run is too small for its growth to be mostly model bytes" in confidence["reason"]
    assert "\n" not in confidence["reason"]
    # Each end keeps what its own rate leaves unexplained, so each gives back the measured peak at the measured size.
    low, high = result["per_rank_peak_range_bytes"]["0"]
    assert low == BEFORE + (11 * M - 1.5 * M) + 1.5 * 1000 * M
    assert high == BEFORE + (11 * M - 2.5 * M) + 2.5 * 1000 * M


def test_a_run_whose_growth_is_mostly_model_bytes_has_high_confidence_and_the_calibrated_range():
    wide = {"5.24.0": {key: entry(1.0, (1.8, 2.0, 2.2), not_model=5 * M) for key in CALIBRATION["releases"]["5.24.0"]}}
    calibration = {**CALIBRATION, "releases": wide}
    result = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2), calibration)
    assert result["confidence"]["level"] == "high", result["confidence"]
    assert result["confidence"]["reason"].startswith("calibrated (5.24.0 fsdp_cpu_ram_efficient/loading, ")
    # Low end: the low rate; high end: the high rate plus the calibration's largest not-model growth.
    low, high = result["per_rank_peak_range_bytes"]["0"]
    assert low == BEFORE + round(1.8 * 1000 * M) + round(2 * M - 1.8 * M)
    assert high == BEFORE + 5 * M + round(2.2 * 1000 * M)
    node_low, node_high = result["per_node_peak_range_bytes"]
    assert node_low < result["per_node_peak_bytes"] < node_high


def test_the_worst_phase_is_the_ranks_peak_not_the_sum_of_phases():
    """The convert phase peaked as high as the load (2 MB of growth) when only the first of 5 files had been read:
    1.6 MB of its growth is not model bytes. At the target each window keeps its own not-model part and scales its
    own share of the bytes; the rank's peak is the worst window (here the whole load), never a sum of phases."""
    trace = trace_id_of("phases")
    spans = rank_spans(trace, 0, "plain", M, 2 * M)
    convert = next(s for s in spans if s["name"] == "transformers.convert")
    first_file = next(s for s in spans if s["name"] == "safetensors.open")
    convert["endTimeUnixNano"] = str(int(first_file["startTimeUnixNano"]) + 1)
    convert["attributes"] += [{"key": "loadtrace.rss.peak", "value": {"intValue": str(BEFORE + 2 * M)}}]
    same = forecast(job("phases", {0: spans}), Target(model_bytes=M, ranks_per_node=1))
    assert same["per_rank_peak_bytes"]["0"] == BEFORE + 2 * M  # both windows give back the measured peak
    result = forecast(job("phases", {0: spans}), Target(model_bytes=1000 * M, ranks_per_node=1))
    assert result["per_rank_peak_bytes"]["0"] == BEFORE + 2000 * M  # not + 1.6 MB + 400 MB more
    assert result["basis"]["ranks"]["0"]["worst_window"] == "transformers.from_pretrained"


def test_a_release_or_strategy_the_calibration_lacks_is_medium_confidence_and_says_which_it_used():
    older = {"5.12.0": CALIBRATION["releases"]["5.24.0"]}
    result = forecast(fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2), {**CALIBRATION, "releases": older})
    assert result["confidence"]["level"] == "medium"
    assert "transformers 5.24.0 is not calibrated (used 5.12.0's)" in result["confidence"]["reason"]
    only_plain = {"5.24.0": {"plain/loading": entry(1.0), "plain/other": entry(1.5, (3.0, 3.0, 3.0))}}
    result = forecast(
        fsdp_512(), Target(model_bytes=1000 * M, ranks_per_node=2), {**CALIBRATION, "releases": only_plain}
    )
    assert (
        "strategy fsdp_cpu_ram_efficient is not calibrated (used the costliest, plain/other)"
        in (result["confidence"]["reason"])
    )


# The job's own rate (issue 34) -------------------------------------------------------------------------------------

BIG = 50 * M  # a model big enough to measure its own rate: 2.5x the calibration's most not-model growth


def plain_job(name: str, read: int, rate: float):
    """Two plain ranks, each reading the model (``read`` bytes) and growing ``rate`` B of RSS per byte read."""
    trace = trace_id_of(name)
    growth = round(rate * read)
    return job(name, {r: rank_spans(trace, r, "plain", read, growth, held=read) for r in (0, 1)})


def test_a_run_that_read_enough_is_forecast_with_its_own_rate():
    """A family the calibration never saw: 1.5 B of RSS per load byte, where the calibration says 2."""
    measured = plain_job("own-rate", BIG, 1.5)
    same = forecast(measured, Target(model_bytes=BIG, ranks_per_node=2))
    assert same["per_rank_peak_bytes"] == {"0": BEFORE + 3 * BIG // 2, "1": BEFORE + 3 * BIG // 2}  # measured peaks
    assert same["per_rank_peak_range_bytes"]["0"] == [BEFORE + 3 * BIG // 2, BEFORE + 3 * BIG // 2]
    result = forecast(measured, Target(model_bytes=10 * BIG, ranks_per_node=2))
    assert result["per_rank_peak_bytes"]["0"] == BEFORE + 15 * BIG  # not BEFORE + 20 x BIG at the calibration's 2
    # Low end: the calibration's most not-model growth (10 MB) taken out of the rate and kept as it is.
    low_rate = (3 * BIG // 2 - NOT_MODEL) / BIG
    assert result["per_rank_peak_range_bytes"]["0"] == [
        BEFORE + NOT_MODEL + round(low_rate * 10 * BIG),
        BEFORE + 15 * BIG,
    ]
    rank = result["basis"]["ranks"]["0"]
    assert rank["calibration"] == "measured; 5.24.0 plain/loading for the low end"
    assert rank["rss_per_load_byte"] == [low_rate, 1.5, 1.5] and rank["load_bytes_explain"] == 1.0
    assert result["confidence"] == {
        "level": "high",
        "reason": "RSS per load byte measured on this job (rank 0 1.50, rank 1 1.50: the load's growth over its load"
        " bytes, enough to measure it)",
    }


def test_a_rank_that_grew_less_than_its_load_bytes_kept_them_mapped():
    """0.5 B of RSS per load byte: the rank cannot have copied its load bytes (a memory-mapped checkpoint). Its growth
    is kept as it is for the point and the low end, scaled with the model for the high end; medium, and why."""
    result = forecast(plain_job("mapped", BIG, 0.5), Target(model_bytes=10 * BIG, ranks_per_node=2))
    assert result["per_rank_peak_bytes"]["0"] == BEFORE + BIG // 2
    assert result["per_rank_peak_range_bytes"]["0"] == [BEFORE + BIG // 2, BEFORE + 5 * BIG]
    assert result["basis"]["ranks"]["0"]["calibration"].startswith("mapped")
    assert result["confidence"]["level"] == "medium"
    assert result["confidence"]["reason"].startswith("the load kept the checkpoint memory-mapped (rank 0 ")


@pytest.mark.parametrize("read, own", [(2 * NOT_MODEL, True), (2 * NOT_MODEL - 1, False)])
def test_a_rank_is_forecast_with_its_own_rate_from_twice_its_calibrations_most_not_model_growth(read, own):
    result = forecast(plain_job(f"edge-{read}", read, 1.5), Target(model_bytes=1000 * M, ranks_per_node=2))
    assert result["basis"]["ranks"]["0"]["calibration"].startswith("measured") is own
    assert result["confidence"]["reason"].startswith("RSS per load byte measured on this job" if own else "calibrated")


def test_a_rank_that_read_too_little_is_calibrated_beside_one_that_read_enough():
    """FSDP: rank 0 reads the model; rank 1 holds 5 MB, too little to measure: the confidence says which is which."""
    trace = trace_id_of("mixed")
    ranks = {
        0: rank_spans(trace, 0, FSDP, BIG, 3 * BIG // 2, held=BIG),
        1: rank_spans(trace, 1, FSDP, 0, 3 * 5 * M, held=5 * M),
    }
    result = forecast(job("mixed", ranks), Target(model_bytes=10 * BIG, ranks_per_node=2))
    assert [result["basis"]["ranks"][r]["calibration"] for r in ("0", "1")] == [
        "measured; 5.24.0 fsdp_cpu_ram_efficient/loading for the low end",
        "5.24.0 fsdp_cpu_ram_efficient/other",
    ]
    assert result["confidence"]["reason"].startswith(
        "RSS per load byte measured on this job (rank 0 1.50: the load's growth over its load bytes, enough to measure"
        " it); calibrated (5.24.0 fsdp_cpu_ram_efficient/other) for rank 1 (too little read to measure)"
    )


def test_the_packaged_calibration_covers_both_releases_and_their_strategies():
    calibration = forecasting.packaged_calibration()
    assert {"5.12.0", "5.24.0"} <= set(calibration["releases"])
    assert {"fsdp_cpu_ram_efficient/loading", "fsdp_cpu_ram_efficient/other", "plain/loading", "plain/other"} <= set(
        calibration["releases"]["5.12.0"]
    )
    assert "zero3/other" in calibration["releases"]["5.24.0"]
    for entries in calibration["releases"].values():
        for values in entries.values():
            low, mid, high = values["rss_per_load_byte"]
            assert 0 <= low <= mid <= high


def test_a_job_without_memory_figures_cannot_be_forecast():
    trace = trace_id_of("old")
    lines = [line(resource(0), rank_load(trace, 0, "plain", M, memory={"loadtrace.rss.before": "?"}))]
    (old,) = jobs_from_spans([s for text in lines for s in decode_line(text.encode())])
    with pytest.raises(ForecastError, match="rank 0's load spans carry no loadtrace.rss"):
        forecast(old, Target(model_bytes=1000 * M))


def test_a_rank_without_memory_figures_is_left_out_and_named():
    trace = trace_id_of("left-out")
    ranks = {
        0: rank_spans(trace, 0, FSDP, M, 2 * M),
        1: rank_load(trace, 1, FSDP, M, memory={"loadtrace.rss.before": "?"}),
        2: rank_spans(trace, 2, FSDP, M, 3 * M),
    }
    result = forecast(job("left-out", ranks), Target(model_bytes=1000 * M, ranks_per_node=3))
    assert sorted(result["per_rank_peak_bytes"]) == ["0", "2"]
    assert result["basis"]["left_out_ranks"] == [{"rank": 1, "why": "no loadtrace.rss.* memory figures"}]
    assert result["basis"]["node"]["profiles"] == [{"rank": 0, "count": 1}, {"rank": 2, "count": 2}]


def test_a_job_without_rank_0_or_a_model_size_cannot_be_forecast():
    trace = trace_id_of("no-rank-0")
    with pytest.raises(ForecastError, match="no spans of rank 0"):
        forecast(job("x", {1: rank_spans(trace, 1, "plain", M, M)}), Target(model_bytes=M))
    trace = trace_id_of("no-model")
    with pytest.raises(ForecastError, match="cannot tell the measured model's size"):
        forecast(job("y", {0: rank_spans(trace, 0, "plain", 0, M, held=0)}), Target(model_bytes=M))


def test_a_world_smaller_than_a_node_is_refused():
    with pytest.raises(ForecastError, match="a world size of 2 cannot have 4 ranks per node"):
        forecast(fsdp_512(), Target(model_bytes=M, ranks_per_node=4, world_size=2))
