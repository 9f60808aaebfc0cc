"""One job id launched four times, as a person relaunches a job that crashed (issue 48), run once per session.

``tests/workers/relaunch_load.py`` under ``torchrun --nproc_per_node 2``, every launch with ``LOADTRACE_JOB_ID=
relaunched`` and its closing line on (``LOADTRACE_QUIET=0``), one after the other in one working directory:

1. ``crashed``: both ranks raise in their own code after the rendezvous, before any load. The launcher is not traced
   (``torchrun --no-python env LOADTRACE=1 python ...``): no launch id, no witness; rank 0 says its own line.
2. ``half``: rank 0 raises in its own code (having loaded nothing) once rank 1 has loaded; torchrun then stops rank 1.
3. ``loaded``: both ranks load.
4. ``elsewhere``: both ranks load, into another folder (``LOADTRACE_DIR``).

Launches 1-3 write into ``loadtrace-traces/relaunched/``, launch 4 into ``elsewhere/``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from .multirank import TRACE_ROOT
from .paths import WORKERS
from .shared import once
from .torchrun import torchrun
from .venvs import Venv

WORKER = WORKERS / "relaunch_load.py"
JOB_ID = "relaunched"
LAUNCHES = ("crashed", "half", "loaded", "elsewhere")
CRASH_RANKS = {"crashed": "0,1", "half": "0", "loaded": "", "elsewhere": ""}
CLOSING = re.compile(r"^loadtrace: job \S+.*$", re.MULTILINE)


@dataclass(frozen=True)
class Launch:
    name: str
    returncode: int
    seconds: float  # torchrun's whole run, launcher start to exit
    log: str

    @property
    def closing_lines(self) -> list[str]:
        return CLOSING.findall(self.log)


@dataclass(frozen=True)
class Relaunched:
    cwd: Path
    launches: dict[str, Launch]

    @property
    def folder(self) -> Path:
        """Where launches 1-3 wrote."""
        return self.cwd / TRACE_ROOT / JOB_ID

    @property
    def elsewhere(self) -> Path:
        return self.cwd / "elsewhere"


def _launch(venv: Venv, checkpoint: Path, cwd: Path, name: str) -> Launch:
    env = {"LOADTRACE_JOB_ID": JOB_ID, "LOADTRACE_QUIET": "0", "HF_DEACTIVATE_ASYNC_LOAD": "1"}
    args = [str(checkpoint), "--crash-ranks", CRASH_RANKS[name]]
    if name == "crashed":  # an untraced launcher: the workers turn tracing on themselves
        script, launcher = Path("/usr/bin/env"), ("--no-python",)
        args = ["LOADTRACE=1", str(venv.python), str(WORKER), *args]
    else:
        script, launcher = WORKER, ()
        env["LOADTRACE"] = "1"
    if name == "elsewhere":
        env["LOADTRACE_DIR"] = str(cwd / "elsewhere")
    run = torchrun(venv, script, args, cwd=cwd, env=env, timeout_s=300, launcher_args=launcher)
    log = run.log.read_text(errors="replace")
    shutil.copy(run.log, cwd / f"torchrun-{name}.log")
    print(f"[relaunch] {name}: rc {run.returncode} in {run.seconds:.1f}s")
    return Launch(name, run.returncode, run.seconds, log)


def relaunched(venv: Venv, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Relaunched:
    def run() -> Relaunched:
        cwd = tmp_path_factory.mktemp("relaunched")
        return Relaunched(cwd, {name: _launch(venv, checkpoint, cwd, name) for name in LAUNCHES})

    return once(tmp_path_factory, ("relaunched", str(venv.root), str(checkpoint)), run)
