"""transformers: a span per ``from_pretrained``, one per loading phase, and the conversion counts.

These targets are private and move between 5.x releases: each is its own hook, so one that disappears is skipped
with a note and the others still run.
"""

from __future__ import annotations

import os
from typing import Any

from .. import semconv, spans
from ._common import tensor_bytes
from .registry import Hook

TRUE = ("1", "true", "yes", "on")


def strategy() -> str:
    """How this rank was told to load: ZeRO-3, FSDP (with or without cpu_ram_efficient_loading), or plain."""
    try:
        from transformers.integrations import is_deepspeed_zero3_enabled

        if is_deepspeed_zero3_enabled():
            return semconv.STRATEGY_ZERO3
    except ImportError:
        pass
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() in TRUE:
        efficient = os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING", "").lower() in TRUE
        return semconv.STRATEGY_FSDP_CPU_RAM_EFFICIENT if efficient else semconv.STRATEGY_FSDP
    return semconv.STRATEGY_PLAIN


def held_bytes(model: Any, partitioned: bool) -> dict[str, int]:
    """Bytes of parameters and buffers the model holds, by device type (ZeRO-3: this rank's partitions)."""
    held: dict[str, int] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        # Only ZeRO-3 parameters have a partition; looking for one on a plain tensor costs a caught AttributeError.
        partition = getattr(tensor, "ds_tensor", None) if partitioned else None
        counted = partition if partition is not None else tensor
        device = counted.device.type
        held[device] = held.get(device, 0) + tensor_bytes(counted)
    return held


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def checkpoint_bytes(checkpoint: Any) -> int | None:
    """Total size of a local checkpoint's weight files (a directory or one file); None for a hub id."""
    if not isinstance(checkpoint, (str, os.PathLike)):
        return None
    path = os.fspath(checkpoint)
    if os.path.isfile(path):
        return os.path.getsize(path)
    if not os.path.isdir(path):
        return None
    return sum(
        entry.stat().st_size for entry in os.scandir(path) if entry.is_file() and entry.name.endswith(WEIGHT_SUFFIXES)
    )


class Load:
    def __init__(self, tracing: spans.Tracing, cls: Any, args: tuple, kwargs: dict):
        self.tracing = tracing
        checkpoint = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        how = strategy()
        attributes: dict[str, Any] = {
            semconv.MODEL_CLASS: getattr(cls, "__name__", str(cls)),
            semconv.CHECKPOINT: tracing.path(checkpoint),
            semconv.DTYPE: str(dtype) if dtype is not None else "default",
            semconv.STRATEGY: how,
        }
        self.partitioned = how == semconv.STRATEGY_ZERO3
        size = checkpoint_bytes(checkpoint)
        if size is not None:
            attributes[semconv.CHECKPOINT_BYTES] = size
        self.scope, self.token = tracing.start_load(semconv.SPAN_FROM_PRETRAINED, attributes)

    def done(self, result: Any, error: BaseException | None) -> Any:
        attributes: dict[str, Any] = {}
        try:
            model = result[0] if isinstance(result, tuple) else result
            if model is not None and hasattr(model, "parameters"):
                for device, nbytes in held_bytes(model, self.partitioned).items():
                    attributes[semconv.held_bytes_key(device)] = nbytes
        finally:
            self.tracing.end_load(self.scope, self.token, attributes, error)
        return result


def from_pretrained(cls, args, kwargs):
    tracing = spans.tracing()
    return Load(tracing, cls, args, kwargs) if tracing is not None else None


class Phase:
    __slots__ = ("tracing", "scope", "token")

    def __init__(self, tracing: spans.Tracing, name: str):
        self.tracing = tracing
        self.scope, self.token = tracing.enter_phase(name)

    def done(self, result: Any, error: BaseException | None) -> Any:
        self.tracing.exit_phase(self.scope, self.token, error)
        return result


def _phase(name: str):
    def handler(instance, args, kwargs):
        tracing = spans.tracing()
        return Phase(tracing, name) if tracing is not None else None

    return handler


class Conversion:
    __slots__ = ("tracing", "operations")

    def __init__(self, tracing: spans.Tracing, operations: tuple[str, ...]):
        self.tracing = tracing
        self.operations = operations

    def done(self, produced: Any, error: BaseException | None) -> Any:
        if error is None:
            nbytes = 0
            for value in produced.values():
                for tensor in value if isinstance(value, list) else (value,):
                    nbytes += tensor_bytes(tensor)
            self.tracing.record_conversion(self.operations, nbytes)
        return produced


def weight_conversion(transform, args, kwargs):
    """One checkpoint entry turned into model parameters: a rename, or a chain of ``ConversionOps``."""
    if not spans.active():
        return None
    tracing = spans.tracing()
    if tracing is None:
        return None
    operations = getattr(transform, "operations", None)
    names = tuple(type(op).__name__ for op in operations) if operations else (semconv.RENAME_OP,)
    return Conversion(tracing, names)


HOOKS = [
    Hook("transformers.modeling_utils", "PreTrainedModel.from_pretrained", from_pretrained),
    Hook("transformers.modeling_utils", "load_state_dict", _phase(semconv.SPAN_LOAD_STATE_DICT)),
    Hook(
        "transformers.modeling_utils",
        "PreTrainedModel._move_missing_keys_from_meta_to_device",
        _phase(semconv.SPAN_MATERIALIZE_MISSING),
    ),
    Hook("transformers.core_model_loading", "convert_and_load_state_dict_in_model", _phase(semconv.SPAN_CONVERT)),
    Hook("transformers.core_model_loading", "WeightConverter.convert", weight_conversion),
    Hook("transformers.core_model_loading", "WeightRenaming.convert", weight_conversion),
    Hook("transformers.integrations.deepspeed", "_load_state_dict_into_zero3_model", _phase(semconv.SPAN_ZERO3_LOAD)),
]
