"""Promise: ``loadtrace top`` shows a load while it happens, from the ranks' state files: a slow rank's bytes rising
between two snapshots, its phase and the bytes it will read; the same in a real terminal (tmux), left with ``q``; a
rank SIGKILLed mid-load as dead; a rank heading for its cgroup's limit marked ``oom_ahead`` before the OOM killer
takes it. The job is real (torchrun, 2 ranks, gloo) and slowed on its own side: rank 1 sleeps before each tensor it
reads, as on slow storage; the observer only polls."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from support.cgroups import remove_cgroup
from support.live import Job, rank_of, top_json, wait_for
from support.venvs import REPO, discover

from loadtrace import semconv

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "slow_load.py"
CHECKPOINT_TENSOR_BYTES = 1_009_152
LOAD_PHASES = {semconv.SPAN_FROM_PRETRAINED, semconv.SPAN_CONVERT, semconv.SPAN_LOAD_STATE_DICT}


def slow_job(checkpoint: Path, tmp_path: Path, *args: str, prefix: tuple[str, ...] = ()) -> tuple[Job, Path]:
    traces = tmp_path / "traces"
    env = {"LOADTRACE": "1", "HF_DEACTIVATE_ASYNC_LOAD": "1", "LOADTRACE_DIR": str(traces)}
    return Job(VENVS[0], WORKER, [str(checkpoint), *args], tmp_path, env, prefix), traces


def loading(traces: Path, rank: int, at_least: int = 1):
    """A check for ``wait_for``: the rank's row once it is loading and has read ``at_least`` bytes."""

    def check():
        if not traces.is_dir():
            return None
        row = rank_of(top_json(VENVS[0], traces), rank)
        return row if row is not None and row["status"] == "loading" and row["read_bytes"] >= at_least else None

    return check


def test_top_once_json_follows_a_slow_load_and_a_killed_rank_is_dead(checkpoint, tmp_path):
    job, traces = slow_job(checkpoint, tmp_path, "--delay", "1")
    try:
        first = wait_for(loading(traces, 1), 240, job, why="rank 1 loading")
        second = wait_for(loading(traces, 1, first["read_bytes"] + 1), 60, job, why="rank 1's bytes rising")
        for row in (first, second):
            assert row["phase"] in LOAD_PHASES, row
            assert row["expected_bytes"] == CHECKPOINT_TENSOR_BYTES
            assert 0 < row["percent"] < 100 and row["read_rate_bytes_per_s"] > 0 and row["eta_seconds"] > 0
            assert row["host"] == socket.gethostname() and row["pid"] > 0 and row["files_opened"] >= 1
            assert row["rss_bytes"] > 0 and row["limit_bytes"] > 0 and row["seconds_since_progress"] < 30
        assert second["read_bytes"] > first["read_bytes"]
        assert semconv.MARK_SLOWEST in second["marks"] and semconv.MARK_STUCK not in second["marks"]
        assert rank_of(top_json(VENVS[0], traces), 0)["status"] in ("loading", "idle")

        os.kill(second["pid"], signal.SIGKILL)  # mid-load, as the OOM killer would

        def dead():
            row = rank_of(top_json(VENVS[0], traces), 1)
            return row if row["status"] == "dead" else None

        killed = wait_for(dead, 60, why="rank 1 shown dead")
        assert killed["read_bytes"] >= second["read_bytes"] and killed["phase"] in LOAD_PHASES
        assert killed["rss_bytes"] is None and killed["read_rate_bytes_per_s"] is None
    finally:
        if job.running():
            job.kill()
    assert job.finish() != 0


TMUX = shutil.which("tmux")


def _tmux(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env, timeout=30).stdout


def rank_percent(screen: str, rank: int) -> int | None:
    """The ``%`` cell of the rank's row on the screen (columns: rank, pid, status, phase, files, read, of, %, ...)."""
    for line in screen.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) > 7 and cells[0] == str(rank) and cells[2] == "loading" and cells[7].isdigit():
            return int(cells[7])
    return None


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (scripts/setup.sh installs it where it may)")
def test_top_in_a_real_terminal_follows_the_load_and_q_restores_the_terminal(checkpoint, tmp_path):
    job, traces = slow_job(checkpoint, tmp_path, "--delay", "1")
    session = f"loadtrace-top-{os.getpid()}"
    try:
        wait_for(loading(traces, 1), 240, job, why="rank 1 loading")
        command = f"{VENVS[0].bin / 'loadtrace'} top {traces}; echo top-left-with-$?; sleep 120"
        _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "30", command)

        def screen_with_rank_1():
            screen = _tmux("capture-pane", "-p", "-t", session)
            return screen if rank_percent(screen, 1) is not None else None

        first = wait_for(screen_with_rank_1, 60, job, why="rank 1 on the screen")
        assert f"node {socket.gethostname()}" in first and "(q: quit)" in first
        assert "slowest" in first and "of" in first.splitlines()[3]
        before = rank_percent(first, 1)
        later = wait_for(
            lambda: (s := screen_with_rank_1()) and rank_percent(s, 1) > before and s, 60, job, why="the % rising"
        )
        assert rank_percent(later, 1) > before
        _tmux("send-keys", "-t", session, "q")
        left = wait_for(
            lambda: "top-left-with-0" in (s := _tmux("capture-pane", "-p", "-t", session)) and s, 20, why="top leaving"
        )
        assert "loadtrace top" not in left, "the terminal's own screen is back, not top's"
    finally:
        _tmux("kill-session", "-t", session)
        job.kill()


MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")


def _cgroup_or_skip() -> Path:
    if os.geteuid() != 0 or not (MEMORY_CGROUPS / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and the cgroup v1 memory controller (/sys/fs/cgroup/memory)")
    directory = MEMORY_CGROUPS / f"loadtrace-top-test-{os.getpid()}"
    try:
        directory.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    return directory


def test_a_rank_heading_for_its_cgroup_limit_is_marked_oom_ahead_before_the_kill(checkpoint, tmp_path):
    cgroup = _cgroup_or_skip()
    # The whole job runs in the cgroup (as under a container's limit). Rank 1 sets the limit to the cgroup's usage plus
    # 250 MB and keeps 16 MB more per tensor it reads (one a second): the limit in ~15 s; its load needs ~25 s.
    args = ("--delay", "1", "--grow-mb", "16", "--cgroup", str(cgroup), "--headroom-mb", "250")
    inside = ("sh", "-c", f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"', "sh")
    job, traces = slow_job(checkpoint, tmp_path, *args, prefix=inside)
    try:

        def heading_for_oom():
            row = loading(traces, 1)()
            return row if row is not None and semconv.MARK_OOM_AHEAD in row["marks"] else None

        marked = wait_for(heading_for_oom, 240, job, why="rank 1 marked oom_ahead")
        assert marked["limit_source"] == "cgroup v1"
        assert marked["limit_bytes"] == int((cgroup / "memory.limit_in_bytes").read_text())
        assert marked["oom_in_seconds"] < marked["eta_seconds"]
        assert marked["rss_bytes"] < marked["cgroup_usage_bytes"] < marked["limit_bytes"]
        returncode = job.finish(240)
        assert returncode != 0, job.tail()
        oom_kills = re.search(r"oom_kill (\d+)", (cgroup / "memory.oom_control").read_text())
        assert oom_kills is None or int(oom_kills.group(1)) >= 1, "the OOM killer did take it"
        assert rank_of(top_json(VENVS[0], traces), 1)["status"] == "dead"
    finally:
        job.kill()
        remove_cgroup(cgroup)
