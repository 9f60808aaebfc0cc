"""Process, node and cgroup memory and the process's storage reads, from /proc and /sys (Linux).

Every reader returns zeros rather than raising where a file is missing (another OS, a locked-down container).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
import sys
import time
from dataclasses import dataclass
from typing import Any

from ... import statefile

_STATUS_FIELDS = {b"VmRSS": "rss", b"VmHWM": "hwm", b"RssAnon": "anon", b"RssFile": "file", b"RssShmem": "shmem"}


@dataclass(frozen=True)
class Memory:
    """One reading of this process: resident memory split by kind, its high-water mark, and storage reads."""

    rss: int = 0  # VmRSS
    hwm: int = 0  # VmHWM: the process's resident high-water mark since it started
    anon: int = 0  # RssAnon: heap, tensors copied out of files
    file: int = 0  # RssFile: file pages mapped in (mmap'ed checkpoints)
    shmem: int = 0  # RssShmem
    storage_read: int = 0  # /proc/self/io read_bytes: bytes this process made the kernel fetch from storage
    at_ns: int = 0  # when it was read (ns since the epoch): fetching.py times storage reads by it

    def peak_since(self, before: Memory) -> int:
        """Peak RSS since ``before``: the high-water mark when it rose in between (exact), else the larger of the
        two readings (the earlier high-water mark belongs to something before)."""
        return self.hwm if self.hwm > before.hwm else max(self.rss, before.rss)


@dataclass(slots=True)
class Peak:
    """The highest resident memory, by kind, seen while a load or phase is open: raised by the monitor's samples."""

    rss: int
    anon: int
    file: int
    shmem: int

    @classmethod
    def starting_at(cls, memory: Memory) -> Peak:
        return cls(memory.rss, memory.anon, memory.file, memory.shmem)

    def raise_to(self, memory: Memory) -> None:
        self.rss = max(self.rss, memory.rss)
        self.anon = max(self.anon, memory.anon)
        self.file = max(self.file, memory.file)
        self.shmem = max(self.shmem, memory.shmem)


def _read(path: str) -> bytes:
    """A /proc or /sys file whole, with bare system calls (no buffered file object: a third of a reading's cost)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kib_fields(path: str, fields: dict[bytes, str]) -> dict[str, int]:
    """``Name:   123 kB`` lines (/proc/self/status, /proc/meminfo): the wanted ones, in bytes."""
    values: dict[str, int] = {}
    try:
        text = b"\n" + _read(path)
        for key, name in fields.items():
            start = text.find(b"\n" + key + b":")
            if start >= 0:
                start += len(key) + 2
                values[name] = int(text[start : text.find(b"\n", start)].split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return values


def _storage_read() -> int:
    try:
        text = _read("/proc/self/io")
        start = text.index(b"read_bytes:") + len(b"read_bytes:")
        return int(text[start : text.find(b"\n", start)])
    except (OSError, ValueError):
        return 0


def waiting_on_storage() -> bool:
    """Whether a thread of this process is in uninterruptible sleep (``D`` in ``/proc/self/task/<tid>/stat``) now: on
    a loading process, waiting for storage to deliver a page it touched. A directory listing and a read per thread
    (0.5 ms with 25 threads here): fetching.py asks only while a run of fetching is on."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            text = _read(f"/proc/self/task/{tid}/stat")
        except OSError:
            continue  # it ended meanwhile
        state = text.rfind(b")") + 2
        if text[state : state + 1] == b"D":
            return True
    return False


def process_memory() -> Memory:
    status = _kib_fields("/proc/self/status", _STATUS_FIELDS)
    return Memory(**status, storage_read=_storage_read(), at_ns=time.time_ns())


@dataclass(frozen=True)
class Limits:
    """What the process's memory is measured against: the node, and the container's cgroup when there is one."""

    node_total: int = 0  # MemTotal
    node_available: int = 0  # MemAvailable
    cgroup_current: int | None = None  # memory.current (v2) / memory.usage_in_bytes (v1)
    cgroup_max: int | None = None  # memory.max / memory.limit_in_bytes; None when unlimited
    cgroup_version: int | None = None  # 1 or 2: which files those came from; None without a memory cgroup
    cgroup_dir: str | None = None  # the process's memory cgroup directory (its oom_kill counter is there)

    @property
    def limit(self) -> tuple[int, int]:
        """The memory limit that applies, in bytes (0: unknown), and where it comes from (``statefile.LIMIT_*``): the
        cgroup's limit when it is lower than the node's memory, else the node's."""
        if self.cgroup_max is not None and self.cgroup_version in (1, 2):
            if not self.node_total or self.cgroup_max < self.node_total:
                source = statefile.LIMIT_CGROUP_V1 if self.cgroup_version == 1 else statefile.LIMIT_CGROUP_V2
                return self.cgroup_max, source
        if self.node_total:
            return self.node_total, statefile.LIMIT_NODE
        return 0, statefile.LIMIT_UNKNOWN


