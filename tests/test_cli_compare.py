"""``loadtrace compare A B``: two jobs side by side as a table or JSON; one job per side, else one line and exit 2."""

from __future__ import annotations

import json

from test_analysis_otlp import field_fact_job, write_lines

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
    assert set(result["a"]) == {"source", "trace_id", "job_id", "skipped_lines"}
    assert all(set(row) == {"phase", "rank", "metric", "a", "b", "difference", "ratio"} for row in result["phases"])
    assert all(set(row) == {"name", "a", "b", "differs"} for row in result["resources"])
    (row,) = [r for r in result["phases"] if (r["phase"], r["rank"], r["metric"]) == ("materialize", 1, "bytes")]
    assert (row["a"], row["b"], row["difference"]) == (1_009_216, 64, -1_009_152)


def test_compare_table_lists_phases_then_what_differs(tmp_path, capsys):
    assert main(["compare", job_dir(tmp_path, "5.12.0"), job_dir(tmp_path, "5.24.0")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: ") and "\nB: " in out
    materialize = [line for line in out.splitlines() if line.split()[:3] == ["materialize", "1", "bytes"]]
    assert materialize and materialize[0].split()[3:] == ["1,009,216", "64", "-1,009,152", "0.00x"]
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
    assert "holds 2 jobs" in captured.err and "compare needs one job on each side" in captured.err


def test_a_missing_side_is_one_line_exit_2(tmp_path, capsys):
    assert main(["compare", job_dir(tmp_path, "5.12.0"), str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"loadtrace: error: {tmp_path / 'missing'}: no such file or directory\n"
