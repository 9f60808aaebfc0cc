"""The stored forecast runs (tests/fixtures/forecast/): their measured truths, and issue 13's bar a forecast must
meet."""

from __future__ import annotations

import json

from loadtrace.analysis import forecast as forecasting
from loadtrace.analysis.forecast import Target
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
