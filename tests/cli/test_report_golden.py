"""Promise: the report's JSON and table for the same spans are identical before and after a refactor.

The spans under ``tests/fixtures/spans/`` are real two-rank jobs (``examples/load.py`` under torchrun: transformers
5.12 and 5.24 with FSDP ``cpu_ram_efficient_loading``, 5.24 ZeRO-3 and plain, a rank SIGKILLed mid-load that left only
its state file, and a job whose conversion hook raised on every call). The outputs under
``tests/fixtures/golden/`` were written by the CLI before the report got its typed model; this test reruns the CLI in
process, from the fixtures folder with relative paths (compare prints its sources), and wants every byte the same.
The compare outputs were rewritten once since, on purpose (issue 12): each side's ``attempt``, ``run`` and
``start_time``, the load parameters (``loadtrace.checkpoint.bytes``, ``loadtrace.model.class``, ``loadtrace.dtype``) in
``resources``, and the table's ``same:`` line were added; every phase row and every earlier value stayed as it was.
The report outputs were rewritten once more (issue 14): each trace's ``startup`` block and the table's ``Startup:``
lines were added; nothing else changed. And once more (issue 26, by ``loadtrace report`` over the same fixtures): the
JSON only by added fields (each finding's ``cause``, the startup phases ``imports`` and ``construct``); the table
shows symptoms of one cause as one finding, sizes once (``1.0 MB``, exact bytes with ``--wide``), and the startup table
in seconds under one unit. And once more (issue 34): the JSON by added fields (each rank's ``partial``, the startup
ranks' ``partial``, each trace's ``partial_files``), ``slowest_phase`` null where the ranks are within a second of each
other, the forecast's confidence saying where its rates come from (``calibrated (...)``) and its basis saying the rate
is the rank's own where it read enough; the table's storage column is ``storage, all files``. No number changed.
And once more (issue 39): a rank's conversions are its loads' (ZeRO-3 converts outside ``transformers.convert``), so
``zero3_524`` counts 4 conversions per rank; its rank 1 converted only ``meta`` tensors, which the hook of the day
counted by their would-be size: that file's conversion bytes were set to 0, what loadtrace writes now.
And once more (issue 40): each node's ``cast_seconds`` (null: these jobs cast nothing); the forecast's shares count the
model as the ranks hold it (its 64 B of buffers are a rank's own share, not ``duplicated``), which moved rank 0's FSDP
forecast at 54 GB by 6 MB (0.006%).
And once more (issue 42): ``incomplete_rank``'s evidence gains ``groups`` (how its detail tells the ranks, as the
table groups its rows); nothing else changed.
And once more (issue 49): the JSON only by added fields (each rank's ``workload`` and ``serving_engine``, null: these
jobs predate them, so their advice stays the training one; ``replicated_load``'s evidence gains the same two).
And once more (issue 48): each rank's ``class_import_seconds`` (null: these spans carry no startup imports); a read
finding's per-node figure says it counts reads (``Projected per node: ... read``; no number changed: no rank held
more than it read); compare's ``open`` seconds are the time any file was open, each instant once, not the files'
summed lengths (``plain524``'s rank 0: 0.019 s, not 0.092 s).
And (issue 48 too): a node's storage figures are what its ranks fetched (``storage_bytes``, their
``loadtrace.io.storage_read_bytes``: 0 in these recordings) over ``fetch_seconds`` (null: recorded before the loads
carried their stretches), ``reading_seconds`` and ``cast_seconds`` gone, ``counted_to_last_reading`` and each last
state's ``storage_read_bytes`` added; the table says "its 2 ranks fetched nothing from storage" where it knows that.
"""

from __future__ import annotations

import pytest
from support.paths import FIXTURES

from loadtrace.cli import main

JOBS = ("fsdp512", "fsdp524", "zero3_524", "plain524", "killed524", "faulty524")
FORECAST = ["--forecast-model-bytes", "54e9", "--ranks-per-node", "16"]
PARAMS = ["--forecast-params", "27e9", "--forecast-dtype", "bf16", "--ranks-per-node", "8"]
PARAMS += ["--forecast-world-size", "64", "--node-memory-bytes", "2TB"]

CASES = {f"report-{job}": ["report", f"spans/{job}"] for job in JOBS}
CASES["report-all"] = ["report", "spans"]
CASES["forecast-fsdp512"] = ["report", "spans/fsdp512", *FORECAST]
CASES["forecast-fsdp524"] = ["report", "spans/fsdp524", *FORECAST]
CASES["forecast-killed524"] = ["report", "spans/killed524", *FORECAST]
CASES["forecast-plain524-params"] = ["report", "spans/plain524", *PARAMS]
CASES["compare-fsdp512-fsdp524"] = ["compare", "spans/fsdp512", "spans/fsdp524"]
CASES["compare-zero3-plain"] = ["compare", "spans/zero3_524", "spans/plain524"]


@pytest.mark.parametrize("output", ["json", "txt"])
@pytest.mark.parametrize("name", list(CASES))
def test_output_is_identical_to_the_golden_one(name, output, capsys, monkeypatch):
    monkeypatch.chdir(FIXTURES)
    argv = CASES[name] + (["--format", "json"] if output == "json" else [])
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == (FIXTURES / "golden" / f"{name}.{output}").read_text()
