"""Promise: every rank of a single-node torchrun or `accelerate launch` lands in one trace from its first line, even
when the launcher's run id is the placeholder `none` (any `--master-port`, every `accelerate launch`) and the job loads
before `init_process_group`: what one launcher gives all its workers on one node is the job id. Several nodes never
use it (each node's launcher has its own): they still join through the process group's store
(tests/in_job/test_job_id_multinode.py)."""

from __future__ import annotations

import pytest

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
