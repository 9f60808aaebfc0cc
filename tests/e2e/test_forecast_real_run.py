"""Promise (issue 13), with a real job: a real 2-rank FSDP run of the 1 MB checkpoint, made now in each installed
release, forecasts the stored 418 MB run of that release within issue 13's bar (the stored runs, the calibration and
the bar itself: analysis/test_forecast_real.py)."""

from __future__ import annotations

import subprocess

import pytest
from support.forecast_truth import (
    LLAMA_BYTES,
    RUNS,
    assert_each_rank_measured_peak_in_its_range,
    check,
    own_size_forecast,
    truth,
)
from support.multirank import EXAMPLE_WORKER
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import read_files

VENVS = discover()


@pytest.mark.parametrize("venv", VENVS, ids=[venv.id for venv in VENVS])
def test_a_real_1mb_fsdp_run_forecasts_the_stored_418mb_run(venv, jobs):
    """A real 2-rank FSDP ``cpu_ram_efficient_loading`` run of the 1 MB checkpoint, now, against the stored truth of the
    418 MB run of the same release (scripts/forecast_runs.py measured it). The session's shared run of
    ``examples/load.py --mode fsdp`` (``jobs``), which test_docs_samples_fresh_run.py reads too."""
    stored = f"{venv.release.replace('.', '')}-fsdp-full"  # a release's, from scripts/new_release.py
    if not (RUNS / stored / "truth.json").exists():
        pytest.skip(f"no stored large run for transformers {venv.transformers}")
    job = jobs.get(venv, "fsdp", True, EXAMPLE_WORKER)
    spans = read_files(str(job.trace_root))
    (measured,) = jobs_from_spans(spans.spans, spans.states)
    print(check(measured, truth(stored), f"{venv.id} real 1 MB fsdp → stored full"))


def test_a_real_llama_run_forecast_at_its_own_size_holds_each_ranks_measured_peak(tmp_path, capsys):
    """The same, from a fresh 2-rank plain load of the Llama in the first test venv."""
    venv = VENVS[0]
    made = subprocess.run(
        [str(venv.python), str(REPO / "tests" / "support" / "llama.py"), str(tmp_path / "llama")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0 and f"wrote 5 shards, 39 tensors, {LLAMA_BYTES:,} bytes" in made.stdout, made.stderr
    args = [str(tmp_path / "llama"), "--mode", "plain"]
    run = torchrun(venv, REPO / "examples" / "load.py", args, cwd=tmp_path / "job", env={"LOADTRACE": "1"})
    run.check()
    forecast, report = own_size_forecast(tmp_path / "job" / "loadtrace-traces", capsys)
    assert_each_rank_measured_peak_in_its_range(forecast, report)
