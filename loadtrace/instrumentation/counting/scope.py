"""Scopes: an open span plus the ledger whose counters become its attributes when it ends (attributes.py); a file
scope also has a read slot in the state file (statefile.py), into which its tensor reads are counted.

Loads and phases are tracked per thread of control (``active_scopes``, a context variable), so a ``zeros_like`` is
charged to the load open where it was called; file scopes belong to the load that opened them. ``OpenScopes`` is what
is open in the whole process, every thread's: what a termination signal or the process's exit ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from contextvars import ContextVar, Token
from enum import Enum
from typing import TYPE_CHECKING, Any

from ... import semconv, statefile
from .fetching import Fetching
from .ledger import Ledger
from .memory import Memory, Peak

if TYPE_CHECKING:
    from opentelemetry import trace


class ScopeKind(Enum):
    LOAD = semconv.SCOPE_LOAD  # ``from_pretrained`` or ``traced_load``: the totals
    PHASE = semconv.SCOPE_PHASE  # a loading step inside a load, one span however often it is entered
    FILE = semconv.SCOPE_FILE  # a file opened or read, charged to the load that opened it
    STAGE = semconv.SCOPE_STAGE  # the rank's startup, and its phases outside loading (rendezvous, preparation)


class Scope:
    """An open span and its ledger."""

    __slots__ = (
        "kind",
        "name",
        "span",
        "ledger",
        "slot",
        "load",
        "phases",
        "files",
        "opened",
        "calls",
        "last_end",
        "ended",
        "recording",
        "memory_before",
        "memory_after",
        "peak",
        "residency",
        "record",
        "nested",
        "fetching",
    )

    def __init__(self, kind: ScopeKind, name: str, span: trace.Span, load: Scope | None = None):
        self.kind = kind
        self.name = name
        self.span = span
        self.ledger = Ledger()
        self.slot: statefile.ReadSlot | None = None  # files only: tensors and bytes read through it
        self.load = load  # the load a phase or file belongs to
        self.phases: dict[str, Scope] = {}
        self.files: list[Scope] = []
        # Loads only: the files opened, each once however often (a path, or a pathless file scope's id): accelerate
        # opens each safetensors file for its metadata, then again for its tensors; that is one file opened.
        self.opened: set[str | int] = set()
        self.calls = 0  # phases: times entered
        self.last_end: int | None = None
        self.ended = False
        self.recording = span.is_recording()
        self.memory_before: Memory | None = None  # loads and phases only: memory when first entered,
        self.memory_after: Memory | None = None  # when last left,
        self.peak: Peak | None = None  # and the highest seen in between
        # Files only: (path, size, bytes in the page cache at open); the cached bytes None where unknown.
        self.residency: tuple[str, int, int | None] | None = None
        self.record: tuple[statefile.Writer, int] | None = None  # non-file scopes: its record in the state file
        self.nested = False  # loads only: opened inside another load of this thread (its time is the outer one's)
        self.fetching: Fetching | None = None  # loads only: the process's storage reads while loads are open


active_scopes: ContextVar[tuple[Scope, ...]] = ContextVar("loadtrace_active", default=())
ActiveToken = Token[tuple[Scope, ...]]


def active() -> tuple[Scope, ...]:
    """Loads and phases open in this thread of control, outermost first; empty outside loading (the fast path)."""
    return active_scopes.get()


def adopt(stack: tuple[Scope, ...]) -> ActiveToken:
    """A library's worker thread takes on the loads and phases open where its work was handed out (DCP's
    ``HuggingFaceStorageReader`` with ``thread_count`` > 1): what it opens is charged to them. ``release`` after."""
    return active_scopes.set(stack)


def release(token: ActiveToken) -> None:
    active_scopes.reset(token)


def current_load() -> Scope | None:
    for scope in reversed(active_scopes.get()):
        if scope.kind is ScopeKind.LOAD:
            return scope
    return None


def owner() -> Scope | None:
    """Where a phase entered now is aggregated: the innermost open load or startup stage (``deepspeed.initialize``)."""
    for scope in reversed(active_scopes.get()):
        if scope.kind is ScopeKind.LOAD or scope.kind is ScopeKind.STAGE:
            return scope
    return None


def detached_slot(tensors: int = 0, nbytes: int = 0) -> statefile.ReadSlot:
    """A read slot in private memory: for a process without a state file, and a forked child's inherited files."""
    counts = memoryview(bytearray(statefile.SLOT_BYTES)).cast("q")
    counts[0], counts[1] = tensors, nbytes
    return statefile.ReadSlot(counts)


# Free-threaded Python (the GIL off): a ``+=`` on a slot's counts is no longer indivisible, so they add under a lock.
_count_lock = None if getattr(sys, "_is_gil_enabled", lambda: True)() else threading.Lock()


def count_reads(slot: statefile.ReadSlot | None, tensors: Iterable[Any]) -> None:
    """Tensors a file call returned all at once (``torch.load``, ``safetensors.torch.load``), into its slot: they were
    all read by the time the call returned, so they are counted together, with one ``+=`` each."""
    if slot is None:
        return
    count = nbytes = 0
    for tensor in tensors:
        count += 1
        nbytes += int(tensor.nbytes)
    if _count_lock is None:
        counts = slot.counts
        counts[0] += count
        counts[1] += nbytes
    else:
        with _count_lock:
            counts = slot.counts
            counts[0] += count
            counts[1] += nbytes


class OpenScopes:
    """What the process has open, every thread's: ended at exit or on a termination signal if the job never closed
    it. A forked child starts with none (``reset``)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.files: set[Scope] = set()  # ended at exit if the job never closed them
        self.loads: set[Scope] = set()  # every thread's
        self.watching: set[Scope] = set()  # the loads that keep the termination handlers in place (loads.py)
        self.loose_phases: set[Scope] = set()  # open phases outside any load
        self.stages: set[Scope] = set()
        self.loads_open = 0
        self.lock = threading.Lock()  # the loads open, and the state's load fields with them
