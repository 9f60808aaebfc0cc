"""Promise (issue 15, README quick start): ``bash examples/demo.sh`` ends by saying what to run next, and a demo whose
job fails shows why instead of exiting 1 in silence (the cause used to be only in ``demo-run/torchrun.log``).

Issue 34: what it says to run next works as printed in the shell of someone who ran ``bash scripts/setup.sh`` and
nothing else (``loadtrace`` is not on their PATH: it is ``.venv/bin/loadtrace``), from wherever they are."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.venvs import REPO

pytestmark = [
    pytest.mark.skipif(
        not (REPO / ".venv" / "bin" / "torchrun").exists(), reason="demo.sh runs the repository's .venv"
    ),
]


def new_users_shell() -> dict[str, str]:
    """The environment after ``bash scripts/setup.sh``: no venv activated, so no ``loadtrace`` on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "VIRTUAL_ENV", "PYTHON"))}
    path = [entry for entry in env.get("PATH", "").split(os.pathsep) if entry and not Path(entry, "activate").exists()]
    env["PATH"] = os.pathsep.join(path)
    assert shutil.which("loadtrace", path=env["PATH"]) is None, env["PATH"]
    return env


def demo(mode: str, work) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "examples" / "demo.sh"), mode],
        env={**new_users_shell(), "DEMO_DIR": str(work)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def typed(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` as the new user types it (its comment included) in their shell, in ``cwd``."""
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=new_users_shell(), capture_output=True, text=True, timeout=300
    )


def test_a_failing_demo_prints_the_error_and_the_end_of_its_log_then_the_good_one_says_what_next(tmp_path):
    failed = demo("bogus", tmp_path)
    assert failed.returncode == 1
    assert f"demo: the job failed (exit 1). Its log is {tmp_path}/torchrun.log" in failed.stderr
    assert "load.py: error: argument --mode: invalid choice: 'bogus'" in failed.stderr
    assert "the log's last lines:" in failed.stderr

    done = demo("fsdp", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "\nloadtrace: job " in out and "→ loadtrace report loadtrace-traces/" in out  # rank 0's line, shown
    # One finding for the cause, its symptoms as its lines (issue 26).
    assert "WARNING rank 1 loaded the whole model under fsdp_cpu_ram_efficient" in out
    assert "\n    duplicate_checkpoint_read: read " in out
    lines = out.rstrip("\n").splitlines()
    after = lines[lines.index("next:") + 1 :]
    assert len(after) == 4 and all(line.startswith("  ") for line in after), after
    assert "loadtrace report loadtrace-traces/ --latest --format json" in after[0] and "loadtrace view" in after[1]
    assert "examples/demo.sh plain" in after[2] and after[3].strip().startswith("source ")

    elsewhere = tmp_path / "elsewhere"  # the user's shell is wherever they were, not in the demo's folder
    elsewhere.mkdir()
    as_json = typed(after[0], elsewhere)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["ranks"], as_json.stdout[:300]
    view = typed(after[1], elsewhere)
    # How to start the backends on this host: Docker's compose file, or the built binaries where Docker is absent.
    assert view.returncode == 0 and ("docker compose" in view.stdout or "# Without Docker" in view.stdout), view.stderr
    # Rank 0's own line names `loadtrace`, as it will in the user's own (activated) environment: with the activation
    # the demo prints, its command works from where the job ran.
    job_line = next(line for line in lines if line.startswith("loadtrace: job "))
    ran_in = next(line for line in lines if line.startswith("$ cd ")).split()[2]
    reported = typed(f"{after[3].split('#')[0]} && cd {ran_in} && {job_line.split(' → ')[1]}", elsewhere)
    assert reported.returncode == 0 and reported.stdout.startswith("job "), reported.stderr
