"""Page-cache control for the residency tests."""

from __future__ import annotations

import os
from pathlib import Path


def evict(path: Path, offset: int = 0, length: int = 0) -> None:
    """Drop the file's pages (a range of them) from the page cache; dirty pages are written first, or they stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
