"""Promise (issue 12): ``loadtrace compare`` says what differs between two real loads, and picks each side from one
folder that holds both.

Two plain ``python`` runs (no launcher, so each is a trace of its own: a job id made from host, pid and random bits)
load the session's tiny Qwen3-MoE checkpoint with ``LOADTRACE=1`` into one ``LOADTRACE_DIR``: one at the default
dtype (float32), one with ``dtype=torch.bfloat16``. ``compare`` of that folder against itself refuses to guess which
is which, and with ``--a-job`` / ``--b-job`` names ``loadtrace.dtype`` as what differs, next to the halved bytes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.torchrun import clean_env
from support.venvs import discover, installed_problems

from loadtrace.cli import main

VENVS = discover()
LOAD = "import torch, transformers; transformers.AutoModelForCausalLM.from_pretrained({checkpoint!r}{dtype})"
DTYPES = {"default": "", "torch.bfloat16": ", dtype=torch.bfloat16"}


def load(checkpoint: Path, dtype: str, traces: Path, cwd: Path) -> None:
    venv = VENVS[0]
    assert not installed_problems(venv), f"{installed_problems(venv)}; {venv.install_hint()}"
    env = clean_env(venv, {"LOADTRACE": "1", "LOADTRACE_DIR": str(traces)})
    code = LOAD.format(checkpoint=str(checkpoint), dtype=DTYPES[dtype])
    proc = subprocess.run([str(venv.python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fp32_and_bf16_loads_in_one_folder_differ_in_dtype(checkpoint, tmp_path, capsys):
    traces = tmp_path / "traces"
    for dtype in DTYPES:
        load(checkpoint, dtype, traces, tmp_path)
    folder = str(traces)

    assert main(["report", folder, "--format", "json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["traces"]
    assert len(jobs) == 2, jobs
    fp32, bf16 = jobs  # in start order

    # Without picks: one line naming both jobs, and how to pick each side.
    assert main(["compare", folder, folder]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{fp32['job_id']} (trace {fp32['trace_id']}" in err
    assert f"{bf16['job_id']} (trace {bf16['trace_id']}" in err and "--a-job ID --b-job ID" in err

    # A by its job id, B by a prefix of its trace id.
    argv = ["compare", folder, folder, "--a-job", fp32["job_id"], "--b-job", bf16["trace_id"][:12]]
    assert main([*argv, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["a"]["trace_id"], result["b"]["trace_id"]) == (fp32["trace_id"], bf16["trace_id"])
    resources = {r["name"]: r for r in result["resources"]}
    assert resources["loadtrace.dtype"] == {
        "name": "loadtrace.dtype",
        "a": "default",
        "b": "torch.bfloat16",
        "differs": True,
    }
    assert [name for name, r in resources.items() if r["differs"]] == ["loadtrace.dtype"]
    assert not resources["checkpoint"]["differs"] and not resources["loadtrace.model.class"]["differs"]
    # A plain python run has no rank: compared as rank 0. bf16 holds half the bytes fp32 does.
    (held,) = [r for r in result["phases"] if (r["phase"], r["rank"], r["metric"]) == ("load", 0, "bytes")]
    buffers = 64  # the non-persistent buffers (rotary inv_freq) stay float32
    assert (held["b"] - buffers) * 2 == held["a"] - buffers == 1_009_152, held

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "\nwhat differs:\n" in out and "\nloadtrace.dtype  default  torch.bfloat16\n" in out
