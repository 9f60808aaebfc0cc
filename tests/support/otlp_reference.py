"""The reference the file exporter's OTLP JSON is tested against: OTel's own protobuf encoder and protobuf's JSON
mapping. It lives here, not in loadtrace: it is ~10x slower than ``export.traces_data``, and no traced process should
import protobuf's ``json_format`` or OTel's encoder for it."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any) -> None:
    """protobuf's JSON writes bytes as base64; OTLP JSON wants trace and span ids as hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def otlp_json_via_protobuf(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """``TracesData`` through OTel's own protobuf encoder and protobuf's JSON mapping."""
    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    _hex_ids(data)
    return data
