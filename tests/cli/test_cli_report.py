"""``loadtrace report``: the documented JSON object, the table, --fail-on-findings, bad input as one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import one_line, run
from support.otlp_lines import MODEL_BYTES, field_fact_job, trace_id_of, write_lines

RANK_KEYS = {
    "trace_id",
    "attempt",
    "launch_id",
    "run",
    "rank",
    "instance",
    "world_size",
    "local_world_size",
    "host",
    "strategy",
    "checkpoint",
    "load_seconds",
    "class_import_seconds",  # issue 48
    "loads",
    "files_opened",
    "tensors_read",
    "read_bytes",
    "conversions",
    "conversion_bytes",
    "materialized_bytes",
    "materialized_sites",
    "held_bytes",
    "peak_rss_bytes",
    "hook_errors",
    "workload",
    "serving_engine",
    "node_memory_bytes",
    "memory_limit_bytes",
    "memory_limit_source",
    "rss_before_bytes",
    "rss_after_bytes",
    "peak_rss_anon_bytes",
    "peak_rss_file_bytes",
    "peak_rss_shmem_bytes",
    "storage_read_bytes",
    "cached_bytes",
    "node_available_bytes",
    "cgroup_memory_current_bytes",
    "cgroup_memory_max_bytes",
    "incomplete",
    "partial",  # issue 34
    "failed",
    "exit",
    "last_state",
}

FINDING_KEYS = {
    "trace_id",
    "attempt",
    "run",
    "kind",
    "severity",
    "ranks",
    "bytes",
    "projected_node_bytes",
    "detail",
    "evidence",
    "next_step",
    "cause",  # issue 26
}

TRACE_KEYS = {
    "trace_id",
    "attempt",
    "launch_id",
    "run",
    "job_id",
    "start_time",
    "world_size",
    "ranks",
    "model_bytes",
    "spans",
    "nodes",
    "startup",  # absent only for a job without a load or startup span
    "missing_ranks",
    "partial_files",  # issue 34
}

STARTUP_KEYS = {"seconds", "slowest_rank", "slowest_phase", "median_rank_seconds", "storage_bytes_per_second"}

STARTUP_KEYS |= {"ranks", "nodes"}

NODE_KEYS = {"host", "ranks", "readers", "read_bytes", "storage_read_bytes", "cached_bytes", "times_asked"}

NODE_KEYS |= {"times_read_from_storage", "checkpoint_file_bytes", "checkpoint_cold_bytes", "outcome", "note"}


def job_dir(tmp_path: Path, version: str, strategy: str) -> Path:
    folder = tmp_path / f"{version}-{strategy}"
    for index, text in enumerate(field_fact_job(version, strategy)):
        write_lines(folder / f"rank-{index}.jsonl", [text])
    return folder


def test_json_report_has_exactly_the_documented_schema(tmp_path, capsys):
    code, out, _ = run(capsys, "report", str(job_dir(tmp_path, "5.12.0", "fsdp_cpu_ram_efficient")), "--format", "json")
    report = json.loads(out)
    assert code == 0
    assert set(report) == {"traces", "ranks", "findings", "skipped_lines", "skipped_state_files"}
    assert all(set(trace) == TRACE_KEYS for trace in report["traces"])
    assert all(set(node) == NODE_KEYS for trace in report["traces"] for node in trace["nodes"])
    assert all(set(trace["startup"]) == STARTUP_KEYS for trace in report["traces"])
    assert all(set(rank) == RANK_KEYS for rank in report["ranks"])
    assert all(set(finding) == FINDING_KEYS for finding in report["findings"])
    rank1 = report["ranks"][1]
    assert (rank1["rank"], rank1["world_size"], rank1["host"], rank1["read_bytes"]) == (1, 2, "node-0", MODEL_BYTES)
    assert (rank1["files_opened"], rank1["tensors_read"], rank1["conversions"]) == (5, 69, 25)
    assert rank1["materialized_bytes"] == {"cpu": 1_009_216} and isinstance(rank1["load_seconds"], float)
    assert isinstance(rank1["peak_rss_bytes"], int) and rank1["held_bytes"] == {"cpu": 1_009_216}
    first = report["findings"][0]
    assert (first["kind"], first["severity"], first["ranks"]) == ("nonzero_rank_materialization", "warning", [1])
    assert report["skipped_lines"] == 0
    assert report["traces"][0]["model_bytes"] == MODEL_BYTES
    # Spans without memory and I/O figures (an older loadtrace): unknown is null, never 0.
    assert rank1["storage_read_bytes"] is None and rank1["peak_rss_anon_bytes"] is None
    assert report["traces"][0]["nodes"][0]["outcome"] is None


@pytest.mark.parametrize(
    "version, strategy, flag, exit_code",
    [
        ("5.12.0", "zero3", "--fail-on-findings", 1),  # warning
        ("5.12.0", "zero3", None, 0),  # warning, but nobody asked to fail
        ("5.24.0", "zero3", "--fail-on-findings", 0),  # no finding
        ("5.24.0", "plain", "--fail-on-findings", 0),  # info only
    ],
)
def test_fail_on_findings_exits_1_only_for_a_warning(tmp_path, capsys, version, strategy, flag, exit_code):
    argv = ["report", str(job_dir(tmp_path, version, strategy)), *([flag] if flag else [])]
    assert run(capsys, *argv)[0] == exit_code


def test_the_table_shows_each_rank_then_the_findings(tmp_path, capsys):
    code, out, _ = run(capsys, "report", str(job_dir(tmp_path, "5.12.0", "fsdp_cpu_ram_efficient")))
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("job job-1  trace ")
    assert lines[1].split()[:3] == ["rank", "host", "strategy"]
    assert lines[2].split()[:3] == ["0", "node-0", "fsdp_cpu_ram_efficient"]
    assert lines[3].split()[4:7] == ["1.0", "MB", "-"] and "cpu=1.0 MB" in lines[3]  # sizes for people
    # One finding for the cause, its symptoms a line each, the largest call site kept (issue 26).
    assert "WARNING rank 1 loaded the whole model under fsdp_cpu_ram_efficient" in out
    assert "\n    nonzero_rank_materialization: created" in out and "modeling_utils.py:4864 zeros_like cpu" in out
    assert out.index("nonzero_rank_materialization") < out.index("duplicate_conversion")


def test_the_table_fits_120_columns_and_every_finding_says_what_to_do_next(tmp_path, capsys):
    """Issue 15: human sizes, 120 columns, wrapped findings each ending with ``next:`` (upstream link where known);
    ``--wide`` adds the count columns; the JSON keeps every byte exact."""
    source = str(job_dir(tmp_path, "5.12.0", "fsdp_cpu_ram_efficient"))
    code, out, _ = run(capsys, "report", source)
    assert code == 0 and max(map(len, out.splitlines())) <= 120
    assert out.splitlines()[1].split()[3:7] == ["load", "s", "read", "storage,"]  # no files, tensors, conversions
    findings = out.split("findings (warnings first, most bytes first):\n")[1].split("\n  WARNING ")
    assert len(findings) == 1 and findings[0].count("\n    next: ") == 1  # one cause, three symptoms (issue 26)
    assert "next: build the model on the meta device" in out
    assert "https://github.com/huggingface/transformers/pull/45649" in out  # zeros_like on rank 1: 5.12's path
    code, wide, _ = run(capsys, "report", source, "--wide")
    assert wide.splitlines()[1].split()[3:7] == ["load", "s", "files", "tensors"] and "conversions" in wide
    code, out, _ = run(capsys, "report", source, "--format", "json")
    report = json.loads(out)
    assert report["ranks"][1]["read_bytes"] == MODEL_BYTES and report["ranks"][1]["held_bytes"] == {"cpu": 1_009_216}
    assert all(finding["next_step"] for finding in report["findings"])


def test_a_report_over_some_ranks_says_which_are_missing(tmp_path, capsys):
    folder = job_dir(tmp_path, "5.24.0", "fsdp_cpu_ram_efficient")
    (folder / "rank-0.jsonl").unlink()
    code, out, _ = run(capsys, "report", str(folder))
    assert code == 0 and "\n1 of 2 ranks present (missing: 0)\n" in out
    code, out, _ = run(capsys, "report", str(folder), "--format", "json")
    assert json.loads(out)["traces"][0]["missing_ranks"] == [0]
    code, out, _ = run(capsys, "report", str(job_dir(tmp_path, "5.24.0", "zero3")), "--format", "json")
    assert json.loads(out)["traces"][0]["missing_ranks"] == []


def test_latest_and_job_pick_one_job_of_a_folder(tmp_path, capsys):
    job_dir(tmp_path, "5.12.0", "zero3")
    job_dir(tmp_path, "5.24.0", "zero3")
    code, out, _ = run(capsys, "report", str(tmp_path), "--job", trace_id_of("5.24.0-zero3")[:8], "--format", "json")
    assert code == 0 and [t["trace_id"] for t in json.loads(out)["traces"]] == [trace_id_of("5.24.0-zero3")]
    code, out, err = run(capsys, "report", str(tmp_path), "--job", "nonesuch")
    assert code == 2 and out == "" and err.startswith("loadtrace: error: no job of") and err.count("\n") == 1
    code, out, err = run(capsys, "report", str(tmp_path), "--job", "x", "--latest")
    assert code == 2 and out == "" and err.startswith("loadtrace: error: no job of") and err.count("\n") == 1


def two_runs_of_one_id(tmp_path: Path) -> Path:
    """A job id used again (issue 48): two runs of one trace, the second's ranks under new pids a minute later."""
    from support.dead_rank_jobs import SECOND
    from support.otlp_lines import T0, line, rank_load, resource

    trace = trace_id_of("again")
    lines = []
    for run_start, pids in ((T0, (1000, 1001)), (T0 + 60 * SECOND, (3000, 3001))):
        for rank, pid in zip((0, 1), pids, strict=True):
            spans = rank_load(trace, rank, "plain", MODEL_BYTES, start=run_start)
            lines.append(line(resource(rank, **{"process.pid": pid, "loadtrace.job.id": "again"}), spans))
    write_lines(tmp_path / "again" / "spans.jsonl", lines)
    return tmp_path / "again"


