"""zeros_like / empty_like bytes during a load, by device and call site; torch.load files."""

import torch
from support.inmemory import traced

import loadtrace


def test_outside_a_load_materialisation_is_pass_through():
    source = torch.ones(4, 4)
    with traced() as t:
        result = torch.zeros_like(source)
        empty = torch.empty_like(source, device="meta")
    assert torch.equal(result, torch.zeros(4, 4)) and empty.device.type == "meta"
    assert t.spans() == []


def test_inside_a_load_bytes_are_counted_by_device_and_call_site():
    source = torch.ones(8, 16, dtype=torch.float32)  # 512 B
    with traced() as t:
        with loadtrace.traced_load("materialise"):
            torch.zeros_like(source, device="cpu")
            torch.zeros_like(source, dtype=torch.float16)  # 256 B
            torch.empty_like(source, device="meta")  # 512 B, on meta
    load = t.one("loadtrace.load")
    assert load.attributes["loadtrace.materialized.calls"] == 3
    assert load.attributes["loadtrace.materialized.bytes.cpu"] == 512 + 256
    assert load.attributes["loadtrace.materialized.bytes.meta"] == 512
    sites = load.attributes["loadtrace.materialized.sites"]
    assert all(site.startswith("test_hooks_torch.py:") for site in sites)
    assert any(site.endswith("zeros_like cpu") for site in sites)
    assert sum(load.attributes["loadtrace.materialized.site_bytes"]) == 512 + 256 + 512


def test_tensor_detail_adds_a_span_per_materialisation():
    with traced(detail="tensor") as t:
        with loadtrace.traced_load("materialise"):
            torch.zeros_like(torch.ones(3))
    (span,) = t.spans("torch.materialize")
    assert span.attributes["loadtrace.materialize.bytes"] == 12
    assert span.parent.span_id == t.one("loadtrace.load").context.span_id


def test_torch_load_counts_the_tensors_it_returned(tmp_path):
    state = {"w": torch.randn(10, 10), "nested": {"b": torch.arange(7)}}
    path = tmp_path / "pytorch_model.bin"
    torch.save(state, path)
    with traced() as t:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    span = t.one("torch.load")
    assert span.attributes["loadtrace.read.tensors"] == 2
    assert span.attributes["loadtrace.read.bytes"] == 400 + 56
    assert span.attributes["loadtrace.file.size"] == path.stat().st_size
    assert span.attributes["loadtrace.map_location"] == "cpu"
    assert torch.equal(loaded["w"], state["w"])
