"""torch.distributed.checkpoint (DCP): its loads, and the reads of its storage readers.

A load scope each: ``dcp.load`` (``state_dict_loader.load``, and the deprecated ``load_state_dict``) and
``state_dict.set_model_state_dict`` / ``set_state_dict``, with the same phases, memory readings and state file as
``from_pretrained``. Counted at the storage reader:

- ``FileSystemReader.read_data`` reads each file of this rank's plan through ``FileSystem.create_stream``, and each
  read item with a ``torch.load`` of its saved chunk: one ``dcp.read_file`` span per file, the ``torch.load`` calls
  counted into it (never a span each: a 10,000-tensor checkpoint would make 10,000 spans per rank);
- ``HuggingFaceStorageReader.read_data`` reads through ``safe_open`` and ``get_slice``: the safetensors hooks count
  those (``safetensors.open`` spans); its ``read_metadata`` opens every file for its header alone, and makes none.

The checkpoint's tensor bytes come from the metadata the reader returns (every tensor's global size and dtype), and
the load's strategy from this rank's plan against the saved chunks (``strategy_of``).
"""

from __future__ import annotations

import os
from contextvars import Token
from typing import Any

import wrapt

from ... import semconv
from ..tracing import spans
from ._common import (
    Broadcasts,
    Counting,
    FileCall,
    broadcasts,
    checkpoint_path,
    file_attributes,
    headers_only,
    reader_reads,
    tensor_bytes,
)
from .registry import Hook, call_through_proxies, fault

# Phases ------------------------------------------------------------------------------------------------------------


class Phase:
    """A reader's step as a phase of the DCP load open on this thread (none outside one)."""

    __slots__ = ("tracing", "scope", "token", "quiet")

    def __init__(self, tracing: spans.Tracing, name: str, quiet: bool = False):
        self.tracing = tracing
        self.scope, self.token = tracing.enter_phase(name)
        self.quiet = headers_only.set(True) if quiet else None

    def done(self, result: Any, error: BaseException | None) -> Any:
        if self.quiet is not None:
            headers_only.reset(self.quiet)
        self.tracing.exit_phase(self.scope, self.token, error)
        return result


def _dcp_load() -> spans.Scope | None:
    load = spans.current_load()
    return load if load is not None and load.name in (semconv.SPAN_DCP_LOAD, semconv.SPAN_DCP_SET_STATE_DICT) else None


# The checkpoint's metadata -----------------------------------------------------------------------------------------


def tensor_bytes_of(metadata: Any) -> int | None:
    """The bytes of every tensor the checkpoint holds, at its global size: what the model is, whatever each rank
    reads of it. None where the metadata says nothing of tensors."""
    total, found = 0, False
    for entry in getattr(metadata, "state_dict_metadata", {}).values():
        size, properties = getattr(entry, "size", None), getattr(entry, "properties", None)
        dtype = getattr(properties, "dtype", None)
        if size is None or dtype is None:
            continue  # bytes saved as such (BytesStorageMetadata): no tensor
        numel = 1
        for extent in size:
            numel *= int(extent)
        total += numel * dtype.itemsize
        found = True
    return total if found else None


def read_metadata(reader, args, kwargs):
    """A phase; the HF reader's opens of every file for its header are no file spans. Its result tells the
    checkpoint's tensor bytes to the DCP load."""
    tracing = spans.tracing()
    load = _dcp_load()
    if tracing is None or load is None:
        return None
    return MetadataRead(tracing, load, reader)


class MetadataRead(Phase):
    __slots__ = ("load", "reader")

    def __init__(self, tracing: spans.Tracing, load: spans.Scope, reader: Any):
        super().__init__(tracing, semconv.SPAN_DCP_READ_METADATA, quiet=True)
        self.load, self.reader = load, reader

    def done(self, result: Any, error: BaseException | None) -> Any:
        super().done(result, error)
        if error is None:
            self.tracing.loads.learned(self.load, learned_from(result, self.reader))
        return result


