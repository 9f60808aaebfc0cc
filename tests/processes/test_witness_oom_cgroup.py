"""Promise: with LOADTRACE=1 the launcher (torchrun's elastic agent, which `accelerate launch` also uses) outlives its
workers and writes one `loadtrace.rank_exit` span per dead rank into the job's trace: how it ended (signal or exit
code, and whether the OOM killer did it) and its exact last state (loadtrace/instrumentation/beside/witness.py,
hooks/torchelastic.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from support.cgroups import memory_cgroup, remove_cgroup

from loadtrace.instrumentation.beside import witness


def test_the_oom_killer_is_told_apart_in_a_real_memory_cgroup(tmp_path):
    cgroup = memory_cgroup("loadtrace-test", 64 * 1024 * 1024)
    try:
        before = witness.oom_kill_count(str(cgroup))
        assert before is not None
        hog = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read(1); x = [bytearray(1 << 20) for _ in range(4096)]"],
            stdin=subprocess.PIPE,
        )
        (cgroup / "cgroup.procs").write_text(str(hog.pid))
        hog.communicate(b"g", timeout=60)
        now = witness.oom_kill_count(str(cgroup))
        if hog.returncode != -signal.SIGKILL:
            pytest.skip(f"this kernel did not OOM-kill in a 64 MB cgroup (exit {hog.returncode}, oom_kill {now})")
        assert witness.oom_killed(hog.returncode, before, now) is True
        assert witness.exit_description(hog.returncode, True) == "SIGKILL (OOM)"
        assert witness.oom_killed(hog.returncode, now, witness.oom_kill_count(str(cgroup))) is False
    finally:
        remove_cgroup(cgroup)
