"""from_pretrained: one load span with exact totals, one span per file, phases aggregated, bounded span count."""

import pytest
import torch
from _examples import make_checkpoint
from _inmemory import traced


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt")
    return path, make_checkpoint(path)


def test_from_pretrained_totals_equal_the_checkpoint(checkpoint):
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        model = AutoModelForCausalLM.from_pretrained(path)
    load = t.one("transformers.from_pretrained")
    files = t.spans("safetensors.open")
    assert len(summary["files"]) >= 3
    assert len(files) == load.attributes["loadtrace.files.opened"] == len(summary["files"])
    assert load.attributes["loadtrace.read.tensors"] == summary["tensors"]
    assert (
        load.attributes["loadtrace.read.bytes"]
        == summary["bytes"]
        == sum(f.attributes["loadtrace.read.bytes"] for f in files)
    )
    assert load.attributes["loadtrace.strategy"] == "plain"
    assert load.attributes["loadtrace.model.class"] == "Qwen3MoeForCausalLM"
    assert load.attributes["loadtrace.checkpoint"] == str(path)
    assert load.attributes["loadtrace.checkpoint.bytes"] == sum(f.stat().st_size for f in path.glob("*.safetensors"))
    held = sum(t.nbytes for t in (*model.parameters(), *model.buffers()))
    assert load.attributes["loadtrace.model.held_bytes.cpu"] == held
    assert load.attributes["loadtrace.rss.peak"] >= load.attributes["loadtrace.rss.after"] > 0
    assert load.attributes["loadtrace.hook_errors"] == 0
    assert all(f.parent.span_id == load.context.span_id for f in files)


def test_conversion_counts_every_parameter_once(checkpoint):
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        model = AutoModelForCausalLM.from_pretrained(path)
    convert = t.one("transformers.convert")
    assert convert.attributes["loadtrace.calls"] == 1
    loaded = dict(model.named_parameters())
    assert convert.attributes["loadtrace.convert.count"] == len(loaded)
    assert convert.attributes["loadtrace.convert.bytes"] == sum(p.nbytes for p in loaded.values())
    ops = {k.split(".")[3] for k in convert.attributes if k.startswith("loadtrace.convert.op.")}
    assert "Rename" in ops and "MergeModulelist" in ops  # experts are merged on load in transformers 5


def test_span_count_is_bounded_by_files_not_tensors(checkpoint):
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        AutoModelForCausalLM.from_pretrained(path)
    assert len(t.spans()) <= len(summary["files"]) + 20
    assert summary["tensors"] > len(summary["files"]) + 20


def test_weights_are_identical_with_and_without_tracing(checkpoint):
    from transformers import AutoModelForCausalLM

    path, _ = checkpoint
    plain = AutoModelForCausalLM.from_pretrained(path).state_dict()
    with traced(detail="tensor"):
        traced_state = AutoModelForCausalLM.from_pretrained(path).state_dict()
    assert plain.keys() == traced_state.keys()
    assert all(torch.equal(plain[k], traced_state[k]) for k in plain)
