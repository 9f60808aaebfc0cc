"""A torchrun job left running in the background, to be watched while it loads (``loadtrace top``, OTLP metrics), and
the two watched scenarios several test files assert on, each run once per session.

The same command and clean environment as ``support.torchrun.torchrun``, but started and handed back at once; the
caller polls what it wants to see while the job really runs, then ``finish``es it (killing its process group when it
outlives its timeout). The job is slowed on its own side (``tests/workers/slow_load.py``: rank 1 sleeps before each
tensor it reads, as on slow storage); the observer only polls, and kills when it has seen what it came for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadtrace import semconv

from .cgroups import memory_cgroup, remove_cgroup
from .paths import WORKERS
from .shared import once
from .torchrun import command, launch
from .venvs import Venv
from .wire import HttpReceiver

SLOW_WORKER = WORKERS / "slow_load.py"
TMUX = shutil.which("tmux")
PROGRESS_INTERVAL_S = 0.5  # the watched job's LOADTRACE_PROGRESS_INTERVAL
PROGRESS_EXPORTS = 6  # rank 1's progress exports the watcher waits for before it kills rank 1


class Job:
    def __init__(self, venv: Venv, script: Path, args: list[str], cwd: Path, env: dict[str, str], prefix=()):
        self.venv, self.cwd = venv, cwd
        self.proc, self.log = launch(venv, [*prefix, *command(venv, script, args)], cwd, env)

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout_s: float = 300) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def top_json(venv: Venv, folder: Path) -> dict[str, Any]:
    """``loadtrace top FOLDER --once --format json``, run as a user runs it (the installed CLI)."""
    result = subprocess.run(
        [str(venv.bin / "loadtrace"), "top", str(folder), "--once", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def rank_of(snapshot: dict[str, Any], rank: int) -> dict[str, Any] | None:
    return next((row for row in snapshot["ranks"] if row["rank"] == rank), None)


def wait_for(
    what: Callable[[], Any], timeout_s: float, job: Job | None = None, every_s: float = 0.2, why: str = ""
) -> Any:
    """Poll ``what`` until it returns something truthy; fail (with the job's log) when time runs out or the job ends
    first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        if job is not None and not job.running():
            found = what()
            if found:
                return found
            raise AssertionError(f"the job ended before {why or 'the wait was over'}:\n{job.tail()}")
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {why}" + (f":\n{job.tail()}" if job is not None else ""))


def loading(venv: Venv, traces: Path, rank: int, at_least: int = 1) -> Callable[[], dict[str, Any] | None]:
    """A check for ``wait_for``: the rank's row once it is loading and has read ``at_least`` bytes."""

    def check():
        if not traces.is_dir():
            return None
        row = rank_of(top_json(venv, traces), rank)
        return row if row is not None and row["status"] == "loading" and row["read_bytes"] >= at_least else None

    return check


def tmux(*args: str) -> str:
    # The program in the terminal takes its size from the terminal (-x, -y), as in a person's: pytest-xdist's workers
    # have COLUMNS=80 and LINES=24 in their environment, which the tmux server would pass on and curses would obey.
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "COLUMNS", "LINES")}
    return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env, timeout=30).stdout


def rank_percent(screen: str, rank: int) -> int | None:
    """The ``%`` cell of the rank's row on the screen (columns: rank, pid, status, phase, files, read, of, %, ...)."""
    for line in screen.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) > 7 and cells[0] == str(rank) and cells[2] == "loading" and cells[7].isdigit():
            return int(cells[7])
    return None


# A slow load, watched, then rank 1 SIGKILLed mid-load ----------------------------------------------------------------


@dataclass
class Watched:
    """What was seen of one slow job: rank 1's ``loadtrace top --once --format json`` rows (``first`` once it loads,
    ``second`` once its bytes rose, ``killed`` once shown dead after its SIGKILL) and rank 0's; ``loadtrace top`` in a
    real terminal (tmux: its ``first`` screen with rank 1, a ``later`` one with rank 1's % risen, and the one ``left``
    after ``q``; None without tmux); and the progress metrics every process exported meanwhile over OTLP/HTTP."""

    traces: Path  # LOADTRACE_DIR: the state files and traces
    launcher_pid: int
    returncode: int
    log: str  # torchrun's output
    first: dict[str, Any]
    second: dict[str, Any]
    rank0: dict[str, Any] | None
    killed: dict[str, Any]
    screens: dict[str, str] | None
    metrics: list[Any]  # ExportMetricsServiceRequest, in arrival order


def watch_in_tmux(venv: Venv, traces: Path, job: Job) -> dict[str, str]:
    session = f"loadtrace-top-{os.getpid()}"
    command = f"{venv.bin / 'loadtrace'} top {traces}; echo top-left-with-$?; sleep 120"
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "30", command)
    try:

        def screen_with_rank_1():
            screen = tmux("capture-pane", "-p", "-t", session)
            return screen if rank_percent(screen, 1) is not None else None

        first = wait_for(screen_with_rank_1, 60, job, why="rank 1 on the screen")
        before = rank_percent(first, 1) or 0
        later = wait_for(
            lambda: (s := screen_with_rank_1()) and (rank_percent(s, 1) or 0) > before and s,
            60,
            job,
            why="the % rising",
        )
        tmux("send-keys", "-t", session, "q")
        left = wait_for(
            lambda: "top-left-with-0" in (s := tmux("capture-pane", "-p", "-t", session)) and s, 20, why="top leaving"
        )
    finally:
        tmux("kill-session", "-t", session)
    return {"first": first, "later": later, "left": left}


