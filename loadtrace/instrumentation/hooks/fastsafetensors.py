"""fastsafetensors (IBM; vLLM's and SGLang's ``--load-format fastsafetensors``): the files are spread over the ranks,
each rank reads its own with its own reads (O_DIRECT ``pread`` in C++ threads without GDS, cuFile with it: never
through Python), then every tensor goes to every rank through ``torch.distributed`` collectives (``get_tensor``: a
broadcast from the rank that read it; ``get_sharded``: a scatter).

So the counting is at the Python boundary that knows the byte ranges:

- ``copy_files_to_device`` opens the load (``fastsafetensors.load``), which lasts until the buffer it returns is
  closed (vLLM's iterator closes it after the last tensor), or the process exits; a file span for each file this rank
  reads, opened before its reads are submitted (so its page-cache residency is what the reads found);
- a file's tensors and bytes are counted when its copier hands them over (``LazyTensorFactory.wait_io`` returned: the
  reads are done), from the header's offsets: the tensors inside the ranges read (all of them, or a tensor filter's);
- what the process group moves while the load is open is its broadcast: bytes sent by the rank that read the file,
  received by the others (``TorchProcessGroup``'s broadcast, scatter, send and recv, and the contiguous runs of
  ``iterate_weights``), on the load span as ``loadtrace.broadcast.*``.
"""

from __future__ import annotations

import weakref
from contextvars import ContextVar
from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import Broadcasts, file_attributes
from .registry import Hook, fault

# The files the rank is reading in this ``copy_files_to_device`` call: path → its file span, and the tensor filter.
_reading: ContextVar[tuple[dict[str, spans.Scope], Any] | None] = ContextVar("loadtrace_fastsafetensors", default=None)


class FastLoad:
    """One ``copy_files_to_device`` and the buffer it made, until that buffer is closed."""

    __slots__ = ("tracing", "scope", "counted", "__weakref__")

    def __init__(self, tracing: spans.Tracing, start: dict[str, Any]):
        self.tracing = tracing
        self.counted = Broadcasts()
        self.scope = tracing.start_detached_load(semconv.SPAN_FASTSAFETENSORS_LOAD, start, self.counted.attributes)

    def end(self, error: BaseException | None = None) -> None:
        if self in _open:
            _open.remove(self)
        self.tracing.end_detached_load(self.scope, self.counted.attributes(), error)


_open: list[FastLoad] = []  # open loads, newest last: the process group's traffic counts into the newest
_buffers: weakref.WeakKeyDictionary[Any, FastLoad] = weakref.WeakKeyDictionary()


def _tensor_bytes(meta: Any) -> int | None:
    size, header = getattr(meta, "size_bytes", None), getattr(meta, "header_length", None)
    return size - header if isinstance(size, int) and isinstance(header, int) else None


class Copying:
    """``copy_files_to_device``: the load and this rank's file spans open before the reads are submitted."""

    __slots__ = ("load", "files", "token")

    def __init__(self, tracing: spans.Tracing, loader: Any):
        rank = loader.pg.rank()
        checkpoint = [_tensor_bytes(meta) for meta, _ in loader.meta.values()]
        start: dict[str, Any] = {semconv.FASTSAFETENSORS_FILES: len(checkpoint)}
        if checkpoint and None not in checkpoint:
            start[semconv.CHECKPOINT_TENSOR_BYTES] = sum(size for size in checkpoint if size is not None)
        self.load = load = FastLoad(tracing, start)
        self.files: dict[str, spans.Scope] = {}
        for path, (meta, owner) in sorted(loader.meta.items()):
            if owner == rank:
                attributes = file_attributes(tracing, path)
                if (data := _tensor_bytes(meta)) is not None:
                    attributes[semconv.FILE_TENSOR_BYTES] = data
                self.files[path] = tracing.open_file(semconv.SPAN_FASTSAFETENSORS_READ, attributes, load=load.scope)
        _open.append(load)
        self.token = _reading.set((self.files, loader._tensor_filter))

    def done(self, buffer: Any, error: BaseException | None) -> Any:
        _reading.reset(self.token)
        tracing = self.load.tracing
        for scope in self.files.values():
            tracing.close_file(scope, error)
        if error is not None or buffer is None:
            self.load.end(error)
            return buffer
        _buffers[buffer] = self.load
        return buffer


def copy_files(instance, args, kwargs):
    tracing = spans.tracing()
    return Copying(tracing, instance) if tracing is not None else None


