"""Shared test configuration: the markers each folder sets, and the session-wide multi-rank fixtures.

The folders say what their tests hold: ``in_job/`` (the instrumentation inside a process), ``analysis/`` (what spans
mean), ``cli/`` (what a person sees), ``fleet/`` (ClickHouse, Jaeger, the collector and dashboard configs), ``e2e/``
(real ``torchrun`` jobs, about 10 s each here) and ``lint/`` (layering, ruff, mypy). Every test in ``e2e/`` is marked
``integration`` here, once; select or skip them with ``-m integration`` / ``-m "not integration"``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import venvs as _venvs  # noqa: E402
from support.multirank import Jobs  # noqa: E402
from support.torchrun import clean_env  # noqa: E402

NO_VENV = "no venv with torchrun and transformers (see tests/support/venvs.py)"
# A folder's markers, set on every test collected under it.
FOLDER_MARKERS = {
    "e2e": (pytest.mark.integration, pytest.mark.skipif(not _venvs.discover(), reason=NO_VENV)),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: starts real multi-process jobs (torchrun, transformers, deepspeed); slow"
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        folder = item.path.relative_to(tests).parts[0]
        for marker in FOLDER_MARKERS.get(folder, ()):
            item.add_marker(marker)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Qwen3-MoE checkpoint (5 shards, 69 tensors), written once per session by
    ``examples/make_checkpoint.py`` run with the first test venv's Python (not this interpreter's)."""
    found = _venvs.discover()
    if not found:
        pytest.skip("no venv with torchrun and transformers (see tests/support/venvs.py)")
    out = tmp_path_factory.mktemp("checkpoint")
    script = _venvs.REPO / "examples" / "make_checkpoint.py"
    env = clean_env(found[0], {})
    proc = subprocess.run(
        [str(found[0].python), str(script), str(out)], cwd=out, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote 5 shards, 69 tensors, 1,009,152 bytes" in proc.stdout, proc.stdout
    return out


@pytest.fixture(scope="session")
def jobs(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    """Two-rank torchrun jobs, each run at most once per session and shared by every test that asks for it."""
    return Jobs(checkpoint, tmp_path_factory.mktemp("jobs"))
