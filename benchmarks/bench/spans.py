"""(c) Spans per rank at default detail, counted from the rank files of (b)'s runs and of a two-rank load of the
~20,000-tensor checkpoint: for each ``transformers.from_pretrained`` span, the spans in its subtree, against the files
it opened."""

from __future__ import annotations

from typing import Any


def span_row(what: str, tensors: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The most spans per load and per rank file over ``runs``, and the files those loads opened."""
    per_load = [load for run in runs for f in run["span_files"] for load in f["loads"]]
    return {
        "what": what,
        "tensors": tensors,
        "files": max(load["files"] for load in per_load),
        "max_spans_per_load": max(load["spans"] for load in per_load),
        "max_rank_file_spans": max(f["total"] for run in runs for f in run["span_files"]),
    }


def traced_runs(res: dict[str, Any], key: str, label: str) -> list[dict[str, Any]]:
    return [rnd[label] for rnd in res[key]["raw"]]


def span_counts(res: dict[str, Any], moe: dict[str, Any], many: dict[str, Any], many_run: dict[str, Any]) -> None:
    """Adds ``spans`` (and ``tensor_detail_spans`` when (b) ran on 1 rank) to ``res``."""
    name = moe["spec"]["name"]
    spans = []
    for key, what in (("single", f"{name}, 1 rank"), ("ddp", f"{name}, 2 ranks")):
        if key in res:
            spans.append(span_row(what, moe["tensors"], traced_runs(res, key, "LOADTRACE=1")))
    if "single" in res:
        tensor_runs = traced_runs(res, "single", "DETAIL=tensor")
        res["tensor_detail_spans"] = span_row("", moe["tensors"], tensor_runs)["max_spans_per_load"]
    spans.append(span_row(f"{many['spec']['name']}, 2 ranks", many["tensors"], [many_run]))
    res["spans"] = spans