class Waiting:
    """A file's copier hands its tensors over: count those inside the ranges it read."""

    __slots__ = ("factory", "scope", "keep")

    def __init__(self, factory: Any, scope: spans.Scope, keep: Any):
        self.factory, self.scope, self.keep = factory, scope, keep

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None:
            keep, count, nbytes = self.keep, 0, 0
            for name, tensor in self.factory.tensors.items():
                if keep is None or keep(name):
                    count += 1
                    nbytes += tensor.get_nbytes()
            counts = self.scope.slot.counts if self.scope.slot is not None else None
            if counts is not None:
                counts[0] += count
                counts[1] += nbytes
        return result


def wait_io(instance, args, kwargs):
    reading = _reading.get()
    if reading is None:
        return None
    files, keep = reading
    scope = files.get(instance.metadata.src)
    return Waiting(instance, scope, keep) if scope is not None and instance.copier is not None else None


class Closing:
    """``FilesBufferOnDevice.close``: the load ends once the buffer is closed (every tensor handed out by then)."""

    __slots__ = ("load",)

    def __init__(self, load: FastLoad):
        self.load = load

    def done(self, result: Any, error: BaseException | None) -> Any:
        self.load.end()
        return result


def close_buffer(instance, args, kwargs):
    load = _buffers.pop(instance, None)
    return Closing(load) if load is not None else None


def _count(nbytes: int, sent: bool) -> None:
    if not _open:
        return
    counted = _open[-1].counted
    if sent:
        counted.sent += nbytes
    else:
        counted.received += nbytes
    counted.tensors += 1


def _nbytes(tensor: Any) -> int:
    real = getattr(tensor, "real_tensor", tensor)
    return int(real.nbytes)


class Moved:
    """One transfer of fastsafetensors' process group, counted once it returned."""

    __slots__ = ("nbytes", "sent")

    def __init__(self, nbytes: int, sent: bool):
        self.nbytes, self.sent = nbytes, sent

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None:
            try:
                _count(self.nbytes, self.sent)
            except Exception as problem:
                fault("fastsafetensors.broadcast", problem)
        return result


def _arg(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def broadcast(instance, args, kwargs):
    if not _open or instance.real_pg is None:
        return None
    tensor, source = _arg(args, kwargs, 0, "dst"), _arg(args, kwargs, 1, "rank")
    return Moved(_nbytes(tensor), source == instance.rank())


def scatter(instance, args, kwargs):
    if not _open or instance.real_pg is None:
        return None
    tensor, source = _arg(args, kwargs, 0, "dst"), _arg(args, kwargs, 2, "src")
    pieces = _arg(args, kwargs, 1, "scatter_list")
    if source == instance.rank():  # the source keeps its own piece: it sends the others
        return Moved(sum(_nbytes(piece) for piece in pieces or ()) - _nbytes(tensor), True)
    return Moved(_nbytes(tensor), False)


def send(instance, args, kwargs):
    if not _open or instance.real_pg is None:
        return None
    return Moved(_nbytes(_arg(args, kwargs, 0, "t")), True)


def recv(instance, args, kwargs):
    if not _open or instance.real_pg is None:
        return None
    return Moved(_nbytes(_arg(args, kwargs, 0, "t")), False)


def contiguous_run(instance, args, kwargs):
    """``iterate_weights``' broadcast of a run of adjacent tensors in one call."""
    pg, frames, source = _arg(args, kwargs, 0, "pg"), _arg(args, kwargs, 2, "frames"), _arg(args, kwargs, 3, "src_rank")
    if not _open or getattr(pg, "real_pg", None) is None:
        return None
    nbytes = sum(frame.data_offsets[1] - frame.data_offsets[0] for frame in frames)
    return Moved(nbytes, source == pg.rank())


HOOKS = [
    Hook("fastsafetensors.loader", "BaseSafeTensorsFileLoader.copy_files_to_device", copy_files),
    Hook("fastsafetensors.tensor_factory", "LazyTensorFactory.wait_io", wait_io),
    Hook("fastsafetensors.file_buffer", "FilesBufferOnDevice.close", close_buffer),
    Hook("fastsafetensors.frameworks._torch", "TorchProcessGroup.broadcast", broadcast),
    Hook("fastsafetensors.frameworks._torch", "TorchProcessGroup.scatter", scatter),
    Hook("fastsafetensors.frameworks._torch", "TorchProcessGroup.send", send),
    Hook("fastsafetensors.frameworks._torch", "TorchProcessGroup.recv", recv),
    Hook("fastsafetensors.frameworks._torch", "TorchOp.broadcast_contiguous_run", contiguous_run),
]
