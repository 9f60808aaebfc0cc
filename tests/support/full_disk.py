"""A filesystem with no space left: a small tmpfs, filled (needs root: where it cannot mount, the test is skipped, or
``mounted_full_tmpfs`` gives None)."""

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CANNOT_MOUNT = "cannot mount a small tmpfs here (needs root)"


@contextmanager
def mounted_full_tmpfs(folder: Path, size: str) -> Iterator[Path | None]:
    """``folder`` as a tmpfs of ``size`` (``8k``, ``16k``) filled to the last block, unmounted afterwards; None where
    it cannot be mounted."""
    folder.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    ).returncode:
        yield None
        return
    try:
        try:
            with open(folder / "filler", "wb") as filler:
                while True:
                    filler.write(b"\0" * 4096)
                    filler.flush()
        except OSError:
            pass  # full
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@contextmanager
def full_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """``mounted_full_tmpfs``, the test skipped where it cannot be mounted."""
    with mounted_full_tmpfs(folder, size) as full:
        if full is None:
            pytest.skip(CANNOT_MOUNT)
        yield full
