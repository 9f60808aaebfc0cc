"""Promise: ``loadtrace top`` shows a load while it happens, from the ranks' state files: a slow rank's bytes rising
between two snapshots, its phase and the bytes it will read; the same in a real terminal (tmux), left with ``q``; a
rank SIGKILLed mid-load as dead; a rank heading for its cgroup's limit marked ``oom_ahead`` before the OOM killer
takes it. The jobs are real (torchrun, 2 ranks, gloo) and slowed on their own side: rank 1 sleeps before each tensor
it reads, as on slow storage; the observer only polls (support/live.py: each job runs once per session, watched by
``top --once --format json`` and by ``top`` in tmux at once; test_progress_metrics_wire.py and
test_witness_of_real_jobs.py read the same jobs)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from support.live import TMUX, HeadingForOom, Watched, heading_for_oom, rank_percent, tmux, wait_for, watched_slow_load
from support.venvs import discover

from loadtrace import semconv

VENVS = discover()
CHECKPOINT_TENSOR_BYTES = 1_009_152
LOAD_PHASES = {semconv.SPAN_FROM_PRETRAINED, semconv.SPAN_CONVERT, semconv.SPAN_LOAD_STATE_DICT}


@pytest.fixture(scope="module")
def watched(checkpoint, tmp_path_factory) -> Watched:
    return watched_slow_load(VENVS[0], checkpoint, tmp_path_factory)


def test_top_once_json_follows_a_slow_load_and_a_killed_rank_is_dead(watched):
    first, second, killed = watched.first, watched.second, watched.killed
    for row in (first, second):
        assert row["phase"] in LOAD_PHASES, row
        assert row["expected_bytes"] == CHECKPOINT_TENSOR_BYTES
        assert 0 < row["percent"] < 100 and row["read_rate_bytes_per_s"] > 0 and row["eta_seconds"] > 0
        assert row["host"] == socket.gethostname() and row["pid"] > 0 and row["files_opened"] >= 1
        assert row["rss_bytes"] > 0 and row["limit_bytes"] > 0 and row["seconds_since_progress"] < 30
    assert second["read_bytes"] > first["read_bytes"]
    assert semconv.MARK_SLOWEST in second["marks"] and semconv.MARK_STUCK not in second["marks"]
    assert watched.rank0 is not None and watched.rank0["status"] in ("loading", "idle")
    # Then SIGKILLed mid-load, as the OOM killer would.
    assert killed["read_bytes"] >= second["read_bytes"] and killed["phase"] in LOAD_PHASES
    assert killed["rss_bytes"] is None and killed["read_rate_bytes_per_s"] is None
    assert watched.returncode != 0


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (scripts/setup.sh installs it where it may)")
def test_top_in_a_real_terminal_follows_the_load_and_q_restores_the_terminal(watched):
    assert watched.screens is not None
    first, later, left = watched.screens["first"], watched.screens["later"], watched.screens["left"]
    assert f"node {socket.gethostname()}" in first and "(q: quit)" in first
    assert "slowest" in first and "of" in first.splitlines()[3]
    assert (rank_percent(later, 1) or 0) > (rank_percent(first, 1) or 0)
    assert "loadtrace top" not in left, "the terminal's own screen is back, not top's"


@pytest.fixture(scope="module", autouse=True)
def top_waiting(tmp_path_factory):
    """``timeout 6 loadtrace top DIR-not-made-yet``, started with this module: it only waits, so it waits while the
    other tests' jobs run."""
    folder = tmp_path_factory.mktemp("top-waits") / "DIR-not-made-yet"
    command = ["timeout", "6", str(VENVS[0].bin / "loadtrace"), "top", str(folder)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield folder, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_top_started_before_the_job_waits_for_its_folder_and_says_so_once(top_waiting):
    """Issue 34: ``timeout 6 loadtrace top DIR-not-made-yet`` exited at once (``not a folder``, exit 2). Like
    ``tail -F`` it waits, saying so once, until the timeout ends it (124)."""
    folder, proc = top_waiting
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 124, (proc.returncode, stderr)  # still waiting when the timeout ended it
    assert stderr.count("\n") == 1 and stderr.startswith(f"loadtrace top: waiting for {folder} to appear ")


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (scripts/setup.sh installs it where it may)")
def test_top_shows_the_folder_once_the_job_has_made_it(tmp_path):
    folder = tmp_path / "traces"
    session = f"loadtrace-top-wait-{os.getpid()}"

    def screen(text: str):
        return lambda: text in (found := tmux("capture-pane", "-p", "-t", session)) and found

    try:
        command = f"{VENVS[0].bin / 'loadtrace'} top {folder}; echo top-left-with-$?; sleep 120"
        tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "30", command)
        wait_for(screen(f"waiting for {folder} to appear"), 10, why="top waiting")
        folder.mkdir()
        shown = wait_for(screen("no rank has begun a load here yet"), 10, why="the folder shown once made")
        assert f"loadtrace top  {folder}" in shown and "(q: quit)" in shown
        tmux("send-keys", "-t", session, "q")
        wait_for(screen("top-left-with-0"), 10, why="top leaving")
    finally:
        tmux("kill-session", "-t", session)


def test_top_once_and_a_file_are_still_one_line(tmp_path):
    """``--once`` is for scripts: a snapshot of a folder that is not there yet is an error, not a wait."""
    not_yet, a_file = tmp_path / "not-yet", tmp_path / "file"
    a_file.write_text("")
    for folder, said in ((not_yet, "no such folder yet"), (a_file, "not a folder")):
        done = subprocess.run(
            [str(VENVS[0].bin / "loadtrace"), "top", str(folder), "--once"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_a_rank_heading_for_its_cgroup_limit_is_marked_oom_ahead_before_the_kill(checkpoint, tmp_path_factory):
    """The whole job runs in the cgroup (as under a container's limit); rank 1 heads for its limit while loading."""
    run: HeadingForOom = heading_for_oom(VENVS[0], checkpoint, tmp_path_factory)
    marked = run.marked
    assert marked["limit_source"] == "cgroup v1"
    assert marked["limit_bytes"] == run.limit_bytes
    assert marked["oom_in_seconds"] < marked["eta_seconds"]
    assert marked["rss_bytes"] < marked["cgroup_usage_bytes"] < marked["limit_bytes"]
    assert run.returncode != 0, run.log[-3000:]
    assert run.oom_kills is None or run.oom_kills >= 1, "the OOM killer did take it"
    assert run.after is not None and run.after["status"] == "dead"