def learned_from(metadata: Any, reader: Any) -> dict[str, Any]:
    """What a DCP load learns from the checkpoint's metadata: its reader, its tensors' bytes, its data files."""
    learned: dict[str, Any] = {semconv.DCP_STORAGE_READER: type(reader).__name__}
    nbytes = tensor_bytes_of(metadata)
    if nbytes is not None:
        learned[semconv.CHECKPOINT_TENSOR_BYTES] = nbytes
    storage = getattr(metadata, "storage_data", None) or {}
    files = {path for info in storage.values() if (path := getattr(info, "relative_path", None)) is not None}
    if files:
        learned[semconv.DCP_SAVED_FILES] = len(files)
    return learned


# This rank's plan --------------------------------------------------------------------------------------------------


def _numel(sizes: Any) -> int:
    numel = 1
    for extent in sizes:
        numel *= int(extent)
    return numel


def _chunk(entry: Any, offsets: Any) -> Any:
    """The saved chunk a read item reads from: the one at its storage index's offsets."""
    for chunk in getattr(entry, "chunks", ()):
        if list(chunk.offsets) == list(offsets or ()):
            return chunk
    return None


def strategy_of(items: list[Any], metadata: Any, slices: bool = False) -> tuple[str, int]:
    """How this rank's plan reads the checkpoint, and how many of its items read a saved chunk that is not this
    rank's own shard: resharded when any does (one tensor assembled from several saved chunks, or a chunk of which
    the rank keeps a part: saved at another world size or sharding); else sharded when it reads parts of tensors;
    else whole tensors (``dcp_full``). ``slices``: the reader reads just the part it keeps of a chunk
    (``HuggingFaceStorageReader``), so that part is this rank's shard."""
    entries: dict[str, Any] = getattr(metadata, "state_dict_metadata", {})
    per_tensor: dict[str, int] = {}
    for item in items:
        per_tensor[item.storage_index.fqn] = per_tensor.get(item.storage_index.fqn, 0) + 1
    resharded = partial = 0
    for item in items:
        entry: Any = entries.get(item.storage_index.fqn)
        chunk = _chunk(entry, item.storage_index.offset) if entry is not None else None
        if chunk is None or not hasattr(entry, "size"):
            continue  # bytes, not a tensor
        kept = list(item.lengths) if slices else list(chunk.sizes)
        if per_tensor[item.storage_index.fqn] > 1 or (list(item.lengths) != list(chunk.sizes) and not slices):
            resharded += 1
        elif _numel(kept) < _numel(entry.size):
            partial += 1
    if resharded:
        return semconv.STRATEGY_DCP_RESHARDED, resharded
    return (semconv.STRATEGY_DCP_SHARDED if partial else semconv.STRATEGY_DCP_FULL), 0


def _slices(reader: Any) -> bool:
    return any(cls.__name__ == "HuggingFaceStorageReader" for cls in type(reader).__mro__)


def _metadata(planner: Any) -> Any:
    return getattr(planner, "metadata", None)


# Reads -------------------------------------------------------------------------------------------------------------


