"""``loadtrace compare A B``: two jobs side by side as a table or JSON; one job per side (the source's only one, or the
one ``--a-job`` / ``--b-job`` picks), else one line and exit 2."""

from __future__ import annotations

import json

from test_analysis_compare import MINUTE, params_job
from test_analysis_otlp import T0, field_fact_job, trace_id_of, write_lines

from loadtrace.cli import main

FSDP = "fsdp_cpu_ram_efficient"


def job_dir(tmp_path, version: str, strategy: str = FSDP):
    folder = tmp_path / version
    write_lines(folder / "ranks.jsonl", field_fact_job(version, strategy))
    return str(folder)


def test_compare_json_shows_rank_1_materialization_and_the_version_change(tmp_path, capsys):
    assert main(["compare", job_dir(tmp_path, "5.12.0"), job_dir(tmp_path, "5.24.0"), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"a", "b", "phases", "resources"}
    assert list(result["a"]) == ["source", "trace_id", "job_id", "attempt", "run", "start_time", "skipped_lines"]
    assert (result["a"]["attempt"], result["a"]["run"], result["a"]["start_time"]) == (
        None,
        0,
        "2025-11-30T09:00:00.000000000Z",
    )
    assert all(set(row) == {"phase", "rank", "metric", "a", "b", "difference", "ratio"} for row in result["phases"])
    assert all(set(row) == {"name", "a", "b", "differs"} for row in result["resources"])
    (row,) = [r for r in result["phases"] if (r["phase"], r["rank"], r["metric"]) == ("materialize", 1, "bytes")]
    assert (row["a"], row["b"], row["difference"]) == (1_009_216, 64, -1_009_152)


def test_compare_table_lists_phases_then_what_differs(tmp_path, capsys):
    assert main(["compare", job_dir(tmp_path, "5.12.0"), job_dir(tmp_path, "5.24.0")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: ") and "\nB: " in out
    materialize = [line for line in out.splitlines() if line.split()[:3] == ["materialize", "1", "bytes"]]
    assert materialize and materialize[0].split()[3:] == ["1.0", "MB", "64", "B", "-1.0", "MB", "0.00x"]
    assert main(["compare", job_dir(tmp_path, "5.12.0"), job_dir(tmp_path, "5.24.0"), "--wide"]) == 0
    wide = [line for line in capsys.readouterr().out.splitlines() if line.split()[:3] == ["materialize", "1", "bytes"]]
    assert wide[0].split()[3:] == ["1,009,216", "64", "-1,009,152", "0.00x"]  # exact bytes, as in the JSON
    assert "what differs:" in out and "loadtrace.lib.transformers  5.12.0  5.24.0" in out


def test_the_same_job_twice_differs_in_nothing(tmp_path, capsys):
    folder = job_dir(tmp_path, "5.24.0")
    assert main(["compare", folder, folder]) == 0
    assert "what differs: nothing recorded" in capsys.readouterr().out


def test_a_side_holding_two_jobs_is_one_line_exit_2(tmp_path, capsys):
    write_lines(tmp_path / "both" / "a.jsonl", field_fact_job("5.12.0", FSDP))
    write_lines(tmp_path / "both" / "b.jsonl", field_fact_job("5.24.0", FSDP))
    assert main(["compare", str(tmp_path / "both"), job_dir(tmp_path, "5.24.0")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    # Both say job id job-1 under different trace ids (hand-built): each is listed, and picked, by its trace id.
    traces = [trace_id_of(f"{version}-{FSDP}") for version in ("5.12.0", "5.24.0")]
    assert f"loadtrace: error: {tmp_path / 'both'} holds 2 jobs: {traces[0]} (attempt" not in captured.err
    assert f"loadtrace: error: {tmp_path / 'both'} holds 2 jobs: {traces[0]} (started " in captured.err
    assert f", {traces[1]} (started " in captured.err
    assert "started 2025-11-30T09:00:00Z" in captured.err and "; pick one with --a-job ID (" in captured.err


# Two jobs in one flat folder (issue 12) ------------------------------------------------------------------------------


def flat_folder(tmp_path):
    """Two jobs in one folder, fp32 then bf16: two ``python`` runs with one LOADTRACE_DIR."""
    write_lines(tmp_path / "traces" / "process-vm-3378.jsonl", params_job("vm-3378-94c4"))
    bf16 = params_job("vm-3409-047d", dtype="torch.bfloat16", start=T0 + MINUTE, pid=3000)
    write_lines(tmp_path / "traces" / "process-vm-3409.jsonl", bf16)
    return str(tmp_path / "traces")


def test_two_jobs_of_one_folder_are_compared_by_picking_each_side(tmp_path, capsys):
    folder = flat_folder(tmp_path)
    assert main(["compare", folder, folder, "--a-job", "vm-3378", "--b-job", "vm-3409-047d"]) == 0
    out = capsys.readouterr().out
    assert "\nwhat differs:\n" in out and "\nloadtrace.dtype  default  torch.bfloat16\n" in out
    same = out[out.index("\nsame: ") :]
    assert "loadtrace.model.class" in same and "loadtrace.dtype" not in same and "strategy" in same
    assert all(len(line) <= 120 for line in same.splitlines())
    assert main(["compare", folder, folder, "--a-job", "vm-3378", "--b-job", "vm-3409", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["a"]["job_id"], result["b"]["job_id"]) == ("vm-3378-94c4", "vm-3409-047d")
    assert result["b"]["start_time"] == "2025-11-30T09:01:00.000000000Z"
    (dtype,) = [r for r in result["resources"] if r["name"] == "loadtrace.dtype"]
    assert dtype == {"name": "loadtrace.dtype", "a": "default", "b": "torch.bfloat16", "differs": True}
    assert any(not r["differs"] for r in result["resources"])  # the JSON keeps the rows that agree


def test_the_same_folder_without_picks_says_how_to_pick_each_side(tmp_path, capsys):
    folder = flat_folder(tmp_path)
    assert main(["compare", folder, folder]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"loadtrace: error: {folder} holds 2 jobs: vm-3378-94c4 (trace ")
    assert "vm-3409-047d (trace " in captured.err and "started 2025-11-30T09:01:00Z" in captured.err
    assert "pick each side's with --a-job ID --b-job ID (a job id, a trace id or a unique prefix" in captured.err


def test_an_ambiguous_or_unknown_pick_is_one_line_exit_2(tmp_path, capsys):
    folder = flat_folder(tmp_path)
    assert main(["compare", folder, folder, "--a-job", "vm-3", "--b-job", "vm-3409"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loadtrace: error: --a-job vm-3 matches 2 jobs of ") and err.count("\n") == 1
    assert main(["compare", folder, folder, "--a-job", "vm-3378", "--b-job", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"loadtrace: error: no job of {folder} matches --b-job nope; it holds vm-3378-94c4 (")


def test_an_attempt_is_picked_and_shown(tmp_path, capsys):
    restarted = [*params_job("job-r", attempt=0), *params_job("job-r", dtype="torch.bfloat16", attempt=1, pid=2000)]
    folder = str(write_lines(tmp_path / "restarted" / "spans.jsonl", restarted).parent)
    assert main(["compare", folder, folder, "--a-job", "job-r@0", "--b-job", "job-r@1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"A: {folder}  trace ") and "  job job-r  attempt 0\nB: " in out
    assert "\nattempt          0        1\n" in out and "\nloadtrace.dtype  default  torch.bfloat16\n" in out


def test_a_missing_side_is_one_line_exit_2(tmp_path, capsys):
    assert main(["compare", job_dir(tmp_path, "5.12.0"), str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"loadtrace: error: {tmp_path / 'missing'}: no such file or directory\n"
