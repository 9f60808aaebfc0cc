"""Promise: every rank of a single-node torchrun or `accelerate launch` lands in one trace from its first line, even
when the launcher's run id is the placeholder `none` (any `--master-port`, every `accelerate launch`) and the job loads
before `init_process_group`: what one launcher gives all its workers on one node is the job id. Several nodes never
use it (each node's launcher has its own): they still join through the process group's store
(tests/in_job/test_job_id_multinode.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.torchrun import clean_env, free_port, torchrun
from support.venvs import discover

from loadtrace.analysis.sources import read_files
from loadtrace.instrumentation.context import (
    SOURCE_LAUNCH,
    SOURCE_LAUNCH_DIR,
    Job,
    job_id_from_env,
    launch_id_from_env,
)

ERROR_FILE = "/tmp/torchelastic_o_tvfkhr/none_8kfhc1i_/attempt_{attempt}/{local_rank}/error.json"


def worker_env(local_rank: int = 0, attempt: int = 0, world: int = 2, local_world: int = 2, **extra: str) -> dict:
    """What torchrun (torch 2.13, static rendezvous) puts in a worker's environment."""
    env = {
        "TORCHELASTIC_RUN_ID": "none",
        "RANK": str(local_rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_WORLD_SIZE": str(world // local_world),
        "TORCHELASTIC_RESTART_COUNT": str(attempt),
        "TORCHELASTIC_ERROR_FILE": ERROR_FILE.format(attempt=attempt, local_rank=local_rank),
    }
    env.update(extra)
    return env


def test_a_traced_launchers_launch_id_is_the_job_id_on_one_node():
    ranks = [job_id_from_env(worker_env(r, LOADTRACE_LAUNCH_ID="5f0c")) for r in (0, 1)]
    assert ranks == [("5f0c", SOURCE_LAUNCH)] * 2


def test_without_a_traced_launcher_the_launchs_log_directory_names_the_job():
    ids = {job_id_from_env(worker_env(r, attempt=a)) for r in (0, 1, 2) for a in (0, 3)}  # every rank, every restart
    ((job_id, source),) = ids
    assert source == SOURCE_LAUNCH_DIR and len(job_id) == 32
    other = job_id_from_env(worker_env(0, TORCHELASTIC_ERROR_FILE="/tmp/torchelastic_x/none_y/attempt_0/0/error.json"))
    assert other[0] != job_id  # another launch: another mkdtemp


@pytest.mark.parametrize(
    "error_file",
    ["", "/tmp/error.json", "/tmp/x/attempt_0/zero/error.json", "/tmp/x/attempt_/0/error.json", "/tmp/x/0/e.json"],
)
def test_no_launch_log_directory_no_launch_id(error_file):
    assert launch_id_from_env(worker_env(TORCHELASTIC_ERROR_FILE=error_file)) == (None, None)


@pytest.mark.parametrize(
    "env",
    [
        worker_env(world=4, local_world=2, LOADTRACE_LAUNCH_ID="5f0c"),  # two nodes: each launcher has its own id
        worker_env(world=2, local_world=2, GROUP_WORLD_SIZE="2", LOADTRACE_LAUNCH_ID="5f0c"),
        {k: v for k, v in worker_env(LOADTRACE_LAUNCH_ID="5f0c").items() if k != "WORLD_SIZE"},
        {k: v for k, v in worker_env(LOADTRACE_LAUNCH_ID="5f0c").items() if k != "TORCHELASTIC_RUN_ID"},  # not torchrun
        worker_env(LOADTRACE_LAUNCH_ID="none", TORCHELASTIC_ERROR_FILE=""),
    ],
    ids=["two-nodes", "two-groups", "no-world-size", "not-torchelastic", "placeholder-launch-id"],
)
def test_never_a_launch_id_unless_this_launcher_started_every_rank(env):
    assert job_id_from_env(env) == (None, None)


def test_real_job_ids_come_first():
    launch = worker_env(LOADTRACE_LAUNCH_ID="5f0c")
    assert job_id_from_env({**launch, "LOADTRACE_JOB_ID": "mine"}) == ("mine", "LOADTRACE_JOB_ID")
    assert job_id_from_env({**launch, "TORCHELASTIC_RUN_ID": "rdzv-7"}) == ("rdzv-7", "TORCHELASTIC_RUN_ID")
    assert job_id_from_env({**launch, "SLURM_JOB_ID": "42"}) == ("42", "SLURM_JOB_ID")


def test_a_launch_id_needs_no_store():
    job = Job(env=worker_env(LOADTRACE_LAUNCH_ID="5f0c"))
    assert job.known and (job.id, job.source) == ("5f0c", SOURCE_LAUNCH)
    job.adopt_from_store(object(), rank=1)  # known: the store is never touched
    assert job.id == "5f0c"


# Real launches ------------------------------------------------------------------------------------------------------

EARLY_LOAD = """
import os, sys
if os.environ.get("INSTRUMENT_IN_WORKER"):  # only the workers traced: the launcher gives them no launch id
    import loadtrace
    loadtrace.instrument()
import torch.distributed as dist
from transformers import AutoModelForCausalLM
assert os.environ["TORCHELASTIC_RUN_ID"] == "none"
AutoModelForCausalLM.from_pretrained(sys.argv[1])  # before any process group
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def venv_or_skip():
    found = discover()
    if not found:
        pytest.skip("no venv with torchrun and transformers (see tests/support/venvs.py)")
    return found[0]


def accelerate_launch(venv, script: Path, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(venv.bin / "accelerate"),
        "launch",
        "--multi_gpu",  # torchelastic's agent; on a CPU-only torch the workers use gloo
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(script),
        *args,
    ]
    proc = subprocess.run(cmd, cwd=cwd, env=clean_env(venv, env), capture_output=True, text=True, timeout=420)
    return proc.returncode, proc.stdout + proc.stderr


def assert_one_trace(traces: Path, output: str, source: str) -> None:
    spans = read_files(traces).spans
    loads = [s for s in spans if s.name == "transformers.from_pretrained"]
    assert sorted(s.resource["loadtrace.rank"] for s in loads) == [0, 1], output
    assert len({s.trace_id for s in spans}) == 1, {(s.resource["loadtrace.rank"], s.trace_id) for s in loads}
    assert {s.resource["loadtrace.job.id_source"] for s in loads} == {source}
    (root,) = [s for s in spans if s.name == "loadtrace.job"]
    startups = {s.resource["loadtrace.rank"]: s for s in spans if s.name == "loadtrace.startup"}
    assert all(s.parent_span_id == root.span_id for s in startups.values())
    assert all(s.parent_span_id == startups[s.resource["loadtrace.rank"]].span_id for s in loads)
    assert "found no job id" not in output


@pytest.mark.integration
def test_accelerate_launch_loading_before_init_process_group_is_one_trace(checkpoint, tmp_path):
    venv = venv_or_skip()
    script = tmp_path / "early_load.py"
    script.write_text(EARLY_LOAD)
    traces = tmp_path / "traces"
    code, output = accelerate_launch(
        venv, script, [str(checkpoint)], tmp_path / "run", {"LOADTRACE": "1", "LOADTRACE_DIR": str(traces)}
    )
    assert code == 0, output[-4000:]
    assert_one_trace(traces, output, SOURCE_LAUNCH)


@pytest.mark.integration
@pytest.mark.parametrize("traced_launcher", [True, False], ids=["traced-launcher", "workers-only"])
def test_torchrun_without_rdzv_id_loading_before_init_process_group_is_one_trace(checkpoint, tmp_path, traced_launcher):
    venv = venv_or_skip()
    script = tmp_path / "early_load.py"
    script.write_text(EARLY_LOAD)
    traces = tmp_path / "traces"
    env = {"LOADTRACE_DIR": str(traces)}
    env.update({"LOADTRACE": "1"} if traced_launcher else {"INSTRUMENT_IN_WORKER": "1"})
    run = torchrun(venv, script, [str(checkpoint)], cwd=tmp_path / "run", env=env).check()  # --master_port: "none"
    output = run.log.read_text(errors="replace")
    assert_one_trace(traces, output, SOURCE_LAUNCH if traced_launcher else SOURCE_LAUNCH_DIR)
