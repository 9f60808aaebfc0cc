"""Shared test configuration: the markers each folder sets, and the session-wide multi-rank fixtures.

The folders say what their tests hold. The quick tier, ``-m "not integration"``, runs in this process and starts no
other: ``in_job/`` (the instrumentation inside a process), ``analysis/`` (what spans mean), ``cli/`` (what a person
sees), ``fleet/`` (ClickHouse, Jaeger, the collector and dashboard configs) and ``structure/`` (layering, one spelling
of every name). The slow tier, marked ``integration`` here once per folder: ``processes/`` (promises that need a
process of their own: ``LOADTRACE=1`` at interpreter start, signals, forks, the console commands, docker-compose),
``e2e/`` (real ``torchrun`` jobs and a real browser), ``lint/`` (ruff and mypy over the whole tree, also ``lint``) and
``backends/`` (the real Jaeger and collector that ``scripts/build_backends.sh`` builds, also ``backends``).

pytest runs on four pytest-xdist workers (``addopts`` in pyproject.toml; ``-n 0`` runs serially), a test file's
tests on one worker (``--dist loadscope``), so a module-scoped job runs once. The session-wide jobs here
(``checkpoint``, ``jobs``) and in ``support/`` (the killed rank, the watched slow load, the OTLP wire runs) are asked
for by several files on any worker: ``support/shared.py`` makes each once and hands the others what it made. Every
torchrun (``support/torchrun.py``) is run again once when a rank only aborted at exit, a torch/gloo flake that no
test is about.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import venvs as _venvs  # noqa: E402
from support.multirank import Jobs  # noqa: E402
from support.shared import once  # noqa: E402
from support.torchrun import EXIT_GC, clean_env  # noqa: E402

# Every Python process a test starts freezes its garbage collector at exit (support/exit_gc/sitecustomize.py): a
# fifth of a rank's CPU. support.torchrun.clean_env, which scrubs PYTHONPATH, puts it back.
os.environ["PYTHONPATH"] = str(EXIT_GC)

NO_VENV = "no venv with torchrun and transformers (see tests/support/venvs.py)"
# A folder's markers, set on every test collected under it.
FOLDER_MARKERS = {
    "processes": (pytest.mark.integration,),
    "e2e": (pytest.mark.integration, pytest.mark.skipif(not _venvs.discover(), reason=NO_VENV)),
    "lint": (pytest.mark.integration, pytest.mark.lint),
    "backends": (pytest.mark.integration, pytest.mark.backends),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "integration: the slow tier: starts processes (torchrun jobs, interpreters, a browser) or reads the whole "
        "tree (ruff, mypy); the quick tier is -m 'not integration'",
    )
    config.addinivalue_line("markers", "lint: ruff and mypy over the whole tree (also integration)")
    config.addinivalue_line(
        "markers", "backends: the real Jaeger and collector of scripts/build_backends.sh (also integration)"
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
    """The default tiny Qwen3-MoE checkpoint (5 shards, 69 tensors), written once per session (whatever the xdist
    workers) by ``examples/make_checkpoint.py`` run with the first test venv's Python (not this interpreter's)."""
    found = _venvs.discover()
    if not found:
        pytest.skip("no venv with torchrun and transformers (see tests/support/venvs.py)")
    return once(tmp_path_factory, "checkpoint", lambda: write_checkpoint(found[0], tmp_path_factory.mktemp("ckpt")))


def write_checkpoint(venv: _venvs.Venv, out: Path) -> Path:
    script = _venvs.REPO / "examples" / "make_checkpoint.py"
    env = clean_env(venv, {})
    proc = subprocess.run(
        [str(venv.python), str(script), str(out)], cwd=out, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote 5 shards, 69 tensors, 1,009,152 bytes" in proc.stdout, proc.stdout
    return out


@pytest.fixture(scope="session")
def jobs(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    """Two-rank torchrun jobs, each run at most once per session and shared by every test that asks for it."""
    return Jobs(checkpoint, tmp_path_factory)
