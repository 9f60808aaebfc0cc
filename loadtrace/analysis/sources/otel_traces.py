"""The collector-contrib ``clickhouseexporter``'s ``otel_traces`` table (release 0.139.0): its DDL, and OTLP JSON →
its rows as the exporter writes them (``loadtrace ingest``; ``clickhouse.py`` reads them back).

The exporter's rules, ported (``exporter_traces.go``, ``internal/sqltemplates/traces_table.sql``):

- ``Timestamp`` is the span's start; ``Duration`` is end - start in ns, as a ``UInt64`` (``pcommon.Timestamp``
  arithmetic: a span that ends before it starts wraps);
- ``TraceId`` / ``SpanId`` / ``ParentSpanId`` lower-case hex, empty for an all-zero id (``traceutil.*ToHexOrEmpty``);
- ``SpanKind`` / ``StatusCode`` spelled by pdata's ``SpanKind.String`` / ``StatusCode.String`` (``Internal``,
  ``Error``, ...; releases before it wrote ``SPAN_KIND_INTERNAL``, ``STATUS_CODE_ERROR``, which ``clickhouse.py``
  still reads);
- ``ServiceName``: the resource's ``service.name`` (``AsString``), empty without one;
- ``ResourceAttributes`` / ``SpanAttributes``: every value through ``pcommon.Value.AsString``: strings as they are,
  ints in decimal, bools ``true``/``false``, doubles by ``strconv.FormatFloat(f, 'f', -1, 64)``, bytes in base64,
  arrays and maps as Go's ``encoding/json`` writes them (compact, ``<>&`` escaped, map keys sorted), an empty value
  as the empty string; ``ScopeName`` / ``ScopeVersion`` in their own columns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from .files import rfc3339_nanos

# The exporter's DDL (internal/sqltemplates/traces_table.sql) rendered as it renders it by default: database
# ``default``, table ``otel_traces``, no cluster, MergeTree, no TTL, the bloom-filter indexes.
DDL = """\
CREATE TABLE IF NOT EXISTS {database}.{table} (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
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
    Duration UInt64 CODEC(ZSTD(1)),
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
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1
"""

SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")
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
    if isinstance(value, str):  # the enum's name, or its number as text
        number = _JSON_KINDS.get(value, int(value) if value.isdigit() else -1)
    else:
        number = int(value or 0)
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


# Every column the exporter writes, with its type as ``system.columns`` names it: a table written into must have each.
COLUMNS = {
    "Timestamp": "DateTime64(9)",
    "TraceId": "String",
    "SpanId": "String",
    "ParentSpanId": "String",
    "TraceState": "String",
    "SpanName": "LowCardinality(String)",
    "SpanKind": "LowCardinality(String)",
    "ServiceName": "LowCardinality(String)",
    "ResourceAttributes": "Map(LowCardinality(String), String)",
    "ScopeName": "String",
    "ScopeVersion": "String",
    "SpanAttributes": "Map(LowCardinality(String), String)",
    "Duration": "UInt64",
    "StatusCode": "LowCardinality(String)",
    "StatusMessage": "String",
    "Events.Timestamp": "Array(DateTime64(9))",
    "Events.Name": "Array(LowCardinality(String))",
    "Events.Attributes": "Array(Map(LowCardinality(String), String))",
    "Links.TraceId": "Array(String)",
    "Links.SpanId": "Array(String)",
    "Links.TraceState": "Array(String)",
    "Links.Attributes": "Array(Map(LowCardinality(String), String))",
}
_NS_LIMIT = 1 << 63  # DateTime64(9) holds 1970 to 2262: unix ns within an Int64


def insert_statement(database: str, table: str) -> str:
    """The INSERT that ``json_lines`` follow (the same text over HTTP, where they are the request's body, and in
    chDB). Times travel as RFC 3339 in UTC, read to the ns whatever the server's time zone."""
    columns = ", ".join(f"`{name}`" for name in COLUMNS)
    return (
        f"INSERT INTO {database}.{table} ({columns}) SETTINGS date_time_input_format = 'best_effort' FORMAT JSONEachRow"
    )


def _time(ns: int) -> str:
    text = rfc3339_nanos(ns) if 0 <= ns < _NS_LIMIT else None
    if text is None:
        raise ValueError(f"{ns} ns is outside what DateTime64(9) holds")
    return text


def json_line(row: dict[str, Any]) -> str:
    """One row as the INSERT reads it; ``ValueError`` for a time the column cannot hold (before 1970, after 2262)."""
    times = {"Timestamp": _time(row["Timestamp"]), "Events.Timestamp": [_time(t) for t in row["Events.Timestamp"]]}
    return json.dumps({**row, **times}, ensure_ascii=False)
