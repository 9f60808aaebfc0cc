"""Promise (issue 40): the forecast of a second model family (a Mistral, the calibration being a Qwen3-MoE) holds what
a run 35 times larger measures, or says why it is unsure; "high" only where the method has been shown right for that
kind of load; no "duplicated" bytes without a duplicate.

The stored runs (tests/fixtures/forecast-mistral: scripts/forecast_runs.py on tests/support/mistral.py's checkpoints,
transformers 5.24, 2 ranks): 37.6 MB and 1.34 GB float32, plain and FSDP ``cpu_ram_efficient_loading``; and the same
model saved as bf16 and loaded as float32 at both sizes. A float32 load keeps the checkpoint memory-mapped (its tensors
are views of the files' pages, untouched by the load): its ranks grew 17.6 MB at 37.6 MB and 20.0 MB at 1.34 GB, where
the forecast used to scale that growth with the model (850 MB and 3.0 GB forecast against 378 MB measured, "high")."""

from __future__ import annotations

import json

import pytest
from support.paths import FIXTURES

from loadtrace.cli import main

RUNS = FIXTURES / "forecast-mistral"
LARGE = 1_338_142_720  # the large checkpoint's tensor bytes (float32)


def report(capsys, run: str, *flags: str) -> dict:
    assert main(["report", str(RUNS / run / "spans"), "--format", "json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def measured_peaks(capsys, run: str) -> dict[str, int]:
    return {str(rank["rank"]): rank["peak_rss_bytes"] for rank in report(capsys, run)["ranks"]}


@pytest.mark.parametrize("mode", ["plain", "fsdp"])
def test_a_mapped_float32_load_s_range_holds_what_35_times_its_size_measures(mode, capsys):
    forecast = report(capsys, f"524-{mode}-small", "--forecast-model-bytes", str(LARGE))["forecast"]
    measured = measured_peaks(capsys, f"524-{mode}-large")
    for rank, (low, high) in forecast["per_rank_peak_range_bytes"].items():
        assert low <= measured[rank] <= high, (rank, low, measured[rank], high)
        assert abs(forecast["per_rank_peak_bytes"][rank] - measured[rank]) < 0.01 * measured[rank]
    confidence = forecast["confidence"]
    assert confidence["level"] == "medium" and "kept the checkpoint memory-mapped" in confidence["reason"]


def test_a_bf16_checkpoint_loaded_as_float32_duplicates_nothing_and_holds_the_large_run(capsys):
    small = report(capsys, "524-plain-bf16as32-small", "--forecast-model-bytes", str(LARGE // 2))["forecast"]
    assert not small["basis"]["categories"]["duplicated"]["ranks"]  # the cast's growth is each rank's own share
    measured = measured_peaks(capsys, "524-plain-bf16as32-large")
    for rank, (low, high) in small["per_rank_peak_range_bytes"].items():
        assert low <= measured[rank] <= high, (rank, low, measured[rank], high)
    # A cast copies every byte: the rank's own rate is measured (1.71), a copying load like the calibration's.
    assert small["confidence"]["level"] == "high" and "measured on this job" in small["confidence"]["reason"]


def test_the_table_says_the_growth_is_not_scaled_and_why(capsys):
    assert main(["report", str(RUNS / "524-plain-small" / "spans"), "--forecast-model-bytes", str(LARGE)]) == 0
    text = capsys.readouterr().out
    assert "confidence: medium: the load kept the checkpoint memory-mapped" in text
