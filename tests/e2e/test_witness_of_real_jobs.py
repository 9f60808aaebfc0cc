"""Promise: with LOADTRACE=1 the launcher (torchrun's elastic agent, which `accelerate launch` also uses) outlives its
workers and writes one `loadtrace.rank_exit` span per dead rank into the job's trace: how it ended (signal or exit
code, and whether the OOM killer did it) and its exact last state (loadtrace/instrumentation/witness.py,
hooks/torchelastic.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.cgroups import memory_cgroup, remove_cgroup
from support.otlp_files import read_lines
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv, statefile
from loadtrace.instrumentation import witness

VENVS = discover()


def worker_writes_state() -> bool:
    """Whether the installed loadtrace's workers keep and announce their own state file (issue 11's worker side)."""
    package = Path(witness.__file__).parent
    return any("announce(" in p.read_text() for p in package.rglob("*.py") if p.name != "witness.py")


def witnessed_run(checkpoint: Path, cwd: Path, traced: bool = True, oom_cgroup: Path | None = None):
    """One torchrun of the witnessed worker, with TMPDIR inside ``cwd`` (to see the witness directory go)."""
    tmp = cwd / "tmp"
    tmp.mkdir(parents=True)
    env = {"HF_DEACTIVATE_ASYNC_LOAD": "1", "TMPDIR": str(tmp), **({"LOADTRACE": "1"} if traced else {})}
    args = [str(checkpoint), "--out", str(cwd), *([] if worker_writes_state() else ["--own-state"])]
    if oom_cgroup is not None:
        args += ["--oom-cgroup", str(oom_cgroup)]
    return torchrun(VENVS[0], REPO / "tests" / "workers" / "witnessed_load.py", args, cwd=cwd, env=env, timeout_s=300)


def rank_exit_of_rank1(run) -> tuple[Path, dict, dict]:
    """(the job's trace directory, resource, span) of rank 1's ``loadtrace.rank_exit``: exactly one."""
    (job_dir,) = (run.cwd / "loadtrace-traces").iterdir()
    (witness_file,) = job_dir.glob("witness-*.jsonl")
    exits = [(r, s) for r, s in read_lines(witness_file) if s["name"] == semconv.SPAN_RANK_EXIT]
    ((resource, span),) = [(r, s) for r, s in exits if r[semconv.RANK] == "1"]
    return job_dir, resource, span


def test_torchrun_witnesses_a_rank_killed_in_the_middle_of_its_load(checkpoint, tmp_path):
    untraced = witnessed_run(checkpoint, tmp_path / "untraced", traced=False)
    run = witnessed_run(checkpoint, tmp_path / "traced")
    assert untraced.returncode != 0, untraced.tail()
    assert run.returncode == untraced.returncode, "the witness leaves torchrun's exit code alone\n" + run.tail()
    said = [line for line in run.log.read_text().splitlines() if "loadtrace:" in line]
    assert not [line for line in said if any(w in line for w in ("witness", "exits", "pointer"))], said

    count = json.loads((run.cwd / "count-rank1.json").read_text())  # rank 1's own count, just before the kill
    assert count["read_bytes"] > 0
    job_dir, resource, span = rank_exit_of_rank1(run)
    (state_path,) = job_dir.glob("rank00001-*.state")
    state = statefile.read(state_path)
    assert state is not None and state.totals()["read_bytes"] == count["read_bytes"]

    trace_id, root_id = semconv.job_trace_ids(job_dir.name)
    assert span["traceId"] == f"{trace_id:032x}" and span["parentSpanId"] == f"{root_id:016x}"
    assert span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"
    assert span["attributes"][semconv.EXIT_SOURCE] == "launcher"
    assert span["attributes"][semconv.READ_BYTES] == str(count["read_bytes"])
    assert span["attributes"][semconv.EXIT_DURING] == semconv.SPAN_CONVERT
    assert span["status"] == {"code": 2, "message": "SIGKILL"}
    assert resource[semconv.PROCESS_PID] == str(state["pid"])
    assert resource[semconv.LAUNCH_ID] == state.texts["launch_id"] != ""
    assert span["attributes"][semconv.WITNESS_PID] != resource[semconv.PROCESS_PID]
    assert not list((run.cwd / "tmp").glob("loadtrace-witness-*")), "the launcher removes its witness directory"
    shutil.rmtree(run.cwd / "tmp", ignore_errors=True)


def test_torchrun_tells_the_oom_killer_apart(checkpoint, tmp_path):
    """Rank 1 in a real memory cgroup (v1, as root) allocates until the kernel's OOM killer takes it."""
    cgroup = memory_cgroup("loadtrace-witness-test", 256 * 1024 * 1024)
    try:
        run = witnessed_run(checkpoint, tmp_path / "oom", oom_cgroup=cgroup)
        assert run.returncode != 0, run.tail()
        assert "exitcode  : -9" in run.log.read_text(), run.tail()
        _, resource, span = rank_exit_of_rank1(run)
        assert span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"
        assert span["attributes"][semconv.EXIT_OOM_KILLED] is True
        assert span["status"] == {"code": 2, "message": "SIGKILL (OOM)"}
    finally:
        remove_cgroup(cgroup)
