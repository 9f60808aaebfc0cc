"""safetensors: one span per opened file, with the tensors and bytes read through it.

``safe_open`` is a Rust type whose methods cannot be patched, so the constructor is wrapped and returns a transparent
proxy (wrapt ``ObjectProxy``) that counts what ``get_tensor``, ``get_tensors`` and indexing a ``get_slice`` result
return. Counting is two ``+=`` per tensor on the file's read slot, a memory-mapped pair of integers the kernel keeps if
the process is killed (statefile.py); a span per tensor only with ``LOADTRACE_DETAIL=tensor``.

``get_slice(name)[...]`` is how transformers reads every tensor: what it costs on top of the library's own call is
the per-tensor cost of a default-detail load. Hence a plain class for the slice (``CountingSlice``) rather than a
wrapt proxy, a ``get_slice`` of each file's own that reaches the library and the slot through its closure
(``counting_get_slice``), and the generic attribute lookup on the file's proxy.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import wrapt

from ... import semconv
from ..tracing import spans
from ._common import FileCall, file_attributes, file_attributes_and_head, headers_only
from .registry import Hook, call_through, call_through_proxies, fault

# Free-threaded Python (3.13t, the GIL off): the ``+=`` on a read slot is no longer indivisible, so reads count under a
# lock there. Checked per file: a GIL turned back on later (an extension that needs it) leaves the lock merely unneeded.
_gil_enabled = getattr(sys, "_is_gil_enabled", lambda: True)


class TracedSafeOpen(wrapt.ObjectProxy):
    """The opened file: every tensor read through it counts into the file's read slot (``spans.Scope.slot``)."""

    # A subclass of wrapt's proxy looks up every attribute through wrapt's ``__getattribute__``, called as a slot
    # wrapper: ~150 ns an attribute here, several per tensor. The generic lookup finds the same things (the proxy's own
    # attributes, wrapt's descriptors such as ``__wrapped__`` and ``__class__``, the ``__module__`` and ``__doc__``
    # wrapt copied from the wrapped object) in ~35 ns, and wrapt's ``__getattr__`` still forwards everything else.
    __getattribute__ = object.__getattribute__

    _self_locking: bool | None = False  # count under a lock: never here, always (LockedSafeOpen), None: without a GIL
    _self_counting_slices = True  # slices from ``counting_get_slice`` (PerTensorSafeOpen's make spans instead)

    def __init__(self, wrapped: Any, scope: spans.Scope, tracing: spans.Tracing):
        super().__init__(wrapped)
        self._self_scope = scope
        self._self_tracing = tracing
        slot = scope.slot if scope.slot is not None else spans.detached_slot()
        locking = not _gil_enabled() if self._self_locking is None else self._self_locking
        self._self_slot = slot
        self._self_lock = threading.Lock() if locking else None
        self._self_counted_keys = False
        self._self_names: list[str] | None = None  # listed at open for the job's first ``keys()`` (forward_slices)
        if self._self_counting_slices:
            if not CountingSlice.forwarding:
                self._self_names = forward_slices(wrapped, scope)
            # This file's own ``get_slice``, set on the proxy: wrapt keeps an attribute whose name the class has on
            # the proxy itself (the method below), where the job's lookup finds it before the method.
            counting = counting_get_slice(wrapped.get_slice, slot, scope, self._self_lock)
            self._self_get_slice = self.get_slice = counting  # type: ignore[method-assign]

    def keys(self):
        # Counted when the job lists them (transformers always does): listing them ourselves costs ~0.1 ms a file.
        names = self._self_names
        if names is None:
            names = self.__wrapped__.keys()
        else:
            self._self_names = None  # the job's own list, given once
        if not self._self_counted_keys:
            self._self_counted_keys = True
            self._self_tensors_in_file(len(names))
        return names

    def _self_tensors_in_file(self, count: int) -> None:
        if not self._self_scope.ended:  # a termination signal may have ended the span already
            self._self_scope.span.set_attribute(semconv.FILE_TENSORS, count)

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

    _self_closed = False

    def _self_close(self) -> None:
        # Once: transformers closes each file (``__exit__``), then drops it (``__del__``).
        if self._self_closed:
            return
        self._self_closed = True
        try:
            self._self_tracing.close_file(self._self_scope)
        except Exception as error:
            fault("safetensors.close", error, self._self_scope)

    def _self_count(self, tensor: Any) -> None:
        """One tensor read (``get_tensors``, per-tensor detail)."""
        try:
            nbytes = tensor.nbytes  # first: a ``nbytes`` in Python code could let another thread in between the +=
            if self._self_lock is None:
                counts = self._self_slot.counts
                counts[0] += 1
                counts[1] += nbytes
            else:
                with self._self_lock:
                    self._self_slot.add(nbytes)
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._self_scope)

    def get_tensor(self, name):
        tensor = self.__wrapped__.get_tensor(name)
        try:  # the per-tensor hot path, inline: two += on the file's slot (LockedSafeOpen without a GIL)
            nbytes = tensor.nbytes
            counts = self._self_slot.counts
            counts[0] += 1
            counts[1] += nbytes
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._self_scope)
        return tensor

    def get_tensors(self, *args, **kwargs):
        tensors = self.__wrapped__.get_tensors(*args, **kwargs)
        if not self._self_counted_keys and not args and not kwargs:
            self._self_counted_keys = True
            self._self_tensors_in_file(len(tensors))
        for tensor in tensors.values():
            self._self_count(tensor)
        return tensors

    def get_slice(self, name):
        return self._self_get_slice(name)  # shadowed on each proxy by the same function (``__init__``)


