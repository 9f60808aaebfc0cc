"""Test cgroups: a memory cgroup (with a limit, or none yet), a storage throttle (blkio), and removing a cgroup once
its processes are gone (the kernel refuses while it still counts them)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def remove_cgroup(path: Path) -> None:
    """Remove the cgroup directory, retrying for up to 10 s while its last processes are being reaped."""
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


V1_MEMORY = Path("/sys/fs/cgroup/memory")


def memory_cgroup(name: str, limit_bytes: int | None) -> Path:
    """A new cgroup v1 memory group ``name`` limited to ``limit_bytes`` (None: no limit yet); the test is skipped where
    none can be made (not root, no v1 memory hierarchy). Remove it with ``remove_cgroup``."""
    if os.geteuid() != 0 or not (V1_MEMORY / "memory.oom_control").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    cgroup = V1_MEMORY / f"{name}-{os.getpid()}"
    try:
        cgroup.mkdir()
        if limit_bytes is not None:
            (cgroup / "memory.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    return cgroup


V1_BLKIO = Path("/sys/fs/cgroup/blkio")


def whole_disk(path: Path) -> str | None:
    """``MAJOR:MINOR`` of the disk holding ``path`` (a partition's disk: the throttle takes whole disks); None where
    /sys does not say."""
    device = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    if not block.exists():
        return None
    if (block / "partition").exists():
        block = block.resolve().parent
    try:
        return (block / "dev").read_text().strip()
    except OSError:
        return None


@contextlib.contextmanager
def storage_throttled(name: str, path: Path, bytes_per_second: int) -> Iterator[bool]:
    """Reads from the disk holding ``path`` by this process and the processes it starts meanwhile, at most
    ``bytes_per_second`` (a cgroup v1 ``blkio.throttle.read_bps_device``): yields True, or False where no throttle can
    be made (not root, no v1 blkio hierarchy, a disk the kernel will not throttle) and nothing is throttled."""
    disk = whole_disk(path)
    if os.geteuid() != 0 or disk is None or not (V1_BLKIO / "blkio.throttle.read_bps_device").exists():
        yield False
        return
    cgroup = V1_BLKIO / f"{name}-{os.getpid()}"
    try:
        cgroup.mkdir()
        (cgroup / "blkio.throttle.read_bps_device").write_text(f"{disk} {bytes_per_second}")
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        remove_cgroup(cgroup)
        yield False
        return
    try:
        yield True
    finally:
        (V1_BLKIO / "cgroup.procs").write_text(str(os.getpid()))
        remove_cgroup(cgroup)