class Read(Phase):
    """One ``read_data`` call: a ``dcp.read_data`` phase; while it runs, the file the reader has open (its
    ``dcp.read_file`` span) and which of the file's read items comes next."""

    __slots__ = ("per_file", "file", "expected", "reading", "worker_stack")

    per_file: dict[str, list[int | None]]

    def __init__(self, tracing: spans.Tracing, reader: Any, plan: Any, planner: Any):
        items = list(getattr(plan, "items", ()))
        metadata = _metadata(planner)
        self.per_file = self._index(reader, items, metadata)  # first: a fault here leaves nothing half set
        load = _dcp_load()
        if load is not None and metadata is not None:
            strategy, resharded = strategy_of(items, metadata, _slices(reader))
            learned = {semconv.STRATEGY: strategy, semconv.DCP_READ_ITEMS: len(items)}
            learned[semconv.DCP_RESHARDED_ITEMS] = resharded
            tracing.loads.learned(load, learned)
        super().__init__(tracing, semconv.SPAN_DCP_READ_DATA)
        self.file: spans.Scope | None = None
        self.expected: list[int | None] = []  # the open file's items still to come: each tensor's element count
        self.worker_stack = spans.active()
        self.reading: Token | None = reader_reads.set(self)

    @staticmethod
    def _index(reader: Any, items: list[Any], metadata: Any) -> dict[str, list[int | None]]:
        """Per file (as the reader will open it), its items in the reader's order: FileSystemReader reads a file's
        items in plan order, with one ``torch.load`` each (a tensor's; the planner's, of an item saved as bytes)."""
        storage = getattr(reader, "storage_data", None) or {}
        entries: dict[str, Any] = getattr(metadata, "state_dict_metadata", {})
        per_file: dict[str, list[int | None]] = {}
        for item in items:
            info = storage.get(item.storage_index)
            if info is None or not hasattr(reader, "fs"):
                continue
            entry: Any = entries.get(item.storage_index.fqn)
            whole = _numel(entry.size) if hasattr(entry, "size") else None
            path = os.fspath(reader.fs.concat_path(reader.path, info.relative_path))
            per_file.setdefault(path, []).append(whole)
        return per_file

    def done(self, result: Any, error: BaseException | None) -> Any:
        if self.reading is not None:
            reader_reads.reset(self.reading)
            self.reading = None
        self.close_file()
        return super().done(result, error)

    def open_file(self, path: Any) -> FileCall:
        self.close_file()  # one file at a time: FileSystemReader closes each before it opens the next
        self.expected = list(self.per_file.get(os.fspath(path), ()))

        def opened(stream: Any, scope: spans.Scope) -> Any:
            self.file = scope
            return Stream(stream, self, scope)

        return FileCall(self.tracing, semconv.SPAN_DCP_FILE, file_attributes(self.tracing, path), opened)

    def close_file(self, scope: spans.Scope | None = None) -> None:
        file = self.file
        if file is not None and (scope is None or scope is file):
            self.file = None
            self.tracing.close_file(file)

    def item(self) -> Item:
        """A ``torch.load`` of one read item: into the open file's span (one without a path when the reader opened
        its file some other way)."""
        if self.file is None:
            self.file = self.tracing.open_file(semconv.SPAN_DCP_FILE, {})
        return Item(self, self.file, self.expected.pop(0) if self.expected else None)


class Item:
    """One read item's ``torch.load``: its saved chunk counts into the file's read slot; a chunk smaller than its
    tensor (a shard) is a partial read of it."""

    __slots__ = ("read", "file", "whole")

    def __init__(self, read: Read, file: spans.Scope, whole: int | None):
        self.read, self.file, self.whole = read, file, whole

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None and hasattr(result, "nbytes"):
            self.read.tracing.count_reads(self.file, (result,))
            if self.whole is not None and result.numel() < self.whole:
                self.file.ledger.partial_reads.append(int(result.nbytes))
        return result


class Stream(wrapt.ObjectProxy):
    """``create_stream``'s context manager: the file's span ends when the reader leaves it."""

    def __init__(self, wrapped: Any, read: Read, scope: spans.Scope):
        super().__init__(wrapped)
        self._self_read, self._self_scope = read, scope

    def __enter__(self):
        return self.__wrapped__.__enter__()

    def __exit__(self, *exc_info):
        try:
            return self.__wrapped__.__exit__(*exc_info)
        finally:
            try:
                self._self_read.close_file(self._self_scope)
            except Exception as error:
                fault("dcp.create_stream", error, self._self_scope)


