"""Weights read with no load around them: a bare ``safe_open``, ``load_file``, ``safetensors.torch.load(bytes)`` or
``torch.load`` (a serving engine's own weight iterator, a script that loads a state dict). Those reads make a load of
their own (``loadtrace.load`` named ``semconv.LOAD_NAME_READS``), so that they have a load time, memory and storage
figures like any other load.

The rule: the load opens where its first read began (a file opened, or a ``.safetensors`` file opened for reading
whose bytes are then loaded), and gathers every read made outside a load in the process, whatever the thread (a
thread pool's ``load_file`` calls are one load). It ends once none of its files has been open for
``LOADTRACE_LOAD_IDLE`` seconds (5 by default), when the job opens a load of its own, or when the process exits;
its span ends where its last file closed, so the idle wait is never counted as loading. A process that reads a few
tensors now and then gets one such load per burst of reads. It leaves the termination signals as the job has them
(loads.py): a worker idle in a lock must die by SIGTERM as it would untraced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..counting.memory import Memory, process_memory
from ..counting.scope import Scope, current_load


class Tracing(Protocol):
    """What the loose load needs of the tracing front (spans.Tracing)."""

    @property
    def provider(self) -> Any: ...

    def start_loose_load(self, start_time: int | None, reading: Memory | None) -> Scope: ...

    def end_detached_load(
        self, scope: Scope, extra: dict[str, Any], error: BaseException | None = None, end_time: int | None = None
    ) -> None: ...


class Loose:
    """The process's load for reads outside any load: at most one open at a time. The hooks tell it of a read before
    the call that makes it (``expect_read``, ``memory_outside``); ``attach`` / ``opened`` / ``closed`` are called by
    the file scopes (spans.py), ``settle`` when the job opens a load of its own, ``finish`` at exit."""

    def __init__(self, tracing: Tracing, idle_s: float):
        self.tracing = tracing
        self.idle_s = idle_s
        self.lock = threading.Condition(threading.Lock())
        self.load: Scope | None = None
        self.files: set[Scope] = set()  # its files still open
        self.expected = 0  # reads begun whose file scope is not made yet (a call in progress)
        self.first: tuple[int, Memory] | None = None  # where the first of them began, and the memory then
        self.last_close: int | None = None
        self.watcher: threading.Thread | None = None
        # Loads that outlive the call that opened them (a streaming loader's, spans.start_detached_load), each with
        # what its hook adds at its end: ended at exit if the job never ends them.
        self.detached: dict[Scope, Callable[[], dict[str, Any]]] = {}

    def expect_read(self) -> bool:
        """Before a call that may read a file: outside any load, the loose load's start and memory are taken now (the
        read is in its figures). True when the call's file must then be opened with ``open_file(expected=True)``."""
        if current_load() is not None:
            return False
        _ = self.tracing.provider  # the process's first span builds the SDK: before the read, not in its load's time
        self.expect()
        return True

    def memory_outside(self) -> Memory | None:
        """The memory now, where a read may open the loose load (None inside a load, or while the loose load is open:
        not needed); the SDK is built first, as in ``expect_read``."""
        if current_load() is not None or self.load is not None:
            return None
        _ = self.tracing.provider
        return process_memory()

    def expect(self) -> None:
        """A read outside any load begins (before the call that reads): when no such load is open, its start and the
        memory before it are taken now, so that the load's memory and storage figures include this read."""
        with self.lock:
            self.expected += 1
            if self.load is None and self.first is None:
                self.first = (time.time_ns(), process_memory())

    def attach(self, file_start: int | None, expected: bool, before: Memory | None = None) -> Scope:
        """The load a file opened outside any load belongs to, opened now if none is (from the earliest read that
        expected it, else from the file's start). The file is then given to ``opened``."""
        with self.lock:
            if not expected:
                self.expected += 1  # until ``opened``: the load must not end in between
            load = self.load
            if load is None:
                start, reading = self.first or (file_start, before)
                if file_start is not None and (start is None or file_start < start):
                    start = file_start  # a file opened before the read that expected it (load(f.read()): its open)
                self.first = None
                load = self.load = self.tracing.start_loose_load(start, reading)
                self._watch()
                self.lock.notify()
            return load

    def opened(self, file: Scope) -> None:
        with self.lock:
            self.expected = max(0, self.expected - 1)
            self.files.add(file)

    def closed(self, file: Scope) -> None:
        if file.load is None or file.load is not self.load:
            return
        with self.lock:
            if file in self.files:
                self.files.discard(file)
                ended = getattr(file.span, "end_time", None) or time.time_ns()  # the span's own end: ours ends there
                self.last_close = max(self.last_close or 0, ended)
                self.lock.notify()

    def settle(self) -> None:
        """The job opens a load of its own: an idle loose load ends where its last file closed."""
        if self.load is not None:
            self._end(idle_only=True)

    def finish(self) -> None:
        """The process exits: the loose load ends (where its last file closed, when none is open), and so do the
        detached loads the job left open. Never raises: the exit goes on whatever happened to them."""
        try:
            if self.load is not None:
                self._end(idle_only=False)
            for load, extra in list(self.detached.items()):
                self.tracing.end_detached_load(load, extra())
        except Exception:
            pass

    def after_fork(self) -> None:
        self.lock = threading.Condition(threading.Lock())
        self.load, self.files, self.expected, self.first = None, set(), 0, None
        self.last_close, self.watcher, self.detached = None, None, {}

    def _idle(self) -> bool:
        return not self.files and self.expected == 0

    def _end(self, idle_only: bool) -> None:
        with self.lock:
            load = self.load
            if load is None or (idle_only and not self._idle()):
                return
            end = self.last_close if self._idle() else None
            self.load, self.files, self.last_close = None, set(), None
            self.lock.notify()
        self.tracing.end_detached_load(load, {}, None, end)

    def _watch(self) -> None:
        """One daemon thread per process ends the loose load once it has been idle for ``idle_s``."""
        if self.watcher is None or not self.watcher.is_alive():
            self.watcher = threading.Thread(target=self._watching, name="loadtrace-loose-load", daemon=True)
            self.watcher.start()

    def _watching(self) -> None:
        lock = self.lock
        while True:
            with lock:
                if lock is not self.lock:  # a forked child's: this thread is its parent's
                    return
                if self.load is None or not self._idle():
                    lock.wait(None if self.load is None else self.idle_s)
                    continue
                if self.last_close is None:
                    self.last_close = time.time_ns()
                remaining = self.idle_s - (time.time_ns() - self.last_close) / 1e9
                if remaining > 0:
                    lock.wait(remaining)
                    continue
            self._end(idle_only=True)


def not_before(load: Scope, start_time: int | None) -> int | None:
    """A file's start in the loose load: not before the load's own (a file opened before another thread's read opened
    the load, as ``open()`` precedes ``load(f.read())``): no child starts before its parent."""
    opened = getattr(load.span, "start_time", None)
    return opened if start_time is not None and opened is not None and start_time < opened else start_time
