"""Process, node and cgroup memory and the process's storage reads, from /proc and /sys (Linux).

Every reader returns zeros rather than raising where a file is missing (another OS, a locked-down container).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import statefile

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
        with open(path) as handle:
            text = handle.read().strip()
        value = int(text)
        return None if value >= 1 << 60 else value  # v1 writes "unlimited" as a huge number
    except (OSError, ValueError):
        return None


def limits() -> Limits:
    node = _kib_fields("/proc/meminfo", {b"MemTotal": "node_total", b"MemAvailable": "node_available"})
    found = _cgroup_dir()
    current = maximum = version = cgroup = None
    if found is not None:
        cgroup, version = found
        current = _read_int(os.path.join(cgroup, "memory.current"))
        maximum = _read_int(os.path.join(cgroup, "memory.max"))
        if current is None:
            current = _read_int(os.path.join(cgroup, "memory.usage_in_bytes"))
            maximum = _read_int(os.path.join(cgroup, "memory.limit_in_bytes"))
            version = 1 if current is not None else version
        else:
            version = 2
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
            with open(os.path.join(cgroup_dir, name)) as handle:
                count = parse_oom_kill(handle.read(64 * 1024))
        except (OSError, ValueError):
            continue
        if count is not None:
            return count
    return None