def test_latest_is_the_run_just_run_and_the_line_is_one_per_job(tmp_path, capsys):
    """``--latest`` is one job (one attempt and run), with ``--job ID`` that job's latest; ``--format line`` says one
    line per job, never one summed over several (rank 0's closing line is the single job's)."""
    folder = two_runs_of_one_id(tmp_path)
    code, out, _ = run(capsys, "report", str(folder), "--job", "again", "--latest", "--format", "json")
    assert code == 0 and [(t["job_id"], t["run"]) for t in json.loads(out)["traces"]] == [("again", 1)]
    code, out, _ = run(capsys, "report", str(folder), "--latest", "--format", "line")
    assert out == "run 2, 2 ranks, 1 finding\n"
    code, out, _ = run(capsys, "report", str(folder), "--format", "line")
    assert out == "job again, 2 ranks, 1 finding\njob again, run 2, 2 ranks, 1 finding\n"


def test_several_jobs_in_one_directory_are_reported_each(tmp_path, capsys):
    job_dir(tmp_path, "5.12.0", "zero3")
    job_dir(tmp_path, "5.24.0", "zero3")
    code, out, _ = run(capsys, "report", str(tmp_path), "--format", "json")
    report = json.loads(out)
    assert [t["trace_id"] for t in report["traces"]] == [trace_id_of("5.12.0-zero3"), trace_id_of("5.24.0-zero3")]
    assert len(report["ranks"]) == 4 and [f["trace_id"] for f in report["findings"]] == [trace_id_of("5.12.0-zero3")]
    code, out, _ = run(capsys, "report", str(tmp_path))
    assert out.count("job job-1  trace ") == 2 and "findings: none" in out


