"""Promise: transformers' own tensor parallelism (``from_pretrained(tp_plan="auto")``) is reported with exact numbers:
each rank's local shard held, the ``tp`` strategy, the model's size from the checkpoint, a sharded read and no
replica; and a plain Llama counts no conversions (transformers makes a ``WeightRenaming`` for every key, renamed or
not), so FSDP ``cpu_ram_efficient_loading`` shows no ``duplicate_conversion`` for work no rank did.

Two ranks (torchrun, gloo on CPU) of ``tests/workers/tp_load.py`` load a tiny randomly initialised Llama saved here;
each rank counts its own reads and its local held bytes (``to_local()`` of a DTensor), knowing nothing of loadtrace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.llama import TINY_LLAMA
from support.multirank import read_spans
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.analysis.report import build_report

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "tp_load.py"
# No plain Llama job: a plain load's replicated_load is held on the session's jobs (e2e/test_cli_multirank.py), and the
# fsdp load here is the Llama loaded without a tp_plan.
MODES = ("tp", "fsdp")
# The second venv (transformers 5.12.0) is for the seed reports' paths: its FSDP load, not tensor parallelism.
CASES = [(venv, mode) for venv in VENVS for mode in MODES if venv is VENVS[0] or mode == "fsdp"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Path, int]:
    """A tiny Llama (its config has a ``base_model_tp_plan``) in 5 shards with an index; its tensor bytes, from the
    tensors themselves."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = LlamaConfig(**TINY_LLAMA, max_position_embeddings=64)
    assert config.base_model_tp_plan, "the Llama config must carry a tensor-parallel plan"
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, max_shard_size="100KB")
    assert (path / "model.safetensors.index.json").exists()
    return path, sum(t.nbytes for t in model.state_dict().values())


@pytest.fixture(scope="module")
def runs(llama, tmp_path_factory):
    done: dict[tuple[str, str], tuple[dict, dict[int, dict], list]] = {}
    path, _ = llama

    def get(venv, mode):
        key = (str(venv.root), mode)
        if key not in done:
            cwd = tmp_path_factory.mktemp(f"{venv.name}-{mode}")
            out = cwd / "out"
            run = torchrun(
                venv, WORKER, [str(path), "--mode", mode, "--out", str(out)], cwd=cwd, env={"LOADTRACE": "1"}
            )
            run.check()
            counts = {r: json.loads((out / f"count-rank{r}.json").read_text()) for r in (0, 1)}
            spans = read_spans(cwd / "loadtrace-traces")
            done[key] = (build_report(spans), counts, spans.spans)
        return done[key]

    return get


@pytest.fixture(params=CASES, ids=[f"{venv.id}-{mode}" for venv, mode in CASES])
def case(request, runs):
    venv, mode = request.param
    return (mode, *runs(venv, mode))


def kinds(report: dict) -> set[str]:
    return {finding["kind"] for finding in report["findings"]}


def test_each_rank_holds_and_reads_its_own_bytes(case):
    mode, report, counts, _ = case
    by_rank = {rank["rank"]: rank for rank in report["ranks"]}
    for number, count in counts.items():
        rank = by_rank[number]
        assert rank["held_bytes"] == count["held_bytes"], f"rank {number}"
        assert (rank["read_bytes"], rank["tensors_read"]) == (count["read_bytes"], count["read_tensors"]), number
    if mode == "tp":
        assert all(rank["read_bytes"] < report["traces"][0]["model_bytes"] for rank in report["ranks"])


def test_model_size_is_the_checkpoints_tensor_bytes(case, llama):
    _, report, _, spans = case
    _, tensor_bytes = llama
    (trace,) = report["traces"]
    assert trace["model_bytes"] == tensor_bytes
    loads = [s for s in spans if s.name == "transformers.from_pretrained"]
    assert len(loads) == 2 and all(s.attributes["loadtrace.checkpoint.tensor_bytes"] == tensor_bytes for s in loads)


def test_strategy_and_findings(case):
    mode, report, _, spans = case
    strategies = {rank["strategy"] for rank in report["ranks"]}
    found = kinds(report)
    loads = [s for s in spans if s.name == "transformers.from_pretrained"]
    if mode == "tp":
        assert strategies == {"tp"}
        assert all(s.attributes["loadtrace.tp_plan"] == "auto" for s in loads)
        assert "replicated_load" not in found and "sharded_read" in found, report["findings"]
        (sharded,) = [f for f in report["findings"] if f["kind"] == "sharded_read"]
        assert sharded["ranks"] == [0, 1] and all(r["partial_bytes"] > 0 for r in sharded["evidence"]["per_rank"])
    else:
        assert strategies == {"fsdp_cpu_ram_efficient"} and all("loadtrace.tp_plan" not in s.attributes for s in loads)
        assert "duplicate_conversion" not in found and "duplicate_checkpoint_read" in found, report["findings"]


def test_a_llama_counts_no_conversions(case):
    """Every checkpoint key of a Llama is its parameter's name: nothing is renamed or converted."""
    _, report, _, _ = case
    assert [(rank["conversions"], rank["conversion_bytes"]) for rank in report["ranks"]] == [(0, 0), (0, 0)]
