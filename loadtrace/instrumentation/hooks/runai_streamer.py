"""Run:ai Model Streamer (``runai-model-streamer``: vLLM's and SGLang's ``--load-format runai_streamer``, for ``s3://``
and slow shared storage): ``SafetensorsStreamer.stream_files`` reads the files' headers and hands every tensor's byte
range to C++ threads that read into a CPU buffer; ``get_tensors()`` then yields each tensor as its bytes arrive.

Counted at the Python boundary that knows the byte ranges: ``stream_files`` opens the load (``runai_streamer.load``)
and a file span per file (its page-cache residency read before the streamer reads it); after it returned, the headers
it parsed say which tensor is in which file. Each tensor ``get_tensors`` yields is counted into its file (one dict
lookup and two additions); a file's span ends with its last tensor, the load when ``get_tensors`` is exhausted (or the
consumer stops, or the process exits).

With distributed streaming (``stream_files(..., is_distributed=True)`` and a process group the streamer accepts), the
ranks split the byte ranges and broadcast what they read: a tensor this rank read is counted as read and as broadcast
sent, one it received as broadcast received (``loadtrace.broadcast.*`` on the load).
"""

from __future__ import annotations

import weakref
from typing import Any

from ... import semconv
from ..tracing import spans
from ._common import Broadcasts, file_attributes
from .registry import Hook, fault


class Stream:
    """One ``stream_files`` and the ``get_tensors`` that drains it."""

    __slots__ = ("tracing", "scope", "counted", "files", "by_name", "left", "own", "__weakref__")

    def __init__(self, tracing: spans.Tracing, paths: list[Any]):
        self.tracing = tracing
        self.counted = Broadcasts()
        self.scope = tracing.start_detached_load(semconv.SPAN_RUNAI_LOAD, {}, self.counted.attributes)
        self.files = [
            tracing.open_file(semconv.SPAN_RUNAI_READ, file_attributes(tracing, path), load=self.scope)
            for path in paths
        ]
        self.by_name: dict[str, int] = {}  # tensor name → its file's index
        self.left: list[int] = []  # tensors still to come, per file
        self.own: set[str] | None = None  # distributed: the tensors this rank reads itself

    def learn(self, streamer: Any) -> None:
        """After ``stream_files``: each file's tensors from the headers it read, and this rank's share."""
        files = streamer.files_to_tensors_metadata
        self.left = [0] * len(self.files)
        for index, tensors in files.items():
            file = self.files[index]
            self.left[index] = len(tensors)
            for tensor in tensors:
                self.by_name[tensor.name] = index
            if file.recording:
                file.span.set_attribute(semconv.FILE_TENSOR_BYTES, sum(tensor.get_bytesize() for tensor in tensors))
        learned: dict[str, Any] = {semconv.CHECKPOINT_TENSOR_BYTES: int(streamer.total_size)}
        distributed = getattr(streamer.file_streamer, "is_distributed", False)
        if distributed:
            self.own = own_tensors(streamer.file_streamer.distributed_streamer, files)
            learned[semconv.RUNAI_DISTRIBUTED] = True
        self.tracing.loads.learned(self.scope, learned)
        for index, count in enumerate(self.left):
            if count == 0:
                self.tracing.close_file(self.files[index])

    def count(self, name: str, tensor: Any) -> None:
        index = self.by_name.get(name)
        if index is None:
            return
        nbytes = tensor.nbytes
        if self.own is None or name in self.own:
            counts = self.files[index].slot.counts  # type: ignore[union-attr]
            counts[0] += 1
            counts[1] += nbytes
            if self.own is not None:
                self.counted.sent += nbytes
                self.counted.tensors += 1
        else:
            self.counted.received += nbytes
            self.counted.tensors += 1
        self.left[index] -= 1
        if self.left[index] == 0:
            self.tracing.close_file(self.files[index])

    def end(self, error: BaseException | None = None) -> None:
        for file in self.files:
            self.tracing.close_file(file, error)
        self.tracing.end_detached_load(self.scope, self.counted.attributes(), error)


def own_tensors(distributed: Any, files: dict[int, list[Any]]) -> set[str]:
    """The tensors in this rank's share of the byte ranges (the streamer's partition: request id → its chunks'
    original file and tensor indices)."""
    own: set[str] = set()
    for chunks in getattr(distributed, "rank_file_chunks_list", ()):
        mapping = distributed.rank_dicts_map[chunks.id]
        for original in mapping.values() if isinstance(mapping, dict) else mapping:
            file_index, tensor_index = original[0], original[1]
            own.add(files[file_index][tensor_index].name)
    return own


_streams: weakref.WeakKeyDictionary[Any, Stream] = weakref.WeakKeyDictionary()


class Streaming:
    __slots__ = ("streamer", "stream")

    def __init__(self, tracing: spans.Tracing, streamer: Any, paths: list[Any] | tuple[Any, ...]):
        previous = _streams.pop(streamer, None)
        if previous is not None:  # streamed again before the last was drained
            previous.end()
        self.streamer = streamer
        self.stream = Stream(tracing, list(paths))

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is not None:
            self.stream.end(error)
            return result
        try:
            self.stream.learn(self.streamer)
        except Exception as problem:
            fault("runai_model_streamer.stream_files", problem, self.stream.scope)
        _streams[self.streamer] = self.stream
        return result


def stream_files(instance, args, kwargs):
    tracing = spans.tracing()
    if tracing is None:
        return None
    paths = args[0] if args else kwargs.get("paths")
    return Streaming(tracing, instance, paths) if isinstance(paths, (list, tuple)) else None


def _counted(tensors: Any, stream: Stream) -> Any:
    """``get_tensors()`` as the job gets it: each tensor counted into its file as it comes."""
    error: BaseException | None = None
    try:
        for name, tensor in tensors:
            try:
                stream.count(name, tensor)
            except Exception as problem:
                fault("runai_model_streamer.get_tensors", problem, stream.scope)
            yield name, tensor
    except GeneratorExit:
        raise
    except BaseException as raised:
        error = raised
        raise
    finally:
        try:
            stream.end(error)
        except Exception as problem:
            fault("runai_model_streamer.get_tensors", problem, stream.scope)


class Draining:
    __slots__ = ("stream",)

    def __init__(self, stream: Stream):
        self.stream = stream

    def done(self, result: Any, error: BaseException | None) -> Any:
        if error is not None or result is None:
            return result
        return _counted(result, self.stream)


def get_tensors(instance, args, kwargs):
    stream = _streams.pop(instance, None)
    return Draining(stream) if stream is not None else None


MODULE = "runai_model_streamer.safetensors_streamer.safetensors_streamer"
HOOKS = [
    Hook(MODULE, "SafetensorsStreamer.stream_files", stream_files),
    Hook(MODULE, "SafetensorsStreamer.get_tensors", get_tensors),
]
