"""A rank's running totals in a file the kernel keeps when the process dies: exact at the moment of a SIGKILL.

Spans leave a process only when they end, and a periodic snapshot is always behind; the OOM killer strikes between
the two. So every count a load makes lives in a small ``MAP_SHARED`` memory-mapped file per process
(``<trace file stem>.state``): a store into it is a store into the page cache, which outlives the process. A rank
that dies leaves its exact last state; ``loadtrace report`` and the launcher's witness read it back with ``decode``,
into a ``State``: a frozen record with an attribute per field, so that a renamed field fails at type checking, not
in a report. Field names appear as strings only here, typed as ``Literal``s where the writer takes them.

The format is the contract between the two halves (like ``semconv``), so this module is standard library only:

- a 4096-byte header: ``MAGIC``, then ``HEADER_FIELDS`` as little-endian int64s, then ``TEXT_FIELDS`` as NUL-padded
  UTF-8 of fixed sizes;
- then read slots of two int64s (tensors, bytes), one per file scope, in 4096-byte chunks appended as needed. A slot
  is written by ``+=`` from whichever thread reads the tensor: under the GIL that read-modify-write has no point where
  another thread can run (no call, no backward jump), so concurrent reads count exactly without a lock. Slots are never
  reused, so a reader just sums them.

Counts are per process since it started; the header keeps the slot and counter values at which the current outermost
load began (``load_*`` fields), so the open load's share is a subtraction.

The live fields (``LIVE_FIELDS``, ``LIVE_TEXT_FIELDS``: progress, current memory, an uncaught exception) sit at
``LIVE_OFFSET`` in the same header page, written by the monitor thread or the exception hooks, never per tensor. They
were added to version 1 without a new version: that part of the page is zeros in every file an older loadtrace wrote,
and zero (an empty text) means "not known" in each of them, so old files read as before and old readers skip them.

After the live fields, the header's tail keeps the open non-file scopes (the startup, loads, phases, stages):
``SCOPE_RECORDS`` records of a NUL-padded name, the trace id, the parent span id, the start time and the span id, the
span id written last and cleared first (0: a free record), so a reader never takes a half-written record for one. A
span open at a SIGKILL is never written; the launcher's witness ends these at the death, and the spans that finished
under them keep their parent.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Literal, get_args

MAGIC = b"LTSTATE1"
PAGE = 4096
HEADER_BYTES = PAGE
SLOT_BYTES = 16  # tensors, bytes
SLOTS_PER_CHUNK = PAGE // SLOT_BYTES

# Process status.
STATUS_IDLE = 0  # no load open (before the first, or all finished)
STATUS_LOADING = 1  # a load is open
STATUS_EXITED = 2  # the interpreter exited normally
STATUS_SIGNALLED = 3  # a termination signal arrived while loading; spans were ended and flushed
Status = Literal["idle", "loading", "exited", "signalled", "unknown"]  # "unknown": a code this loadtrace does not know
STATUSES: dict[int, Status] = {
    STATUS_IDLE: "idle",
    STATUS_LOADING: "loading",
    STATUS_EXITED: "exited",
    STATUS_SIGNALLED: "signalled",
}

# Where the memory limit came from.
LIMIT_UNKNOWN, LIMIT_NODE, LIMIT_CGROUP_V1, LIMIT_CGROUP_V2 = 0, 1, 2, 3
LimitSource = Literal["node", "cgroup v1", "cgroup v2"]
LIMIT_SOURCES: dict[int, LimitSource | None] = {
    LIMIT_UNKNOWN: None,
    LIMIT_NODE: "node",
    LIMIT_CGROUP_V1: "cgroup v1",
    LIMIT_CGROUP_V2: "cgroup v2",
}

# The field names, as types: the writer takes them, so a misspelt or renamed one fails at type checking. The tuples
# after them (``COUNTERS``, ``HEADER_FIELDS``, ...) are the same names in file order; ``State`` spells them once more as
# attributes, checked against these below.

# Counters that only grow; each has a ``load_<name>`` twin holding its value when the current outermost load began.
Counter = Literal[
    "files_opened",
    "materialized_cpu",  # materialised bytes by device (DEVICE_COLUMNS)
    "materialized_cuda",
    "materialized_meta",
    "materialized_other",
    "conversions",
    "conversion_bytes",
    "hook_errors",
]
LoadCounter = Literal[
    "load_files_opened",
    "load_materialized_cpu",
    "load_materialized_cuda",
    "load_materialized_meta",
    "load_materialized_other",
    "load_conversions",
    "load_conversion_bytes",
    "load_hook_errors",
]
COUNTERS: tuple[Counter, ...] = get_args(Counter)
LOAD_COUNTERS: tuple[LoadCounter, ...] = get_args(LoadCounter)
assert LOAD_COUNTERS == tuple(f"load_{name}" for name in COUNTERS), "a counter without its load_ twin"
# Materialised bytes are counted by device type; any other type goes to "other".
DEVICE_COLUMNS: dict[str, Counter] = {
    "cpu": "materialized_cpu",
    "cuda": "materialized_cuda",
    "meta": "materialized_meta",
    "other": "materialized_other",
}
DEVICES = tuple(DEVICE_COLUMNS)

HeaderField = Literal[
    "version",
    "pid",
    "rank",  # -1: unknown
    "local_rank",
    "world_size",
    "local_world_size",
    "attempt",  # TORCHELASTIC_RESTART_COUNT
    "status",
    "signal",  # the termination signal that arrived while loading, 0 if none
    "created_ns",
    "updated_ns",  # the last change of phase or status
    "loads_open",
    "load_start_ns",  # when the current outermost load began
    "memory_limit",  # bytes; 0: unknown
    "memory_limit_source",
    "node_memory_total",
    "cgroup_memory_max",  # 0: none
    "rss_peak",  # the highest VmRSS seen while loading (sampled, and VmHWM at phase boundaries)
    "slots_used",  # read slots handed out so far
    "load_first_slot",  # the first slot of the current outermost load
    "oom_kill_before",  # the cgroup's oom_kill counter when the first load began (-1: unreadable)
    "checkpoint_tensor_bytes",  # the open load's checkpoint, from its headers (0: unknown): the model's size
    Counter,
    LoadCounter,
]
HEADER_FIELDS: tuple[HeaderField, ...] = get_args(HeaderField)
TextField = Literal[
    "phase", "load", "job_id", "launch_id", "host", "trace_id", "failure", "strategy", "trace_file", "cgroup"
]
TEXT_FIELDS: tuple[tuple[TextField, int], ...] = (
    ("phase", 96),  # the innermost span open (a phase, or the load itself)
    ("load", 96),  # the outermost load open
    ("job_id", 128),
    ("launch_id", 64),
    ("host", 64),
    ("trace_id", 33),  # hex, of the job's trace (32 digits and the NUL)
    ("failure", 96),  # the exception type the open (or last) outermost load raised, empty if none
    ("strategy", 32),  # the open load's loadtrace.strategy
    ("trace_file", 1024),  # the span file beside this state (empty when spans go only over OTLP)
    ("cgroup", 512),  # the process's memory cgroup directory when the load began (the witness reads its oom_kill)
)

# Live fields: written off the loading thread (instrumentation/exporting/progress.py, beside/excepthooks.py), read by
# ``loadtrace top``.
LiveField = Literal[
    "progress_ns",  # the last time the open load's read bytes, files or phase moved (the monitor's sample)
    "rss_now",  # VmRSS at the monitor's last sample while loading
    "rss_sampled_ns",  # when that sample was taken
    "rss_load_start",  # VmRSS at the first sample of the open (or last) outermost load
    "rss_load_start_ns",  # when that sample was taken
    "exception_ns",  # when an uncaught exception reached sys.excepthook or threading.excepthook (0: none)
    "rate_base_ns",  # a sample up to ~10 s old of the open load's read bytes: a reader's recent rate starts there
    "rate_base_bytes",
]
LIVE_FIELDS: tuple[LiveField, ...] = get_args(LiveField)
LiveTextField = Literal["exception"]  # its type and the first line of its message: "RuntimeError: Timed out ..."
LIVE_TEXT_FIELDS: tuple[tuple[LiveTextField, int], ...] = (("exception", 256),)
assert [name for name, _ in TEXT_FIELDS] == list(get_args(TextField)), "TEXT_FIELDS and TextField differ"
LIVE_OFFSET = 3072

_INTS = struct.Struct(f"<{len(HEADER_FIELDS)}q")
_LIVE_INTS = struct.Struct(f"<{len(LIVE_FIELDS)}q")
_INT_OFFSET = len(MAGIC)
_TEXT_OFFSET = _INT_OFFSET + _INTS.size
INDEX: dict[HeaderField, int] = {name: i for i, name in enumerate(HEADER_FIELDS)}
TEXT_OFFSETS: dict[TextField | LiveTextField, tuple[int, int]] = {}
_offset = _TEXT_OFFSET
for _name, _size in TEXT_FIELDS:
    TEXT_OFFSETS[_name] = (_offset, _size)
    _offset += _size
assert _offset <= LIVE_OFFSET, "the header outgrew its place before the live fields"
LIVE_INDEX: dict[LiveField, int] = {name: i for i, name in enumerate(LIVE_FIELDS)}
_offset = LIVE_OFFSET + _LIVE_INTS.size
for _live_name, _size in LIVE_TEXT_FIELDS:
    TEXT_OFFSETS[_live_name] = (_offset, _size)
    _offset += _size
# Storage reads of the open (or last) outermost load (``/proc/self/io`` ``read_bytes``:
# instrumentation/counting/fetching.py): the count when it began, at the last reading, when that was, and the stretches
# between readings in which it rose (at most ``FETCH_INTERVALS``, start and end ns). For a rank that dies, what it had
# fetched by its last reading (the monitor's sample, every 0.1 s) and when. Written at the load's start and at each
# reading the count rose, never per tensor. In the gap between the texts and the live fields, added to version 1 as
# those were: zeros (not known) in every file an older loadtrace wrote.
FETCH_OFFSET = 2560
FETCH_INTERVALS = 16
_FETCH_HEAD = struct.Struct("<3q")  # the count when the load began, now, when that was
_FETCH_PAIRS = struct.Struct(f"<{2 * FETCH_INTERVALS}q")
_FETCH = struct.Struct(f"<{3 + 2 * FETCH_INTERVALS}q")
assert _TEXT_OFFSET + sum(size for _, size in TEXT_FIELDS) <= FETCH_OFFSET, "the texts outgrew their place"
assert FETCH_OFFSET + _FETCH.size <= LIVE_OFFSET, "the storage reads outgrew their place before the live fields"
SCOPE_NAME_BYTES = 40
SCOPE_RECORDS = 8  # open loads, phases and stages at once; more are not kept (their children may then be orphans)
_SCOPE = struct.Struct(f"<{SCOPE_NAME_BYTES}s2Q3q")  # name, trace id (high, low), parent id, start ns, span id
SCOPES_OFFSET = (_offset + 7) // 8 * 8
_SPAN_ID_OFFSET = _SCOPE.size - 8
assert SCOPES_OFFSET + SCOPE_RECORDS * _SCOPE.size <= HEADER_BYTES, "the header outgrew its page"
VERSION = 1


# Reading (both halves) -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenScope:
    """A load, phase or stage span the process had open: what the witness needs to end it in its place."""

    name: str
    trace_id: int
    parent_span_id: int  # 0: none
    start_ns: int
    span_id: int


@dataclass(frozen=True, slots=True)
class Counters:
    """The counters that only grow (``COUNTERS``, in their order): of the process, or their values when its open (or
    last) outermost load began (the ``load_*`` twins)."""

    files_opened: int
    materialized_cpu: int
    materialized_cuda: int
    materialized_meta: int
    materialized_other: int
    conversions: int
    conversion_bytes: int
    hook_errors: int

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in COUNTERS)

    def materialized(self) -> dict[str, int]:
        """Materialised bytes by device (``DEVICES``), the devices with none left out."""
        return {device: getattr(self, column) for device, column in DEVICE_COLUMNS.items() if getattr(self, column)}


@dataclass(frozen=True, slots=True)
class Totals(Counters):
    """What a load (or the whole process) did: its counters, and the tensors and bytes its read slots summed."""

    tensors_read: int
    read_bytes: int


@dataclass(frozen=True, slots=True)
class State:
    """One process's last state, decoded: an attribute per field, in the file's order (``HEADER_FIELDS``, its counters
    in two ``Counters``, ``TEXT_FIELDS``, ``LIVE_FIELDS``, ``LIVE_TEXT_FIELDS``). Values are as written, except where
    the file encodes one: an unknown rank is None (-1 there), and ``status`` and ``memory_limit_source`` are names."""

    version: int
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int
    local_world_size: int
    attempt: int
    status: Status
    signal: int  # the termination signal that arrived while loading, 0 if none
    created_ns: int
    updated_ns: int  # the last change of phase or status
    loads_open: int
    load_start_ns: int  # when the current (or last) outermost load began
    memory_limit: int  # bytes; 0: unknown
    memory_limit_source: LimitSource | None
    node_memory_total: int
    cgroup_memory_max: int  # 0: none
    rss_peak: int
    slots_used: int
    load_first_slot: int
    oom_kill_before: int  # -1: unreadable
    checkpoint_tensor_bytes: int  # 0: unknown
    counters: Counters  # of the process since it started
    load_counters: Counters  # their values when the open (or last) outermost load began
    phase: str  # texts: empty when not known
    load: str
    job_id: str
    launch_id: str
    host: str
    trace_id: str
    failure: str
    strategy: str
    trace_file: str
    cgroup: str
    progress_ns: int  # live fields: 0 when not known
    rss_now: int
    rss_sampled_ns: int
    rss_load_start: int
    rss_load_start_ns: int
    exception_ns: int
    rate_base_ns: int
    rate_base_bytes: int
    exception: str
    storage_read_load_start: int  # storage reads (FETCH_OFFSET): read_bytes when the open (or last) load began,
    storage_read_now: int  # at its last reading,
    storage_sampled_ns: int  # when that was (0: not known),
    storage_intervals: list[tuple[int, int]]  # and the stretches between readings in which it rose
    slots: list[tuple[int, int]] = field(repr=False)  # (tensors, bytes) per slot handed out that the file holds
    open_scopes: list[OpenScope] = field(default_factory=list)

    def totals(self, since_load: bool = True) -> Totals:
        """Tensors and bytes read, files opened, materialised bytes by device, conversions, hook faults: of the open
        (or last) outermost load with ``since_load``, else of the whole process."""
        first = self.load_first_slot if since_load else 0
        reads = self.slots[first:]
        counts = self.counters.values()
        if since_load:
            counts = tuple(now - then for now, then in zip(counts, self.load_counters.values(), strict=True))
        return Totals(
            **dict(zip(COUNTERS, counts, strict=True)),
            tensors_read=sum(t for t, _ in reads),
            read_bytes=sum(b for _, b in reads),
        )

    def materialized(self, since_load: bool = True) -> dict[str, int]:
        return self.totals(since_load).materialized()


_COUNTERS_AT, _LOAD_COUNTERS_AT = INDEX[COUNTERS[0]], INDEX[LOAD_COUNTERS[0]]  # they end the header's ints
_TEXT_SLICES = [TEXT_OFFSETS[name] for name, _ in (*TEXT_FIELDS, *LIVE_TEXT_FIELDS)]
assert [f.name for f in fields(Counters)] == list(COUNTERS), "Counters and COUNTERS differ"
assert [f.name for f in fields(State)] == [
    *HEADER_FIELDS[:_COUNTERS_AT],
    "counters",
    "load_counters",
    *(name for name, _ in TEXT_FIELDS),
    *LIVE_FIELDS,
    *(name for name, _ in LIVE_TEXT_FIELDS),
    "storage_read_load_start",
    "storage_read_now",
    "storage_sampled_ns",
    "storage_intervals",
    "slots",
    "open_scopes",
], "State and the header's fields differ"
_RANK, _LOCAL_RANK, _STATUS, _LIMIT_SOURCE = (
    INDEX[name] for name in ("rank", "local_rank", "status", "memory_limit_source")
)


def decode(data: bytes) -> State | None:
    """A state file's bytes → ``State``; None when they are not one (wrong magic or version, truncated, corrupt)."""
    if len(data) < HEADER_BYTES or data[: len(MAGIC)] != MAGIC:
        return None
    ints = _INTS.unpack_from(data, _INT_OFFSET)
    if ints[INDEX["version"]] != VERSION or ints[INDEX["slots_used"]] < 0 or ints[INDEX["load_first_slot"]] < 0:
        return None
    counters, load_counters = ints[_COUNTERS_AT:_LOAD_COUNTERS_AT], ints[_LOAD_COUNTERS_AT:]
    body = data[HEADER_BYTES:]
    count = len(body) // SLOT_BYTES
    values = struct.unpack_from(f"<{2 * count}q", body) if count else ()
    if min(values, default=0) < 0 or min(counters) < 0:  # a negative count or slot: not ours, or damaged
        return None
    used = 2 * min(ints[INDEX["slots_used"]], count)  # those never handed out are zeros: a rank's few, not 256
    slots = list(zip(values[0:used:2], values[1:used:2], strict=True))
    head: list[object] = list(ints[:_COUNTERS_AT])
    head[_RANK] = ints[_RANK] if ints[_RANK] >= 0 else None
    head[_LOCAL_RANK] = ints[_LOCAL_RANK] if ints[_LOCAL_RANK] >= 0 else None
    head[_STATUS] = STATUSES.get(ints[_STATUS], "unknown")
    head[_LIMIT_SOURCE] = LIMIT_SOURCES.get(ints[_LIMIT_SOURCE])
    texts = [
        data[offset : offset + size].split(b"\0", 1)[0].decode("utf-8", errors="replace")
        for offset, size in _TEXT_SLICES
    ]
    live = _LIVE_INTS.unpack_from(data, LIVE_OFFSET)
    record = (*head, Counters(*counters), Counters(*load_counters), *texts[: len(TEXT_FIELDS)], *live)
    fetch = _FETCH.unpack_from(data, FETCH_OFFSET)
    stretches = [(fetch[i], fetch[i + 1]) for i in range(3, len(fetch), 2) if fetch[i + 1] > fetch[i] > 0]
    fetched = (*fetch[:3], stretches)
    return State(*record, *texts[len(TEXT_FIELDS) :], *fetched, slots, _open_scopes(data))  # type: ignore[call-arg]


