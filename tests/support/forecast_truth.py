"""The stored forecast runs (tests/fixtures/forecast/): their measured truths, and issue 13's bar a forecast must
meet."""

from __future__ import annotations

import json
from pathlib import Path

from loadtrace.analysis import forecast as forecasting
from loadtrace.analysis.forecast import Target
from loadtrace.cli import main
from support.paths import FIXTURES

RUNS = FIXTURES / "forecast"


def truth(name: str) -> dict:
    return json.loads((RUNS / name / "truth.json").read_text())


def meets_the_bar(point: int, span: list[int], low: int, high: int) -> bool:
    holds = span[0] <= low and high <= span[1] and span[1] <= 2 * span[0]
    return 0.8 * low <= point <= 1.25 * high or holds


def check(measured, full: dict, label: str) -> str:
    result = forecasting.forecast(measured, Target(full["checkpoint"]["bytes"], ranks_per_node=2))
    low, high = full["node"]["sum_rss_anon_peaks"], full["node"]["sum_vm_hwm"]
    point, span = result.per_node_peak_bytes, result.per_node_peak_range_bytes
    text = (
        f"{label}: forecast {point:,} [{span[0]:,}, {span[1]:,}] ({result.confidence.level}); truth {low:,} - {high:,}"
    )
    assert meets_the_bar(point, span, low, high), text
    return text


# A model family the calibration never saw (issue 34, point 6): the user's Llama, forecast at its own size.

LLAMA_BYTES = 27_993_088  # its tensors: tests/support/llama.py


def own_size_forecast(folder: Path, capsys) -> tuple[dict, dict]:
    """``report --forecast-model-bytes <its own size>`` of a Llama job: (forecast, report) as JSON."""
    assert main(["report", str(folder), "--forecast-model-bytes", str(LLAMA_BYTES), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["traces"][0]["model_bytes"] == LLAMA_BYTES
    return report["forecast"], report


def assert_each_rank_measured_peak_in_its_range(forecast: dict, report: dict) -> None:
    measured = {str(rank["rank"]): rank["peak_rss_bytes"] for rank in report["ranks"]}
    assert set(measured) == set(forecast["per_rank_peak_range_bytes"]) == {"0", "1"}
    for rank, (low, high) in forecast["per_rank_peak_range_bytes"].items():
        assert low <= measured[rank] <= high, (rank, low, measured[rank], high)
    # The Llama grew 15 MB for its 28 MB: a float32 load keeps the checkpoint memory-mapped (issue 40).
    assert forecast["confidence"]["reason"].startswith("the load kept the checkpoint memory-mapped (rank 0 ")
