"""A filesystem with no space left: a small tmpfs, filled (needs root; the test is skipped where it cannot mount)."""

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def full_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """``folder`` as a tmpfs of ``size`` (``8k``, ``16k``) filled to the last block; unmounted afterwards."""
    folder.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
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
