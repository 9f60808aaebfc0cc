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

import re
import shutil
import time
from pathlib import Path

from support.paths import SPANS

from loadtrace import semconv
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
