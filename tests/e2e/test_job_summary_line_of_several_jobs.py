"""Promise (issue 15), with real jobs (the line itself: in_job/test_job_summary_line.py): several jobs into one
folder, each job's own line from rank 0 names it, and ``report loadtrace-traces/ --latest`` reports the one just run."""

from __future__ import annotations

import json
import os
import re

from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.cli import main

LINE = re.compile(r"^loadtrace: job (\S+), (\d+) ranks, (\d+) findings? → (loadtrace report .+)$", re.MULTILINE)

VENVS = discover()


def report(capsys, *args: str) -> dict:
    """``loadtrace report ARGS --format json``, run in this process from the jobs' folder."""
    assert main(["report", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_several_jobs_into_one_folder_each_says_its_line_and_latest_reports_the_one_just_run(
    checkpoint, tmp_path, capsys, monkeypatch
):
    """The acceptance of issue 15: a user who reuses a folder for job after job reports the one just run with
    ``loadtrace report loadtrace-traces/ --latest``, or with the command rank 0 printed. Two jobs of different modes:
    the first one's report is the whole folder's, the second's is not."""
    venv = VENVS[0]
    monkeypatch.chdir(tmp_path)
    seen = []
    for mode in ("fsdp", "plain"):
        run = torchrun(
            venv,
            REPO / "examples" / "load.py",
            [str(checkpoint), "--mode", mode],
            cwd=tmp_path,
            env={"LOADTRACE": "1", "LOADTRACE_QUIET": "0"},
        ).check()
        log = run.log.read_text()
        lines = LINE.findall(log)
        assert len(lines) == 1 and log.count("loadtrace:") == 1, log[-3000:]  # rank 0 alone, nothing else said
        job_id, ranks, findings, command = lines[0]
        assert command == f"loadtrace report loadtrace-traces/{job_id}" and ranks == "2" and job_id not in seen
        seen.append(job_id)
        for reported in (report(capsys, *command.split()[2:]), report(capsys, "loadtrace-traces/", "--latest")):
            assert [trace["job_id"] for trace in reported["traces"]] == [job_id]
            assert len(reported["findings"]) == int(findings) and len(reported["ranks"]) == 2
        assert int(findings) == (3 if mode == "fsdp" else 1)  # FSDP on 5.24: rank 1 reads, converts, holds; plain: info
    assert len(report(capsys, "loadtrace-traces/")["traces"]) == 2
    assert os.listdir(tmp_path / "loadtrace-traces") and len(seen) == 2
