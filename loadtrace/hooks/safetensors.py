"""safetensors: one span per opened file, with the tensors and bytes read through it.

``safe_open`` is a Rust type whose methods cannot be patched, so the constructor is wrapped and returns a transparent
proxy (wrapt ``ObjectProxy``) that counts what ``get_tensor``, ``get_tensors`` and indexing a ``get_slice`` result
return. Counting is one list append per tensor; a span per tensor only with ``LOADTRACE_DETAIL=tensor``.
"""

from __future__ import annotations

import time
from typing import Any

import wrapt

from .. import semconv, spans
from ._common import FileCall, file_attributes, tensor_bytes
from .registry import Hook, fault


class TracedSafeOpen(wrapt.ObjectProxy):
    def __init__(self, wrapped: Any, scope: spans.Scope, tracing: spans.Tracing):
        super().__init__(wrapped)
        self._self_scope = scope
        self._self_tracing = tracing
        self._self_reads = scope.ledger.reads  # the hot path appends here directly
        self._self_per_tensor = tracing.settings.per_tensor
        self._self_counted_keys = False

    def keys(self):
        # Counted when the job lists them (transformers always does): listing them ourselves costs ~0.1 ms a file.
        names = self.__wrapped__.keys()
        if not self._self_counted_keys:
            self._self_counted_keys = True
            self._self_scope.span.set_attribute(semconv.FILE_TENSORS, len(names))
        return names

    def __enter__(self):
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info):
        if not self._self_counted_keys:
            try:
                self.keys()
            except Exception:
                pass
        try:
            return self.__wrapped__.__exit__(*exc_info)
        finally:
            self._self_close()

    def __del__(self):
        self._self_close()

    def _self_close(self) -> None:
        try:
            self._self_tracing.close_file(self._self_scope)
        except Exception as error:
            fault("safetensors.close", error, self._self_scope)

    def _self_count(self, name: str, tensor: Any, started: int | None) -> None:
        try:
            nbytes = tensor.nbytes
            self._self_scope.ledger.add_read(nbytes)
            if started is not None:
                self._self_tracing.point_span(
                    semconv.SPAN_SAFETENSORS_READ,
                    self._self_scope,
                    started,
                    {
                        semconv.TENSOR_NAME: name,
                        semconv.READ_BYTES: nbytes,
                        semconv.TENSOR_DTYPE: str(tensor.dtype),
                        semconv.TENSOR_SHAPE: list(tensor.shape),
                    },
                )
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._self_scope)

    def get_tensor(self, name):
        started = time.time_ns() if self._self_per_tensor else None
        tensor = self.__wrapped__.get_tensor(name)
        self._self_count(name, tensor, started)
        return tensor

    def get_tensors(self, *args, **kwargs):
        started = time.time_ns() if self._self_per_tensor else None
        tensors = self.__wrapped__.get_tensors(*args, **kwargs)
        if not self._self_counted_keys and not args and not kwargs:
            self._self_counted_keys = True
            self._self_scope.span.set_attribute(semconv.FILE_TENSORS, len(tensors))
        for name, tensor in tensors.items():
            self._self_count(name, tensor, started)
        return tensors

    def get_slice(self, name):
        if self._self_per_tensor:
            return TracedSlice(self.__wrapped__.get_slice(name), name, self)
        return CountingSlice(self.__wrapped__.get_slice(name), self)


class CountingSlice(wrapt.ObjectProxy):
    """Bytes are read when a slice is indexed, possibly in another thread: they go to the file it came from.
    This is the per-tensor hot path of a default-detail load: one append."""

    def __init__(self, wrapped: Any, file: TracedSafeOpen):
        super().__init__(wrapped)
        self._self_file = file

    def __getitem__(self, index):
        tensor = self.__wrapped__[index]
        try:
            self._self_file._self_reads.append(tensor.nbytes)
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._self_file._self_scope)
        return tensor


class TracedSlice(wrapt.ObjectProxy):
    """``LOADTRACE_DETAIL=tensor``: the same, plus a span for each read."""

    def __init__(self, wrapped: Any, name: str, file: TracedSafeOpen):
        super().__init__(wrapped)
        self._self_name = name
        self._self_file = file

    def __getitem__(self, index):
        file = self._self_file
        started = time.time_ns()
        tensor = self.__wrapped__[index]
        file._self_count(self._self_name, tensor, started)
        return tensor


def open_file(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None:
        return None
    path = args[0] if args else kwargs.get("filename")

    def opened(handle: Any, scope: spans.Scope) -> Any:
        if scope.recording:
            return TracedSafeOpen(handle, scope, tracing)
        tracing.close_file(scope)
        return handle

    return FileCall(tracing, semconv.SPAN_SAFETENSORS_OPEN, file_attributes(tracing, path), opened)


def load_bytes(instance, args, kwargs):
    """``safetensors.torch.load(data)``: transformers reads files this way when mmap is off."""
    tracing = spans.tracing()
    if tracing is None:
        return None

    def loaded(tensors: dict, scope: spans.Scope) -> dict:
        for tensor in tensors.values():
            scope.ledger.add_read(tensor_bytes(tensor))
        tracing.close_file(scope)
        return tensors

    return FileCall(tracing, semconv.SPAN_SAFETENSORS_LOAD, {}, loaded)


HOOKS = [
    Hook("safetensors", "safe_open", open_file),
    Hook("safetensors.torch", "load", load_bytes),
]
