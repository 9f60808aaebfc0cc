"""The killed-rank job (``tests/workers/killed_load.py``: rank 1 SIGKILLed in the middle of its load while rank 0
waits, loaded), run at most once per session traced and once untraced: what the report says of the dead rank
(e2e/test_killed_rank.py) and what the launcher witnessed (e2e/test_witness_of_real_jobs.py) are read from the same
run. ``TMPDIR`` lies inside the job's folder, to see the launcher's witness directory go."""

from __future__ import annotations

from pathlib import Path

import pytest

from .paths import WORKERS
from .shared import once
from .torchrun import TorchrunResult, torchrun
from .venvs import Venv

KILLED_WORKER = WORKERS / "killed_load.py"


def killed_rank_job(
    venv: Venv, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, traced: bool = True
) -> TorchrunResult:
    """The run (its counts and ``loadtrace-traces/`` in its ``cwd``); rank 1's own count of what it had read when it
    died is ``cwd/count-rank1.json``."""

    def run() -> TorchrunResult:
        cwd = tmp_path_factory.mktemp("killed-traced" if traced else "killed-untraced")
        tmp = cwd / "tmp"
        tmp.mkdir()
        env = {"HF_DEACTIVATE_ASYNC_LOAD": "1", "TMPDIR": str(tmp), **({"LOADTRACE": "1"} if traced else {})}
        env["LOADTRACE_QUIET"] = "0"  # its closing line, said by the launcher (e2e/test_closing_line_agrees.py)
        return torchrun(venv, KILLED_WORKER, [str(checkpoint), "--out", str(cwd)], cwd=cwd, env=env, timeout_s=300)

    return once(tmp_path_factory, ("killed", str(venv.root), str(checkpoint), traced), run)
