"""Promise (issue 40): ``report``, ``timeline`` and ``top`` read the same folder when given no source
(``$LOADTRACE_DIR``, else ``./loadtrace-traces``: where a job writes its traces) and take ``--latest``; where that
folder is not there, one line says so."""

from __future__ import annotations

import shutil

from support.cli import one_line, run
from support.paths import SPANS


def folder_of_two_jobs(root):
    for job in ("plain524", "fsdp524"):
        shutil.copytree(SPANS / job, root / job)
    return root


def test_report_timeline_and_top_read_loadtrace_traces_with_latest(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LOADTRACE_DIR", raising=False)
    folder_of_two_jobs(tmp_path / "loadtrace-traces")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "report", "--latest")
    assert code == 0 and out.startswith("job "), err
    latest = out.split()[1]
    code, out, err = run(capsys, "timeline", "--latest", "-o", "-")
    assert code == 0 and latest in out, err
    assert "holds 2 jobs" in one_line(capsys, "timeline")  # the same folder, two jobs: pick one
    code, out, err = run(capsys, "top", "--once")
    assert code == 0 and "loadtrace top  loadtrace-traces" in out, err


def test_loadtrace_dir_is_the_default_where_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOADTRACE_DIR", str(folder_of_two_jobs(tmp_path / "elsewhere")))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "report", "--latest")
    assert code == 0 and out.startswith("job "), err
    code, out, err = run(capsys, "timeline", "--latest", "-o", "-")
    assert code == 0, err


def test_no_folder_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LOADTRACE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    for command in ("report", "timeline"):
        assert "loadtrace-traces: no such folder; give a SOURCE" in one_line(capsys, command, "--latest")
    assert "either --job ID or --latest" in one_line(capsys, "timeline", "--job", "x", "--latest")