def read_data(reader, args, kwargs):
    tracing = spans.tracing()
    if tracing is None or reader_reads.get() is not None or _dcp_load() is None:
        return None  # a subclass's read_data calling its parent's: the outer call counts
    plan = args[0] if args else kwargs.get("plan")
    planner = args[1] if len(args) > 1 else kwargs.get("planner")
    return Read(tracing, reader, plan, planner)


def create_stream(fs, args, kwargs):
    reading = reader_reads.get()
    mode = args[1] if len(args) > 1 else kwargs.get("mode", "")
    if reading is None or not str(mode).startswith("r"):
        return None
    return reading.open_file(args[0] if args else kwargs.get("path"))


class Worker:
    """``HuggingFaceStorageReader``'s reader thread: it takes on the load and phase of the ``read_data`` that
    started it, so the files it opens are that load's."""

    __slots__ = ("token",)

    def __init__(self, stack: tuple[spans.Scope, ...]):
        self.token = spans.adopt(stack)

    def done(self, result: Any, error: BaseException | None) -> Any:
        spans.release(self.token)
        return result


def reader_thread(reader, args, kwargs):
    reading = _started_by.get(id(reader))
    if reading is None or spans.active():
        return None
    return Worker(reading.worker_stack)


# The HF reader's read_data hands its files to threads: they find the Read it was in by their reader.
_started_by: dict[int, Read] = {}


def hf_read_data(reader, args, kwargs):
    call = read_data(reader, args, kwargs)
    if call is None:
        return None
    _started_by[id(reader)] = call
    return HfRead(call, reader)


class HfRead:
    __slots__ = ("read", "reader")

    def __init__(self, read: Read, reader: Any):
        self.read, self.reader = read, reader

    def done(self, result: Any, error: BaseException | None) -> Any:
        _started_by.pop(id(self.reader), None)
        return self.read.done(result, error)


# Loads -------------------------------------------------------------------------------------------------------------


def _checkpoint(args: tuple, kwargs: dict) -> Any:
    reader = kwargs.get("storage_reader")
    checkpoint = kwargs.get("checkpoint_id")
    if checkpoint is None and reader is not None:
        checkpoint = getattr(reader, "checkpoint_id", None) or getattr(reader, "path", None)
    return checkpoint


class Load:
    """A DCP load, or a ``set_*_state_dict``: a load scope; the latter also counts what ``broadcast_from_rank0``
    moves (as accelerate's ``fsdp2_load_full_state_dict`` does)."""

    __slots__ = ("tracing", "scope", "token", "counting")

    def __init__(self, tracing: spans.Tracing, name: str, start: dict[str, Any], counts: bool):
        self.tracing = tracing
        self.scope, self.token = tracing.start_load(name, start)
        self.counting = Counting(counts)

    def done(self, result: Any, error: BaseException | None) -> Any:
        self.tracing.end_load(self.scope, self.token, self.counting.stop(), error)
        return result


def load(function, args, kwargs):
    tracing = spans.tracing()
    if tracing is None or _dcp_load() is not None:
        return None
    start: dict[str, Any] = {}
    checkpoint = _checkpoint(args, kwargs)
    if checkpoint is not None:
        start[semconv.CHECKPOINT] = tracing.path(checkpoint_path(checkpoint))
    reader = kwargs.get("storage_reader")
    if reader is not None:
        start[semconv.DCP_STORAGE_READER] = type(reader).__name__
    return Load(tracing, semconv.SPAN_DCP_LOAD, start, counts=False)


