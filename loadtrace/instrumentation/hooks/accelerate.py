"""accelerate: the model's preparation (``Accelerator.prepare`` of a model: FSDP/FSDP2 sharding, DDP wrapping, or
``deepspeed.initialize`` under it) and FSDP2's ``fsdp2_load_full_state_dict``, where rank 0 broadcasts every weight to
the other ranks (``cpu_ram_efficient_loading``). The end of the outermost preparation ends the rank's startup.
"""

from __future__ import annotations

from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import Stage
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


HOOKS = [
    Hook("accelerate.accelerator", "Accelerator.prepare", prepare),
    Hook("accelerate.accelerator", "Accelerator.prepare_model", prepare),
    Hook("accelerate.utils.fsdp_utils", "fsdp2_load_full_state_dict", load_full_state_dict),
]
