"""Promise: the default report (with a forecast) and compare tables fit 120 columns (issue 15): human sizes in the
table cells, prose wrapped; ``--wide`` may be wider, and the JSON keeps exact bytes (tests/cli/test_report_golden.py).

Over the stored real two-rank jobs under ``tests/fixtures/spans/``, with the golden cases' arguments and a few more.
"""

from __future__ import annotations

import pytest
from support.paths import FIXTURES

from loadtrace.cli import main

JOBS = ("fsdp512", "fsdp524", "zero3_524", "plain524", "killed524", "faulty524")
FORECAST = ["--forecast-model-bytes", "54e9", "--ranks-per-node", "16"]
PARAMS = ["--forecast-params", "27e9", "--forecast-dtype", "bf16", "--ranks-per-node", "8"]
PARAMS += ["--forecast-world-size", "64", "--node-memory-bytes", "2TB"]

CASES = [["report", f"spans/{job}", *extra] for job in JOBS if job != "faulty524" for extra in (FORECAST, PARAMS)]
CASES += [["report", "spans/faulty524"], ["report", "spans"]]
CASES += [["compare", f"spans/{a}", f"spans/{b}"] for a in JOBS for b in JOBS if a < b]


@pytest.mark.parametrize("argv", CASES, ids=" ".join)
def test_every_line_fits_120_columns(argv, capsys, monkeypatch):
    monkeypatch.chdir(FIXTURES)
    assert main(argv) == 0
    long = [line for line in capsys.readouterr().out.splitlines() if len(line) > 120]
    assert long == []
