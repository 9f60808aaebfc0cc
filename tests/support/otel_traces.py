"""OTLP JSON Lines → ``otel_traces`` rows, as the collector-contrib ``clickhouseexporter`` (0.135.0) writes them, and a
chDB database filled with them (the tests' and the benchmark's ClickHouse).

The exporter's rules, ported (``exporter_traces.go``, ``internal/sqltemplates/traces_table.sql``):

- ``Timestamp`` is the span's start; ``Duration`` is end - start in ns, as a ``UInt64`` (``pcommon.Timestamp``
  arithmetic: a span that ends before it starts wraps);
- ``TraceId`` / ``SpanId`` / ``ParentSpanId`` lower-case hex, empty for an all-zero id (``traceutil.*ToHexOrEmpty``);
- ``SpanKind`` / ``StatusCode`` spelled by ``traceutil.SpanKindStr`` / ``StatusCodeStr`` (``SPAN_KIND_INTERNAL``,
  ``STATUS_CODE_ERROR``, ...);
- ``ServiceName``: the resource's ``service.name`` (``AsString``), empty without one;
- ``ResourceAttributes`` / ``SpanAttributes``: every value through ``pcommon.Value.AsString``: strings as they are,
  ints in decimal, bools ``true``/``false``, doubles by ``strconv.FormatFloat(f, 'f', -1, 64)``, bytes in base64,
  arrays and maps as Go's ``encoding/json`` writes them (compact, ``<>&`` escaped, map keys sorted), an empty value
  as the empty string; ``ScopeName`` / ``ScopeVersion`` in their own columns.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

# The exporter's DDL (internal/sqltemplates/traces_table.sql) rendered as it renders it by default: database
# ``default``, table ``otel_traces``, no cluster, MergeTree, no TTL, the bloom-filter indexes.
DDL = """\
CREATE TABLE IF NOT EXISTS {database}.{table} (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""

SPAN_KINDS = ("SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT")
SPAN_KINDS += ("SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER")
STATUS_CODES = ("STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR")
_JSON_KINDS = {"SPAN_KIND_" + k: i for i, k in enumerate(("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT"))}
_JSON_KINDS.update({"SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5})
U64 = 1 << 64


def go_float(value: float) -> str:
    """``strconv.FormatFloat(value, 'f', -1, 64)``: the shortest digits that round-trip, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text  # -0.0 is "-0", as Go writes it


def _go_json_float(value: float) -> str:
    """``encoding/json``'s float64: 'f' in [1e-6, 1e21), else 'e' with a two-digit exponent at least."""
    if value != 0 and (abs(value) < 1e-6 or abs(value) >= 1e21):
        mantissa, exponent = f"{value:e}".split("e")
        digits = repr(value).split("e")[0] if "e" in repr(value) else mantissa
        sign, power = exponent[0], exponent[1:].lstrip("0")
        return f"{digits}e{sign}{power.zfill(2)}"
    return go_float(value)


def _go_json(raw: Any) -> str:
    """Go's ``json.Marshal`` of ``AsRaw()``: compact, HTML-escaped, map keys sorted."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return _go_json_float(raw)
    if isinstance(raw, str):
        text = json.dumps(raw, ensure_ascii=False)
        for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
            text = text.replace(char, escaped)
        return text.replace("\u2029", "\\u2029")
    if isinstance(raw, list):
        return "[" + ",".join(_go_json(item) for item in raw) + "]"
    if isinstance(raw, dict):
        return "{" + ",".join(f"{_go_json(k)}:{_go_json(v)}" for k, v in sorted(raw.items())) + "}"
    return "null"


def _raw(value: dict[str, Any]) -> Any:
    """An OTLP JSON AnyValue as ``AsRaw()`` gives it (bytes stay base64 text: Go's json writes []byte so)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_raw(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: _raw(kv.get("value", {})) for kv in value["kvlistValue"].get("values", [])}
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def as_string(value: dict[str, Any]) -> str:
    """``pcommon.Value.AsString`` of an OTLP JSON AnyValue."""
    raw = _raw(value)
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return go_float(raw)
    return _go_json(raw)


def attributes_map(items: Iterable[dict[str, Any]]) -> dict[str, str]:
    return {item["key"]: as_string(item.get("value", {})) for item in items}


def _hex_or_empty(text: str) -> str:
    return "" if not text or set(text) == {"0"} else text.lower()


def _kind(value: Any) -> str:
    number = _JSON_KINDS.get(value, value) if isinstance(value, str) else int(value or 0)
    return SPAN_KINDS[number] if 0 <= number < len(SPAN_KINDS) else ""


def rows(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``otel_traces`` rows of one OTLP ``TracesData`` (JSON), ``Timestamp`` as unix ns."""
    for resource_spans in data.get("resourceSpans", []):
        resource = attributes_map(resource_spans.get("resource", {}).get("attributes", []))
        service = resource.get("service.name", "")
        for scope_spans in resource_spans.get("scopeSpans", []):
            scope = scope_spans.get("scope", {})
            for span in scope_spans.get("spans", []):
                start, end = int(span.get("startTimeUnixNano", 0)), int(span.get("endTimeUnixNano", 0))
                status = span.get("status", {})
                code = status.get("code", 0)
                code = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code, code)
                yield {
                    "Timestamp": start,
                    "TraceId": _hex_or_empty(span.get("traceId", "")),
                    "SpanId": _hex_or_empty(span.get("spanId", "")),
                    "ParentSpanId": _hex_or_empty(span.get("parentSpanId", "")),
                    "TraceState": span.get("traceState", ""),
                    "SpanName": span.get("name", ""),
                    "SpanKind": _kind(span.get("kind", 0)),
                    "ServiceName": service,
                    "ResourceAttributes": resource,
                    "ScopeName": scope.get("name", ""),
                    "ScopeVersion": scope.get("version", ""),
                    "SpanAttributes": attributes_map(span.get("attributes", [])),
                    "Duration": (end - start) % U64,
                    "StatusCode": STATUS_CODES[int(code)] if 0 <= int(code) < 3 else "",
                    "StatusMessage": status.get("message", ""),
                    "Events.Timestamp": [int(e.get("timeUnixNano", 0)) for e in span.get("events", [])],
                    "Events.Name": [e.get("name", "") for e in span.get("events", [])],
                    "Events.Attributes": [attributes_map(e.get("attributes", [])) for e in span.get("events", [])],
                    "Links.TraceId": [_hex_or_empty(x.get("traceId", "")) for x in span.get("links", [])],
                    "Links.SpanId": [_hex_or_empty(x.get("spanId", "")) for x in span.get("links", [])],
                    "Links.TraceState": [x.get("traceState", "") for x in span.get("links", [])],
                    "Links.Attributes": [attributes_map(x.get("attributes", [])) for x in span.get("links", [])],
                }


def rows_of_files(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every row of these JSON Lines files (what the collector receives when each rank exports over OTLP)."""
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                yield from rows(json.loads(line))


# Raw JSON columns → the table's: times are unix ns in the JSON (no time zone can shift them).
_STRUCTURE = (
    "Timestamp Int64, TraceId String, SpanId String, ParentSpanId String, TraceState String, SpanName String, "
    "SpanKind String, ServiceName String, ResourceAttributes Map(String, String), ScopeName String, "
    "ScopeVersion String, SpanAttributes Map(String, String), Duration UInt64, StatusCode String, "
    "StatusMessage String, `Events.Timestamp` Array(Int64), `Events.Name` Array(String), "
    "`Events.Attributes` Array(Map(String, String)), `Links.TraceId` Array(String), `Links.SpanId` Array(String), "
    "`Links.TraceState` Array(String), `Links.Attributes` Array(Map(String, String))"
)
_SELECT = (
    "fromUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName, "
    "ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage, "
    "arrayMap(t -> fromUnixTimestamp64Nano(t), `Events.Timestamp`), `Events.Name`, `Events.Attributes`, "
    "`Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`"
)


def create(session: Any, database: str = "default", table: str = "otel_traces") -> None:
    session.query(f"CREATE DATABASE IF NOT EXISTS {database}")
    session.query(DDL.format(database=database, table=table))


def insert(session: Any, rows_: Iterable[dict[str, Any]], database: str = "default", table: str = "otel_traces") -> int:
    """Insert rows through a JSON Lines file chDB reads (the way the exporter's batch lands: one INSERT)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        count = 0
        for row in rows_:
            handle.write(json.dumps(row) + "\n")
            count += 1
    try:
        session.query(
            f"INSERT INTO {database}.{table} SELECT {_SELECT} FROM file('{handle.name}', 'JSONEachRow', '{_STRUCTURE}')"
        )
    finally:
        os.unlink(handle.name)
    return count


def fill(path: Path, sources: Iterable[Path], database: str = "default", table: str = "otel_traces") -> int:
    """A chDB database at ``path`` with the exporter's table, filled from these trace files; the rows inserted."""
    from chdb import session as chdb_session

    with chdb_session.Session(str(path)) as session:
        create(session, database, table)
        return insert(session, rows_of_files(sources), database, table)
