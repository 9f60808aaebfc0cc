"""instrument() / uninstrument() are exact inverses, idempotent, and reach names bound with `from x import y`."""

import inspect
import os
import sys

import accelerate.utils as accelerate_utils
import pytest
import safetensors
import torch
import transformers.core_model_loading as core_model_loading
import transformers.modeling_utils as modeling_utils
import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

import loadtrace
from loadtrace.instrumentation.hooks import all_hooks, registry
from loadtrace.instrumentor import LoadtraceInstrumentor


@pytest.fixture(autouse=True)
def traces_in_tmp(monkeypatch, tmp_path):
    monkeypatch.setenv("LOADTRACE_DIR", str(tmp_path))  # instrument() with loadtrace's own export writes files


def targets():
    """Every hooked object, found where each module keeps it (class __dict__ entries included)."""
    found = {}
    for hook in all_hooks():
        module = __import__(hook.module, fromlist=["_"])
        parent, attribute, original = wrapt.resolve_path(module, hook.target)
        found[hook.name] = original
    found["modeling_utils.safe_open"] = modeling_utils.safe_open
    found["modeling_utils.convert_and_load_state_dict_in_model"] = modeling_utils.convert_and_load_state_dict_in_model
    # Bound with ``from x import y`` before loadtrace came: torch.distributed's own broadcast (what accelerate calls as
    # ``dist.broadcast``) and accelerate.utils' fsdp2_load_full_state_dict.
    found["torch.distributed.broadcast"] = torch.distributed.broadcast
    found["accelerate.utils.fsdp2_load_full_state_dict"] = accelerate_utils.fsdp2_load_full_state_dict
    return found


WHILE_LOADING = {hook.name for hook in all_hooks() if hook.while_loading}
# Once per tensor: a plain function of loadtrace's stands in for each (``Hook.inline``), not wrapt's wrapper.
INLINE = {"transformers.core_model_loading._materialize_copy", "transformers.core_model_loading.WeightRenaming.convert"}


def test_instrument_then_uninstrument_restores_every_object():
    before = targets()
    loadtrace.instrument()
    loadtrace.instrument()  # idempotent: nothing wrapped twice
    during = targets()
    assert {name for name in before if registry.ours(during[name])} == set(before) - WHILE_LOADING
    wrapped = {name for name in before if isinstance(during[name], wrapt.FunctionWrapper)}
    assert wrapped == set(before) - WHILE_LOADING - INLINE
    assert {hook.name for hook in all_hooks() if hook.inline} == INLINE
    for name in INLINE:  # the original's name, signature and docstring; itself one step away
        assert during[name].__wrapped__ is before[name] and during[name].__name__ == before[name].__name__
        assert inspect.signature(during[name]) == inspect.signature(before[name])
    assert WHILE_LOADING == {"torch.zeros_like", "torch.empty_like"}
    with loadtrace.traced_load("x"):
        inside = targets()
        assert all(name in INLINE or isinstance(inside[name], wrapt.FunctionWrapper) for name in before)
    assert all(targets()[name] is before[name] for name in WHILE_LOADING)  # out again after the load
    loadtrace.uninstrument()
    loadtrace.uninstrument()  # idempotent
    after = targets()
    assert all(after[name] is before[name] for name in before)


