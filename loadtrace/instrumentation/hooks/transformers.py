"""transformers: a span per ``from_pretrained``, one per loading phase, and the conversion counts.

These targets are private and move between 5.x releases: each is its own hook, so one that disappears is skipped
with a note and the others still run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import checkpoint_path, tensor_bytes
from .registry import Hook, call_done, call_through, fault
from .safetensors import CountingSlice

TRUE = ("1", "true", "yes", "on")


def tp_plan(kwargs: dict) -> Any:
    """The tensor-parallel plan asked for: ``tp_plan=`` (5.12 on; deprecated in 5.24), or the one of
    ``distributed_config=DistributedConfig(tp_plan=...)`` (5.24); None without tensor parallelism."""
    plan = kwargs.get("tp_plan")
    if plan is None:
        plan = getattr(kwargs.get("distributed_config"), "tp_plan", None)
    return plan


def _size(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def strategy(kwargs: dict | None = None) -> str:
    """How this rank was told to load: ZeRO-3, FSDP (with or without cpu_ram_efficient_loading), transformers' own
    tensor parallelism (alone or with FSDP), or plain."""
    kwargs = kwargs or {}
    config = kwargs.get("distributed_config")
    tensor_parallel = (
        tp_plan(kwargs) is not None or _size(kwargs.get("tp_size")) > 1 or _size(getattr(config, "tp_size", None)) > 1
    )
    try:
        from transformers.integrations import is_deepspeed_zero3_enabled

        if is_deepspeed_zero3_enabled():
            return semconv.STRATEGY_ZERO3
    except ImportError:
        pass
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() in TRUE:
        if os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING", "").lower() in TRUE:
            return (
                semconv.STRATEGY_FSDP_CPU_RAM_EFFICIENT_TP
                if tensor_parallel
                else semconv.STRATEGY_FSDP_CPU_RAM_EFFICIENT
            )
        return semconv.STRATEGY_FSDP_TP if tensor_parallel else semconv.STRATEGY_FSDP
    if _size(getattr(config, "fsdp_size", None)) > 1:  # transformers' own FSDP (DistributedConfig, 5.24)
        return semconv.STRATEGY_FSDP_TP if tensor_parallel else semconv.STRATEGY_FSDP
    return semconv.STRATEGY_TP if tensor_parallel else semconv.STRATEGY_PLAIN


def held_bytes(model: Any, partitioned: bool) -> dict[str, int]:
    """Bytes of parameters and buffers the model holds, by device type (``held_and_whole``)."""
    return held_and_whole(model, partitioned)[0]


def held_and_whole(model: Any, partitioned: bool) -> tuple[dict[str, int], int]:
    """Bytes of parameters and buffers the model holds, by device type (ZeRO-3: this rank's partitions; tensor
    parallel: its local shards), each tensor once (tied weights are one tensor); and the whole model's bytes as built,
    every tensor at its full size in its own dtype (a ZeRO-3 parameter's ``ds_numel``, a DTensor's global size): what
    a rank's share of it is judged against (a bf16 checkpoint built as fp32 weighs twice its file bytes)."""
    held: dict[str, int] = {}
    elsewhere = 0  # bytes of the whole model held by other ranks (their partitions or shards)
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)  # none made if never imported
    for tensor in _parameters_and_buffers(model):
        if partitioned:
            # Only ZeRO-3 parameters have a partition; looking for one on a plain tensor costs a caught AttributeError.
            partition = getattr(tensor, "ds_tensor", None)
            if partition is not None:
                elsewhere += tensor.ds_numel * partition.element_size() - partition.nbytes
                tensor = partition
        if dtensor is not None and isinstance(tensor, dtensor):
            local = tensor._local_tensor  # its ``nbytes`` is the global size
            elsewhere += tensor.nbytes - local.nbytes
            tensor = local
        device = "cpu" if tensor.is_cpu else tensor.device.type  # ``device`` makes an object per call: CPU skips it
        held[device] = held.get(device, 0) + tensor.nbytes
    return held, sum(held.values()) + elsewhere


