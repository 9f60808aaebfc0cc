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
