"""Medians, minima and paired ratios: every figure the report shows is computed here, from the raw runs."""

from __future__ import annotations

import math
import statistics
from typing import Any

LOAD_METRICS = ("first", "warm", "first_cpu", "warm_cpu", "profiler_inner", "peak_mb", "load_peak_mb", "import_mb")


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def low(values: list[float]) -> float | None:
    return min(values) if values else None


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median: the order statistics k and n + 1 - k, k the largest for which
    the binomial(n, 1/2) coverage is still ``level``; None for fewer than 6 values (no such k)."""
    ordered, n = sorted(values), len(values)
    found = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n < level:
            break
        found = k
    return None if found is None else (ordered[found - 1], ordered[n - found])


def warm(rank: dict[str, Any], key: str = "wall_s") -> float | None:
    """The warm figure of a process: the fastest of its 2nd, 3rd, ... loads."""
    walls = [load[key] for load in rank["loads"][1:]]
    return min(walls) if walls else None


def rank_metric(rank: dict[str, Any], name: str) -> float | None:
    """One rank's figure ``name`` (see LOAD_METRICS)."""
    first = rank["loads"][0]
    figures = {
        "first": lambda: first["wall_s"],
        "warm": lambda: warm(rank),
        "first_cpu": lambda: first["cpu_s"],
        "warm_cpu": lambda: warm(rank, "cpu_s"),
        "profiler_inner": lambda: first.get("inner_s"),
        "peak_mb": lambda: rank["process_peak"] / 2**20,
        "load_peak_mb": lambda: first["peak_delta"] / 2**20,
        "import_mb": lambda: rank["hwm_after_import"] / 2**20,
    }
    return figures[name]() if name in figures else None


def metric(run: dict[str, Any], name: str) -> float | None:
    """A run's figure; for two ranks, the slower rank (what the job waits for)."""
    values = [rank_metric(rank, name) for rank in run["ranks"]]
    values = [v for v in values if v is not None]
    if name.endswith("_cpu"):
        return sum(values) if values else None  # CPU: what the job spent on all its ranks
    return max(values) if values else None


def paired(results: list[dict[str, dict[str, Any]]], label: str, name: str) -> dict[str, Any]:
    """``label``'s figure ``name`` over the rounds, with ratios and differences to the ``off`` run of each round."""
    mine = [metric(rnd[label], name) for rnd in results]
    values = [v for v in mine if v is not None]
    base = [metric(rnd["off"], name if name != "profiler_inner" else "first") for rnd in results]
    ratios = [v / b for v, b in zip(mine, base, strict=True) if b and v is not None]
    diffs = [v - b for v, b in zip(mine, base, strict=True) if b is not None and v is not None]
    base_values = [b for b in base if b is not None]
    return {
        "median": med(values),
        "min": low(values),
        "n": len(values),
        "values": values,
        "pair_ratio_median": med(ratios),
        "pair_ratios": ratios,
        "pair_diff_median": med(diffs),
        "ratio_of_minima": (low(values) / low(base_values)) if values and base_values else None,
        "ratio_of_medians": (med(values) / med(base_values)) if values and base_values else None,
    }


def summarize_load(results: list[dict[str, dict[str, Any]]], configs: list[str]) -> dict[str, dict[str, Any]]:
    summary = {}
    for label in configs:
        entry: dict[str, Any] = {name: paired(results, label, name) for name in LOAD_METRICS}
        entry["otlp_spans"] = [rnd[label]["otlp"]["spans"] for rnd in results]
        entry["wrapped"] = sorted({r["zeros_like_wrapped"] for rnd in results for r in rnd[label]["ranks"]})
        summary[label] = entry
    return summary


def summarize_ab(rows: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Each label of the in-process A/B against ``off`` (wall) or ``off cpu`` (CPU) of the same triple."""
    result = {}
    for label in ("off", "on", "off (null)", "off cpu", "on cpu", "off (null) cpu"):
        base = "off cpu" if label.endswith("cpu") else "off"
        values = [row[label] for row in rows]
        ratios = [row[label] / row[base] for row in rows]
        result[label] = {
            "median": med(values),
            "min": low(values),
            "pair_ratio_median": med(ratios),
            "ratio_of_minima": low(values) / low([row[base] for row in rows]),
            "pair_diff_median_ms": med([(row[label] - row[base]) * 1000 for row in rows]),
        }
    return result


def summarize_starts(times: dict[str, list[float]], base: list[float]) -> dict[str, dict[str, Any]]:
    """Interpreter start times (s) per variant, against ``base`` (not installed) of the same triple."""
    return {
        name: {
            "median_ms": med(values) * 1000,
            "min_ms": low(values) * 1000,
            "pair_diff_median_ms": med([(a - b) * 1000 for a, b in zip(values, base, strict=True)]),
            "pair_ratio_median": med([a / b for a, b in zip(values, base, strict=True)]),
        }
        for name, values in times.items()
    }