@call_through
def counting_get_slice(
    read: Callable[[str], Any], slot: spans.ReadSlot, scope: spans.Scope, lock: Any
) -> Callable[[str], CountingSlice]:
    """A file's ``get_slice``: the library's slice (``read``) in a ``CountingSlice`` that counts into the file's slot.
    What it needs is in its closure: no lookup on the file's proxy, and no reference to it (its ``__del__`` ends the
    file's span when the job drops it: a cycle would leave that to the garbage collector)."""
    if lock is None:

        def get_slice(name):
            piece = CountingSlice()
            piece._slice = read(name)
            piece._slot = slot
            piece._scope = scope
            return piece

    else:

        def get_slice(name):
            piece = LockedCountingSlice()
            piece._slice = read(name)
            piece._slot = slot
            piece._scope = scope
            piece._lock = lock
            return piece

    return get_slice


def forward_slices(handle: Any, scope: spans.Scope) -> list[str] | None:
    """Once per process, at the first file with a tensor: ``CountingSlice`` answers for each public attribute of the
    library's slice type that it lacks. A ``__getattr__`` would do it for any, but in Python 3.11 a class with one
    has every attribute read on its instances take the generic path (no specialised slot read): ~0.4 µs a tensor
    measured. The file's names, listed to find a tensor, go to the job's first ``keys()`` (transformers lists them
    right after ``safe_open``: no second listing)."""
    try:
        names = handle.keys()
        if names:
            library_slice = type(handle.get_slice(names[0]))
            for name in dir(library_slice):
                if not name.startswith("_") and not hasattr(CountingSlice, name):
                    setattr(CountingSlice, name, property(_forwarded(name)))
            CountingSlice.forwarding = library_slice
        return names
    except Exception as error:
        fault(semconv.SPAN_SAFETENSORS_OPEN, error, scope)
        return None


@call_through
def _forwarded(name: str) -> Callable[[Any], Any]:
    def forwarded(piece):
        return getattr(piece._slice, name)

    return forwarded


def partial_read(piece: Any, tensor: Any, nbytes: int, partial: list[int]) -> None:
    """An index other than ``...``: if it returned less than the whole tensor (a tensor-parallel rank reading its
    slice), its bytes go to the file's ``partial`` list (one ``append``, atomic). Not the hot path: transformers reads
    whole tensors with ``[...]``."""
    whole = tensor.itemsize  # torch, numpy, jax and mlx arrays alike (``element_size`` is torch's alone)
    for size in piece.get_shape():
        whole *= size
    if nbytes < whole:
        partial.append(nbytes)


class CountingSlice:
    """A slice: bytes are read when it is indexed, possibly in another thread, and they count into the file it came
    from. This is the per-tensor hot path of a default-detail load: two ``+=`` on the file's read slot, no call (an
    index other than ``...`` also checks for a partial read). One is made per tensor, so it is a plain class that
    ``counting_get_slice`` fills (no ``__init__`` to run) rather than a wrapt proxy (~0.3 µs to make, ~150 ns for each
    attribute it reads). It answers for the library's slice: ``get_shape``, ``get_dtype``, ``isinstance``
    (``__class__``), and whatever else the library's slice has (``forward_slices``: no ``__getattr__``)."""

    __slots__ = ("_slice", "_slot", "_scope")

    forwarding: type | None = None  # the library's slice type, once its other attributes are forwarded

    _slice: Any  # the library's slice
    _slot: spans.ReadSlot  # the file's: its ``counts`` are swapped for private memory in a forked child
    _scope: spans.Scope

    def __getitem__(self, index):
        tensor = self._slice[index]
        try:
            nbytes = tensor.nbytes  # first: nothing but the two += may run between reading and writing a count
            counts = self._slot.counts
            counts[0] += 1
            counts[1] += nbytes
            if index is not Ellipsis:
                self._count_partial(tensor, nbytes)
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._scope)
        return tensor

    def _count_partial(self, tensor, nbytes):
        """Off the hot path: transformers indexes with ``...``; an index that slices may read part of the tensor."""
        partial_read(self._slice, tensor, nbytes, self._scope.ledger.partial_reads)

    def get_shape(self):
        return self._slice.get_shape()

    def get_dtype(self):
        return self._slice.get_dtype()

    @property  # type: ignore[misc]
    def __class__(self):  # isinstance() sees the library's slice, as through a wrapt proxy
        return type(self._slice)


