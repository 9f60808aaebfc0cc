"""Promise: ``loadtrace report SOURCE --forecast-model-bytes 54e9 --ranks-per-node 16`` (or ``--forecast-params N
--forecast-dtype bf16``) prints a forecast block with a range, a confidence and a verdict (OK, WILL OOM or UNCERTAIN),
adds a documented ``forecast`` object to ``--format json``, exits 1 on ``oom`` with ``--fail-on-oom`` (and on
``uncertain`` too with ``--fail-on-uncertain``), one line on stderr saying why, and turns every bad flag value into one
error line and exit 2."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from support.cli import one_line, run
from support.forecast_spans import FSDP, M, rank_spans
from support.otlp_lines import line, rank_load, resource, trace_id_of, write_lines

from loadtrace.analysis import forecast as forecasting
from loadtrace.analysis.model import to_json
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import read_files

FORECAST_KEYS = {
    "model_bytes",
    "ranks_per_node",
    "per_rank_peak_bytes",
    "per_rank_peak_range_bytes",
    "per_node_peak_bytes",
    "per_node_peak_range_bytes",
    "node_memory_bytes",
    "verdict",
    "confidence",
    "basis",
}
BASIS_KEYS = {"text", "trace_id", "job_id", "measured", "target", "model_scale", "categories", "ranks", "node"}
BASIS_KEYS |= {"left_out_ranks", "calibration"}


def small_job(folder: Path, name: str = "small") -> Path:
    """Two FSDP ranks of a 1,000,000-byte model, 64 GB nodes (see test_analysis_forecast.fsdp_512)."""
    trace = trace_id_of(name)
    ranks = {
        0: rank_spans(trace, 0, FSDP, M, 2 * M, file_growth=M),
        1: rank_spans(trace, 1, FSDP, M, 4 * M, file_growth=M, created=M),
    }
    for rank, spans in ranks.items():
        write_lines(folder / name / f"rank{rank}.jsonl", [line(resource(rank), spans)])
    return folder / name


def test_json_gets_a_forecast_object_only_when_asked(tmp_path, capsys):
    source = str(small_job(tmp_path))
    code, out, _ = run(capsys, "report", source, "--format", "json")
    assert code == 0 and "forecast" not in json.loads(out)
    code, out, _ = run(
        capsys, "report", source, "--format", "json", "--forecast-model-bytes", "1e9", "--ranks-per-node", "2"
    )
    forecast = json.loads(out)["forecast"]
    assert code == 0 and set(forecast) == FORECAST_KEYS and set(forecast["basis"]) == BASIS_KEYS
    assert (forecast["model_bytes"], forecast["ranks_per_node"], forecast["verdict"]) == (1_000_000_000, 2, "ok")
    # The analysis' own forecast with the packaged calibration (test_analysis_forecast tests the method).
    (job,) = jobs_from_spans(read_files(source).spans)
    expected = to_json(forecasting.forecast(job, forecasting.Target(1_000_000_000, 2, given_as=None)))
    assert forecast["per_rank_peak_bytes"] == expected["per_rank_peak_bytes"]
    low, high = forecast["per_node_peak_range_bytes"]
    assert low <= forecast["per_node_peak_bytes"] <= high
    assert forecast["confidence"]["level"] in ("high", "medium", "low") and forecast["confidence"]["reason"]
    assert forecast["per_node_peak_bytes"] == expected["per_node_peak_bytes"]
    assert forecast["node_memory_bytes"] == 64_000_000_000
    assert forecast["basis"]["target"]["given_as"] == "--forecast-model-bytes 1e9"


@pytest.mark.parametrize(
    "flags, model_bytes",
    [
        (["--forecast-model-bytes", "54e9"], 54_000_000_000),
        (["--forecast-model-bytes", "54GB"], 54_000_000_000),
        (["--forecast-model-bytes", "50GiB"], 50 * 2**30),
        (["--forecast-model-bytes", "1234567"], 1_234_567),
        (["--forecast-params", "27e9", "--forecast-dtype", "bf16"], 54_000_000_000),
        (["--forecast-params", "27B", "--forecast-dtype", "fp16"], 54_000_000_000),
        (["--forecast-params", "7e9", "--forecast-dtype", "fp32"], 28_000_000_000),
        (["--forecast-params", "7000M", "--forecast-dtype", "fp8"], 7_000_000_000),
    ],
)
def test_the_target_is_given_in_bytes_or_as_parameters_and_a_dtype(tmp_path, capsys, flags, model_bytes):
    code, out, _ = run(capsys, "report", str(small_job(tmp_path)), "--format", "json", *flags)
    forecast = json.loads(out)["forecast"]
    assert code == 0 and forecast["model_bytes"] == model_bytes
    assert forecast["ranks_per_node"] == 2  # default: as the measured job ran
    if "--forecast-params" in flags:
        count, dtype = flags[1], flags[-1]
        assert forecast["basis"]["target"]["given_as"].startswith(f"{count} = ")
        assert f"parameters x {dtype} (" in forecast["basis"]["target"]["given_as"]


def test_the_table_ends_in_will_oom_when_a_node_cannot_hold_it(tmp_path, capsys):
    source = str(small_job(tmp_path))
    argv = ["report", source, "--forecast-model-bytes", "54e9", "--ranks-per-node", "16"]
    code, out, _ = run(capsys, *argv)
    block = out[out.index("forecast: ") :]
    assert code == 0
    # Human sizes once in the table (issue 26); --wide, below, gives the exact bytes beside them.
    assert block.startswith("forecast: 54.0 GB model, 16 ranks per node, world size 16")
    assert "per node: 1 x rank 0 + 15 x rank 1 = " in block
    assert "node memory: 64.0 GB (loadtrace.node.memory_total)" in block
    assert "verdict: WILL OOM: a node needs " in block and "basis: Scaled from job job-1" in block
    rows = block[block.index("\n  rank ") + 1 :].splitlines()[:3]  # the title may wrap
    assert rows[0].split() == ["rank", "fixed", "+", "once", "per", "job", "+", "own", "share", "+", "duplicated",
                               "+", "not", "model", "=", "peak", "RSS", "range"]  # fmt: skip
    assert all(len(line) <= 120 for line in block.splitlines())  # human sizes in the table, the prose wrapped
    code, wide, _ = run(capsys, *argv, "--wide")  # exact bytes in the table, as in the JSON
    rows = wide[wide.index("\n  rank ") + 1 :].splitlines()[:3]
    assert code == 0 and rows[0].split()[-2:] == ["range", "B"] and "," in rows[1]
    assert wide[wide.index("forecast: ") :].startswith("forecast: 54,000,000,000 B (54.0 GB) model, 16 ranks per node")
    assert "node memory: 64,000,000,000 B (64.0 GB) (loadtrace.node.memory_total)" in wide
    assert ", range " in block and "\n  confidence: " in block
    assert rows[1].split()[0] == "0" and rows[2].split()[0] == "1"


def test_the_table_says_ok_with_room_to_spare(tmp_path, capsys):
    argv = ["report", str(small_job(tmp_path)), "--forecast-model-bytes", "1e9", "--node-memory-bytes", "8GB"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "verdict: OK: a node needs " in out and "to spare; the high end, " in out
    assert "node memory: 8.0 GB (--node-memory-bytes)" in out


def test_an_oom_forecast_is_not_a_finding(tmp_path, capsys):
    """--fail-on-findings gates on findings only; --fail-on-oom (below) on the verdict."""
    argv = ["report", str(small_job(tmp_path)), "--forecast-model-bytes", "54e9", "--ranks-per-node", "16"]
    code, out, _ = run(capsys, *argv, "--format", "json")
    assert code == 0 and json.loads(out)["forecast"]["verdict"] == "oom"


def test_fail_on_oom_exits_1_with_one_line_saying_why(tmp_path, capsys):
    argv = ["report", str(small_job(tmp_path)), "--forecast-model-bytes", "54e9", "--ranks-per-node", "16"]
    code, out, err = run(capsys, *argv, "--fail-on-oom")
    assert code == 1 and "verdict: WILL OOM" in out
    assert err.startswith("loadtrace: forecast verdict oom (--fail-on-oom): WILL OOM: a node needs ")
    assert err.count("\n") == 1
    code, out, err = run(capsys, *argv[:3], "1e6", "--fail-on-oom")  # the measured size: fits
    assert code == 0 and err == "" and "verdict: OK" in out


def test_fail_on_uncertain_also_fails_when_the_nodes_memory_lies_inside_the_range(tmp_path, capsys):
    source = str(small_job(tmp_path))
    code, out, _ = run(capsys, "report", source, "--forecast-model-bytes", "1e9", "--format", "json")
    low, high = json.loads(out)["forecast"]["per_node_peak_range_bytes"]
    inside = ["report", source, "--forecast-model-bytes", "1e9", "--node-memory-bytes", str((low + high) // 2)]
    code, out, err = run(capsys, *inside, "--fail-on-oom")
    assert code == 0 and "verdict: UNCERTAIN: the node's " in out and err == ""
    code, out, err = run(capsys, *inside, "--fail-on-uncertain")
    assert code == 1 and err.startswith("loadtrace: forecast verdict uncertain (--fail-on-uncertain): UNCERTAIN: ")
    assert err.count("\n") == 1
    code, out, err = run(capsys, "report", source, "--forecast-model-bytes", "54e9", "--ranks-per-node", "16",
                         "--fail-on-uncertain")  # fmt: skip
    assert code == 1 and err.startswith("loadtrace: forecast verdict oom (--fail-on-uncertain): ")


def test_fail_on_uncertain_fails_when_the_nodes_memory_is_unknown_and_fail_on_oom_does_not(tmp_path, capsys):
    trace = trace_id_of("no-memory")
    for rank in (0, 1):
        spans = rank_spans(trace, rank, FSDP, M, 2 * M, node_total=None)
        write_lines(tmp_path / "job" / f"rank{rank}.jsonl", [line(resource(rank), spans)])
    argv = ["report", str(tmp_path / "job"), "--forecast-model-bytes", "1e9"]
    code, out, err = run(capsys, *argv, "--fail-on-oom")
    assert code == 0 and "verdict: UNKNOWN" in out and err == ""
    code, out, err = run(capsys, *argv, "--fail-on-uncertain")
    assert code == 1 and err == (
        "loadtrace: forecast verdict unknown (--fail-on-uncertain): the node's memory is unknown;"
        " give --node-memory-bytes\n"
    )


# The flags as typed after ``loadtrace report SOURCE``, and what the one line says.
BAD_FLAGS = {
    "--forecast-model-bytes lots": "argument --forecast-model-bytes: 'lots' is not a byte count",
    "--forecast-model-bytes 0": "'0' is not a positive size",
    "--forecast-model-bytes -5": "'-5' is not a byte count",
    "--forecast-model-bytes 1e400": "'1e400' is out of range",
    "--forecast-model-bytes nan": "'nan' is not a byte count",
    "--forecast-model-bytes '54 XB'": "'54 XB' is not a byte count",
    "--forecast-model-bytes 1e30": "'1e30' is out of range",
    "--forecast-model-bytes 0.4": "'0.4' is not a positive size",
    "--forecast-params seven": "argument --forecast-params: 'seven' is not a count",
    "--forecast-params 7e9 --forecast-dtype int4": "argument --forecast-dtype: invalid choice",
    "--forecast-params 7e9": "--forecast-params needs --forecast-dtype (fp8|bf16|fp16|fp32)",
    "--forecast-dtype bf16": "--forecast-dtype goes with --forecast-params",
    "--forecast-model-bytes 1e9 --forecast-params 5e8 --forecast-dtype bf16":
        "either --forecast-model-bytes or --forecast-params, not both",
    "--forecast-model-bytes 1e9 --ranks-per-node 0": "argument --ranks-per-node: '0' is not positive",
    "--forecast-model-bytes 1e9 --ranks-per-node 2.5": "'2.5' is not a whole number",
    "--forecast-model-bytes 1e9 --forecast-world-size -1": "'-1' is not positive",
    "--forecast-model-bytes 1e9 --node-memory-bytes 0": "'0' is not a positive size",
    "--ranks-per-node 16": "--ranks-per-node goes with --forecast-model-bytes or --forecast-params",
    "--node-memory-bytes 1TB": "--node-memory-bytes goes with --forecast-model-bytes",
    "--fail-on-oom": "--fail-on-oom goes with --forecast-model-bytes or --forecast-params",
    "--fail-on-uncertain": "--fail-on-uncertain goes with --forecast-model-bytes or --forecast-params",
    "--forecast-model-bytes 1e9 --ranks-per-node 16 --forecast-world-size 8":
        "--forecast-world-size 8 is smaller than --ranks-per-node 16",
}  # fmt: skip


@pytest.mark.parametrize("typed", BAD_FLAGS)
def test_a_bad_flag_is_one_line_and_exit_2(tmp_path, capsys, typed):
    assert BAD_FLAGS[typed] in one_line(capsys, "report", str(small_job(tmp_path)), *shlex.split(typed))


def test_a_source_the_forecast_cannot_use_is_one_line_and_exit_2(tmp_path, capsys):
    small_job(tmp_path, "one")
    small_job(tmp_path, "two")
    err = one_line(capsys, "report", str(tmp_path), "--forecast-model-bytes", "1e9")
    assert err.startswith("loadtrace: error: a forecast scales one job; this source holds 2 (traces ")
    # Spans of an older loadtrace: no memory figures to scale.
    trace = trace_id_of("old")
    old = write_lines(
        tmp_path / "old.jsonl",
        [line(resource(0), rank_load(trace, 0, "plain", M, memory={"loadtrace.rss.before": "?"}))],
    )
    err = one_line(capsys, "report", str(old), "--forecast-model-bytes", "1e9")
    assert "rank 0's load spans carry no loadtrace.rss.* memory figures" in err