def _parameters_and_buffers(model: Any) -> Iterable[Any]:
    """Every module's own parameters and buffers, each tensor once: what ``parameters()`` and ``buffers()`` walk, in
    one pass and without the dotted names they build for each module (most of their time). A model that is no plain
    ``nn.Module`` tree: theirs."""
    try:
        tensors: dict[int, Any] = {}
        stack, seen = [model], set()
        while stack:
            module = stack.pop()
            if id(module) not in seen:
                seen.add(id(module))
                stack.extend(module._modules.values())
                for owned in (module._parameters, module._buffers):
                    for tensor in owned.values():
                        if tensor is not None:
                            tensors[id(tensor)] = tensor
        return tensors.values()
    except (AttributeError, TypeError):
        return {id(tensor): tensor for tensor in (*model.parameters(), *model.buffers())}.values()


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


MAX_HEADER = 100 * 2**20  # safetensors' own limit on a header


def safetensors_tensor_bytes(path: str) -> int | None:
    """The bytes of the tensors in one safetensors file, from its header alone (8-byte length + JSON)."""
    try:
        with open(path, "rb") as file:
            length = int.from_bytes(file.read(8), "little")
            if not 0 < length <= MAX_HEADER:
                return None
            header = json.loads(file.read(length))
        return sum(
            end - begin
            for name, entry in header.items()
            if name != "__metadata__"
            for begin, end in [entry["data_offsets"]]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _variant(name: str, variant: Any) -> str:
    """transformers' own naming: ``model.safetensors`` → ``model.fp16.safetensors``."""
    if not variant:
        return name
    parts = name.split(".")
    return ".".join([*parts[:-1], str(variant), parts[-1]])


def _locate(checkpoint: Any, name: str, kwargs: dict) -> str | None:
    """A file of the checkpoint on this machine: in a local directory, else in the Hugging Face cache (no network)."""
    if isinstance(checkpoint, (str, os.PathLike)) and os.path.isdir(checkpoint):
        path = os.path.join(os.fspath(checkpoint), kwargs.get("subfolder") or "", name)
        return path if os.path.isfile(path) else None
    if not isinstance(checkpoint, str):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        subfolder = kwargs.get("subfolder") or ""
        found = try_to_load_from_cache(
            checkpoint,
            f"{subfolder}/{name}" if subfolder else name,
            cache_dir=kwargs.get("cache_dir"),
            revision=kwargs.get("revision"),
        )
    except Exception:
        return None
    return found if isinstance(found, str) else None


def checkpoint_tensor_bytes(checkpoint: Any, kwargs: dict, headers: bool = True) -> int | None:
    """The exact bytes of the checkpoint's tensors: the headers of the files its ``model.safetensors.index.json``
    lists (its ``metadata.total_size`` when a file is missing), or of ``model.safetensors``; None when neither is on
    this machine (a ``.bin`` checkpoint, a hub id not in the cache). ``headers=False`` reads the index alone: before
    the load, reading the weight files' headers would put their first pages in the page cache, and the load's
    cold/warm measure (``loadtrace.file.cached_bytes_at_open``) would then see what loadtrace itself read."""
    variant = kwargs.get("variant")
    index = _locate(checkpoint, _variant("model.safetensors.index.json", variant), kwargs)
    if index is not None and not headers and (total := _total_size_ahead(index)) is not None:
        return total
    if index is not None:
        try:
            with open(index) as file:
                content = json.load(file)
        except (OSError, ValueError):
            return None
        folder = os.path.dirname(index)
        files = sorted(set(content.get("weight_map", {}).values())) if isinstance(content, dict) and headers else []
        sizes = [safetensors_tensor_bytes(os.path.join(folder, name)) for name in files]
        if files and None not in sizes:
            return sum(sizes)  # type: ignore[arg-type]
        total = content.get("metadata", {}).get("total_size") if isinstance(content, dict) else None
        return _size(total) or None
    single = _locate(checkpoint, _variant("model.safetensors", variant), kwargs) if headers else None
    return safetensors_tensor_bytes(single) if single is not None else None


# ``{"metadata": {"total_size": N, ...}, "weight_map": {...}}``, as transformers and huggingface_hub write it.
_TOTAL_SIZE_AHEAD = re.compile(rb'^\s*\{\s*"metadata"\s*:\s*\{[^{}]*?"total_size"\s*:\s*(\d+)\s*[,}]')


def _total_size_ahead(index: str) -> int | None:
    """An index's ``metadata.total_size`` when the file opens with it: parsing all of a large index's JSON (3,219
    entries: ~1 ms) to read one number at the top would be most of a load's tracing cost. None: parse it all."""
    try:
        with open(index, "rb") as file:
            found = _TOTAL_SIZE_AHEAD.match(file.read(4096))
    except OSError:
        return None
    return int(found[1]) or None if found else None


MAX_ARGUMENT = 4096  # characters of a ``str()``-ed argument kept on the span (a per-module device map can be long)


class Load:
    def __init__(self, tracing: spans.Tracing, cls: Any, args: tuple, kwargs: dict):
        self.tracing = tracing
        checkpoint = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        how = strategy(kwargs)
        attributes: dict[str, Any] = {
            semconv.MODEL_CLASS: getattr(cls, "__name__", str(cls)),
            semconv.CHECKPOINT: tracing.path(checkpoint_path(checkpoint)),
            semconv.DTYPE: str(dtype) if dtype is not None else "default",
            semconv.STRATEGY: how,
        }
        for key, value in ((semconv.DEVICE_MAP, kwargs.get("device_map")), (semconv.TP_PLAN, tp_plan(kwargs))):
            if value is not None:
                attributes[key] = str(value)[:MAX_ARGUMENT]
        self.partitioned = how == semconv.STRATEGY_ZERO3
        self.checkpoint, self.kwargs = checkpoint, kwargs
        size = checkpoint_bytes(checkpoint)
        if size is not None:
            attributes[semconv.CHECKPOINT_BYTES] = size
        # At the start, so a rank that dies mid-load still tells the model's size (its state file keeps it): from the
        # index alone, leaving the weight files' pages as the job found them.
        self.tensor_bytes = checkpoint_tensor_bytes(checkpoint, kwargs, headers=False)
        if self.tensor_bytes is not None:
            attributes[semconv.CHECKPOINT_TENSOR_BYTES] = self.tensor_bytes
        self.scope, self.token = tracing.start_load(semconv.SPAN_FROM_PRETRAINED, attributes)

    def done(self, result: Any, error: BaseException | None) -> Any:
        attributes: dict[str, Any] = {}
        try:
            model = result[0] if isinstance(result, tuple) else result
            if model is not None and hasattr(model, "parameters"):
                held, whole = held_and_whole(model, self.partitioned)
                for device, nbytes in held.items():
                    attributes[semconv.held_bytes_key(device)] = nbytes
                attributes[semconv.MODEL_BYTES] = whole
            # Without an index (one file), or a hub checkpoint not yet cached at the start: one header read per file.
            tensors = checkpoint_tensor_bytes(self.checkpoint, self.kwargs) if self.tensor_bytes is None else None
            if tensors is not None:
                attributes[semconv.CHECKPOINT_TENSOR_BYTES] = tensors
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
    """A converted weight: ``done`` counts it with the real bytes it produced (an output on ``meta`` is 0 B). It holds
    only the tracing and its operations' names, so one per distinct chain of operations serves every call
    (``_conversion``): the conversion hooks of a MoE load run just after a tensor copy has pushed loadtrace's objects
    out of the CPU's caches, where every object made or looked at, and every function called, per conversion is paid
    as cache misses (so ``done`` is one function)."""

    __slots__ = ("tracing", "operations")

    def __init__(self, tracing: spans.Tracing, operations: tuple[str, ...]):
        self.tracing = tracing
        self.operations = operations

    def done(self, produced: Any, error: BaseException | None) -> Any:
        if error is None:
            nbytes = 0
            for value in produced.values():
                for tensor in value if isinstance(value, list) else (value,):
                    if not tensor.is_meta:  # ZeRO-3 on 5.24, rank 1: a conversion of shapes, no bytes
                        nbytes += tensor_bytes(tensor)
            self.tracing.record_conversion(self.operations, nbytes)
        return produced


def renames(transform: Any) -> bool:
    """Whether a ``WeightRenaming`` changes the key. transformers (5.12, 5.24) makes one ``WeightRenaming(original,
    renamed)`` per checkpoint key that no ``WeightConverter`` takes, renamed or not; its patterns are those two keys
    (``_original_*``: as given, before the patterns are processed for reverse mapping)."""
    sources = getattr(transform, "_original_source_patterns", None) or getattr(transform, "source_patterns", None)
    targets = getattr(transform, "_original_target_patterns", None) or getattr(transform, "target_patterns", None)
    if sources is None or targets is None:
        return True  # a release that no longer says: count it, as before
    return list(sources) != list(targets)


def weight_conversion(transform, args, kwargs):
    """One checkpoint entry turned into model parameters: a chain of ``ConversionOps``, a rename that changes the key,
    and a quantization op if any. A key kept as it is (most of them) is no conversion and is not counted. Counted on
    every load and phase open, whoever calls it: ``convert_and_load_state_dict_in_model``, and under ZeRO-3
    ``integrations.deepspeed._apply_weight_conversions_to_state_dict`` (5.12, 5.24; a generator from 5.24 on, so no
    phase could hold its conversions), each conversion once."""
    if not spans.active():
        return None
    operations = getattr(transform, "operations", None)
    if operations:
        return _conversion(tuple(map(type, operations)), transform)
    return weight_renaming(transform, args, kwargs)


def weight_renaming(transform, args, kwargs):
    """``WeightRenaming.convert``: called for every checkpoint key that no converter takes (nearly every key of a dense
    model). A key kept as it is, without quantization, is looked at first and passed at once: two of its own slots,
    compared (5.12, 5.24)."""
    try:
        if (
            transform.quantization_operation is None
            and transform._original_source_patterns == transform._original_target_patterns
        ):
            return None
    except AttributeError:
        pass  # a release without those slots: ``renames`` looks further
    if not spans.active():
        return None
    return _conversion((Rename,) if renames(transform) else (), transform)


@call_through
def inline_renaming(original: Any) -> Any:
    """``WeightRenaming.convert`` in a plain function of its own, of the same signature (5.12, 5.24): a dense model's
    every tensor passes here, where wrapt's wrapper on a method costs ~1.5 µs a call (a wrapper object bound per
    call). A key kept as it is passes at once; anything else goes the generic way (``weight_renaming``, then its
    ``Conversion``). None (the generic wrapper) for another signature."""
    defaults = {"model": None, "config": None, "hf_quantizer": None, "loading_info": None}
    if not has_parameters(original, "self", "layer_name", **defaults):
        return None

    def convert(self, layer_name, model=None, config=None, hf_quantizer=None, loading_info=None):
        try:
            kept = (
                self.quantization_operation is None and self._original_source_patterns == self._original_target_patterns
            )
        except AttributeError:
            kept = False  # a release without those slots: ``renames`` looks further
        if kept:
            return original(self, layer_name, model, config, hf_quantizer, loading_info)
        args = (layer_name, model, config, hf_quantizer, loading_info)
        try:
            call = weight_renaming(self, args, {})
        except Exception as error:
            fault(RENAMING, error)
            call = None
        if call is None:
            return original(self, *args)
        return call_done(RENAMING, call, original, (self, *args), {})

    return convert


def has_parameters(function: Any, *names: str, **defaults: Any) -> bool:
    """Whether ``function`` takes exactly these parameters: ``names`` without a default, then ``defaults``."""
    import inspect

    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    expected = [(name, inspect.Parameter.empty) for name in names] + list(defaults.items())
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD}
    return [(p.name, p.default) for p in parameters] == expected and {p.kind for p in parameters} <= kinds


RENAMING = "transformers.core_model_loading.WeightRenaming.convert"


class Rename:
    """Stands for a plain rename in a chain of operation types (``_conversion``)."""


# The shared ``Conversion`` of each chain of operation types (a quantization's last): a model has a handful.
_conversions: dict[tuple[type, ...], Conversion] = {}


def _conversion(types: tuple[type, ...], transform: Any) -> Conversion | None:
    quantize = getattr(transform, "quantization_operation", None)
    if quantize is not None:
        types += (type(quantize),)
    tracing = spans.tracing()
    if tracing is None or not types:
        return None
    found = _conversions.get(types)
    if found is None or found.tracing is not tracing:  # a new chain, or instrumented again since
        names = tuple(semconv.RENAME_OP if kind is Rename else kind.__name__ for kind in types)
        found = _conversions[types] = Conversion(tracing, names)
    return found


# safetensors' names of its dtypes (``get_slice(name).get_dtype()``), as torch names them (``str(torch.float32)``).
SAFETENSORS_DTYPES = {
    "F64": "torch.float64",
    "F32": "torch.float32",
    "F16": "torch.float16",
    "BF16": "torch.bfloat16",
    "I64": "torch.int64",
    "I32": "torch.int32",
    "I16": "torch.int16",
    "I8": "torch.int8",
    "U8": "torch.uint8",
    "BOOL": "torch.bool",
    "F8_E4M3": "torch.float8_e4m3fn",
    "F8_E5M2": "torch.float8_e5m2",
}


class Cast:
    """A read tensor that ``_materialize_copy`` casts or copies: its call's time (the read call in it only makes a
    view of the mapped file: the bytes are touched by the cast) is charged to the load as casting, not reading."""

    __slots__ = ("tracing", "scope", "started")

    def __init__(self, tracing: spans.Tracing, scope: Any):
        self.tracing, self.scope = tracing, scope
        self.started = time.time_ns()

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None:
            self.tracing.record_cast(self.scope, self.started, time.time_ns(), tensor_bytes(result))
        return result


def materialize_copy(instance, args, kwargs):
    """``_materialize_copy(tensor, device, dtype)``: transformers (5.12, 5.24) reads a checkpoint tensor (``[...]`` on
    its slice) and casts it to the model's dtype or copies it to the parameter's device, in its loading thread pool.
    Timed only when it does cast or copy; a read that keeps its dtype and device passes untouched."""
    tracing = spans.tracing()
    if tracing is None:
        return None
    tensor = args[0] if args else kwargs.get("tensor")
    # It runs in the pool's threads, where no load is active: a counting slice knows its file, and so its load.
    scope = getattr(tensor, "_scope", None)
    if scope is None:
        traced = getattr(tensor, "_self_file", None)  # LOADTRACE_DETAIL=tensor's slice
        scope = traced._self_scope if traced is not None else spans.current_load()
    if scope is None:
        return None
    device = args[1] if len(args) > 1 else kwargs.get("device")
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    return Cast(tracing, scope) if casts(tensor, device, dtype) else None