def _open_scopes(data: bytes) -> list[OpenScope]:
    found = []
    for index in range(SCOPE_RECORDS):
        raw, high, low, parent, start, span_id = _SCOPE.unpack_from(data, SCOPES_OFFSET + index * _SCOPE.size)
        if span_id != 0 and start > 0:
            name = raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")
            found.append(OpenScope(name, (high << 64) | low, parent & (2**64 - 1), start, span_id & (2**64 - 1)))
    return found


def read(
    path: str | os.PathLike[str], max_bytes: int = 64 * 1024 * 1024, owners: Collection[int] | None = None
) -> State | None:
    """The state file at ``path``, or None when it is missing, unreadable, oversized or not a state file, or, with
    ``owners``, owned by a user not among them (``owned_by``): never a link, and the owner is the opened file's."""
    try:
        with open(path, "rb", opener=_no_follow) as handle:
            if owners is not None and os.fstat(handle.fileno()).st_uid not in owners:
                return None
            data = handle.read(max_bytes + 1)
    except OSError:
        return None
    return decode(data) if len(data) <= max_bytes else None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


# Where the state lives when there is no trace file to lie beside (spans only over OTLP) -----------------------------


def state_root(environ: Mapping[str, str] = os.environ) -> str:
    """This user's folder for the state files of jobs whose spans go only over OTLP, one owner-only folder per job in
    it: ``$XDG_RUNTIME_DIR/loadtrace`` where the login gave the user a runtime directory of its own (owner-only,
    emptied at logout), else ``<temp dir>/loadtrace-<uid>``. The path alone; ``private_dir`` makes each."""
    import tempfile  # here: only a process without trace files asks

    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and _private(runtime):
        return os.path.join(runtime, "loadtrace")
    return os.path.join(tempfile.gettempdir(), f"loadtrace-{os.geteuid()}")


