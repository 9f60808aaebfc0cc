"""Promise (issue 15): a traced job says where its trace went, in one line from rank 0, and one short command reports
the job just run even in a folder of many.

- Rank 0, at exit: ``loadtrace: job <id>, 2 ranks, 3 findings → loadtrace report loadtrace-traces/<id>``, the path as
  the user types it (relative to where the job ran), ``--job ID`` added where ``LOADTRACE_DIR`` is shared by jobs; with
  spans only over OTLP, the Jaeger command. No other rank says anything; ``LOADTRACE_QUIET=1`` silences it.
- Bounded: the counts come from ``loadtrace report`` in a child process; when it does not answer in time the line goes
  without them, and the job's exit is not held longer than ``summary.TIMEOUT_S``.
- Real runs: several jobs into one folder, each job's own line names it, and ``report loadtrace-traces/ --latest``
  reports the one just run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from support.paths import SPANS

from loadtrace import semconv, statefile
from loadtrace.instrumentation import settings
from loadtrace.instrumentation.exporting import summary

FIXTURES = SPANS

FSDP524_JOB = "cc2eef90-40e1-446d-ac10-d780c6600db0"  # tests/fixtures/spans/fsdp524: 2 ranks, 3 findings

LINE = re.compile(r"^loadtrace: job (\S+), (\d+) ranks, (\d+) findings? → (loadtrace report .+)$", re.MULTILINE)


def job_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    for path in (FIXTURES / "fsdp524").iterdir():
        shutil.copy(path, folder / path.name)
    return folder


def test_rank_0_names_its_job_its_counts_and_the_command_as_typed_from_where_it_ran(tmp_path, monkeypatch):
    folder = job_folder(tmp_path / "loadtrace-traces", FSDP524_JOB)
    monkeypatch.chdir(tmp_path)
    said = summary.line(FSDP524_JOB, str(folder / "rank00000-vm-1.jsonl"), None, local_world_size=2)
    assert (
        said == f"loadtrace: job {FSDP524_JOB}, 2 ranks, 3 findings → loadtrace report loadtrace-traces/{FSDP524_JOB}"
    )
    monkeypatch.chdir(tmp_path / "loadtrace-traces")  # a folder above the job's: the path from there
    said = summary.line(FSDP524_JOB, str(folder / "rank00000-vm-1.jsonl"), None, local_world_size=2)
    assert said.endswith(f"→ loadtrace report {FSDP524_JOB}")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # not below: the absolute path
    assert summary.line(FSDP524_JOB, str(folder / "x.jsonl"), None, 2).endswith(f"loadtrace report {folder}")


def test_a_shared_loadtrace_dir_adds_the_job_to_the_command(tmp_path, monkeypatch):
    shared = job_folder(tmp_path, "shared")
    job_folder(tmp_path / "shared", "older-job")  # another job's files in the same tree
    monkeypatch.chdir(tmp_path)
    said = summary.line(FSDP524_JOB, str(shared / "rank00000-vm-1.jsonl"), None, local_world_size=2)
    assert said == f"loadtrace: job {FSDP524_JOB}, 2 ranks, 3 findings → loadtrace report shared --job {FSDP524_JOB}"


def test_one_rank_of_two_here_says_so(tmp_path, monkeypatch):
    folder = job_folder(tmp_path / "loadtrace-traces", FSDP524_JOB)
    next(folder.glob("rank00001-*")).unlink()  # the other rank ran on another node
    monkeypatch.chdir(tmp_path)
    said = summary.line(FSDP524_JOB, str(folder / "rank00000-vm-1.jsonl"), None, local_world_size=1)
    assert said.startswith(f"loadtrace: job {FSDP524_JOB}, 1 of 2 ranks here, ")


def test_spans_only_over_otlp_point_to_jaeger():
    trace_id = format(semconv.job_trace_ids("job-7")[0], "032x")
    said = summary.line("job-7", None, "http://collector.example:4318", local_world_size=2)
    assert said == (
        f"loadtrace: job job-7, trace {trace_id} sent to http://collector.example:4318 → "
        "loadtrace report --jaeger http://collector.example:16686 --latest"
    )


def test_a_report_that_does_not_answer_in_time_leaves_the_counts_out_and_the_exit_bounded(tmp_path, monkeypatch):
    folder = job_folder(tmp_path / "loadtrace-traces", FSDP524_JOB)
    stuck = tmp_path / "stuck-python"
    stuck.write_text("#!/bin/sh\nsleep 60\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(summary.sys, "executable", str(stuck))
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    said = summary.line(FSDP524_JOB, str(folder / "r.jsonl"), None, local_world_size=2, timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + 1.0  # the timeout, plus killing the child
    assert said == f"loadtrace: job {FSDP524_JOB} → loadtrace report loadtrace-traces/{FSDP524_JOB}"
    monkeypatch.setattr(summary.sys, "executable", "")  # an embedded interpreter: no child at all
    assert summary.line(FSDP524_JOB, str(folder / "r.jsonl"), None, 2, timeout_s=0.5).endswith(FSDP524_JOB)


def test_only_rank_0_speaks_and_quiet_silences_it(tmp_path, monkeypatch, capsys):
    folder = job_folder(tmp_path / "loadtrace-traces", FSDP524_JOB)
    monkeypatch.chdir(tmp_path)
    loud, quiet = settings.from_env({}), settings.from_env({"LOADTRACE_QUIET": "1"})
    assert (loud.quiet, quiet.quiet) == (False, True)
    trace_file = str(folder / "rank00000-vm-1.jsonl")
    for rank, chosen in ((1, loud), (None, loud), (0, quiet)):
        summary.say(chosen, FSDP524_JOB, rank, 2, trace_file)
    assert capsys.readouterr().err == ""
    summary.say(loud, FSDP524_JOB, 0, 2, trace_file)
    assert LINE.fullmatch(capsys.readouterr().err.rstrip("\n"))
    monkeypatch.setattr(summary, "line", lambda *args: 1 / 0)  # a fault of ours never reaches the job
    summary.say(loud, FSDP524_JOB, 0, 2, trace_file)
    assert capsys.readouterr().err == ""


# Issue 48, point 3: counted once the run is over on this node, by whoever sees it end -------------------------------


def job_1_folder(tmp_path: Path) -> Path:
    """job-1 (support/dead_rank_jobs.py): both ranks loaded, rank 0's state (this process) exited, in
    ``loadtrace-traces/job-1``."""
    from support.dead_rank_jobs import JOB, TRACE, full_job
    from support.otlp_lines import write_lines

    folder = tmp_path / "loadtrace-traces" / JOB
    write_lines(folder / "spans.jsonl", full_job())
    identity = {"pid": os.getpid(), "rank": 0, "local_rank": 0, "world_size": 2, "local_world_size": 2, "attempt": 0}
    texts = {"job_id": JOB, "host": HOST, "trace_id": TRACE, "trace_file": str(folder / "spans.jsonl")}
    state = statefile.Writer(str(folder / f"rank00000-{HOST}-{os.getpid()}.state"), identity, texts)
    state["status"] = statefile.STATUS_EXITED
    state["updated_ns"] = time.time_ns()
    return folder


HOST = summary.socket.gethostname()


def test_a_rank_still_running_leaves_the_counts_out_and_says_so(tmp_path, monkeypatch):
    """A crash in rank 0's own code while rank 1 still starts: counts taken then would not be the report's (rank 1's
    startup not over, its end not yet known), so there are none, and the line says why."""
    from support.dead_rank_jobs import state_file

    folder = job_1_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(summary, "PEER_WAIT_S", 0.3)
    with subprocess.Popen(["sleep", "30"]) as alive:
        try:
            state_file(folder, 1, status=statefile.STATUS_IDLE, pid=alive.pid, host=HOST, updated=time.time_ns())
            said = summary.line("job-1", str(folder / "spans.jsonl"), None, 2, since_ns=time.time_ns() - 10**9)
        finally:
            alive.kill()
    assert said == (
        "loadtrace: job job-1 (rank 1 still running: no counts before the run is over) → "
        "loadtrace report loadtrace-traces/job-1"
    )


def test_ranks_that_ended_or_belong_to_an_earlier_launch_do_not_hold_the_counts(tmp_path, monkeypatch):
    """Rank 1 killed (its state says loading, its pid is gone) ended; a rank 1 of an earlier launch of the job id
    (updated before this run began) is not of this run, whatever its state says."""
    from support.dead_rank_jobs import state_file

    folder = job_1_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    state_file(folder, 1, status=statefile.STATUS_LOADING, pid=gone.pid, host=HOST, updated=time.time_ns())
    with subprocess.Popen(["sleep", "30"]) as alive:
        try:
            state_file(
                folder, 1, status=statefile.STATUS_IDLE, pid=alive.pid, host=HOST, updated=time.time_ns() - 60 * 10**9
            )
            said = summary.line("job-1", str(folder / "spans.jsonl"), None, 2, since_ns=time.time_ns() - 10**9)
        finally:
            alive.kill()
    assert said.startswith("loadtrace: job job-1, 2 ranks, 2 findings; rank 1 incomplete → "), said


def test_under_a_witnessing_launcher_the_launcher_says_it(tmp_path, monkeypatch, capsys):
    """Rank 0 leaves the line to the launcher that runs its workers (LOADTRACE_WITNESS_DIR), which says it from rank
    0's state once every worker is done: rank 0 killed or stopped with the job is told of too."""
    folder = job_1_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    loud = settings.from_env({})
    monkeypatch.setenv(semconv.ENV_WITNESS_DIR, str(tmp_path))
    summary.say(loud, "job-1", 0, 2, str(folder / "spans.jsonl"), started_ns=0)
    assert capsys.readouterr().err == ""
    (state_path,) = folder.glob("rank00000-*.state")
    summary.said_by_launcher(loud, statefile.read(state_path))
    assert LINE.fullmatch(capsys.readouterr().err.rstrip("\n"))
    summary.said_by_launcher(settings.from_env({"LOADTRACE_QUIET": "1"}), statefile.read(state_path))
    assert capsys.readouterr().err == ""
