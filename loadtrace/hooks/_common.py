"""What the hook modules share: a file-shaped call (open → span → proxy) and byte counting."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .. import semconv, spans
from ..memory import cached_bytes


def tensor_bytes(tensor: Any) -> int:
    """The bytes a tensor occupies in this process: a DTensor's local shard (its ``nbytes`` is the global size)."""
    local = getattr(tensor, "_local_tensor", None)
    return int((tensor if local is None else local).nbytes)


def file_attributes(tracing: spans.Tracing, path: Any) -> dict[str, Any]:
    """A file's path, size and, before the library opens it, how much of it the page cache holds (Linux)."""
    attributes: dict[str, Any] = {}
    if isinstance(path, (str, os.PathLike)):
        attributes[semconv.FILE_PATH] = tracing.path(path)
        try:
            attributes[semconv.FILE_SIZE] = os.stat(path).st_size
        except OSError:
            return attributes
        cached = cached_bytes(path)
        if cached is not None:
            attributes[semconv.FILE_CACHED_BYTES_AT_OPEN] = cached
    return attributes


class FileCall:
    """A call that opens or reads a file: its span starts before the call; ``on_result`` accounts the result and
    returns what the caller gets (a counting proxy, or the result itself after closing the span)."""

    def __init__(
        self,
        tracing: spans.Tracing,
        name: str,
        attributes: dict[str, Any],
        on_result: Callable[[Any, spans.Scope], Any],
    ):
        self.tracing = tracing
        self.name = name
        self.attributes = attributes
        self.on_result = on_result
        self.started = time.time_ns()

    def done(self, result: Any, error: BaseException | None) -> Any:
        scope = self.tracing.open_file(self.name, self.attributes, self.started)
        if error is not None:
            self.tracing.close_file(scope, error)
            return result
        return self.on_result(result, scope)