def exports_of(metrics: list[Any], pid: int) -> int:
    """How many of the export requests came from process ``pid`` (its Resource's ``process.pid``)."""
    return sum(
        any(kv.key == semconv.PROCESS_PID and kv.value.int_value == pid for kv in rm.resource.attributes)
        for request in metrics
        for rm in request.resource_metrics
    )


def _watch(venv: Venv, checkpoint: Path, cwd: Path) -> Watched:
    traces = cwd / "traces"
    with HttpReceiver() as receiver:
        env = {
            "LOADTRACE": "1",
            "HF_DEACTIVATE_ASYNC_LOAD": "1",
            "LOADTRACE_DIR": str(traces),
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "LOADTRACE_PROGRESS_INTERVAL": str(PROGRESS_INTERVAL_S),
        }
        job = Job(venv, SLOW_WORKER, [str(checkpoint), "--delay", "1"], cwd, env)
        try:
            first = wait_for(loading(venv, traces, 1), 240, job, why="rank 1 loading")
            screens = watch_in_tmux(venv, traces, job) if TMUX else None
            second = wait_for(loading(venv, traces, 1, first["read_bytes"] + 1), 60, job, why="rank 1's bytes rising")
            rank0 = rank_of(top_json(venv, traces), 0)
            wait_for(
                lambda: exports_of(receiver.received.metrics, second["pid"]) >= PROGRESS_EXPORTS,
                60,
                job,
                why=f"{PROGRESS_EXPORTS} progress exports from rank 1",
            )
            os.kill(second["pid"], signal.SIGKILL)  # mid-load, as the OOM killer would

            def dead():
                row = rank_of(top_json(venv, traces), 1)
                return row if row["status"] == "dead" else None

            killed = wait_for(dead, 60, why="rank 1 shown dead")
        finally:
            if job.running():
                job.kill()
        returncode = job.finish()
        metrics = list(receiver.received.metrics)
    return Watched(
        traces,
        job.proc.pid,
        returncode,
        job.log.read_text(errors="replace"),
        first,
        second,
        rank0,
        killed,
        screens,
        metrics,
    )


def watched_slow_load(venv: Venv, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Watched:
    """The slow job (rank 1 sleeps 1 s before each tensor it reads), watched by ``loadtrace top`` and an OTLP receiver
    of its progress metrics every ``PROGRESS_INTERVAL_S``, then rank 1 SIGKILLed: run once per session."""
    return once(
        tmp_path_factory,
        ("watched", str(venv.root), str(checkpoint)),
        lambda: _watch(venv, checkpoint, tmp_path_factory.mktemp("watched")),
    )


# A rank heading for its cgroup's limit, until the OOM killer takes it ------------------------------------------------


@dataclass
class HeadingForOom:
    """One slow job run whole inside a memory cgroup whose limit rank 1 sets to the cgroup's usage plus 250 MB, keeping
    16 MB more per tensor it reads (one a second: the limit in ~15 s; its load needs ~70 s): rank 1's ``top`` row once
    marked ``oom_ahead`` and the limit then, how the job ended, and rank 1's row after."""

    traces: Path
    marked: dict[str, Any]
    limit_bytes: int
    returncode: int
    log: str
    oom_kills: int | None  # the cgroup's count of OOM kills (None where the kernel does not count them)
    after: dict[str, Any] | None


def _head_for_oom(venv: Venv, checkpoint: Path, cwd: Path) -> HeadingForOom:
    cgroup = memory_cgroup("loadtrace-oom-ahead", None)
    traces = cwd / "traces"
    try:
        # 6 MB a tensor, 1 s apart, against 250 MB of headroom taken once both ranks' imports are resident: the kill
        # comes ~35 tensors in, of the 69 the load would take, and `top` can see it coming for ~30 s: wide enough for a
        # loaded suite's polling (the imports used to eat the headroom, leaving ~3 s, which a busy machine missed).
        args = [str(checkpoint), "--delay", "1", "--grow-mb", "6", "--cgroup", str(cgroup), "--headroom-mb", "250"]
        inside = ("sh", "-c", f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"', "sh")
        env = {"LOADTRACE": "1", "HF_DEACTIVATE_ASYNC_LOAD": "1", "LOADTRACE_DIR": str(traces)}
        job = Job(venv, SLOW_WORKER, args, cwd, env, prefix=inside)
        try:

            def heading_for_oom():
                row = loading(venv, traces, 1)()
                return row if row is not None and semconv.MARK_OOM_AHEAD in row["marks"] else None

            marked = wait_for(heading_for_oom, 240, job, why="rank 1 marked oom_ahead")
            limit = int((cgroup / "memory.limit_in_bytes").read_text())
            returncode = job.finish(240)
            counted = re.search(r"oom_kill (\d+)", (cgroup / "memory.oom_control").read_text())
            after = rank_of(top_json(venv, traces), 1)
        finally:
            job.kill()
    finally:
        remove_cgroup(cgroup)
    oom_kills = None if counted is None else int(counted.group(1))
    return HeadingForOom(traces, marked, limit, returncode, job.log.read_text(errors="replace"), oom_kills, after)


def heading_for_oom(venv: Venv, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> HeadingForOom:
    """The job whose rank 1 heads for its cgroup's limit until the OOM killer takes it: run once per session (skipped
    where no memory cgroup can be made)."""
    return once(
        tmp_path_factory,
        ("oom", str(venv.root), str(checkpoint)),
        lambda: _head_for_oom(venv, checkpoint, tmp_path_factory.mktemp("oom")),
    )
