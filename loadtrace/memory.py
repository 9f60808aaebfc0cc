"""Process, node and cgroup memory and the process's storage reads, from /proc and /sys (Linux).

Every reader returns zeros rather than raising where a file is missing (another OS, a locked-down container).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


def _kib_fields(path: str, fields: dict[bytes, str]) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        with open(path, "rb") as handle:
            for line in handle:
                key, _, rest = line.partition(b":")
                name = fields.get(key)
                if name is not None:
                    values[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return values


def _storage_read() -> int:
    try:
        with open("/proc/self/io", "rb") as handle:
            for line in handle:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def process_memory() -> Memory:
    return Memory(**_kib_fields("/proc/self/status", _STATUS_FIELDS), storage_read=_storage_read())


@dataclass(frozen=True)
class Limits:
    """What the process's memory is measured against: the node, and the container's cgroup when there is one."""

    node_total: int = 0  # MemTotal
    node_available: int = 0  # MemAvailable
    cgroup_current: int | None = None  # memory.current (v2) / memory.usage_in_bytes (v1)
    cgroup_max: int | None = None  # memory.max / memory.limit_in_bytes; None when unlimited


def _cgroup_dir() -> str | None:
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
                if hierarchy == "0" and controllers == "":
                    return os.path.join("/sys/fs/cgroup", path.lstrip("/"))
                if "memory" in controllers.split(","):
                    return os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
    except (OSError, ValueError):
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            text = handle.read().strip()
        value = int(text)
        return None if value >= 1 << 60 else value  # v1 writes "unlimited" as a huge number
    except (OSError, ValueError):
        return None


def limits() -> Limits:
    node = _kib_fields("/proc/meminfo", {b"MemTotal": "node_total", b"MemAvailable": "node_available"})
    cgroup = _cgroup_dir()
    current = maximum = None
    if cgroup is not None:
        current = _read_int(os.path.join(cgroup, "memory.current"))
        maximum = _read_int(os.path.join(cgroup, "memory.max"))
        if current is None:
            current = _read_int(os.path.join(cgroup, "memory.usage_in_bytes"))
            maximum = _read_int(os.path.join(cgroup, "memory.limit_in_bytes"))
    return Limits(node.get("node_total", 0), node.get("node_available", 0), current, maximum)
