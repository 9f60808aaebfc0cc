"""The file exporter's OTLP JSON equals what OTel's own protobuf encoder and protobuf's JSON mapping produce."""

import safetensors
import safetensors.torch
import torch
from _inmemory import traced
from _otlp_reference import otlp_json_via_protobuf

import loadtrace
from loadtrace.export import traces_data


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
    """The line a file gets encodes the resource and scope once per process (``otlp_json``): byte for byte what
    encoding ``traces_data`` whole gives, for one span, several, and spans of two resources."""
    import json

    from opentelemetry.sdk.resources import Resource

    from loadtrace.export import otlp_json

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
