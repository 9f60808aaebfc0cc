"""Promise: with LOADTRACE=1 the launcher (torchrun's elastic agent, which `accelerate launch` also uses) outlives its
workers and writes one `loadtrace.rank_exit` span per dead rank into the job's trace: how it ended (signal or exit
code, and whether the OOM killer did it) and its exact last state (loadtrace/instrumentation/beside/witness.py,
hooks/torchelastic.py).

The jobs are the session's: the killed-rank job, traced and untraced (support/killed_rank.py; test_killed_rank.py reads
the traced one's report), and the job whose rank 1 heads for its cgroup's limit until the OOM killer takes it
(support/live.py; test_top_live.py watches it)."""

from __future__ import annotations

import json
from pathlib import Path

from support.killed_rank import killed_rank_job
from support.live import heading_for_oom
from support.otlp_files import read_lines
from support.venvs import discover

from loadtrace import semconv, statefile

VENVS = discover()


def rank_exit_of_rank1(folder: Path) -> tuple[Path, dict, dict]:
    """(the job's trace directory, resource, span) of rank 1's ``loadtrace.rank_exit`` under ``folder``: exactly
    one."""
    (witness_file,) = folder.rglob("witness-*.jsonl")
    exits = [(r, s) for r, s in read_lines(witness_file) if s["name"] == semconv.SPAN_RANK_EXIT]
    ((resource, span),) = [(r, s) for r, s in exits if r[semconv.RANK] == "1"]
    return witness_file.parent, resource, span


def test_torchrun_witnesses_a_rank_killed_in_the_middle_of_its_load(checkpoint, tmp_path_factory):
    untraced = killed_rank_job(VENVS[0], checkpoint, tmp_path_factory, traced=False)
    run = killed_rank_job(VENVS[0], checkpoint, tmp_path_factory)
    assert untraced.returncode != 0, untraced.tail()
    assert run.returncode == untraced.returncode, "the witness leaves torchrun's exit code alone\n" + run.tail()
    said = [line for line in run.log.read_text().splitlines() if "loadtrace:" in line]
    assert not [line for line in said if any(w in line for w in ("witness", "exits", "pointer"))], said

    count = json.loads((run.cwd / "count-rank1.json").read_text())  # rank 1's own count, just before the kill
    assert count["read_bytes"] > 0
    job_dir, resource, span = rank_exit_of_rank1(run.cwd / "loadtrace-traces")
    (state_path,) = job_dir.glob("rank00001-*.state")
    state = statefile.read(state_path)
    assert state is not None and state.totals().read_bytes == count["read_bytes"]

    trace_id, group = semconv.job_trace_ids(job_dir.name)[0], semconv.rank_group_id(job_dir.name, 1)
    assert span["traceId"] == f"{trace_id:032x}" and span["parentSpanId"] == f"{group:016x}"  # rank 1's group
    assert span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"
    assert span["attributes"][semconv.EXIT_SOURCE] == "launcher"
    assert span["attributes"][semconv.READ_BYTES] == str(count["read_bytes"])
    assert span["attributes"][semconv.EXIT_DURING] == semconv.SPAN_CONVERT
    assert span["status"] == {"code": 2, "message": "SIGKILL"}
    assert resource[semconv.PROCESS_PID] == str(state.pid)
    assert resource[semconv.LAUNCH_ID] == state.launch_id != ""
    assert span["attributes"][semconv.WITNESS_PID] != resource[semconv.PROCESS_PID]
    assert not list((run.cwd / "tmp").glob("loadtrace-witness-*")), "the launcher removes its witness directory"


def test_torchrun_tells_the_oom_killer_apart(checkpoint, tmp_path_factory):
    """The job runs in a real memory cgroup (v1, as root) whose limit rank 1 heads for until the kernel's OOM killer
    takes it."""
    run = heading_for_oom(VENVS[0], checkpoint, tmp_path_factory)
    assert run.returncode != 0, run.log[-3000:]
    assert "exitcode  : -9" in run.log, run.log[-3000:]
    _, resource, span = rank_exit_of_rank1(run.traces)
    assert span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"
    assert span["attributes"][semconv.EXIT_OOM_KILLED] is True
    assert span["status"] == {"code": 2, "message": "SIGKILL (OOM)"}