def _cgroup_dir() -> tuple[str, int] | None:
    """The process's memory cgroup directory and the cgroup version of its hierarchy."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
                if hierarchy == "0" and controllers == "":
                    return os.path.join("/sys/fs/cgroup", path.lstrip("/")), 2
                if "memory" in controllers.split(","):
                    return os.path.join("/sys/fs/cgroup/memory", path.lstrip("/")), 1
    except (OSError, ValueError):
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        value = int(_read(path).strip())
        return None if value >= 1 << 60 else value  # v1 writes "unlimited" as a huge number
    except (OSError, ValueError):
        return None


_V2_FILES = ("memory.current", "memory.max")
_V1_FILES = ("memory.usage_in_bytes", "memory.limit_in_bytes")
# Where this process's cgroup numbers are: (pid, directory, version, (usage file, limit file)). Found once per process
# (a forked child looks again); a process moved to another cgroup meanwhile is rare enough to be read as it was.
_cgroup_files: tuple[int, str, int, tuple[str, str]] | None = None


def _cgroup_numbers() -> tuple[str, int | None, int | None, int | None] | None:
    """The memory cgroup's directory, version, usage and limit now; None without a memory cgroup."""
    global _cgroup_files
    pid = os.getpid()
    if _cgroup_files is None or _cgroup_files[0] != pid:
        found = _cgroup_dir()
        if found is None:
            return None
        cgroup = found[0]  # the version is the files that answer, found next
        names = _V2_FILES if _read_int(os.path.join(cgroup, "memory.current")) is not None else _V1_FILES
        version = 2 if names is _V2_FILES else 1
        _cgroup_files = (pid, cgroup, version, names)
    _, cgroup, version, (usage, limit) = _cgroup_files
    current = _read_int(os.path.join(cgroup, usage))
    if current is None:
        _cgroup_files = None  # gone (or never readable): the next call looks again
        return cgroup, None, None, None
    return cgroup, version, current, _read_int(os.path.join(cgroup, limit))


def limits() -> Limits:
    node = _kib_fields("/proc/meminfo", {b"MemTotal": "node_total", b"MemAvailable": "node_available"})
    found = _cgroup_numbers()
    current = maximum = version = cgroup = None
    if found is not None:
        cgroup, version, current, maximum = found
    return Limits(node.get("node_total", 0), node.get("node_available", 0), current, maximum, version, cgroup)