class LockedCountingSlice(CountingSlice):
    """The same without a GIL: the two ``+=`` under the file's lock."""

    __slots__ = ("_lock",)

    _lock: Any

    def __getitem__(self, index):
        tensor = self._slice[index]
        try:
            with self._lock:
                self._slot.add(tensor.nbytes)
            if index is not Ellipsis:
                self._count_partial(tensor, tensor.nbytes)
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._scope)
        return tensor


class LockedSafeOpen(TracedSafeOpen):
    """Free-threaded Python: every count under the file's lock."""

    _self_locking = True

    def get_tensor(self, name):
        tensor = self.__wrapped__.get_tensor(name)
        self._self_count(tensor)
        return tensor


class PerTensorSafeOpen(TracedSafeOpen):
    """``LOADTRACE_DETAIL=tensor``: the same counts, plus a span for each tensor read."""

    _self_locking = None
    _self_counting_slices = False

    def _self_read(self, name: str, tensor: Any, started: int) -> None:
        self._self_count(tensor)
        try:
            self._self_tracing.point_span(
                semconv.SPAN_SAFETENSORS_READ,
                self._self_scope,
                started,
                {
                    semconv.TENSOR_NAME: name,
                    semconv.READ_BYTES: tensor.nbytes,
                    semconv.TENSOR_DTYPE: str(tensor.dtype),
                    semconv.TENSOR_SHAPE: list(tensor.shape),
                },
            )
        except Exception as error:
            fault(semconv.SPAN_SAFETENSORS_READ, error, self._self_scope)

    def get_tensor(self, name):
        started = time.time_ns()
        tensor = self.__wrapped__.get_tensor(name)
        self._self_read(name, tensor, started)
        return tensor

    def get_tensors(self, *args, **kwargs):
        started = time.time_ns()
        tensors = self.__wrapped__.get_tensors(*args, **kwargs)
        if not self._self_counted_keys and not args and not kwargs:
            self._self_counted_keys = True
            self._self_tensors_in_file(len(tensors))
        for name, tensor in tensors.items():
            self._self_read(name, tensor, started)
        return tensors

    def get_slice(self, name):
        return TracedSlice(self.__wrapped__.get_slice(name), name, self)


class TracedSlice(wrapt.ObjectProxy):
    """``LOADTRACE_DETAIL=tensor``: a slice whose reads count and get a span each."""

    def __init__(self, wrapped: Any, name: str, file: PerTensorSafeOpen):
        super().__init__(wrapped)
        self._self_name = name
        self._self_file = file

    def __getitem__(self, index):
        file = self._self_file
        started = time.time_ns()
        tensor = self.__wrapped__[index]
        file._self_read(self._self_name, tensor, started)
        if index is not Ellipsis:
            try:
                partial_read(self.__wrapped__, tensor, tensor.nbytes, file._self_scope.ledger.partial_reads)
            except Exception as error:
                fault(semconv.SPAN_SAFETENSORS_READ, error, file._self_scope)
        return tensor


