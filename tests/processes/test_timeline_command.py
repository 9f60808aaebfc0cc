"""Promise (issue 15): ``loadtrace timeline`` draws one job as lanes of bars, every span of every rank, generic over
span names; its Chrome trace-event JSON is well formed for Perfetto and chrome://tracing; bad input is one line.

Over the stored real runs (``fixtures/spans``: FSDP with findings, a rank SIGKILLed with only its state file left) and
a 512-rank job made from one (``support/big_job.py``). The page in a real browser: test_timeline_browser.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from support.paths import SPANS

LOADTRACE = [sys.executable, "-m", "loadtrace.cli"]


def check_trace_events(trace: dict) -> None:
    """The trace-event format's rules that Perfetto's and chrome://tracing's importers rely on."""
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] in ("ms", "ns")
    json.dumps(trace, allow_nan=False)
    for event in trace["traceEvents"]:
        assert isinstance(event["name"], str) and event["ph"] in ("X", "M", "i")
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            assert isinstance(event["args"], dict)
        else:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0 and isinstance(event["args"], dict)
        if event["ph"] == "i":
            assert event["s"] in ("g", "p", "t")
    # Complete events of one thread nest: each one ends before the one around it does.
    threads = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            threads[(event["pid"], event["tid"])].append(event)
    for events in threads.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for event in events:
            while stack and stack[-1] <= event["ts"]:
                stack.pop()
            end = event["ts"] + event["dur"]
            assert not stack or end <= stack[-1] + 1e-6, f"{event['name']} overlaps without nesting"
            stack.append(end)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LOADTRACE, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_command_writes_the_page_and_the_chrome_json(tmp_path):
    page = tmp_path / "job.html"
    result = run("timeline", str(SPANS / "killed524"), "-o", str(page))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {page}: 2 ranks on 1 node\n" and result.stderr == ""
    assert page.read_text().startswith("<!doctype html>")
    result = run("timeline", str(SPANS / "killed524"), "--format", "chrome", "-o", "-")
    assert result.returncode == 0, result.stderr
    check_trace_events(json.loads(result.stdout))
    result = run("timeline", str(SPANS / "fsdp524"), "--format", "chrome", cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "cc2eef90-40e1-446d-ac10-d780c6600db0.trace.json").is_file()


def test_a_source_of_several_jobs_needs_job(tmp_path):
    result = run("timeline", str(SPANS), "-o", str(tmp_path / "x.html"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "holds 6 jobs" in result.stderr and "--job ID" in result.stderr
    result = run("timeline", str(SPANS), "--job", "fb0f766f", "-o", str(tmp_path / "x.html"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and (tmp_path / "x.html").is_file()


@pytest.mark.parametrize(
    "args, says",
    [
        (["/no/such/dir", "-o", "x.html"], "no such file or directory"),
        ([str(SPANS / "fsdp524"), "--job", "nope", "-o", "x.html"], "no job of"),
        ([str(SPANS / "fsdp524"), "-o", "/no/such/dir/x.html"], "No such file or directory"),
        ([str(SPANS / "fsdp524"), "--format", "svg"], "invalid choice"),
        ([], "timeline needs a SOURCE (a .jsonl file or directory) or --clickhouse URL --job ID"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    result = run("timeline", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("loadtrace: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr
