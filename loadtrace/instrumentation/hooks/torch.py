"""torch: bytes created by ``zeros_like`` / ``empty_like`` during a load, ``torch.load`` files, the rendezvous
(``init_process_group``, and the job id through its store), the bytes ``broadcast`` moves in a broadcast phase, and
the first optimizer constructed (a sign of training).

``zeros_like`` is called constantly in training: its hooks are in place only while a load is open, and even then a
call from a thread that is not loading returns at the first check.
"""

from __future__ import annotations

import os
import sys
import time
from types import FrameType
from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import Broadcasts, FileCall, broadcasts, file_attributes, reader_reads, tensor_bytes
from .registry import Hook, fault

_SKIP_DIRS: tuple[str, ...] = ()


def _skip_dirs() -> tuple[str, ...]:
    """Frames in torch, wrapt or loadtrace are not the call site a user wants to see."""
    global _SKIP_DIRS
    if not _SKIP_DIRS:
        import torch
        import wrapt

        _SKIP_DIRS = tuple(os.path.dirname(str(m.__file__)) + os.sep for m in (torch, wrapt, sys.modules["loadtrace"]))
    return _SKIP_DIRS


def call_site() -> str:
    skip = _skip_dirs()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


class Materialize:
    __slots__ = ("tracing", "function", "site", "started")

    def __init__(self, tracing: spans.Tracing, function: str):
        self.tracing = tracing
        self.function = function
        self.site = f"{call_site()} {function}"
        self.started = time.time_ns()

    def done(self, tensor: Any, error: BaseException | None) -> Any:
        if error is None:
            device, nbytes = tensor.device.type, tensor_bytes(tensor)
            self.tracing.record_materialized(self.site, device, nbytes)
            if self.tracing.settings.per_tensor:
                stack = spans.active()
                self.tracing.point_span(
                    semconv.SPAN_TORCH_MATERIALIZE,
                    stack[-1],
                    self.started,
                    {
                        semconv.MATERIALIZE_FUNCTION: self.function,
                        semconv.MATERIALIZE_DEVICE: device,
                        semconv.MATERIALIZE_BYTES: nbytes,
                        semconv.MATERIALIZE_SITE: self.site,
                    },
                )
        return tensor


def _materializer(function: str):
    def handler(instance, args, kwargs):
        if not spans.active():  # outside loading: pass through
            return None
        tracing = spans.tracing()
        return Materialize(tracing, function) if tracing is not None else None

    return handler


def _tensors(value: Any):
    """Every tensor in what ``torch.load`` returned (state dicts, nested containers)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def torch_load(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None:
        return None
    if (reading := reader_reads.get()) is not None:
        return reading.item()  # a read item of the file a DCP storage reader has open
    attributes = file_attributes(tracing, args[0] if args else kwargs.get("f"))
    location = kwargs.get("map_location", args[1] if len(args) > 1 else None)
    if location is not None:
        attributes[semconv.MAP_LOCATION] = str(location)

    def loaded(result: Any, scope: spans.Scope) -> Any:
        try:
            tracing.count_reads(scope, _tensors(result))
        finally:
            tracing.close_file(scope)
        return result

    return FileCall(tracing, semconv.SPAN_TORCH_LOAD, attributes, loaded)


class Rendezvous:
    """``init_process_group``: a job without a usable id gets one from rank 0 through the store; then the call
    becomes a ``torch.init_process_group`` span, made after the fact so that it lands in the job's trace."""

    __slots__ = ("tracing", "backend", "started")

    def __init__(self, tracing: spans.Tracing, backend: Any):
        self.tracing = tracing
        self.backend = backend
        self.started = time.time_ns()

    def done(self, result: Any, error: BaseException | None) -> Any:
        backend = self.backend
        if error is None:
            import torch.distributed as dist

            if not self.tracing.job.known:
                try:
                    store = dist.distributed_c10d._get_default_store()
                    self.tracing.job.adopt_from_store(store, dist.get_rank())
                    self.tracing.job_changed()
                except Exception as problem:
                    fault("torch.init_process_group (job id)", problem)
            try:
                backend = dist.get_backend()
            except Exception:
                pass  # what was asked for, then
        start = {semconv.RENDEZVOUS_BACKEND: str(backend)} if backend is not None else {}
        self.tracing.stage_span(semconv.SPAN_INIT_PROCESS_GROUP, self.started, start, error)
        return result


def init_process_group(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None:
        return None
    return Rendezvous(tracing, kwargs.get("backend", args[0] if args else None))


class Broadcast:
    __slots__ = ("counted", "tensor", "src", "group", "group_src")

    def __init__(self, counted: Broadcasts, args: tuple, kwargs: dict):
        self.counted = counted
        self.tensor = kwargs.get("tensor", args[0] if args else None)
        self.src = kwargs.get("src", args[1] if len(args) > 1 else None)
        self.group = kwargs.get("group", args[2] if len(args) > 2 else None)
        self.group_src = kwargs.get("group_src")

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None and self.tensor is not None:
            import torch.distributed as dist

            source = self.src
            if source is None and self.group_src is not None:
                source = dist.get_global_rank(self.group or dist.group.WORLD, self.group_src)  # type: ignore[arg-type, unused-ignore]
            nbytes = tensor_bytes(self.tensor)
            if source == dist.get_rank():
                self.counted.sent += nbytes
            else:
                self.counted.received += nbytes
            self.counted.tensors += 1
        return result


def broadcast(instance, args, kwargs):
    """Counted only while a broadcast phase is open on this thread (accelerate's ``fsdp2_load_full_state_dict``);
    elsewhere (training) the call passes at the first check."""
    counted = broadcasts.get()
    return Broadcast(counted, args, kwargs) if counted is not None else None


def optimizer(instance, args, kwargs):
    """``Optimizer.__init__``, which every torch optimizer runs: a sign of training (counting/workload.py); after the
    process's first, each passes at the first check."""
    if not spans.trained():
        spans.saw_training(f"optimizer {type(instance).__name__}")
    return None


HOOKS = [
    Hook("torch", "zeros_like", _materializer("zeros_like"), while_loading=True),
    Hook("torch", "empty_like", _materializer("empty_like"), while_loading=True),
    Hook("torch", "load", torch_load),
    Hook("torch.distributed.distributed_c10d", "init_process_group", init_process_group),
    Hook("torch.distributed.distributed_c10d", "broadcast", broadcast),
    Hook("torch.optim.optimizer", "Optimizer.__init__", optimizer),
]
