"""The recorded fleet the ``--clickhouse`` tests read: trace files and the chDB database filled from exactly them.

The real runs of tests/fixtures/spans (plain, FSDP, ZeRO-3, a failed load, a killed rank: its spans only, as a
collector receives them), a restart of one of them (new processes, attempt 1), a tree of jobs on three clusters
(``support/jobtree.py``) and a rank only the launcher's witness saw die."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support import otel_traces
from support.dead_rank_jobs import oom_killed_job
from support.jobtree import write_tree
from support.paths import SPANS

RUNS = ("plain524", "fsdp512", "fsdp524", "zero3_524", "faulty524", "killed524")
SINCE = ["--since", "36500d"]  # the recorded jobs ran long before the test


def restart(source: Path, folder: Path, shift_ns: int = 60 * 10**9) -> None:
    """The same job run again by its launcher: attempt 1, new span ids (the root span's too), a minute later."""
    folder.mkdir(parents=True)
    for path in source.glob("*.jsonl"):
        lines = []
        for line in path.read_text().splitlines():
            data = json.loads(line)
            for rs in data["resourceSpans"]:
                attributes = [a for a in rs["resource"]["attributes"] if a["key"] != "loadtrace.attempt"]
                for attribute in attributes:  # new processes
                    if attribute["key"] == "process.pid":
                        attribute["value"] = {"intValue": str(int(attribute["value"]["intValue"]) + 100_000)}
                    if attribute["key"] == "service.instance.id":
                        attribute["value"] = {"stringValue": attribute["value"]["stringValue"] + "-restart"}
                rs["resource"]["attributes"] = [*attributes, {"key": "loadtrace.attempt", "value": {"intValue": "1"}}]
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        for key in ("spanId", "parentSpanId"):
                            if span.get(key):
                                span[key] = span[key][::-1]
                        for key in ("startTimeUnixNano", "endTimeUnixNano"):
                            span[key] = str(int(span[key]) + shift_ns)
            lines.append(json.dumps(data))
        (folder / ("restart-" + path.name)).write_text("\n".join(lines) + "\n")


def fleet_of(root: Path, with_restart: bool = True) -> tuple[Path, str]:
    """(a folder of trace files, ``chdb:`` URL of a database filled from exactly those files), under ``root``."""
    files = root / "files"
    for run in RUNS:
        (files / run).mkdir(parents=True)
        for path in (SPANS / run).glob("*.jsonl"):  # spans only: state files stay on the node
            shutil.copy(path, files / run / path.name)
    if with_restart:
        restart(SPANS / "plain524", files / "plain524-restart")
    write_tree(files / "tree", 9, 4)
    (files / "oom-witness").mkdir()
    oom_killed_job(files / "oom-witness", with_state=False)  # the launcher's witness span speaks for the dead rank
    otel_traces.fill(root / "db", sorted(files.rglob("*.jsonl")))
    return files, f"chdb:{root / 'db'}"


def copy_of(fleet: tuple[Path, str], root: Path) -> tuple[Path, str]:
    """A copy of a filled fleet under ``root``, for a test that changes it: cheaper than filling another (the
    database's own links are relative)."""
    files, url = fleet
    shutil.copytree(files, root / "files")
    shutil.copytree(url.removeprefix("chdb:"), root / "db", symlinks=True)
    return root / "files", f"chdb:{root / 'db'}"


def trace_of(folder: Path) -> str:
    """The trace id of the first span in one of the folder's files."""
    line = next(folder.glob("*.jsonl")).read_text().splitlines()[0]
    return json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]


def without_skipped(report: dict) -> dict:
    report.pop("skipped_lines", None)
    return report