def parse_oom_kill(text: str) -> int | None:
    """The ``oom_kill N`` line of a cgroup's ``memory.events`` (v2) or ``memory.oom_control`` (v1); None without one."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "oom_kill":
            try:
                return int(fields[1])
            except ValueError:
                return None
    return None


def oom_kill_count(cgroup_dir: str | None) -> int | None:
    """How many processes the OOM killer has killed in this memory cgroup (v2 ``memory.events``, else v1
    ``memory.oom_control``); None when neither can be read."""
    if not cgroup_dir:
        return None
    for name in ("memory.events", "memory.oom_control"):
        try:
            count = parse_oom_kill(_read(os.path.join(cgroup_dir, name)).decode())
        except (OSError, ValueError):
            continue
        if count is not None:
            return count
    return None


# Page-cache residency of a file -------------------------------------------------------------------------------------
#
# ``cachestat(2)`` (Linux 6.5+) counts a file's cached pages in one call; the kernel walks the file's cached pages, so
# it is the one cost of tracing that grows with bytes: 10-90 µs for a 400 MB file as first measured here, up to ~4 µs
# per cached MB (1.3 ms for 409 MB) in benchmarks/README.md's later runs. Where it is missing or refused (an older
# kernel, a seccomp profile), ``mincore(2)`` on a read-only shared mapping asks page by page (1-3 ms for that file).
# Both read the kernel's page cache exactly, and neither reads the file.

_CACHESTAT = 451  # the same number on every architecture that has it (the unified syscall table)
_CACHESTAT_MACHINES = frozenset({"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x"})
_WINDOW = 1 << 30  # mincore maps and asks at most this much at a time: one vector byte per page (256 KiB here)
_LOW_BIT = bytes(value & 1 for value in range(256))  # mincore: bit 0 of each byte says resident, the rest is reserved
_libc: Any = None  # libc through ctypes, typed; False where there is none (not Linux)
_use_cachestat = True  # turned off for the process where the machine has none, and at the first ENOSYS / EPERM


def _load_libc() -> Any:
    global _libc, _use_cachestat
    if _libc is None:
        # Set once, when done: a second thread opening its first file meanwhile (HuggingFaceStorageReader's reader
        # threads) must not find a half-made answer; both may make it, the same.
        found: Any = False
        if sys.platform.startswith("linux"):
            try:
                # The symbols already in this process: no ``find_library`` (it runs ldconfig in a subprocess) and no
                # import here. A first file open may come from any thread; an import or a subprocess in flight while
                # the job forks (a DataLoader worker) leaves the child waiting forever on a lock it inherited held.
                libc: Any = ctypes.CDLL(None, use_errno=True)
                libc.mmap.restype = ctypes.c_void_p
                libc.mmap.argtypes = [
                    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
                ]  # fmt: skip
                libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
                libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
                libc.syscall.restype = ctypes.c_long

                class CachestatRange(ctypes.Structure):
                    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

                class Cachestat(ctypes.Structure):
                    _fields_ = [
                        (name, ctypes.c_uint64)
                        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
                    ]

                libc.cachestat_range, libc.cachestat_t = CachestatRange, Cachestat
                if os.uname().machine not in _CACHESTAT_MACHINES:
                    _use_cachestat = False
                found = libc
            except (OSError, AttributeError):
                pass
        _libc = found
    return _libc


def cached_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes of the file at ``path`` in the page cache now: what reading it whole would not fetch from storage (the
    last page counts only the file's bytes in it). None where it cannot be known: not Linux, not a regular file, both
    calls refused; never a guess."""
    if not _load_libc():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        return cached_bytes_of(fd, info.st_size) if stat.S_ISREG(info.st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def cached_bytes_of(fd: int, size: int) -> int | None:
    """``cached_bytes`` of a regular file the caller has open (``fd``), ``size`` bytes long."""
    libc = _load_libc()
    if not libc:
        return None
    try:
        found = _cachestat(libc, fd, size) if _use_cachestat else None
        return found if found is not None else _mincore(libc, fd, size)
    except (OSError, ValueError):
        return None


def _cachestat(libc: Any, fd: int, size: int) -> int | None:
    global _use_cachestat

    def pages(offset: int, length: int) -> int | None:  # length 0: to the end of the file
        found = libc.cachestat_t()
        if libc.syscall(_CACHESTAT, fd, ctypes.byref(libc.cachestat_range(offset, length)), ctypes.byref(found), 0):
            return None
        return int(found.nr_cache)

    page = mmap.PAGESIZE
    cached = pages(0, 0)
    if cached is None:
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
            _use_cachestat = False
        return None
    resident = cached * page
    tail = size % page
    if tail and cached:
        last = pages(size - tail, page)
        if last is None:
            return None
        if last:
            resident -= page - tail
    return min(resident, size)


def _mincore(libc: Any, fd: int, size: int) -> int | None:
    page = mmap.PAGESIZE
    vector = (ctypes.c_ubyte * (min(size, _WINDOW) // page + 1))()
    resident = 0
    for offset in range(0, size, _WINDOW):
        length = min(_WINDOW, size - offset)
        address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
        if address is None or address == ctypes.c_void_p(-1).value:
            return None
        try:
            if libc.mincore(ctypes.c_void_p(address), length, vector) != 0:
                return None
        finally:
            libc.munmap(ctypes.c_void_p(address), length)
        count = (length + page - 1) // page
        flags = bytes(vector)[:count].translate(_LOW_BIT)
        resident += flags.count(1) * page
        if flags[count - 1] and length % page:  # the file ends inside its last page
            resident -= page - length % page
    return resident
