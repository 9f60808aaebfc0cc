"""Promise (issue 48, point 3): the closing line counts what the report counts for the same run, always.

Real ``torchrun`` launches of one job id (``support/relaunch.py``): both ranks crash in their own code after the
rendezvous (an untraced launcher: rank 0 says the line itself), rank 0 crashes in its own code while rank 1 loads (it
printed "1 finding; rank 0 slow" where the report said none), both load into the same folder again (it printed "2
findings" where each run has 1), and into another folder; and the session's killed-rank job (rank 1 SIGKILLed while
loading, rank 0 stopped by torchrun: no line at all before). Each launch's one closing line is the report's own line of
that run, read after the job.
"""

from __future__ import annotations

import re

import pytest
from support.installed import job_dir, report, require_installed
from support.killed_rank import killed_rank_job
from support.relaunch import JOB_ID, Relaunched, relaunched
from support.venvs import discover

VENVS = discover()
COMMAND = re.compile(r" → (loadtrace report .+)$")


@pytest.fixture(scope="module")
def launches(checkpoint, tmp_path_factory) -> Relaunched:
    venv = VENVS[0]
    require_installed(venv)
    return relaunched(venv, checkpoint, tmp_path_factory)


def report_lines(folder) -> list[str]:
    """``loadtrace report --format line`` over the folder after the jobs, as a user runs it: one line per run."""
    code, out, err = report(VENVS[0], folder, "--format", "line")
    assert code in (0, 1) and err == "", err
    lines = out.splitlines()
    return lines if len(lines) > 1 else [f"job {JOB_ID}, {lines[0]}"]


def closing_line(log: str) -> tuple[str, str]:
    """The launch's one closing line: (what it says of the run, the command it gives)."""
    said = [line for line in log.splitlines() if line.startswith("loadtrace: job ")]
    assert len(said) == 1, log[-3000:]
    match = COMMAND.search(said[0])
    assert match, said
    return said[0][len("loadtrace: ") : match.start()], match.group(1)


@pytest.mark.parametrize(
    "name, run",
    [("crashed", 0), ("half", 1), ("loaded", 2)],
    ids=["both-crash-untraced-launcher", "crash-in-user-code", "reused-id"],
)
def test_each_launch_s_closing_line_is_its_run_s_report_line(launches: Relaunched, name: str, run: int):
    said, command = closing_line(launches.launches[name].log)
    assert said == report_lines(launches.folder)[run]
    assert command == f"loadtrace report loadtrace-traces/{JOB_ID}"


def test_the_crash_in_user_code_judges_no_rank_against_the_one_that_never_got_ready(launches: Relaunched):
    """Rank 0 raised before its load: its startup ran to its last activity before the crash; rank 1, which loaded,
    was said slow against it."""
    said, _ = closing_line(launches.launches["half"].log)
    assert " slow" not in said, said


def test_the_reused_id_counts_its_own_run_only(launches: Relaunched):
    said, _ = closing_line(launches.launches["loaded"].log)
    assert said == f"job {JOB_ID}, run 3, 2 ranks, 1 finding", said  # replicated_load: each run's own, not 2


def test_a_launch_into_another_folder_counts_that_folder_s_run(launches: Relaunched):
    said, command = closing_line(launches.launches["elsewhere"].log)
    assert said == report_lines(launches.elsewhere)[0] == f"job {JOB_ID}, 2 ranks, 1 finding"
    assert command == f"loadtrace report elsewhere --job {JOB_ID}"


def test_a_job_with_a_killed_rank_says_its_line(checkpoint, tmp_path_factory):
    """The session's killed-rank job: rank 1 SIGKILLed while loading, rank 0 (loaded, waiting) stopped by torchrun's
    SIGTERM; the launcher says the line once both are done and rank 1's death is written."""
    run = killed_rank_job(VENVS[0], checkpoint, tmp_path_factory)
    folder = job_dir(run)
    said, command = closing_line(run.log.read_text(errors="replace"))
    code, out, err = report(VENVS[0], folder, "--format", "line")
    assert said == f"job {folder.name}, {out.strip()}" and "rank 1 incomplete (SIGKILL)" in said, (said, out)
    assert command == f"loadtrace report loadtrace-traces/{folder.name}"
