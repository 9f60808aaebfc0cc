"""The file exporter's OTLP JSON equals what OTel's own protobuf encoder and protobuf's JSON mapping produce."""

import safetensors
import safetensors.torch
import torch
from support.inmemory import traced
from support.otlp_reference import otlp_json_via_protobuf

import loadtrace
from loadtrace.instrumentation.exporting.export import traces_data


def test_direct_encoding_equals_the_protobuf_reference(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file({"a": torch.ones(3), "b": torch.zeros(())}, str(path))
    with traced(detail="tensor") as t:
        with loadtrace.traced_load("reference"):
            with safetensors.safe_open(str(path), framework="pt") as handle:
                handle.get_tensor("a")
                handle.get_tensor("b")  # a 0-d tensor: an empty shape array
            torch.zeros_like(torch.ones(2), dtype=torch.float64)
        try:
            safetensors.safe_open(str(tmp_path / "missing.safetensors"), framework="pt")
        except FileNotFoundError:
            pass  # an error status with an exception event
    spans = t.spans()
    assert {s.name for s in spans} >= {"loadtrace.load", "safetensors.open", "safetensors.read", "torch.materialize"}
    for span in spans:
        assert traces_data([span]) == otlp_json_via_protobuf([span]), span.name
    assert traces_data(spans) == otlp_json_via_protobuf(spans)


def test_the_file_line_is_the_json_of_traces_data(tmp_path):
    """The line a file gets (``otlp_json``: the resource and scope encoded once per process, around each span's text)
    is what ``json.dumps`` writes for the ``TracesData`` it holds, byte for byte: for one span, several, the same
    again (from the cached head), and spans of two resources. What it holds is checked against OTel's encoder above."""
    import json

    from opentelemetry.sdk.resources import Resource

    from loadtrace.instrumentation.exporting.export import otlp_json

    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file({"a": torch.ones(3)}, str(path))
    with traced() as t:
        with loadtrace.traced_load("line"):
            with safetensors.safe_open(str(path), framework="pt") as handle:
                handle.get_tensor("a")
    spans = t.spans()
    assert len(spans) >= 2
    for batch in ([spans[0]], [spans[1]], spans, spans):  # twice: the cached head gives the same line
        assert otlp_json(batch) == json.dumps(traces_data(batch), separators=(",", ":")) + "\n"
    other = spans[1].__class__.__new__(spans[1].__class__)
    other.__dict__.update(spans[1].__dict__, _resource=Resource({"service.name": "other"}))
    mixed = [spans[0], other]
    line = otlp_json(mixed)
    assert line == json.dumps(traces_data(mixed), separators=(",", ":")) + "\n"
    assert len(json.loads(line)["resourceSpans"]) == 2


def test_every_value_kind_encodes_as_the_protobuf_reference_does():
    """The text encoder against OTel's protobuf encoder for what a span can hold: every attribute type (strings that
    need escaping and non-ASCII ones among them), arrays empty and not, events with and without attributes, an error
    status with its message, a remote parent, spans of two scopes and two resources in one line."""
    import json

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

    from loadtrace.instrumentation.exporting.export import otlp_json

    exporter = InMemorySpanExporter()
    for resource in (Resource({"service.name": "a", "host.name": "nœud-1"}), Resource({"service.name": "b"})):
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        for scope, version in (("loadtrace", "1.2"), ("other", None)):
            tracer = provider.get_tracer(scope, version)
            parent = NonRecordingSpan(SpanContext(2**127 + 5, 2**63 + 7, True, TraceFlags(TraceFlags.SAMPLED)))
            attributes = {
                "s": 'quote " backslash \\ tab \t nul \x00 é 日本 😀',
                "i": -(2**62),
                "big": 2**63 - 1,
                "f": 0.1,
                "whole": 3.0,
                "t": True,
                "no": False,
                "strings": ["a", "ü"],
                "ints": [0, 1, -2],
                "floats": [1.5, -0.25],
                "bools": [True, False],
                "empty": [],
            }
            with tracer.start_as_current_span("outer", context=trace.set_span_in_context(parent)) as outer:
                outer.set_attributes(attributes)
                outer.add_event("plain")
                outer.add_event("with attributes", {"k": "v", "n": 2})
                with tracer.start_as_current_span("inner ✓", kind=trace.SpanKind.CLIENT) as inner:
                    inner.set_status(Status(StatusCode.ERROR, 'broke: "why"'))
                with tracer.start_as_current_span("ok") as ok:
                    ok.set_status(Status(StatusCode.OK))
    spans = exporter.get_finished_spans()
    assert len(spans) == 12
    for span in spans:
        assert traces_data([span]) == otlp_json_via_protobuf([span]), span.name
    assert traces_data(spans) == otlp_json_via_protobuf(spans)
    assert len(traces_data(spans)["resourceSpans"]) == 2
    for batch in ([spans[0]], spans[:3], spans):
        line = otlp_json(batch)
        assert line == json.dumps(json.loads(line), separators=(",", ":")) + "\n"  # what json.dumps writes
