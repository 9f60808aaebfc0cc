"""Promise: a rank SIGKILLed in the middle of loading (the OOM killer's signal) leaves every span it finished and its
last state on disk, and `loadtrace report` says which phase it died in and how many bytes it had read by then."""

from __future__ import annotations

import json

import pytest
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files

VENVS = discover()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not VENVS, reason="no venv with torchrun and transformers")]


def test_report_names_the_phase_a_killed_rank_died_in(checkpoint, tmp_path):
    venv = VENVS[0]
    result = torchrun(
        venv,
        REPO / "tests" / "workers" / "killed_load.py",
        [str(checkpoint), "--out", str(tmp_path)],
        cwd=tmp_path,
        env={"LOADTRACE": "1", "HF_DEACTIVATE_ASYNC_LOAD": "1"},
        timeout_s=300,
    )
    assert result.returncode != 0, "rank 1 was killed, so the job fails"
    count = json.loads((tmp_path / "count-rank1.json").read_text())  # rank 1's own count, just before the kill
    assert count["read_bytes"] > 0

    (job_dir,) = (tmp_path / "loadtrace-traces").iterdir()
    assert list(job_dir.glob("rank00001-*.progress.json")), "the killed rank's last progress snapshot stays"
    assert not list(job_dir.glob("rank00000-*.progress.json")), "a rank that finished removes its snapshot"

    report = build_report(read_files(job_dir))
    ranks = {rank["rank"]: rank for rank in report["ranks"]}
    assert ranks[0]["incomplete"] is False and ranks[0]["read_bytes"] == 1_009_152
    assert ranks[1]["incomplete"] is True
    state = ranks[1]["last_state"]
    assert state["during"] == "transformers.convert"
    assert {"transformers.from_pretrained", "transformers.convert"} <= set(state["open"])
    assert state["read_bytes"] == count["read_bytes"]
    assert state["tensors_read"] == count["read_tensors"]
    (finding,) = [f for f in report["findings"] if f["kind"] == "incomplete_rank"]
    assert finding["ranks"] == [1] and finding["severity"] == "warning"
    assert (
        f"rank 1 was killed or crashed during transformers.convert after reading {count['read_bytes']:,} B"
        in finding["detail"]
    )
