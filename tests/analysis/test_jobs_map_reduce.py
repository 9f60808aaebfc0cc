"""``loadtrace jobs`` over a tree of job folders reads it map-reduce (``jobs.jobs_report_of_tree``: forked processes
each read whole folders and hand back their jobs' rows): the same report, byte for byte, as reading every span in
one process; the single-process path where a job's files lie in more than one folder; Ctrl-C leaves no process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.jobtree import write_tree

from loadtrace.analysis import jobs
from loadtrace.analysis.jobs import jobs_report, jobs_report_of_tree
from loadtrace.analysis.model import to_json
from loadtrace.analysis.sources import SourceError, read_files
from loadtrace.cli import main

JOBS, RANKS = 30, 8


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_tree(tmp_path_factory.mktemp("mapreduce") / "tree", JOBS, RANKS)


def one_process(path: Path, where=None, group_by=None) -> str:
    return json.dumps(to_json(jobs_report(read_files(path), where, group_by)))


def cli_json(capsys, monkeypatch, workers: int, *args: str) -> str:
    monkeypatch.setattr(jobs, "_workers", lambda: workers)
    assert main(["jobs", *args, "--format", "json"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "where, group_by", [(None, None), (None, ["cluster"]), (["cluster=beta"], ["host"]), (["cluster=null"], None)]
)
def test_folders_read_in_parts_give_the_same_report(tree, where, group_by):
    parts = jobs_report_of_tree(tree, where, group_by, workers=2)
    assert parts is not None  # read by forked processes
    assert json.dumps(to_json(parts)) == one_process(tree, where, group_by)


def test_the_command_prints_the_same_bytes_with_one_cpu_or_two(tree, capsys, monkeypatch):
    two = cli_json(capsys, monkeypatch, 2, str(tree), "--group-by", "cluster")
    one = cli_json(capsys, monkeypatch, 1, str(tree), "--group-by", "cluster")
    assert two == one and len(json.loads(two)["jobs"]) == JOBS


def test_unreadable_lines_count_the_same(tree, tmp_path):
    copy = shutil.copytree(tree, tmp_path / "tree")
    first = sorted((copy / "bench-00003").glob("*.jsonl"))[0]
    with open(first, "ab") as handle:
        handle.write(b'{"resourceSpans": [\n\xff\xfe not json\n')  # a cut line, and bytes that are not UTF-8
    parts = jobs_report_of_tree(copy, workers=2)
    assert parts is not None and parts.skipped_lines == 2
    assert json.dumps(to_json(parts)) == one_process(copy)


def test_a_job_across_folders_is_read_in_one_process(tree, tmp_path, capsys, monkeypatch):
    copy = shutil.copytree(tree, tmp_path / "tree")
    stray = copy / "zz-stray"  # the last folder, in another part than bench-00001's
    stray.mkdir()
    moved = sorted((copy / "bench-00001").glob("*.jsonl"))[-1]
    moved.rename(stray / moved.name)
    assert jobs_report_of_tree(copy, workers=2) is None
    printed = cli_json(capsys, monkeypatch, 2, str(copy))
    assert printed.strip() == json.dumps(to_json(jobs_report(read_files(copy))), indent=2)
    row = next(row for row in json.loads(printed)["jobs"] if row["job_id"] == "bench-00001")
    assert row["world_size"] == RANKS and len(row["hosts"]) == 2  # the whole job: the moved rank is in it


def test_a_file_few_folders_or_one_cpu_are_read_in_one_process(tree):
    assert jobs_report_of_tree(tree, workers=1) is None
    assert jobs_report_of_tree(next((tree / "bench-00000").glob("*.jsonl")), workers=2) is None
    assert jobs_report_of_tree(tree / "bench-00000", workers=2) is None  # one folder


def _processes_reading(path: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(path).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find processes")
def test_ctrl_c_ends_the_workers_too(tmp_path):
    big = write_tree(tmp_path / "big-tree", 200, RANKS)
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


def test_a_file_a_worker_cannot_read_is_one_line_and_exit_2(tree, capsys, monkeypatch):
    def unreadable(files, states, parallel=False):
        raise SourceError(f"{files[0]}: Permission denied")

    monkeypatch.setattr(jobs, "read_sources", unreadable)  # in the forked workers too
    monkeypatch.setattr(jobs, "_workers", lambda: 2)
    assert main(["jobs", str(tree)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("loadtrace: error: ") and captured.err.endswith(": Permission denied\n")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find processes")
def test_workers_end_when_their_parent_is_killed(tmp_path):
    big = write_tree(tmp_path / "big-tree", 200, RANKS)
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