def test_after_uninstrument_a_load_runs_no_code_of_loadtrace_or_wrapt(tiny_checkpoint):
    """Nothing is left on the per-tensor path (or anywhere in a load): every Python function and C function a whole
    ``from_pretrained`` calls after ``uninstrument()``, traced by ``sys.setprofile``, is the job's libraries' own; a
    slice is the library's own type again. While instrumented, the same profile does see loadtrace's code."""
    from transformers import AutoModelForCausalLM

    checkpoint, _ = tiny_checkpoint
    ours = tuple(os.path.dirname(module.__file__) + os.sep for module in (loadtrace, wrapt))

    def callers_of_ours() -> set[str]:
        seen: set[str] = set()

        def profile(frame, event, arg):
            name = frame.f_code.co_filename
            # wrapt's import finder stays in sys.meta_path once any post-import hook was registered (an import's
            # cost, not the load's): not counted
            if event == "call" and name.startswith(ours) and not name.endswith(f"wrapt{os.sep}importer.py"):
                seen.add(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
            elif event == "c_call" and str(getattr(arg, "__module__", None)).startswith(("loadtrace", "wrapt")):
                seen.add(repr(arg))

        sys.setprofile(profile)
        try:
            model = AutoModelForCausalLM.from_pretrained(checkpoint)
        finally:
            sys.setprofile(None)
        assert model.num_parameters() > 0
        return seen

    def file_and_slice() -> tuple[type, type]:
        handle = safetensors.safe_open(str(next(checkpoint.glob("*.safetensors"))), framework="pt")
        return type(handle), type(handle.get_slice(handle.keys()[0]))

    library = file_and_slice()
    # An untraced load first: transformers' lazy imports happen now, not inside the traced load (a module first
    # imported there may keep a reference to a hook anywhere, not only as a module name uninstrument restores), nor
    # in the last load below, where wrapt's import finder, in sys.meta_path for good once any post-import hook was
    # registered in this process, would run.
    callers_of_ours()
    loadtrace.instrument()
    try:
        assert callers_of_ours()  # the profile sees loadtrace where it runs
        assert file_and_slice() != library
    finally:
        loadtrace.uninstrument()
    assert callers_of_ours() == set()
    assert file_and_slice() == library


def test_uninstrument_restores_a_module_first_imported_while_instrumented(monkeypatch):
    """A module imported while ours are in place binds ours by ``from x import y`` (transformers imports lazily, in a
    load): uninstrument gives it the originals back, the per-tensor plain functions included."""
    originals = (safetensors.safe_open, core_model_loading._materialize_copy)
    late = type(sys)("loadtrace_test_late_importer")
    monkeypatch.setitem(sys.modules, late.__name__, late)
    loadtrace.instrument()
    try:
        late.safe_open = safetensors.safe_open  # what `from safetensors import safe_open` binds now
        late._materialize_copy = core_model_loading._materialize_copy
        assert (late.safe_open, late._materialize_copy) != originals
    finally:
        loadtrace.uninstrument()
    assert (late.safe_open, late._materialize_copy) == originals


def test_uninstrument_restores_a_method_that_a_patch_saved_through_its_class_and_put_back():
    """``saved = Model.method; Model.method = patched; ...; Model.method = saved`` while instrumented puts back wrapt's
    binding of ours, not ours (a class hands out a bound wrapper): uninstrument still gives the class its original."""
    model = modeling_utils.PreTrainedModel
    name = "_move_missing_keys_from_meta_to_device"
    original = vars(model)[name]
    loadtrace.instrument()
    try:
        saved = getattr(model, name)
        assert saved is not vars(model)[name]  # the binding, a new object
        setattr(model, name, lambda *args, **kwargs: None)
        setattr(model, name, saved)
    finally:
        loadtrace.uninstrument()
    assert vars(model)[name] is original


def test_late_activation_rebinds_names_imported_with_from():
    assert modeling_utils.safe_open is safetensors.safe_open
    loadtrace.instrument()
    try:
        assert modeling_utils.safe_open is safetensors.safe_open
        assert isinstance(modeling_utils.safe_open, wrapt.FunctionWrapper)
        assert (
            modeling_utils.convert_and_load_state_dict_in_model
            is core_model_loading.convert_and_load_state_dict_in_model
        )
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


def test_while_loading_hooks_wrap_whatever_is_there_and_give_it_back():
    """Someone else's wrapper on torch.zeros_like keeps working inside ours, and is what remains after the load."""
    theirs_calls = []
    original = torch.zeros_like

    def theirs(*args, **kwargs):
        theirs_calls.append(1)
        return original(*args, **kwargs)

    torch.zeros_like = theirs
    try:
        loadtrace.instrument()
        with loadtrace.traced_load("x"):
            torch.zeros_like(torch.ones(2))
        assert torch.zeros_like is theirs and theirs_calls == [1]
        loadtrace.uninstrument()
        assert torch.zeros_like is theirs
    finally:
        torch.zeros_like = original


def test_a_missing_target_is_skipped_with_a_note_and_the_others_still_run(monkeypatch, capsys, tmp_path):
    import transformers.integrations.deepspeed as deepspeed_integration
    from support.examples import make_checkpoint
    from support.inmemory import traced
    from transformers import AutoModelForCausalLM

    monkeypatch.delattr(deepspeed_integration, "_load_state_dict_into_zero3_model")  # as if a release renamed it
    make_checkpoint(tmp_path)
    with traced() as t:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("loadtrace:")]
    assert len(notes) == 1 and "_load_state_dict_into_zero3_model not found" in notes[0]
    assert t.one("transformers.from_pretrained").attributes["loadtrace.read.bytes"] > 0


def test_its_dependencies_are_the_tested_releases_of_the_libraries_installed_here():
    """OTel's check (``BaseInstrumentor.instrument``) refuses a release outside a library's tested range, and passes
    the ones CI installs; a library not installed is left out, so it is no conflict (hooked only where present)."""
    from importlib.metadata import PackageNotFoundError, version

    from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

    from loadtrace.instrumentation import INSTRUMENTS

    def present(name: str) -> bool:
        try:
            return bool(version(name))
        except PackageNotFoundError:
            return False

    dependencies = LoadtraceInstrumentor().instrumentation_dependencies()
    assert [line.split()[0] for line in dependencies] == [name for name in INSTRUMENTS if present(name)]
    assert get_dependency_conflicts(dependencies) is None
    assert get_dependency_conflicts(["torch >= 99"]) is not None  # a release outside the range: refused
    assert get_dependency_conflicts(["loadtrace-no-such-library >= 1"]) is not None  # why the absent are left out
