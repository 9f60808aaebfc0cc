"""Promise (issue 15), with real jobs (the line itself: in_job/test_job_summary_line.py): several jobs into one
folder, each job's own line from rank 0 names it, and ``report loadtrace-traces/ --latest`` reports the one just run."""

from __future__ import annotations

import json
import os
import re
import subprocess

from support.torchrun import torchrun
from support.venvs import REPO, discover

LINE = re.compile(r"^loadtrace: job (\S+), (\d+) ranks, (\d+) findings? → (loadtrace report .+)$", re.MULTILINE)

VENVS = discover()


def test_several_jobs_into_one_folder_each_says_its_line_and_latest_reports_the_one_just_run(checkpoint, tmp_path):
    """The acceptance of issue 15: a user who reuses a folder for job after job reports the one just run with
    ``loadtrace report loadtrace-traces/ --latest``, or with the command rank 0 printed."""
    venv = VENVS[0]
    loadtrace = [str(venv.python), "-m", "loadtrace", "report"]
    seen = []
    for mode in ("fsdp", "plain", "fsdp"):
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
        reported = subprocess.run(
            [*loadtrace, *command.split()[2:], "--format", "json"], cwd=tmp_path, capture_output=True, text=True
        )
        latest = subprocess.run(
            [*loadtrace, "loadtrace-traces/", "--latest", "--format", "json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        for result in (reported, latest):
            report = json.loads(result.stdout)
            assert [trace["job_id"] for trace in report["traces"]] == [job_id], result.stderr
            assert len(report["findings"]) == int(findings) and len(report["ranks"]) == 2
        assert int(findings) == (3 if mode == "fsdp" else 1)  # FSDP on 5.24: rank 1 reads, converts, holds; plain: info
    everything = subprocess.run(
        [*loadtrace, "loadtrace-traces/", "--format", "json"], cwd=tmp_path, capture_output=True
    )
    assert len(json.loads(everything.stdout)["traces"]) == 3
    assert os.listdir(tmp_path / "loadtrace-traces") and len(seen) == 3
