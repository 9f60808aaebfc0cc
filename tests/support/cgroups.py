"""Test memory cgroups: removing one once its processes are gone (the kernel refuses while it still counts them)."""

from __future__ import annotations

import time
from pathlib import Path


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
