"""Where the analysis reads spans from, each turned into the same ``SpanSet``: the trace and state files ranks leave
(``files``), Jaeger's query API (``jaeger``) and ClickHouse's ``otel_traces`` table (``clickhouse``). The span model
and the file reader's names are re-exported here."""

from __future__ import annotations

from .files import (
    STATUS_ERROR,
    DamagedFile,
    ResourceCache,
    SourceError,
    Span,
    SpanSet,
    StateFile,
    any_value,
    decode_line,
    key_values,
    parse_line,
    read_files,
    read_sources,
    read_stream,
    rfc3339_nanos,
    source_files,
    spans_from_traces_data,
    trace_files,
)

__all__ = [
    "STATUS_ERROR",
    "DamagedFile",
    "ResourceCache",
    "SourceError",
    "Span",
    "SpanSet",
    "StateFile",
    "any_value",
    "decode_line",
    "key_values",
    "parse_line",
    "read_files",
    "read_sources",
    "read_stream",
    "rfc3339_nanos",
    "source_files",
    "spans_from_traces_data",
    "trace_files",
]
