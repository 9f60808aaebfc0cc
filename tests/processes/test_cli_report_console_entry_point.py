"""``loadtrace report``: the documented JSON object, the table, --fail-on-findings, bad input as one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.paths import REPO
from test_analysis_otlp import field_fact_job, write_lines

STARTUP_KEYS = {"seconds", "slowest_rank", "slowest_phase", "median_rank_seconds", "storage_bytes_per_second"}

STARTUP_KEYS |= {"ranks", "nodes"}

NODE_KEYS = {"host", "ranks", "readers", "read_bytes", "storage_read_bytes", "cached_bytes", "times_asked"}

NODE_KEYS |= {"times_read_from_storage", "checkpoint_file_bytes", "checkpoint_cold_bytes", "outcome", "note"}


def job_dir(tmp_path: Path, version: str, strategy: str) -> Path:
    folder = tmp_path / f"{version}-{strategy}"
    for index, text in enumerate(field_fact_job(version, strategy)):
        write_lines(folder / f"rank-{index}.jsonl", [text])
    return folder


def test_the_console_entry_point_never_shows_a_traceback(tmp_path):
    missing = subprocess.run(
        [sys.executable, "-m", "loadtrace.cli", "report", str(tmp_path / "nope")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr == f"loadtrace: error: {tmp_path / 'nope'}: no such file or directory\n"
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtrace.cli",
            "report",
            str(job_dir(tmp_path, "5.12.0", "zero3")),
            "--fail-on-findings",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 1 and "duplicate_checkpoint_read" in ok.stdout and ok.stderr == ""
