"""``loadtrace jobs`` over a tree of job folders reads it map-reduce (``jobs.jobs_report_of_tree``: forked processes
each read whole folders and hand back their jobs' rows): the same report, byte for byte, as reading every span in
one process; the single-process path where a job's files lie in more than one folder; Ctrl-C leaves no process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.jobtree import write_tree

JOBS, RANKS = 30, 8


def _processes_reading(path: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(path).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A tree large enough that ``loadtrace jobs`` is still reading it when it is stopped; read, never changed."""
    return write_tree(tmp_path_factory.mktemp("jobs") / "big-tree", 200, RANKS)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find processes")
def test_ctrl_c_ends_the_workers_too(big):
    command = [str(Path(sys.executable).with_name("loadtrace")), "jobs", str(big)]
    # Its own process group, as a terminal's: Ctrl-C goes to every process of it.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 30
    while len(_processes_reading(big)) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # until the workers are forked
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode in (0, 130), err  # 0: it had finished already
    assert b"Traceback" not in err
    deadline = time.monotonic() + 10
    while _processes_reading(big) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_reading(big) == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find processes")
def test_workers_end_when_their_parent_is_killed(big):
    command = [str(Path(sys.executable).with_name("loadtrace")), "jobs", str(big)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(_processes_reading(big)) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # until both workers are forked
    process.send_signal(signal.SIGSTOP)  # the workers run out of work and wait for more
    time.sleep(1)
    process.kill()  # no chance to end them itself
    process.wait()
    deadline = time.monotonic() + 10
    while _processes_reading(big) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_reading(big) == []