MATERIALIZE = "transformers.core_model_loading._materialize_copy"


@call_through
def inline_materialize_copy(original: Any) -> Any:
    """``_materialize_copy(tensor, device, dtype)`` in a plain function of its own, of the same signature: it runs once
    per tensor, where wrapt's wrapper and the generic handler cost ~2 µs. A safetensors slice read on the CPU in its
    own dtype (every tensor of a CPU load in the checkpoint's dtype) passes after a few checks and one ``get_dtype``
    of the library's slice; a cast or a device copy (every tensor of a load onto an accelerator) is timed and appended
    to its load's ledger in a few steps. None (the generic wrapper) for another signature."""
    import torch

    if not has_parameters(original, "tensor", device=None, dtype=None):
        return None
    dtypes = {name: getattr(torch, torch_name.split(".")[1], None) for name, torch_name in SAFETENSORS_DTYPES.items()}
    devices = DeviceKinds()
    clock = time.time_ns

    def _materialize_copy(tensor, device=None, dtype=None):
        try:
            if type(tensor) is CountingSlice:  # on the CPU until read; its dtype from the library's slice directly
                cpu = device is None or device == "cpu" or devices[device]
                cast = not cpu or (dtype is not None and dtypes.get(tensor._slice.get_dtype(), dtype) is not dtype)
            else:
                cast = casts(tensor, device, dtype)  # another slice, or a tensor (a ``.bin`` checkpoint's)
        except Exception as error:
            fault(MATERIALIZE, error)
            cast = False
        if not cast:
            return original(tensor, device, dtype)
        started = clock()
        result = original(tensor, device, dtype)
        try:
            scope = tensor._scope if type(tensor) is CountingSlice else None
            load = scope.load if scope is not None else None  # a file's: what its casts are charged to
            if load is not None:
                load.ledger.casts.append((started, clock(), getattr(result, "_local_tensor", result).nbytes))
            else:
                record_cast(tensor, started, result)
        except Exception as error:
            fault(MATERIALIZE, error)
        return result

    return _materialize_copy


