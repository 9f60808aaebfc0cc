"""Test memory cgroups: making one (with a limit, or none yet), and removing it once its processes are gone (the kernel
refuses while it still counts them)."""

from __future__ import annotations

import os
import time
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
