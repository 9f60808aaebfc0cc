"""Promise (issue 40): ``loadtrace.launcher`` names what launched the process, from the launcher's own traces (the
process tree: torchrun, ``accelerate launch``, deepspeed's launcher; else the variables only a launcher sets), never
from a setting any job may put in its environment: a plain torchrun with ``ACCELERATE_USE_FSDP=true`` is torchrun.
The tree read for real: tests/processes/test_launcher_from_the_process_tree.py; a real torchrun with that setting:
tests/e2e/test_multirank_traces.py; real ``accelerate launch``, torchrun and deepspeed's launcher:
tests/e2e/test_job_id_single_node_launchers.py."""

from __future__ import annotations

import os

import pytest

from loadtrace.instrumentation import context
from loadtrace.instrumentation.context import launched_by, launcher, program, rank_from_env

TORCHRUN = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
ELASTIC = {**TORCHRUN, "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}
# What deepspeed/launcher/launch.py gives each rank it starts (besides MASTER_ADDR, MASTER_PORT).
DEEPSPEED = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "CROSS_RANK": "0", "CROSS_SIZE": "1", "LOCAL_SIZE": "2"}
ACCELERATE_SETTINGS = {"ACCELERATE_USE_FSDP": "true", "ACCELERATE_MIXED_PRECISION": "bf16"}


@pytest.mark.parametrize(
    "env, tree, expected",
    [
        ({**ELASTIC, **ACCELERATE_SETTINGS}, None, "torchrun"),  # the job's settings name nothing
        ({**ELASTIC, "ACCELERATE_USE_DEEPSPEED": "true"}, None, "torchrun"),
        ({**ELASTIC, **ACCELERATE_SETTINGS}, "torchrun", "torchrun"),
        ({**ELASTIC, **ACCELERATE_SETTINGS}, "accelerate", "accelerate"),  # accelerate launch's process started it
        (DEEPSPEED, None, "deepspeed"),
        ({**DEEPSPEED, "ACCELERATE_USE_DEEPSPEED": "true"}, "deepspeed", "deepspeed"),
        ({**ELASTIC, "CROSS_RANK": "0", "CROSS_SIZE": "1", "LOCAL_SIZE": "2"}, None, "torchrun"),  # torchelastic's
        ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "ACCELERATE_USE_FSDP": "true"}, None, "slurm"),
        ({}, "accelerate", "accelerate"),  # accelerate launch of one process: no rank variables
        (ACCELERATE_SETTINGS, None, "none"),
    ],
)
def test_the_launcher_from_its_own_traces(env, tree, expected):
    rank = rank_from_env(env, tree)
    assert rank.launcher == expected
    if "RANK" in env:
        assert (rank.rank, rank.world_size) == (1, 2), "the numbers are the variables' whoever launched"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["/venv/bin/python", "/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"], "torchrun"),
        (["/venv/bin/python3.11", "-m", "torch.distributed.run", "train.py"], "torchrun"),
        (["/venv/bin/python", "/venv/bin/accelerate", "launch", "--multi_gpu", "train.py"], "accelerate"),
        (["/usr/bin/python3", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"], "deepspeed"),
        (["python", "-X", "importtime", "-mdeepspeed.launcher.runner", "train.py"], "deepspeed"),
        (["/venv/bin/python", "/venv/bin/deepspeed", "--num_gpus", "2", "train.py"], "deepspeed"),
        (["torchrun", "--nnodes", "2", "train.py"], "torchrun"),
        (["python", "train.py", "--launcher", "accelerate"], None),  # a job's arguments are not its program
        (["python", "-c", "import torchrun"], None),
        (["bash", "run.sh"], None),
        ([], None),
    ],
)
def test_a_command_line_names_its_launcher(argv, expected):
    name = program(argv)
    assert (context.PROGRAMS.get(name) if name else None) == expected


def test_this_process_and_its_tree_name_no_launcher():
    """pytest is no launcher, nor is what runs it; a pid that is gone names nothing."""
    assert launcher() is None and launcher(os.getpid()) is None
    assert launcher(2**22 + 1) is None
    assert launched_by() is None