def test_corrupt_lines_are_counted_in_the_report(tmp_path, capsys):
    folder = job_dir(tmp_path, "5.24.0", "plain")
    with open(folder / "rank-1.jsonl", "ab") as handle:
        handle.write(b'{"resourceSpans": [{"resou')  # killed mid-write
    code, out, _ = run(capsys, "report", str(folder), "--format", "json")
    assert code == 0 and json.loads(out)["skipped_lines"] == 1
    assert "1 corrupt or truncated lines skipped" in run(capsys, "report", str(folder))[1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["report", "{tmp}/missing"], "no such file or directory"),
        (["report", "{tmp}/empty"], "no *.jsonl trace files"),
        (["report", "{tmp}/garbage.jsonl"], "no spans found (2 unreadable lines skipped)"),
        (["report", "/dev/zero"], "not a regular file or directory"),
        (["report"], "loadtrace-traces: no such folder; give a SOURCE"),  # the default folder, not here
        (["report", "{tmp}/empty", "--jaeger", "http://127.0.0.1:1"], "either a SOURCE path or --jaeger"),
        (["report", "--jaeger", "http://127.0.0.1:1"], "either --trace-id ID or --service NAME"),
        (["report", "--jaeger", "localhost:16686", "--trace-id", "ab"], "bad Jaeger URL"),
        (["report", "--jaeger", "http://127.0.0.1:1", "--service", "s", "--since", "soon"], "bad duration"),
        (["report", "{tmp}/garbage.jsonl", "--format", "yaml"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOADTRACE_DIR", raising=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.jsonl").write_bytes(b"\x00\xff nonsense\n{\n")
    assert message in one_line(capsys, *(arg.format(tmp=tmp_path) for arg in argv))


def test_no_command_prints_help_and_exits_2(capsys):
    code, _, err = run(capsys)
    assert code == 2 and "report" in err and "compare" in err
