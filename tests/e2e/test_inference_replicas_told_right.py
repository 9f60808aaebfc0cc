"""Promise (issue 49.3): an inference server's ranks that each read the whole checkpoint are told how to read it once,
in the serving engines' own words (a sharded state saved once per tensor-parallel rank, ``--load-format
sharded_state``; a distributed loader, fastsafetensors), never "use FSDP or ZeRO-3", which are for training. A
training job keeps that advice (e2e/test_startup_spans.py, a plain job that makes its optimizer after the load).

A real ``torchrun --nproc_per_node 2`` job of ``tests/workers/tp_serving_load.py``: vLLM's default loading path
reproduced (its ``safetensors_weights_iterator``, each weight narrowed to this rank's tensor-parallel part), on a
multi-file Llama saved here, with no optimizer and no training framework in the process; each rank counts its own
opens and reads, knowing nothing of loadtrace.
"""

from __future__ import annotations

import json

import pytest
from support.llama import TINY_LLAMA
from support.multirank import read_spans
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv
from loadtrace.analysis.report import build_report

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "tp_serving_load.py"


@pytest.fixture(scope="module")
def serving(tmp_path_factory) -> tuple[dict, dict[int, dict], list]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    checkpoint = tmp_path_factory.mktemp("llama-to-serve")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, max_position_embeddings=64)).save_pretrained(
        checkpoint, max_shard_size="100KB"
    )
    cwd = tmp_path_factory.mktemp("serving")
    out = cwd / "out"
    torchrun(VENVS[0], WORKER, [str(checkpoint), "--out", str(out)], cwd=cwd, env={"LOADTRACE": "1"}).check()
    counts = {r: json.loads((out / f"serving-rank{r}.json").read_text()) for r in (0, 1)}
    spans = read_spans(cwd / "loadtrace-traces")
    return build_report(spans), counts, spans.spans


def test_each_serving_rank_read_the_whole_checkpoint_exactly(serving):
    report, counts, _ = serving
    for rank in report["ranks"]:
        count = counts[rank["rank"]]
        assert (rank["read_bytes"], rank["tensors_read"]) == (count["read_bytes"], count["read_tensors"])
        assert rank["files_opened"] == len(count["files"]) == count["opens"] > 1
        assert count["kept_bytes"] < count["read_bytes"]  # each keeps its tensor-parallel part of what it read


def test_the_ranks_are_an_inference_job(serving):
    report, _, spans = serving
    assert {rank["workload"] for rank in report["ranks"]} == {semconv.WORKLOAD_INFERENCE}
    startups = [s for s in spans if s.name == semconv.SPAN_STARTUP]
    assert len(startups) == 2 and all(s.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_INFERENCE for s in startups)
    assert not [s for s in spans if s.name == semconv.SPAN_TRAINING_SIGN]


def test_they_are_told_how_to_read_it_once_never_fsdp_or_zero3(serving):
    report, _, _ = serving
    (finding,) = report["findings"]
    assert (finding["kind"], finding["severity"], finding["ranks"]) == (semconv.FINDING_REPLICATED_LOAD, "info", [1])
    advice = finding["next_step"]
    assert "--load-format sharded_state" in advice and "fastsafetensors" in advice, advice
    assert "vllm-project/vllm/issues/5405" in advice
    assert "FSDP" not in advice and "ZeRO" not in advice, advice
    assert "inference job" in finding["detail"]
    assert finding["evidence"]["per_rank"][0]["workload"] == semconv.WORKLOAD_INFERENCE
