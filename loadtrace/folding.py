"""A span folded into an attribute of the span it hangs from: the one format both halves use (as startup_split.py is
for the startup's split).

Above the span budget's world size most ranks export only their startup and load spans (instrumentation/budget.py);
each of their other spans (the rendezvous, the preparation, a load's phases) travels whole in ``loadtrace.folded`` of
the nearest of those it hangs from: one JSON text per span, with its name, ids, times, status and every attribute. The
analysis rebuilds each as the span it was (analysis/summarized.py ``unfold``), so a folding rank reports as it would
with every span exported. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple


class Folded(NamedTuple):
    """A folded span as the analysis rebuilds it; ids as 16 hex digits, as OTLP JSON writes them."""

    name: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    error: bool
    attributes: dict[str, Any]


def encode(
    name: str,
    span_id: int,
    parent_span_id: int | None,
    times: tuple[int, int],
    error: bool,
    attributes: Mapping[str, Any],
) -> str:
    """The folded span's text: compact JSON, sequences as lists."""
    record: dict[str, Any] = {
        "name": name,
        "span_id": f"{span_id:016x}",
        "parent_span_id": f"{parent_span_id:016x}" if parent_span_id else "",
        "start": times[0],
        "end": times[1],
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()},
    }
    if error:
        record["error"] = True
    return json.dumps(record, separators=(",", ":"))


def decode(text: Any) -> Folded | None:
    """The folded span ``encode`` wrote; None for anything else (a value cut short by a store, another producer's)."""
    try:
        record = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    name, span_id, parent, start, end = (record.get(k) for k in ("name", "span_id", "parent_span_id", "start", "end"))
    attributes = record.get("attributes")
    if not (isinstance(name, str) and isinstance(span_id, str) and span_id and isinstance(parent, str)):
        return None
    if type(start) is not int or type(end) is not int or not isinstance(attributes, dict):
        return None
    return Folded(name, span_id, parent, start, end, record.get("error") is True, attributes)