class DeviceKinds(dict):
    """A device argument (``"cuda:0"``, ``0``, a ``torch.device``) → whether it names the CPU: learnt once per value
    (``__missing__``), then one dict lookup. An unhashable one raises ``TypeError`` (a fault: torch refuses it too)."""

    def __missing__(self, device: Any) -> bool:
        kind = device if isinstance(device, str) else getattr(device, "type", "cuda")  # an int is a CUDA index
        found = str(kind).split(":")[0] == "cpu"
        if len(self) < 64:
            self[device] = found
        return found


def record_cast(tensor: Any, started: int, result: Any) -> None:
    """A cast or device copy ``_materialize_copy`` made of something other than a file's counting slice, charged to
    the load of the file it came from (a per-tensor detail slice's), else to this thread's."""
    ended = time.time_ns()
    tracing = spans.tracing()
    if tracing is None:
        return
    scope = getattr(tensor, "_scope", None)
    if scope is None:
        traced = getattr(tensor, "_self_file", None)  # LOADTRACE_DETAIL=tensor's slice
        scope = traced._self_scope if traced is not None else spans.current_load()
    if scope is not None:
        tracing.record_cast(scope, started, ended, tensor_bytes(result))


def casts(tensor: Any, device: Any, dtype: Any) -> bool:
    """Whether ``tensor.to(device=device, dtype=dtype)`` makes a new tensor: another dtype, or a device other than the
    CPU (a safetensors slice of a mapped file is on the CPU). An unknown dtype name: not known to cast."""
    if dtype is not None:
        get_dtype = getattr(tensor, "get_dtype", None)
        have = SAFETENSORS_DTYPES.get(get_dtype()) if get_dtype is not None else str(getattr(tensor, "dtype", ""))
        if have is not None and have != str(dtype):
            return True
    if device is None:
        return False
    kind = device if isinstance(device, str) else getattr(device, "type", "cuda")  # an int is a CUDA index
    here = getattr(getattr(tensor, "device", None), "type", "cpu")
    return kind.split(":")[0] != here


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
    Hook("transformers.core_model_loading", "WeightRenaming.convert", weight_renaming, inline=inline_renaming),
    Hook("transformers.core_model_loading", "_materialize_copy", materialize_copy, inline=inline_materialize_copy),
    Hook("transformers.integrations.deepspeed", "_load_state_dict_into_zero3_model", _phase(semconv.SPAN_ZERO3_LOAD)),
]
