"""Promise (issue 40): ``loadtrace.launcher`` names what really launched the ranks: a plain ``torchrun`` with
``ACCELERATE_USE_FSDP=true`` in the environment (the job's setting, which accelerate's ``Accelerator`` reads) is
``torchrun`` (the session's FSDP job: torchrun with accelerate's settings, ``support/multirank.py``), ``accelerate
launch`` is ``accelerate`` (its real launch: e2e/test_job_id_single_node_launchers.py), deepspeed's launcher is
``deepspeed``. The rules, unit by unit: tests/in_job/test_launcher_named.py."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from support.multirank import MODE_ENV
from support.torchrun import clean_env, free_port
from support.venvs import Venv, discover

from loadtrace import semconv
from loadtrace.analysis.sources import read_files

READ = """
import sys, safetensors
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
"""
# A setting of the job's, not a launcher's trace: deepspeed's launcher runs with it too.
SETTINGS = MODE_ENV["fsdp"]


@pytest.fixture(scope="module")
def venv() -> Venv:
    return discover()[0]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    import safetensors.torch
    import torch

    path = tmp_path_factory.mktemp("ckpt") / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(path))
    return path


def launchers_named(traces: Path, output: str) -> dict[int, str]:
    """Each rank's ``loadtrace.launcher``, from its spans' resource."""
    named = {s.resource[semconv.RANK]: s.resource[semconv.LAUNCHER] for s in read_files(traces).spans}
    assert sorted(named) == [0, 1], output[-3000:]
    return named


def job(tmp_path: Path, ckpt: Path) -> tuple[Path, list[str], dict[str, str]]:
    script = tmp_path / "read.py"
    script.write_text(READ)
    traces = tmp_path / "traces"
    return traces, [str(script), str(ckpt)], {"LOADTRACE": "1", "LOADTRACE_DIR": str(traces), **SETTINGS}


def test_plain_torchrun_with_accelerates_setting_is_torchrun(jobs, venv):
    job = jobs.get(venv, "fsdp", traced=True)  # torchrun, with MODE_ENV["fsdp"]: accelerate's settings
    assert launchers_named(job.trace_root, job.run.tail()) == {0: "torchrun", 1: "torchrun"}


def test_deepspeeds_launcher_is_deepspeed(venv, ckpt, tmp_path):
    """``deepspeed.launcher.launch``: what the ``deepspeed`` command starts on each node to start its ranks."""
    traces, command, env = job(tmp_path, ckpt)
    world = base64.urlsafe_b64encode(json.dumps({"localhost": [0, 1]}).encode()).decode()
    launch = [str(venv.python), "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world}"]
    launch += ["--master_port", str(free_port()), "--no_local_rank", *command]
    done = subprocess.run(launch, cwd=tmp_path, env=clean_env(venv, env), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert launchers_named(traces, done.stdout + done.stderr) == {0: "deepspeed", 1: "deepspeed"}
