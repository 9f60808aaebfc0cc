"""deepspeed: ``deepspeed.initialize`` (the engine: ZeRO partitioning of what was not yet partitioned, the optimizer),
whose end ends the rank's startup and whose span says the engine's ZeRO stage (and which is a sign of training);
ZeRO-3's ``zero.Init`` (parameters partitioned as modules are built) and ``GatheredParameters`` (gather the
partitions, then partition again) inside a load or a startup phase.

``zero.Init`` and ``GatheredParameters`` are context managers entered per model and per module: each is a phase,
aggregated like transformers' per-file ``load_state_dict``: one span per load (or per ``deepspeed.initialize``) with
``loadtrace.calls``, never a span per module. ``zero.Init`` counts only its outermost context (deepspeed's own
``zero_init_context`` depth); ``GatheredParameters`` outside loading and startup (saving, training) is not traced.
"""

from __future__ import annotations

import sys
from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import Stage
from .registry import Hook

PARTITION = "deepspeed.runtime.zero.partition_parameters"

# Contexts entered and not yet left, by id: a phase opened at ``__enter__`` ends at the same object's ``__exit__``.
_open: dict[int, tuple[spans.Scope, spans.ActiveToken]] = {}


class Initialize(Stage):
    """``deepspeed.initialize``: its span says which ZeRO stage the engine it returned runs (0 to 3)."""

    __slots__ = ()

    def learned(self, result: Any) -> dict[str, Any]:
        engine = result[0] if isinstance(result, tuple) and result else result
        stage = engine.zero_optimization_stage()
        return {semconv.DEEPSPEED_ZERO_STAGE: int(stage)} if isinstance(stage, int) else {}


def initialize(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None:
        return None
    spans.saw_training(semconv.SPAN_DEEPSPEED_INITIALIZE)
    return Initialize(tracing, semconv.SPAN_DEEPSPEED_INITIALIZE, {}, prepares=True)


class Entered:
    __slots__ = ("tracing", "key", "scope", "token")

    def __init__(self, tracing: spans.Tracing, key: int, name: str):
        self.tracing = tracing
        self.key = key
        self.scope, self.token = tracing.enter_phase(name)

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is not None:
            self.tracing.exit_phase(self.scope, self.token, error)
        else:
            _open[self.key] = (self.scope, self.token)
        return result


class Left:
    __slots__ = ("tracing", "scope", "token")

    def __init__(self, tracing: spans.Tracing, scope: spans.Scope, token: spans.ActiveToken):
        self.tracing, self.scope, self.token = tracing, scope, token

    def done(self, result: Any, error: BaseException | None) -> Any:
        self.tracing.exit_phase(self.scope, self.token, error)
        return result


def zero_init_enter(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None or not getattr(instance, "enabled", False):
        return None
    if getattr(sys.modules.get(PARTITION), "zero_init_context", 0) != 0:
        return None  # nested: the outermost context is the phase
    return Entered(tracing, id(instance), semconv.SPAN_ZERO_INIT)


def gathered_enter(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None or not spans.active() or not getattr(instance, "enabled", False):
        return None
    return Entered(tracing, id(instance), semconv.SPAN_GATHERED_PARAMETERS)


def leave(instance, args, kwargs):
    entered = _open.pop(id(instance), None)
    tracing = spans.tracing()
    if entered is None or tracing is None:
        return None
    return Left(tracing, *entered)


HOOKS = [
    Hook("deepspeed", "initialize", initialize),
    Hook(PARTITION, "InsertPostInitMethodToModuleSubClasses.__enter__", zero_init_enter),
    Hook(PARTITION, "InsertPostInitMethodToModuleSubClasses.__exit__", leave),
    Hook(PARTITION, "GatheredParameters.__enter__", gathered_enter),
    Hook(PARTITION, "GatheredParameters.__exit__", leave),
]
