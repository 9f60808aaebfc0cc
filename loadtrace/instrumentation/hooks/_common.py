"""What the hook modules share: a file-shaped call (open → span → proxy) and byte counting."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ... import semconv
from ..tracing import spans


def tensor_bytes(tensor: Any) -> int:
    """The bytes a tensor occupies in this process: a DTensor's local shard (its ``nbytes`` is the global size)."""
    local = getattr(tensor, "_local_tensor", None)
    return int((tensor if local is None else local).nbytes)


def checkpoint_path(checkpoint: Any) -> Any:
    """A checkpoint as ``loadtrace.checkpoint`` names it: a local one by its resolved path (``mistral`` and
    ``../mistral`` from another folder are one model to ``jobs --group-by model``), anything else (a hub id) as
    given."""
    if isinstance(checkpoint, (str, os.PathLike)):
        try:
            if os.path.exists(checkpoint):
                return os.path.realpath(checkpoint)
        except (OSError, ValueError):  # a NUL in the path: the library says so to the job
            pass
    return checkpoint


def file_attributes(tracing: spans.Tracing, path: Any) -> dict[str, Any]:
    """A file's path, size and, before the library opens it, how much of it the page cache holds (Linux)."""
    return file_attributes_and_head(tracing, path, 0)[0]


def file_attributes_and_head(tracing: spans.Tracing, path: Any, head: int) -> tuple[dict[str, Any], bytes]:
    """``file_attributes``, and the file's first ``head`` bytes (fewer where it is shorter, none where it cannot be
    read). The file is opened once, and its page-cache residency read before anything of it is: it is what the job
    found. Only a regular file is opened: a FIFO's open would wait for its writer."""
    attributes: dict[str, Any] = {}
    if not isinstance(path, (str, os.PathLike)):
        return attributes, b""
    attributes[semconv.FILE_PATH] = tracing.path(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path (the library says so to the job)
        return attributes, b""
    attributes[semconv.FILE_SIZE] = info.st_size
    if not stat.S_ISREG(info.st_mode):
        return attributes, b""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return attributes, b""
    try:
        cached = spans.cached_bytes_of(fd, info.st_size)
        if cached is not None:
            attributes[semconv.FILE_CACHED_BYTES_AT_OPEN] = cached
        return attributes, os.read(fd, head) if head else b""  # a new descriptor reads from the start
    except OSError:
        return attributes, b""
    finally:
        os.close(fd)


class FileCall:
    """A call that opens or reads a file: its span starts before the call; ``on_result`` accounts the result and
    returns what the caller gets (a counting proxy, or the result itself after closing the span). Outside any load,
    the load of reads outside a load is told before the call (``Loose.expect_read``: its figures include this read);
    ``opened``: the read began earlier, (when, the memory then): the ``open()`` of the file whose bytes it loads."""

    def __init__(
        self,
        tracing: spans.Tracing,
        name: str,
        attributes: dict[str, Any],
        on_result: Callable[[Any, spans.Scope], Any],
        opened: tuple[int, Any] | None = None,
    ):
        self.tracing = tracing
        self.name = name
        self.attributes = attributes
        self.on_result = on_result
        self.before = None
        if opened is not None:
            (self.started, self.before), self.expected = opened, False
        else:
            self.expected = tracing.loose.expect_read()
            self.started = time.time_ns()

    def done(self, result: Any, error: BaseException | None) -> Any:
        scope = self.tracing.open_file(
            self.name, self.attributes, self.started, before=self.before, expected=self.expected
        )
        if error is not None:
            self.tracing.close_file(scope, error)
            return result
        return self.on_result(result, scope)


class Broadcasts:
    """The weight bytes ``torch.distributed.broadcast`` moved while a broadcast phase is open on this thread
    (``accelerate.fsdp2_load_full_state_dict``): a call whose source is this rank sent its tensor's bytes, any other
    call received them. Counted after the call returned, from the tensor it was given (``nbytes``: its local data)."""

    __slots__ = ("sent", "received", "tensors")

    def __init__(self) -> None:
        self.sent = self.received = self.tensors = 0

    def attributes(self) -> dict[str, int]:
        return {
            semconv.BROADCAST_BYTES_SENT: self.sent,
            semconv.BROADCAST_BYTES_RECEIVED: self.received,
            semconv.BROADCAST_TENSORS: self.tensors,
        }


broadcasts: ContextVar[Broadcasts | None] = ContextVar("loadtrace_broadcasts", default=None)

# Set while a storage reader reads a checkpoint (hooks/dcp.py): a ``torch.load`` there is one read item of the file
# the reader has open, counted into that file's span, never a span of its own.
reader_reads: ContextVar[Any] = ContextVar("loadtrace_reader_reads", default=None)
# Set while a storage reader reads only headers (``HuggingFaceStorageReader.read_metadata``): no file spans.
headers_only: ContextVar[bool] = ContextVar("loadtrace_headers_only", default=False)


class Counting:
    """The weight bytes broadcast while a scope is open on this thread, when it ``counts`` them: ``stop`` gives them
    as the scope's attributes (none when it does not count)."""

    __slots__ = ("counted", "token")

    def __init__(self, counts: bool):
        self.counted = Broadcasts() if counts else None
        self.token = broadcasts.set(self.counted) if counts else None

    def stop(self) -> dict[str, Any]:
        if self.token is not None:
            broadcasts.reset(self.token)
        return self.counted.attributes() if self.counted is not None else {}


class Stage:
    """A startup phase outside loading (accelerate's preparation, ``deepspeed.initialize``): a span from the call to
    its return; ``prepares``: its end ends the rank's startup (``loadtrace.startup``)."""

    __slots__ = ("tracing", "scope", "token", "prepares", "counting")

    def __init__(self, tracing: spans.Tracing, name: str, start: dict[str, Any], prepares: bool, counts: bool = False):
        self.tracing = tracing
        self.prepares = prepares
        self.scope, self.token = tracing.enter_stage(name, start)
        self.counting = Counting(counts)

    def done(self, result: Any, error: BaseException | None) -> Any:
        extra = self.counting.stop()
        if error is None:
            try:
                extra.update(self.learned(result))
            except Exception:
                pass  # what the result tells is extra: the span ends as it would without it
        self.tracing.exit_stage(self.scope, self.token, extra, error, self.prepares)
        return result

    def learned(self, result: Any) -> dict[str, Any]:
        """What the call's result tells its span (``deepspeed.initialize``: the engine's ZeRO stage)."""
        return {}