def set_state_dict(function, args, kwargs):
    """``set_model_state_dict(model, sd, options=)`` / ``set_state_dict(model, optims, ..., options=)``: with
    ``full_state_dict`` every rank brings the whole state dict (``dcp_full_state``), with ``broadcast_from_rank0``
    only rank 0 does (``dcp_broadcast_from_rank0``); a sharded state dict names no strategy (its load did)."""
    tracing = spans.tracing()
    if tracing is None or _dcp_load() is not None:
        return None
    options = kwargs.get("options")
    full = bool(getattr(options, "full_state_dict", False))
    broadcast = bool(getattr(options, "broadcast_from_rank0", False))
    start: dict[str, Any] = {semconv.DCP_FULL_STATE_DICT: full, semconv.DCP_BROADCAST_FROM_RANK0: broadcast}
    if broadcast:
        start[semconv.STRATEGY] = semconv.STRATEGY_DCP_BROADCAST
    elif full:
        start[semconv.STRATEGY] = semconv.STRATEGY_DCP_FULL_STATE
    return Load(tracing, semconv.SPAN_DCP_SET_STATE_DICT, start, counts=broadcast)


# Broadcasts --------------------------------------------------------------------------------------------------------


class Coalesced:
    """``_broadcast_coalesced(group, tensors, buffer_size, src)``: how ``broadcast_from_rank0`` moves the tensors."""

    __slots__ = ("counted", "tensors", "group", "src")

    def __init__(self, counted: Broadcasts, args: tuple, kwargs: dict):
        self.counted = counted
        self.group = args[0] if args else kwargs.get("process_group")
        self.tensors = list(args[1] if len(args) > 1 else kwargs.get("tensors", ()))
        self.src = args[3] if len(args) > 3 else kwargs.get("src", 0)

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is None:
            import torch.distributed as dist

            source = dist.get_global_rank(self.group, self.src) if self.group is not None else self.src
            nbytes = sum(tensor_bytes(tensor) for tensor in self.tensors)
            if source == dist.get_rank():
                self.counted.sent += nbytes
            else:
                self.counted.received += nbytes
            self.counted.tensors += len(self.tensors)
        return result


def broadcast_coalesced(instance, args, kwargs):
    counted = broadcasts.get()
    return Coalesced(counted, args, kwargs) if counted is not None else None


class Uncounted:
    """``broadcast_object_list``: the pickled key list and sizes that go before the tensors are no weight bytes."""

    __slots__ = ("token",)

    def __init__(self) -> None:
        self.token = broadcasts.set(None)

    def done(self, result: Any, error: BaseException | None) -> Any:
        broadcasts.reset(self.token)
        return result


def broadcast_objects(instance, args, kwargs):
    return Uncounted() if broadcasts.get() is not None else None


LOADER = "torch.distributed.checkpoint.state_dict_loader"
STATE_DICT = "torch.distributed.checkpoint.state_dict"
FILESYSTEM = "torch.distributed.checkpoint.filesystem"
HF = "torch.distributed.checkpoint.hf_storage"

HOOKS = [
    Hook(LOADER, "load", load),
    Hook(LOADER, "load_state_dict", load),
    # What both call, and so do ``_load_state_dict_from_keys`` and ``format_utils``: their loads are loads too.
    Hook(LOADER, "_load_state_dict", load),
    Hook(STATE_DICT, "set_model_state_dict", set_state_dict),
    Hook(STATE_DICT, "set_state_dict", set_state_dict),
    Hook(FILESYSTEM, "FileSystemReader.read_metadata", read_metadata),
    Hook(FILESYSTEM, "FileSystemReader.read_data", read_data),
    Hook(FILESYSTEM, "FileSystem.create_stream", create_stream),
    Hook("torch.distributed.checkpoint._fsspec_filesystem", "FileSystem.create_stream", create_stream),
    Hook(HF, "HuggingFaceStorageReader.read_metadata", read_metadata),
    Hook(HF, "HuggingFaceStorageReader.read_data", hf_read_data),
    Hook(HF, "HuggingFaceStorageReader._read_files_from_queue", reader_thread),
    Hook("torch.distributed", "_broadcast_coalesced", broadcast_coalesced),
    Hook("torch.distributed.distributed_c10d", "broadcast_object_list", broadcast_objects),
]

call_through_proxies(__name__)
