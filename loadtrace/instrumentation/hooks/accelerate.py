"""accelerate: the model's preparation (``Accelerator.prepare`` of a model: FSDP/FSDP2 sharding, DDP wrapping, or
``deepspeed.initialize`` under it) and FSDP2's ``fsdp2_load_full_state_dict``, where rank 0 broadcasts every weight to
the other ranks (``cpu_ram_efficient_loading``). The end of the outermost preparation ends the rank's startup.
Its own checkpoint loading, ``load_checkpoint_in_model`` (``load_checkpoint_and_dispatch`` calls it), is a load.
"""

from __future__ import annotations

from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import Stage, checkpoint_path
from .registry import Hook


def _models(args: tuple, kwargs: dict) -> bool:
    import torch

    return any(isinstance(value, torch.nn.Module) for value in (*args, *kwargs.values()))


def _distribution(accelerator: Any) -> dict[str, Any]:
    """How accelerate distributes this model: its ``DistributedType`` and, under FSDP, the FSDP version."""
    kind = getattr(accelerator, "distributed_type", None)
    attributes: dict[str, Any] = {}
    if kind is not None:
        attributes[semconv.ACCELERATE_DISTRIBUTED_TYPE] = str(getattr(kind, "value", kind))
        plugin = getattr(getattr(accelerator, "state", None), "fsdp_plugin", None)
        version = getattr(plugin, "fsdp_version", None)
        if str(getattr(kind, "value", kind)) == "FSDP" and isinstance(version, int):
            attributes[semconv.ACCELERATE_FSDP_VERSION] = version
    return attributes


def prepare(accelerator, args, kwargs):
    """``prepare(model, optimizer, ...)`` and ``prepare_model(model)``: one span, the outermost (``prepare`` calls
    ``prepare_model`` for each model); a ``prepare`` without a model (data loaders) is not startup."""
    tracing = spans.tracing()
    if tracing is None or not _models(args, kwargs):
        return None
    if any(scope.name == semconv.SPAN_ACCELERATE_PREPARE for scope in spans.active()):
        return None
    return Stage(tracing, semconv.SPAN_ACCELERATE_PREPARE, _distribution(accelerator), prepares=True)


def load_full_state_dict(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None:
        return None
    return Stage(tracing, semconv.SPAN_FSDP2_LOAD_FULL_STATE_DICT, {}, prepares=False, counts=True)


class CheckpointLoad:
    """``load_checkpoint_in_model`` (and ``load_checkpoint_and_dispatch``, which calls it): one load, whose files are
    the ones accelerate reads each checkpoint file through (``load_state_dict``: a ``safe_open`` for its metadata,
    then ``load_file``); the DCP ``set_model_state_dict`` it calls per file is a load inside it (its strategy)."""

    __slots__ = ("tracing", "scope", "token")

    def __init__(self, tracing: spans.Tracing, start: dict[str, Any]):
        self.tracing = tracing
        self.scope, self.token = tracing.start_load(semconv.SPAN_ACCELERATE_LOAD_CHECKPOINT, start)

    def done(self, result: Any, error: BaseException | None) -> Any:
        self.tracing.end_load(self.scope, self.token, {}, error)
        return result


def load_checkpoint(function, args, kwargs):
    """A load of its own, unless another load is open (its files are that load's)."""
    tracing = spans.tracing()
    if tracing is None or spans.current_load() is not None:
        return None
    checkpoint = args[1] if len(args) > 1 else kwargs.get("checkpoint")
    start = {semconv.CHECKPOINT: tracing.path(checkpoint_path(checkpoint))} if checkpoint is not None else {}
    return CheckpointLoad(tracing, start)


HOOKS = [
    Hook("accelerate.accelerator", "Accelerator.prepare", prepare),
    Hook("accelerate.accelerator", "Accelerator.prepare_model", prepare),
    Hook("accelerate.utils.fsdp_utils", "fsdp2_load_full_state_dict", load_full_state_dict),
    Hook("accelerate.utils.modeling", "load_checkpoint_in_model", load_checkpoint),
]
