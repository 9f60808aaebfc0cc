"""Promise (issue 49.5): accelerate's own loaders are told right. ``load_checkpoint_and_dispatch`` opens each
safetensors file twice (accelerate's ``load_state_dict`` reads its metadata and keys through one ``safe_open``, then
``load_file`` opens it again to read it): that is one file opened, not two. ``load_checkpoint_in_model`` is one load,
``accelerate.load_checkpoint_in_model``, with its reads inside it and the ``set_model_state_dict`` it makes per file
nested in it, not one DCP load per file with the reads outside them.

Real processes of ``tests/workers/accelerate_load.py`` (accelerate as installed, ``LOADTRACE=1``) on a 7-file Llama
saved here; the worker counts every ``safe_open`` and what was read through it, knowing nothing of loadtrace.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.llama import TINY_LLAMA
from support.venvs import REPO

from loadtrace import semconv
from loadtrace.analysis.sources import read_files
from loadtrace.cli import main

WORKER = REPO / "tests" / "workers" / "accelerate_load.py"
FILES = 7


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("llama-7-files")
    torch.manual_seed(0)
    sizes = {**TINY_LLAMA, "vocab_size": 2000, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4}
    LlamaForCausalLM(LlamaConfig(**sizes, max_position_embeddings=64)).save_pretrained(path, max_shard_size="700KB")
    assert len(list(path.glob("*.safetensors"))) == FILES
    return path


def run(llama: Path, cwd: Path, mode: str) -> tuple[dict, dict, list]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "ACCELERATE_", "FSDP_"))}
    env.update({"LOADTRACE": "1", "PYTHONPATH": ""})
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    ran = subprocess.run(
        [sys.executable, str(WORKER), str(llama), "--mode", mode, "--out", str(cwd / "out")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    count = json.loads((cwd / "out" / f"accelerate-{mode}.json").read_text())
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["report", str(cwd / "loadtrace-traces"), "--format", "json"]) == 0
    (rank,) = json.loads(out.getvalue())["ranks"]
    return count, rank, read_files(cwd / "loadtrace-traces").spans


@pytest.fixture(scope="module", params=["dispatch", "in_model"])
def loaded(request, llama, tmp_path_factory):
    return request.param, llama, *run(llama, tmp_path_factory.mktemp(request.param), request.param)


def test_each_file_opened_twice_counts_once_and_its_bytes_exactly(loaded):
    _, llama, count, rank, spans = loaded
    assert count["opens"] == 2 * FILES and len(count["files"]) == FILES  # the metadata open, then the read
    assert all(entry["opens"] == 2 for entry in count["files"].values())
    assert rank["files_opened"] == FILES
    assert (rank["read_bytes"], rank["tensors_read"]) == (count["read_bytes"], count["read_tensors"])
    (load,) = [s for s in spans if s.name == semconv.SPAN_ACCELERATE_LOAD_CHECKPOINT]
    assert load.attributes[semconv.FILES_OPENED] == FILES
    assert load.attributes[semconv.READ_BYTES] == count["read_bytes"]
    assert load.attributes[semconv.CHECKPOINT] == os.path.realpath(llama)


def test_one_load_with_its_reads_inside_it(loaded):
    mode, _, count, rank, spans = loaded
    assert rank["loads"] == 1
    (load,) = [s for s in spans if s.name == semconv.SPAN_ACCELERATE_LOAD_CHECKPOINT]
    files = [s for s in spans if s.name == semconv.SPAN_SAFETENSORS_OPEN]
    assert len(files) == 2 * FILES
    assert all(load.start_ns <= f.start_ns and f.end_ns <= load.end_ns for f in files)
    assert all(f.parent_span_id == load.span_id for f in files)
    assert count["started_ns"] <= load.start_ns and load.end_ns <= count["ended_ns"]
    assert rank["load_seconds"] == pytest.approx((load.end_ns - load.start_ns) / 1e9, abs=1e-6)
    nested = [s for s in spans if s.name == semconv.SPAN_DCP_SET_STATE_DICT]
    if mode == "in_model":  # accelerate's per-file set_model_state_dict: loads inside the one load
        assert len(nested) == FILES and all(s.parent_span_id == load.span_id for s in nested)
    else:
        assert nested == []