def open_file(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None or headers_only.get():
        return None
    path = args[0] if args else kwargs.get("filename")

    def opened(handle: Any, scope: spans.Scope) -> Any:
        if scope.recording:
            if tracing.settings.per_tensor:
                return PerTensorSafeOpen(handle, scope, tracing)
            return (TracedSafeOpen if _gil_enabled() else LockedSafeOpen)(handle, scope, tracing)
        tracing.close_file(scope)
        return handle

    attributes, head = file_attributes_and_head(tracing, path, 8)
    size = attributes.get(semconv.FILE_SIZE)
    if size is not None and (data := data_bytes(head, size)) is not None:
        attributes[semconv.FILE_TENSOR_BYTES] = data
    return FileCall(tracing, semconv.SPAN_SAFETENSORS_OPEN, attributes, opened)


def data_bytes(head: bytes, size: int) -> int | None:
    """The bytes of a safetensors file's tensors, from its first 8 bytes (``head``: the header's length) and its size:
    what follows the length and the JSON header. Exact (the format pads inside the header): a tensor-parallel job that
    reads slices still tells the model's size. None for a file that is not safetensors-shaped."""
    if len(head) != 8:
        return None
    length = int.from_bytes(head, "little")
    data = size - 8 - length
    return data if length > 0 and data >= 0 else None


def load_bytes(instance, args, kwargs):
    """``safetensors.torch.load(data)``: transformers reads files this way when mmap is off, vLLM's eager strategy and
    SGLang's ``--weight-loader-disable-mmap`` too (``open(path, "rb").read()`` first: ``read_from``)."""
    tracing = spans.tracing()
    if tracing is None:
        return None

    def loaded(tensors: dict, scope: spans.Scope) -> dict:
        try:
            tracing.count_reads(scope, tensors.values())
        finally:
            tracing.close_file(scope)
        return tensors

    data = args[0] if args else kwargs.get("data")
    source = read_from(data)
    if source is None:
        return FileCall(tracing, semconv.SPAN_SAFETENSORS_LOAD, {}, loaded)
    attributes = dict(source.attributes)
    if (tensor_bytes := data_bytes(bytes(data[:8]), len(data))) is not None:
        attributes[semconv.FILE_TENSOR_BYTES] = tensor_bytes
    return FileCall(tracing, semconv.SPAN_SAFETENSORS_LOAD, attributes, loaded, (source.started, source.before))


class Opened:
    """A ``.safetensors`` file this thread opened for reading (``open_for_reading``): its path, size and page-cache
    residency as found before it was read, when, and the memory then (outside any load: where the load of reads
    outside any load begins, if its bytes are loaded)."""

    __slots__ = ("file", "size", "attributes", "started", "before")

    def __init__(self, file: Any, attributes: dict[str, Any], started: int, before: Any):
        self.file = weakref.ref(file)
        self.size = attributes.get(semconv.FILE_SIZE)
        self.attributes = attributes
        self.started = started
        self.before = before


_opened = threading.local()  # .files: this thread's ``Opened``, newest last (at most MAX_OPENED)
MAX_OPENED = 8


def read_from(data: Any) -> Opened | None:
    """The file ``data`` was read from: the newest ``.safetensors`` file this thread opened for reading whose size is
    ``len(data)`` and that was read to its end (or is closed already: ``Path.read_bytes``). Matched by identity of
    size and thread, not guessed from a name; None when none matches (the bytes came from elsewhere). An opened file
    whose bytes are never loaded (a hash, a header read) is no read of weights: it is simply forgotten."""
    files: list[Opened] = getattr(_opened, "files", None) or []
    try:
        length = len(data)
    except TypeError:
        return None
    for index in range(len(files) - 1, -1, -1):
        opened = files[index]
        if opened.size != length:
            continue
        file = opened.file()
        try:
            if file is not None and not file.closed and file.tell() != length:
                continue
        except (OSError, ValueError):
            continue
        del files[index]
        return opened
    return None


class Opening:
    """``open()`` of a ``.safetensors`` file for reading: its residency is read before the job reads it."""

    __slots__ = ("attributes", "started", "before")

    def __init__(self, tracing: spans.Tracing, path: str):
        self.before = tracing.loose.memory_outside()
        self.started = time.time_ns()
        self.attributes = file_attributes(tracing, path)

    def done(self, file: Any, error: BaseException | None) -> Any:
        if error is None:
            files = getattr(_opened, "files", None)
            if files is None:
                files = _opened.files = []
            files.append(Opened(file, self.attributes, self.started, self.before))
            del files[:-MAX_OPENED]
        return file


def open_for_reading(instance, args, kwargs):
    """``open()``, ``io.open``: a ``.safetensors`` file opened to be read whole (mode ``rb``) is remembered
    (``Opened``), so that ``safetensors.torch.load`` of its bytes is that file's read. Any other open passes at the
    first checks."""
    path = args[0] if args else kwargs.get("file")
    if type(path) is not str:
        if not isinstance(path, os.PathLike) or not isinstance(path := os.fspath(path), str):
            return None
    if not path.endswith(".safetensors"):
        return None
    mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
    if mode not in ("rb", "br"):
        return None
    tracing = spans.tracing()
    if tracing is None or "safetensors.torch" not in sys.modules:
        return None
    return Opening(tracing, path)


HOOKS = [
    Hook("safetensors", "safe_open", open_file),
    Hook("safetensors.torch", "load", load_bytes),
    # The one hook outside safetensors: which file ``safetensors.torch.load(f.read())`` read (``read_from``).
    Hook("builtins", "open", open_for_reading),
]

# The proxies' methods stand between the job and safetensors: warnings raised below them name the job's line. The
# slices are plain classes, marked the same way (``counting_get_slice`` is marked where it is defined).
call_through_proxies(__name__)
for _method in (*vars(CountingSlice).values(), *vars(LockedCountingSlice).values()):
    call_through(_method)
for _method in (*vars(Opened).values(), *vars(Opening).values()):  # run inside the job's ``open()``
    call_through(_method)
