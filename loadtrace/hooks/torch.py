"""torch: bytes created by ``zeros_like`` / ``empty_like`` during a load, ``torch.load`` files, and the job id.

``zeros_like`` is called constantly in training: its hooks are in place only while a load is open, and even then a
call from a thread that is not loading returns at the first check.
"""

from __future__ import annotations

import os
import sys
import time
from types import FrameType
from typing import Any

from .. import semconv, spans
from ._common import FileCall, file_attributes, tensor_bytes
from .registry import Hook

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


class PublishJobId:
    """After ``init_process_group``: a job without a usable id gets one from rank 0 through the store."""

    def __init__(self, tracing: spans.Tracing):
        self.tracing = tracing

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None:
            import torch.distributed as dist

            store = dist.distributed_c10d._get_default_store()
            self.tracing.job.adopt_from_store(store, dist.get_rank())
            self.tracing.job_changed()
        return result


def init_process_group(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None or tracing.job.known:
        return None
    return PublishJobId(tracing)


HOOKS = [
    Hook("torch", "zeros_like", _materializer("zeros_like"), while_loading=True),
    Hook("torch", "empty_like", _materializer("empty_like"), while_loading=True),
    Hook("torch", "load", torch_load),
    Hook("torch.distributed.distributed_c10d", "init_process_group", init_process_group),
]
