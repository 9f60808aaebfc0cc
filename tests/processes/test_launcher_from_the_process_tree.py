"""Promise (issue 40): the launcher is read from the process tree for real (tests/in_job/test_launcher_named.py has the
rules): a rank started by a program called ``torchrun`` is torchrun's whatever its environment says, and so is a
process one level further down (under a shell wrapper, a forked worker)."""

from __future__ import annotations

import os
import subprocess
import sys

ELASTIC = {"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none", "ACCELERATE_USE_FSDP": "true"}


def test_a_process_started_by_a_program_called_torchrun_is_torchrun_launched(tmp_path):
    """The tree, read for real: a child of a script named ``torchrun`` (run by this Python, as a console script is)
    and its own child (a shell wrapper's, a forked worker's) both name it."""
    inner = "from loadtrace.instrumentation.context import launched_by; print(launched_by())"
    fake = tmp_path / "torchrun"
    fake.write_text(
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {inner!r}], check=True)\n"
        f"subprocess.run(['sh', '-c', '\"$0\" -c \"$1\"; true', sys.executable, {inner!r}], check=True)\n"
    )
    env = {**os.environ, **ELASTIC}
    done = subprocess.run([sys.executable, str(fake)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torchrun", "torchrun"]
