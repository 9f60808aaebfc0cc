"""``loadtrace report`` over ranks that died, failed or restarted (issue 11): state files as a source, the exit object
and the new keys in the JSON, the table's marks, and bad state files never breaking a report."""

from __future__ import annotations

import json

from support.cli import run
from support.dead_rank_jobs import TRACE, full_job, oom_killed_job, state_file
from support.otlp_lines import MODEL_BYTES, line, rank_load, resource, write_lines

from loadtrace import semconv as sc
from loadtrace import statefile

CLEAN_EXIT = {"signal": None, "code": None, "oom_killed": None, "source": None}


def test_a_folder_of_state_files_alone_is_a_source(tmp_path, capsys):
    state_file(tmp_path, 0, status=statefile.STATUS_EXITED, reads=(69, MODEL_BYTES), files=5)
    state_file(tmp_path, 1, status=statefile.STATUS_LOADING, phase=sc.SPAN_CONVERT, reads=(3, 30_000), files=1)
    code, out, err = run(capsys, "report", str(tmp_path))
    assert (code, err) == (0, "")
    rows = out.splitlines()
    assert rows[2].split()[:2] == ["0", "node-0"] and rows[3].split()[:3] == ["1", "incomplete", "node-0"]
    assert "30.0 kB" in rows[3] and "no launcher witness: how it ended is unknown" in " ".join(out.split())


def test_one_state_file_is_a_source(tmp_path, capsys):
    path = state_file(tmp_path, 1, status=statefile.STATUS_LOADING, reads=(3, 30_000), files=1)
    code, out, _ = run(capsys, "report", str(path), "--format", "json")
    assert code == 0 and [rank["read_bytes"] for rank in json.loads(out)["ranks"]] == [30_000]


def test_the_json_says_how_each_rank_ended(tmp_path, capsys):
    code, out, _ = run(capsys, "report", str(oom_killed_job(tmp_path)), "--format", "json", "--fail-on-findings")
    report = json.loads(out)
    assert code == 1 and report["skipped_state_files"] == 0
    (trace,) = report["traces"]
    assert (trace["attempt"], trace["launch_id"], trace["run"]) == (0, None, 0)
    rank0, rank1 = report["ranks"]
    assert rank0["exit"] == CLEAN_EXIT and rank0["failed"] is None and rank0["last_state"] is None
    assert rank1["exit"] == {"signal": "SIGKILL", "code": None, "oom_killed": True, "source": "launcher"}
    assert rank1["incomplete"] is True and rank1["read_bytes"] == 210_323_968
    assert rank1["last_state"]["during"] == sc.SPAN_CONVERT and rank1["last_state"]["source"] == "state file"
    assert (rank1["memory_limit_bytes"], rank1["memory_limit_source"]) == (1_258_291_200, "cgroup v1")
    assert all(finding["attempt"] == 0 and finding["run"] == 0 for finding in report["findings"])
    (incomplete,) = [f for f in report["findings"] if f["kind"] == sc.FINDING_INCOMPLETE_RANK]
    assert incomplete["evidence"]["per_rank"][0]["exit"]["oom_killed"] is True


def test_a_failed_load_fails_the_gate(tmp_path, capsys):
    spans = rank_load(TRACE, 1, "plain", 300_000)
    spans[0]["status"] = {"code": 2}
    spans[0]["attributes"].append({"key": sc.ERROR_TYPE, "value": {"stringValue": "FileNotFoundError"}})
    write_lines(tmp_path / "rank0.jsonl", full_job(ranks=(0,)))
    write_lines(tmp_path / "rank1.jsonl", [line(resource(1), spans)])
    code, out, _ = run(capsys, "report", str(tmp_path), "--fail-on-findings")
    assert code == 1
    assert "1 failed" in out and "WARNING failed_load  rank 1" in out
    assert "rank 1's transformers.from_pretrained raised FileNotFoundError after reading 300.0 kB" in out


def test_bad_state_files_are_counted_in_the_table_and_the_json(tmp_path, capsys):
    for index, text in enumerate(full_job()):
        write_lines(tmp_path / f"rank-{index}.jsonl", [text])
    (tmp_path / "rank00001-node-0-1001.state").write_bytes(b"LTSTATE1" + b"\xff" * 50)  # truncated
    (tmp_path / "other.state").write_bytes(b"\x7fELF" + b"\0" * 5000)  # foreign
    code, out, _ = run(capsys, "report", str(tmp_path))
    assert code == 0 and "2 corrupt, truncated or foreign state files skipped" in out
    code, out, _ = run(capsys, "report", str(tmp_path), "--format", "json")
    assert json.loads(out)["skipped_state_files"] == 2


def test_a_folder_of_only_bad_state_files_is_bad_input(tmp_path, capsys):
    (tmp_path / "a.state").write_bytes(b"")
    code, out, err = run(capsys, "report", str(tmp_path))
    assert (code, out) == (2, "")
    assert (
        err
        == f"loadtrace: error: {tmp_path}: no spans found (0 unreadable lines and 1 unreadable state files skipped)\n"
    )


def test_an_empty_folder_names_both_kinds_of_file(tmp_path, capsys):
    code, _, err = run(capsys, "report", str(tmp_path))
    assert code == 2 and "no *.jsonl trace files or *.state files" in err
