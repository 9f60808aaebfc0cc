"""Promise (issue 34, point 4): a rank whose trace file lost spans (cut short: a full disk, a copy in flight; or lines
that cannot be read) is marked ``partial`` on its row, in the table and the JSON; the report names the file and how
many lines it lost, and draws no finding from what is missing.

The input that showed it: issue 34's user's own job (``tests/fixtures/llama524``: a 2-rank plain load of their Llama,
transformers 5.24) with rank 0's file cut to two thirds. The report said ``WARNING slow_rank rank 1 took 8.70 s to
start, 21.2x the median of the other ranks`` (rank 0's startup was measured from what survived of its spans), showed
rank 0 without its startup, and said only ``1 corrupt or truncated lines skipped`` at the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.paths import FIXTURES, SPANS

from loadtrace.analysis.sources import read_files
from loadtrace.cli import main

LLAMA = FIXTURES / "llama524"
RANK0 = "rank00000-vm-25037.jsonl"
TIMING = {"slow_rank", "slow_storage", "rendezvous_wait"}


def cut(source: Path, folder: Path, name: str, share: float) -> Path:
    """A copy of ``source`` with the file ``name`` cut to ``share`` of its bytes."""
    shutil.copytree(source, folder)
    path = folder / name
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * share)])
    return path


def report_json(folder: Path, capsys, *flags: str) -> dict:
    assert main(["report", str(folder), "--format", "json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_whole_job_has_no_partial_rank_and_no_timing_finding(capsys):
    report = report_json(LLAMA, capsys)
    assert [rank["partial"] for rank in report["ranks"]] == [False, False]
    assert report["traces"][0]["partial_files"] == []
    assert not TIMING & {f["kind"] for f in report["findings"]}


def test_rank_0_cut_to_two_thirds_is_partial_and_makes_no_slow_rank(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cut_file = cut(LLAMA, Path("job"), RANK0, 2 / 3)
    assert main(["report", "job", "--fail-on-findings"]) == 0  # a CI does not fail on it
    out = capsys.readouterr().out
    assert "slow_rank" not in out
    rows = out.splitlines()
    assert rows[2].startswith("0 partial  vm") and rows[3].startswith("1          vm")
    assert (
        "\nPartial: rank 0: job/rank00000-vm-25037.jsonl lost spans (cut short mid-line, 1 unreadable line skipped);"
        " its rows show\n  what survived, and no finding is drawn from what is missing.\n"
    ) in out
    assert "Startup: 19.468 s (slowest: rank 1), median rank 19.468 s" in out  # rank 1's alone
    assert "\n0 partial    0.604 " in out  # its startup row: what survived, marked

    report = report_json(Path("job"), capsys)
    assert [(rank["rank"], rank["partial"], rank["incomplete"]) for rank in report["ranks"]] == [
        (0, True, False),
        (1, False, False),
    ]
    (trace,) = report["traces"]
    assert trace["partial_files"] == [{"path": str(cut_file), "skipped_lines": 1, "cut_short": True, "ranks": [0]}]
    assert [r["partial"] for r in trace["startup"]["ranks"]] == [True, False]
    assert (trace["startup"]["slowest_rank"], trace["startup"]["median_rank_seconds"]) == (1, 19.467642)
    assert not TIMING & {f["kind"] for f in report["findings"]}
    assert report["skipped_lines"] == 1


def test_a_file_without_its_state_file_cut_short_is_not_said_to_have_died(tmp_path, capsys):
    """The 5.24 plain job of the fixtures (spans only, no state files) with rank 0 cut: its file spans' parent, the
    load span, was among what it lost; an ``incomplete_rank`` warning said rank 0 never finished."""
    cut(SPANS / "plain524", tmp_path / "job", "rank00000-vm-7393.jsonl", 2 / 3)
    report = report_json(tmp_path / "job", capsys)
    assert [(rank["partial"], rank["incomplete"]) for rank in report["ranks"]] == [(True, False), (False, False)]
    assert [f["severity"] for f in report["findings"]] == ["info"]  # the replica rank 1 loaded, as expected


def test_an_unreadable_line_in_the_middle_makes_the_rank_partial_too(tmp_path, capsys):
    folder = tmp_path / "job"
    shutil.copytree(LLAMA, folder)
    path = folder / RANK0
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b'{"resourceSpans": [{"resource": 3}]}\n'] + lines[3:]))
    spans = read_files(folder)
    (damaged,) = spans.damaged_files
    assert (damaged.path, damaged.skipped_lines, damaged.cut_short) == (str(path), 1, False)  # its third line
    report = report_json(folder, capsys)
    assert [rank["partial"] for rank in report["ranks"]] == [True, False]
    assert report["traces"][0]["partial_files"][0]["skipped_lines"] == 1


def test_a_file_cut_just_before_its_last_newline_is_cut_short_with_every_line_read(tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(LLAMA, folder)
    path = folder / RANK0
    path.write_bytes(path.read_bytes()[:-1])
    (damaged,) = read_files(folder).damaged_files
    assert (damaged.skipped_lines, damaged.cut_short) == (0, True)
    assert damaged.processes == {("vm", 25037)}


def test_jobs_and_the_timeline_draw_no_finding_from_what_a_cut_file_lost(tmp_path, capsys):
    cut(LLAMA, tmp_path / "llama", RANK0, 2 / 3)
    assert main(["jobs", str(tmp_path / "llama"), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["jobs"]
    assert row["findings"] == {"replicated_load": 1} and row["slowest_rank"] == 1  # no slow_rank
    cut(SPANS / "plain524", tmp_path / "plain", "rank00000-vm-7393.jsonl", 2 / 3)
    out = tmp_path / "plain.trace.json"
    assert main(["timeline", str(tmp_path / "plain"), "--format", "chrome", "-o", str(out)]) == 0
    findings = [e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "finding"]
    assert findings == ["info replicated_load"]  # not "warning incomplete_rank"


def test_a_partial_rank_is_left_out_of_the_forecast_and_rank_0_partial_refuses_it(tmp_path, capsys):
    cut(LLAMA, tmp_path / "one", "rank00001-vm-25040.jsonl", 2 / 3)
    report = report_json(tmp_path / "one", capsys, "--forecast-model-bytes", "54e9")
    assert report["forecast"]["basis"]["left_out_ranks"] == [{"rank": 1, "why": "its trace file lost spans (partial)"}]
    cut(LLAMA, tmp_path / "zero", RANK0, 2 / 3)
    assert main(["report", str(tmp_path / "zero"), "--forecast-model-bytes", "54e9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rank 0's load spans are partial (its trace file lost spans)" in err
