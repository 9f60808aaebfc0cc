"""instrument() / uninstrument() are exact inverses, idempotent, and reach names bound with `from x import y`."""

import safetensors
import torch
import transformers.core_model_loading as core_model_loading
import transformers.modeling_utils as modeling_utils
import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

import loadtrace
from loadtrace.hooks import all_hooks
from loadtrace.instrumentor import LoadtraceInstrumentor


def targets():
    """Every hooked object, found where each module keeps it (class __dict__ entries included)."""
    found = {}
    for hook in all_hooks():
        module = __import__(hook.module, fromlist=["_"])
        parent, attribute, original = wrapt.resolve_path(module, hook.target)
        found[hook.name] = original
    found["modeling_utils.safe_open"] = modeling_utils.safe_open
    found["modeling_utils.convert_and_load_state_dict_in_model"] = modeling_utils.convert_and_load_state_dict_in_model
    return found


def test_instrument_then_uninstrument_restores_every_object():
    before = targets()
    loadtrace.instrument()
    loadtrace.instrument()  # idempotent
    during = targets()
    assert all(isinstance(during[name], wrapt.FunctionWrapper) for name in before), [n for n in before if not isinstance(during[n], wrapt.FunctionWrapper)]
    loadtrace.uninstrument()
    loadtrace.uninstrument()  # idempotent
    after = targets()
    assert all(after[name] is before[name] for name in before)


def test_late_activation_rebinds_names_imported_with_from():
    assert modeling_utils.safe_open is safetensors.safe_open
    loadtrace.instrument()
    try:
        assert modeling_utils.safe_open is safetensors.safe_open
        assert isinstance(modeling_utils.safe_open, wrapt.FunctionWrapper)
        assert modeling_utils.convert_and_load_state_dict_in_model is core_model_loading.convert_and_load_state_dict_in_model
    finally:
        loadtrace.uninstrument()
    assert not isinstance(modeling_utils.safe_open, wrapt.FunctionWrapper)


def test_it_is_an_opentelemetry_instrumentor_with_an_entry_point():
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "loadtrace"]
    assert entry.load() is LoadtraceInstrumentor
    assert issubclass(LoadtraceInstrumentor, BaseInstrumentor)


def test_zeros_like_is_the_original_object_when_not_instrumented():
    assert torch.zeros_like is torch._C._VariableFunctions.zeros_like


def test_a_missing_target_is_skipped_with_a_note_and_the_others_still_run(monkeypatch, capsys, tmp_path):
    import transformers.integrations.deepspeed as deepspeed_integration
    from transformers import AutoModelForCausalLM

    from _examples import make_checkpoint
    from _inmemory import traced

    monkeypatch.delattr(deepspeed_integration, "_load_state_dict_into_zero3_model")  # as if a release renamed it
    make_checkpoint(tmp_path)
    with traced() as t:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("loadtrace:")]
    assert len(notes) == 1 and "_load_state_dict_into_zero3_model not found" in notes[0]
    assert t.one("transformers.from_pretrained").attributes["loadtrace.read.bytes"] > 0
