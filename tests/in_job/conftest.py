"""The in-job tests' shared fixtures: the checkpoint, written in this process (the quick tier starts no process to
write one), and the witness's folder."""

from pathlib import Path

import pytest
from support.examples import make_checkpoint

from loadtrace import semconv


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """``examples/make_checkpoint.py``'s default checkpoint (5 shards, 69 tensors): (its folder, its summary)."""
    path = tmp_path_factory.mktemp("tiny-checkpoint")
    return path, make_checkpoint(path)


@pytest.fixture
def witness_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "witness"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(semconv.ENV_WITNESS_DIR, str(directory))
    monkeypatch.setenv(semconv.ENV_LAUNCH_ID, "launch-abc")
    return directory
