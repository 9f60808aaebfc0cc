"""Walk a trace's parent links: every span's parent must be a span of the same trace (Jaeger draws any other as a
second root, with its "invalid parent" warning)."""

from __future__ import annotations

from collections.abc import Iterable


def orphans(spans: Iterable[tuple[str, str, str | None, str]]) -> list[tuple[str, str]]:
    """(trace id, span id, parent span id or empty, name) of every span → (name, parent id) of those whose parent is
    not in their trace."""
    spans = list(spans)
    known = {(trace_id, span_id) for trace_id, span_id, _, _ in spans}
    return [
        (name, parent)
        for trace_id, _, parent, name in spans
        if parent and parent != "0" * 16 and (trace_id, parent) not in known
    ]


def from_files(pairs: Iterable[tuple[dict, dict]]) -> list[tuple[str, str, str | None, str]]:
    """``support.installed.file_spans``' (resource, span) pairs, in OTLP JSON's own hex."""
    return [(s["traceId"], s["spanId"], s.get("parentSpanId"), s["name"]) for _, s in pairs]


def from_wire(spans: Iterable) -> list[tuple[str, str, str | None, str]]:
    """``_wire.WireSpan``s."""
    return [(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in spans]
