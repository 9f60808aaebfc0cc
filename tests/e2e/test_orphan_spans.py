"""Promise (issue 26): in every trace loadtrace writes, every span's parent is in the trace, even where a rank died.

A span leaves a process only when it ends: a rank SIGKILLed mid-load never writes its startup or its load, and the
spans that finished under them (``torch.init_process_group``, phases) would point at parents Jaeger cannot find. The
state file keeps the open non-file scopes and the launcher's witness ends them at the death (witness_scopes.py).

Here: a real two-node job, two ``torchrun`` launchers each in its own UTS namespace (``unshare -u``: its own host
name), static rendezvous, 2 ranks each, where rank 3 SIGKILLs itself mid-load (its launcher then stops rank 2): one
run that writes files (``LOADTRACE_DIR``) and sends OTLP at once, each walked on its own. The teardown and OOM cases
are walked the same way in test_dying_jobs.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import parents
from support.installed import file_spans, require_installed
from support.multirank import MODE_ENV
from support.torchrun import clean_env, free_port
from support.venvs import REPO, discover
from support.wire import HttpReceiver, wire_spans

from loadtrace import semconv as sc
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "dying_load.py"
KILLED = 3
TIMEOUT_S = 300

pytestmark = [
    pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)"),
]


@dataclass
class TwoNodes:
    cwd: Path
    outputs: list[str]
    returncodes: list[int]
    spans: list[tuple[str, str, str | None, str]]  # trace, span, parent, name
    ended_by_launcher: set[str]  # names of the killed rank's spans its witness ended
    report: dict[str, Any] | None


def run_two_nodes(cwd: Path, env_extra: dict[str, str]) -> tuple[list[str], list[int]]:
    venv = VENVS[0]
    require_installed(venv)
    cwd.mkdir(parents=True, exist_ok=True)
    # Plain data parallel: no collective inside the load, so the other node's ranks finish while rank 3 lies dead.
    env = clean_env(venv, {**MODE_ENV["plain"], "LOADTRACE": "1", **env_extra})
    port = free_port()
    launchers = []
    for node in (0, 1):
        torchrun = [
            str(venv.torchrun),
            *("--nnodes", "2", "--nproc_per_node", "2", "--node_rank", str(node)),
            *("--master_addr", "127.0.0.1", "--master_port", str(port)),
            str(WORKER),
            *(str(cwd / "ckpt"), "--out", str(cwd / "out"), "--scenario", "multinode"),
            *("--kill-rank", str(KILLED), "--kill-after", "5"),
        ]
        script = f'hostname node{node} && exec "$@"'
        launchers.append(
            subprocess.Popen(
                ["unshare", "-u", "sh", "-c", script, "sh", *torchrun],
                cwd=cwd,
                env=env,
                stdout=(cwd / f"node{node}.log").open("w"),  # a file: a full pipe would stall a node nobody reads
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a hung job is killed whole: the launcher and its workers
            )
        )
    codes = [0, 0]
    try:
        codes[1] = launchers[1].wait(timeout=TIMEOUT_S)  # rank 3's node: fails once rank 3 is dead
        # Node 0's ranks finish; its launcher then waits at torchelastic's exit barrier for a node that is gone (300 s
        # by default): once its workers are done, it has nothing more to write.
        deadline = time.monotonic() + TIMEOUT_S
        finished = [cwd / "out" / f"finished-rank{rank}.json" for rank in (0, 1)]
        while launchers[0].poll() is None and time.monotonic() < deadline:
            if all(path.exists() for path in finished):
                # Their exit (the spans' flush) is over once the processes are gone.
                pids = [json.loads(path.read_text())["pid"] for path in finished]
                while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
                    time.sleep(0.1)
                break
            time.sleep(0.2)
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                try:
                    os.killpg(launcher.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    codes[0] = launchers[0].wait()
    outputs = [(cwd / f"node{node}.log").read_text(errors="replace") for node in (0, 1)]
    return outputs, codes


def alive(pid: int) -> bool:
    """Whether the process still runs (a zombie its launcher has not reaped yet has exited)."""
    with suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _place_checkpoint(checkpoint: Path, cwd: Path) -> None:
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "ckpt").symlink_to(checkpoint)


@pytest.fixture(scope="module")
def two_nodes(checkpoint: Path, tmp_path_factory) -> dict[str, TwoNodes]:
    """The run, as its files say (``over_files``, with the report of them) and as its OTLP export calls do
    (``over_otlp``)."""
    cwd = tmp_path_factory.mktemp("two-nodes")
    _place_checkpoint(checkpoint, cwd)
    folder = cwd / "traces"
    with HttpReceiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "LOADTRACE_EXIT_TIMEOUT": "10",
            "LOADTRACE_DIR": str(folder),  # files too, next to OTLP
        }
        outputs, codes = run_two_nodes(cwd, env)
    assert (cwd / "out" / f"count-rank{KILLED}.json").exists(), "\n".join(o[-3000:] for o in outputs)
    pairs = file_spans(folder)
    ended = {s["name"] for r, s in pairs if r.get(sc.RANK) == KILLED and s["attributes"].get(sc.EXIT_SOURCE)}
    over_files = TwoNodes(cwd, outputs, codes, parents.from_files(pairs), ended, build_report(read_files(folder)))
    spans = wire_spans(receiver.received.arrivals)
    ended = {s.name for s in spans if s.resource.get(sc.RANK) == KILLED and s.attributes.get(sc.EXIT_SOURCE)}
    return {"over_files": over_files, "over_otlp": TwoNodes(cwd, outputs, codes, parents.from_wire(spans), ended, None)}


@pytest.mark.parametrize("run", ["over_files", "over_otlp"])
def test_two_node_kill_every_span_has_its_parent_in_the_trace(run, two_nodes):
    found = two_nodes[run]
    assert found.returncodes[1] != 0, "rank 3's node failed"
    names = {name for *_, name in found.spans}
    assert sc.SPAN_INIT_PROCESS_GROUP in names and sc.SPAN_RANK_GROUP in names, names  # rank 0 laid the trace out
    assert not parents.orphans(found.spans), parents.orphans(found.spans)
    # The killed rank's startup (its bar in Jaeger's timeline) and load were ended by its launcher.
    assert {sc.SPAN_RANK_EXIT, sc.SPAN_STARTUP, sc.SPAN_FROM_PRETRAINED} <= found.ended_by_launcher, (
        found.ended_by_launcher
    )


def test_two_node_kill_report_counts_no_span_the_witness_ended(two_nodes):
    """The witness's stand-ins carry no numbers: rank 3 shows its state file's exact count, one load."""
    over_files = two_nodes["over_files"]
    count = json.loads((over_files.cwd / "out" / f"count-rank{KILLED}.json").read_text())
    assert over_files.report is not None
    (rank3,) = [r for r in over_files.report["ranks"] if r["rank"] == KILLED]
    assert rank3["incomplete"] and rank3["exit"]["signal"] == "SIGKILL", rank3
    assert (rank3["read_bytes"], rank3["tensors_read"]) == (count["read_bytes"], count["read_tensors"]), rank3
    assert rank3["loads"] <= 1, rank3
