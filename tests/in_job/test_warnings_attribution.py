"""Promise: a guest does not move warnings. A ``warnings.warn(..., stacklevel=N)`` raised inside a hooked call names the
same file, line and module traced and untraced (so ``module=`` filters keep matching), through the hook wrapper, the
while-loading wrappers and the safetensors proxies; tracebacks still show our frames with their source."""

from __future__ import annotations

import re
import sys
import traceback
import types
import warnings

import pytest
import torch
import wrapt

import loadtrace
from loadtrace.instrumentation.hooks import registry
from loadtrace.instrumentation.hooks import safetensors as safetensors_hooks
from loadtrace.instrumentation.hooks.registry import CALL_THROUGH_MARK, Hook, Registry

MODULE = "_loadtrace_warning_target"


class Done:
    def done(self, result, error):
        return result


def make_target() -> types.ModuleType:
    module = types.ModuleType(MODULE)
    source = """
import warnings

def deprecated(x=1):
    warnings.warn("deprecated", FutureWarning, stacklevel=2)
    return x

def _inner():
    warnings.warn("deeper", FutureWarning, stacklevel=3)

def outer():
    _inner()

class Model:
    @classmethod
    def from_pretrained(cls, name):
        warnings.warn("tp_plan", FutureWarning, stacklevel=2)
        return cls()

def fails():
    raise ValueError("from the job")
"""
    exec(compile(source, f"/site-packages/{MODULE}.py", "exec"), module.__dict__)
    sys.modules[MODULE] = module
    return module


@pytest.fixture
def target():
    module = make_target()
    yield module
    sys.modules.pop(MODULE, None)


def calls(module) -> list[tuple[str, int, str]]:
    """Every way the job calls it, each on a line of its own; where each warning says it came from."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module.deprecated()
        module.deprecated(x=2)
        module.outer()
        module.Model.from_pretrained("ckpt")
    return [(w.filename, w.lineno, str(w.message)) for w in caught]


def handlers():
    return {
        "pass-through": lambda instance, args, kwargs: None,
        "with-done": lambda instance, args, kwargs: Done(),
        "faulty": lambda instance, args, kwargs: 1 / 0,
    }


@pytest.mark.parametrize("kind", list(handlers()))
def test_a_hooked_call_warns_from_the_callers_line(target, kind):
    untraced = calls(target)
    assert {f for f, _, _ in untraced} == {__file__}
    handler = handlers()[kind]
    hooks = Registry(
        [
            Hook(MODULE, "deprecated", handler),
            Hook(MODULE, "outer", handler),
            Hook(MODULE, "Model.from_pretrained", handler),
        ]
    )
    hooks.install()
    try:
        assert isinstance(target.deprecated, registry.HookWrapper)
        assert calls(target) == untraced
    finally:
        hooks.uninstall()
    assert not isinstance(target.deprecated, wrapt.FunctionWrapper)  # exact uninstrument
    assert calls(target) == untraced


@pytest.mark.parametrize("fits", [True, False])
def test_an_inline_hook_warns_from_the_callers_line_and_is_taken_out_exactly(target, fits):
    """A per-tensor target's plain function (``Hook.inline``, marked as a call-through like the wrappers) moves no
    warning either; where it does not fit the target (None), the generic wrapper goes in instead."""
    untraced = calls(target)
    original = target.deprecated

    @registry.call_through
    def inline(function):
        def deprecated(x=1):
            return function(x)

        return deprecated if fits else None

    hooks = Registry([Hook(MODULE, "deprecated", lambda instance, args, kwargs: Done(), inline=inline)])
    hooks.install()
    hooks.install()  # idempotent: not wrapped twice
    try:
        assert registry.ours(target.deprecated) and target.deprecated.__wrapped__ is original
        assert isinstance(target.deprecated, registry.HookWrapper) is not fits
        assert calls(target) == untraced
    finally:
        hooks.uninstall()
    assert target.deprecated is original
    assert calls(target) == untraced


def test_a_module_filter_still_matches_a_hooked_call(target):
    hooks = Registry([Hook(MODULE, "deprecated", lambda instance, args, kwargs: Done())])
    hooks.install()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.filterwarnings("error", category=FutureWarning, module=re.escape(__name__))
            with pytest.raises(FutureWarning):
                target.deprecated()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", category=FutureWarning, module=re.escape(__name__))
            target.deprecated()  # ignored by module, as untraced
    finally:
        hooks.uninstall()


def test_tracebacks_still_show_the_wrapper_and_its_source(target):
    hooks = Registry([Hook(MODULE, "fails", lambda instance, args, kwargs: Done())])
    hooks.install()
    try:
        with pytest.raises(ValueError) as raised:
            target.fails()
    finally:
        hooks.uninstall()
    text = "".join(traceback.format_exception(raised.type, raised.value, raised.tb))
    assert "loadtrace/instrumentation/hooks/registry.py" in text and CALL_THROUGH_MARK in text
    assert "result = wrapped(*args, **kwargs)" in text  # the source line, found through the module's loader
    assert "ValueError: from the job" in text


def test_a_while_loading_wrapper_keeps_the_callers_line():
    original = torch.zeros_like

    def theirs(*args, **kwargs):  # a Python function where torch.zeros_like was: it warns about its caller
        warnings.warn("theirs", UserWarning, stacklevel=2)
        return original(*args, **kwargs)

    def call():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.zeros_like(torch.ones(2))
        return [(w.filename, w.lineno) for w in caught]

    torch.zeros_like = theirs
    try:
        untraced = call()
        loadtrace.instrument()
        try:
            with loadtrace.traced_load("x"):
                assert torch.zeros_like is not theirs  # ours, around theirs
                assert call() == untraced
        finally:
            loadtrace.uninstrument()
    finally:
        torch.zeros_like = original
    assert untraced and untraced[0][0] == __file__


def test_every_safetensors_proxy_method_is_a_call_through_frame():
    proxies = [
        value
        for value in vars(safetensors_hooks).values()
        if isinstance(value, type) and value.__module__ == safetensors_hooks.__name__
    ]
    assert safetensors_hooks.CountingSlice in proxies and safetensors_hooks.TracedSafeOpen in proxies
    for proxy in proxies:
        for name, member in vars(proxy).items():
            if isinstance(member, types.FunctionType):
                assert member.__code__.co_filename.endswith(CALL_THROUGH_MARK), f"{proxy.__name__}.{name}"


def test_a_proxy_keeps_the_callers_line():
    class Slice:
        def __getitem__(self, index):
            warnings.warn("slice", DeprecationWarning, stacklevel=2)
            return torch.ones(2)

    def get_slice(name):
        warnings.warn("get_slice", DeprecationWarning, stacklevel=2)
        return Slice()

    slot = types.SimpleNamespace(counts=[0, 0])
    counting = safetensors_hooks.counting_get_slice(get_slice, slot, None, None)  # the file's get_slice, per file
    seen = []
    for handle_get_slice in (get_slice, counting):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            handle_get_slice("a")[...]
        seen.append([(w.filename, w.lineno) for w in caught])
    assert seen[0] == seen[1] and len(seen[0]) == 2 and all(name == __file__ for name, _ in seen[0])
    assert slot.counts == [1, 8]
