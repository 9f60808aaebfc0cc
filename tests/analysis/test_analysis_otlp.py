"""Hand-built OTLP JSON Lines, exactly as the OTLP JSON spec writes them (hex ids, nanoseconds and 64-bit integers as
decimal strings, attributes as ``{"key", "value": {"intValue": "..."}}``), built by ``support/otlp_lines.py`` for
the analysis, CLI and fleet tests: the reader takes them back exactly.
"""

from __future__ import annotations

import json

from support.otlp_lines import T0, field_fact_job, line, resource, span, trace_id_of, write_lines

from loadtrace.analysis.sources import SpanSet, decode_line, read_files


def test_reader_decodes_every_field_of_a_hand_built_span():
    trace = trace_id_of("decode")
    built = span(
        "safetensors.open",
        trace,
        T0,
        T0 + 5,
        parent="00000000000000aa",
        sid="00000000000000bb",
        **{"loadtrace.read.bytes": 2**40, "loadtrace.file.path": "/x", "ok": True, "ratio": 0.5, "list": ["a", "b"]},
    )
    spans = decode_line(line(resource(1), [built]).encode())
    assert spans is not None and len(spans) == 1
    (decoded,) = spans
    assert (decoded.trace_id, decoded.span_id, decoded.parent_span_id) == (
        trace,
        "00000000000000bb",
        "00000000000000aa",
    )
    assert (decoded.start_ns, decoded.end_ns, decoded.name) == (T0, T0 + 5, "safetensors.open")
    assert decoded.attributes == {
        "loadtrace.read.bytes": 2**40,
        "loadtrace.file.path": "/x",
        "ok": True,
        "ratio": 0.5,
        "list": ["a", "b"],
    }
    assert decoded.resource["loadtrace.rank"] == 1 and decoded.resource["host.name"] == "node-0"


def test_a_field_facts_job_reads_back_span_for_span(tmp_path):
    lines = field_fact_job("5.12.0", "zero3")
    spans = read_files(write_lines(tmp_path / "job.jsonl", lines))
    assert isinstance(spans, SpanSet) and spans.skipped_lines == 0
    assert len(spans.spans) == sum(
        len(json.loads(text)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for text in lines
    )
