"""The in-job tests' checkpoint, written in this process: the quick tier starts no process to write one."""

from pathlib import Path

import pytest
from support.examples import make_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """``examples/make_checkpoint.py``'s default checkpoint (5 shards, 69 tensors): (its folder, its summary)."""
    path = tmp_path_factory.mktemp("tiny-checkpoint")
    return path, make_checkpoint(path)
