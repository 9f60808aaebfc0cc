"""The suite's own machinery, which every real job relies on: a torchrun that only aborted at exit is run again
(support/torchrun.py), and what was made once is handed out again, failures included (support/shared.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.shared import once
from support.torchrun import aborted_at_exit, set_aside

ABORTED = """terminate called without an active exception
E1203 10:56:47.250000 26132 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) local_rank: 1
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 26149)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 26150)  (SIGABRT)
"""


@pytest.mark.parametrize(
    ("log", "again"),
    [
        (ABORTED, True),  # what a real run logged (rank 0 then SIGTERMed by torchrun)
        (ABORTED.replace("-15 (pid: 26149)  (SIGTERM)", "-9 (pid: 26149)  (SIGKILL)"), False),  # a killed rank
        (ABORTED.replace("-15 (pid: 26149)  (SIGTERM)", "1 (pid: 26149)"), False),  # a rank that raised
        (ABORTED.replace("terminate called without an active exception\n", ""), False),  # an abort of another kind
        ("", False),
    ],
)
def test_only_a_run_that_aborted_at_exit_is_run_again(tmp_path: Path, log: str, again: bool):
    (tmp_path / "torchrun.log").write_text(log)
    assert aborted_at_exit(tmp_path / "torchrun.log") is again


def test_a_run_again_starts_from_what_its_caller_prepared(tmp_path: Path):
    cwd = tmp_path / "job"
    (cwd / "ckpt").mkdir(parents=True)
    (cwd / "ckpt" / "model.safetensors").write_text("prepared")
    before = set(cwd.rglob("*"))
    (cwd / "torchrun.log").write_text("first run")
    (cwd / "loadtrace-traces" / "job-1").mkdir(parents=True)
    (cwd / "ckpt" / "written-by-the-job").write_text("")
    aside = set_aside(cwd, before)
    assert sorted(p.relative_to(cwd).as_posix() for p in cwd.rglob("*")) == ["ckpt", "ckpt/model.safetensors"]
    found = sorted(p.relative_to(aside).as_posix() for p in aside.rglob("*"))
    assert found == ["ckpt", "ckpt/written-by-the-job", "loadtrace-traces", "loadtrace-traces/job-1", "torchrun.log"]


def test_made_once_then_the_same_result_or_the_same_failure(tmp_path_factory):
    made = []
    assert once(tmp_path_factory, ("machinery", 1), lambda: made.append(1) or len(made)) == 1
    assert once(tmp_path_factory, ("machinery", 1), lambda: made.append(1) or len(made)) == 1

    def fails():
        made.append(2)
        raise AssertionError("the job failed")

    for _ in range(2):
        with pytest.raises(AssertionError, match="the job failed"):
            once(tmp_path_factory, ("machinery", 2), fails)
    assert made == [1, 2]