def private_dir(path: str) -> str:
    """``path``, made owner-only if missing; ``PermissionError`` when it is not a directory of this user's alone
    (someone else made it, a link, open to others): the job's state must be reachable by its own user only."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    if not _private(path):
        raise PermissionError(f"{path} is not a directory of this user's alone")
    return path


def _private(path: str) -> bool:
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and not found.st_mode & 0o077


def own_user() -> frozenset[int]:
    """The ``owners`` of the state files a process may act on (probe their pids, read the cgroups they name, end and
    send their spans): its own user's alone. Another user's is refused, whatever the folder it lies in."""
    return frozenset({os.geteuid()})


def owned_by(path: str | os.PathLike[str]) -> frozenset[int]:
    """The ``owners`` of the state files a report trusts for figures: the reader's, and the user who owns the folder
    the file is in (the job's own, where its ranks wrote: a colleague's job on a shared filesystem reads as theirs); a
    file someone else put in that folder is refused."""
    try:
        return frozenset({os.geteuid(), os.stat(os.path.dirname(os.path.abspath(path))).st_uid})
    except OSError:
        return own_user()


# Writing (the instrumented process) ----------------------------------------------------------------------------------


class ReadSlot:
    """One file scope's two counters. ``add`` is the per-tensor hot path; callers on the hottest path use ``counts``
    directly: ``counts[0] += 1; counts[1] += nbytes``."""

    __slots__ = ("counts",)

    def __init__(self, counts: memoryview):
        self.counts = counts

    def add(self, nbytes: int) -> None:
        counts = self.counts
        counts[0] += 1
        counts[1] += nbytes

    @property
    def tensors(self) -> int:
        return self.counts[0]

    @property
    def bytes(self) -> int:
        return self.counts[1]


class Writer:
    """The process's state, in a file when ``path`` is given (created owner-only), else in anonymous memory: the same
    code either way, and nothing on disk when there is nowhere to put it."""

    def __init__(self, path: str | None, identity: Mapping[HeaderField, int], texts: Mapping[TextField, str]) -> None:
        self.path = path
        self._fd: int | None = None
        if path is not None:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _reserve(self._fd, 0)
            except BaseException:
                os.close(self._fd)
                raise
        self._header = self._map(0)
        self._chunks: list[memoryview] = []
        self._lock = threading.Lock()  # slot hand-out and chunk growth only: counting never locks
        ints = self._ints = memoryview(self._header)[_INT_OFFSET : _INT_OFFSET + _INTS.size].cast("q")
        self._live = memoryview(self._header)[LIVE_OFFSET : LIVE_OFFSET + _LIVE_INTS.size].cast("q")
        ints[INDEX["version"]] = VERSION
        ints[INDEX["rank"]] = -1
        ints[INDEX["local_rank"]] = -1
        ints[INDEX["oom_kill_before"]] = -1
        for name, value in identity.items():
            ints[INDEX[name]] = value
        ints[INDEX["created_ns"]] = time.time_ns()
        for text_field, text in texts.items():
            self.set_text(text_field, text)
        self._header[: len(MAGIC)] = MAGIC  # last: a reader never sees a half-written header as valid

    def _map(self, offset: int) -> mmap.mmap:
        if self._fd is None:
            return mmap.mmap(-1, PAGE)
        return mmap.mmap(self._fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)

    # Fields ---------------------------------------------------------------------------------------------------------

    def __getitem__(self, name: HeaderField) -> int:
        return self._ints[INDEX[name]]

    def __setitem__(self, name: HeaderField, value: int) -> None:
        self._ints[INDEX[name]] = value

    def live(self, name: LiveField) -> int:
        return self._live[LIVE_INDEX[name]]

    def set_live(self, name: LiveField, value: int) -> None:
        """A live field (``LIVE_FIELDS``): from the monitor thread or an exception hook, never the loading thread."""
        self._live[LIVE_INDEX[name]] = value

    def add(self, name: Counter, amount: int) -> None:
        """Add to a counter (atomic under the GIL, like a slot)."""
        self._ints[INDEX[name]] += amount

    def set_text(self, name: TextField | LiveTextField, text: str) -> None:
        offset, size = TEXT_OFFSETS[name]
        encoded = text.encode("utf-8", errors="replace")[: size - 1]
        self._header[offset : offset + size] = encoded + b"\0" * (size - len(encoded))

    def text(self, name: TextField | LiveTextField) -> str:
        offset, size = TEXT_OFFSETS[name]
        return bytes(self._header[offset : offset + size]).split(b"\0", 1)[0].decode("utf-8", errors="replace")

    def touch(self) -> None:
        self._ints[INDEX["updated_ns"]] = time.time_ns()

    def fetched(self, start: int, now: int, at_ns: int, intervals: list[tuple[int, int]]) -> None:
        """The open load's storage reads (``FETCH_OFFSET``): at most ``FETCH_INTERVALS`` stretches (the caller merges
        more), then the count, and when, last."""
        flat = [at for interval in intervals[:FETCH_INTERVALS] for at in interval]
        flat += [0] * (2 * FETCH_INTERVALS - len(flat))
        _FETCH_PAIRS.pack_into(self._header, FETCH_OFFSET + _FETCH_HEAD.size, *flat)
        _FETCH_HEAD.pack_into(self._header, FETCH_OFFSET, start, now, at_ns)

    # Read slots -----------------------------------------------------------------------------------------------------

    def new_slot(self) -> ReadSlot:
        """A fresh pair of counters for one file scope; a new 4096-byte chunk every 256 files."""
        with self._lock:
            index = self["slots_used"]
            chunk, within = divmod(index, SLOTS_PER_CHUNK)
            while chunk >= len(self._chunks):
                offset = HEADER_BYTES + PAGE * len(self._chunks)
                if self._fd is not None:
                    _reserve(self._fd, offset)
                self._chunks.append(memoryview(self._map(offset)).cast("q"))
            self["slots_used"] = index + 1
            return ReadSlot(self._chunks[chunk][2 * within : 2 * within + 2])

    def open_load_reads(self) -> tuple[int, int]:
        """(tensors, bytes) read so far by the open (or last) outermost load: its slots summed, lock-free (a slot read
        mid-``+=`` is the value before or after it)."""
        tensors = nbytes = 0
        first, used = self["load_first_slot"], self["slots_used"]
        chunks = self._chunks
        for index in range(first, used):
            chunk, within = divmod(index, SLOTS_PER_CHUNK)
            if chunk >= len(chunks):
                break  # handed out, its chunk not yet mapped here (another thread is growing the file)
            counts = chunks[chunk]
            tensors += counts[2 * within]
            nbytes += counts[2 * within + 1]
        return tensors, nbytes

    # Open scopes ----------------------------------------------------------------------------------------------------

    def open_scope(self, name: str, trace_id: int, parent_id: int, start_ns: int, span_id: int) -> int | None:
        """Keep an open span's record (its span id last: until then the record reads as free); its index, or None
        when every record is taken."""
        with self._lock:
            for index in range(SCOPE_RECORDS):
                offset = SCOPES_OFFSET + index * _SCOPE.size
                if struct.unpack_from("<q", self._header, offset + _SPAN_ID_OFFSET)[0] == 0:
                    break
            else:
                return None
            encoded = name.encode("utf-8", errors="replace")[:SCOPE_NAME_BYTES]
            high, low = trace_id >> 64, trace_id & (2**64 - 1)
            _SCOPE.pack_into(self._header, offset, encoded, high, low, _signed(parent_id), start_ns, 0)
            struct.pack_into("<q", self._header, offset + _SPAN_ID_OFFSET, _signed(span_id) or 1)
            return index

    def close_scope(self, index: int) -> None:
        """The span ended (or was written): its record is free again, span id cleared first."""
        struct.pack_into("<q", self._header, SCOPES_OFFSET + index * _SCOPE.size + _SPAN_ID_OFFSET, 0)

    # Loads ----------------------------------------------------------------------------------------------------------

    def load_started(self) -> None:
        """The current outermost load begins: remember where its slots and counters start."""
        self["load_first_slot"] = self["slots_used"]
        for name, twin in zip(COUNTERS, LOAD_COUNTERS, strict=True):
            self[twin] = self[name]
        self["load_start_ns"] = time.time_ns()

    def close(self) -> None:
        """Nothing to flush: every store is already in the page cache. Only the descriptor goes."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def _reserve(fd: int, offset: int) -> None:
    """Give the file its next page with real blocks behind it. A store into a mapped page the filesystem cannot back
    (a full disk, a full tmpfs) is a SIGBUS that kills the process; reserving the page first turns that into an
    ``OSError`` here, where it can be handled."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, offset, PAGE)  # glibc writes the zeros itself where the filesystem cannot allocate
    else:  # pragma: no cover - macOS
        os.pwrite(fd, bytes(PAGE), offset)


def _signed(value: int) -> int:
    """A 64-bit id as the int64 the header stores."""
    return value - 2**64 if value >= 2**63 else value


def device_column(device: str) -> Counter:
    return DEVICE_COLUMNS.get(device, "materialized_other")
