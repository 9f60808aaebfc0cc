"""Promise (issue 48.1, issue 49.4): ZeRO-3 is told right, in real jobs.

- A bf16 checkpoint under ZeRO-3 with bf16 off in the DeepSpeed config (``examples/load.py --mode zero3``'s config) is
  built as fp32: each rank's partition is half the fp32 model, as many bytes as the whole checkpoint. That is no
  finding, as with bf16 on, and the forecast calls none of it duplicated: a partition is judged against the model as
  built (``loadtrace.model.bytes``), not against the checkpoint's bytes.
- The ZeRO-3 mistake (Roblox/FAI-RL#66): the config made after ``from_pretrained``, so every rank builds and reads the
  whole model, then ``deepspeed.initialize`` partitions it. ``deepspeed.initialize`` records the ZeRO stage, and the
  report warns ``whole_model_before_zero3`` with the bytes per node and the fix, not "plain, expected".

Three real ``torchrun --nproc_per_node 2`` jobs of ``tests/workers/zero3_job.py`` (deepspeed's CPU accelerator, gloo) on
a bf16 Llama saved here; each rank counts what its model holds, knowing nothing of loadtrace: the partitions
(``ds_tensor.numel() * element_size()``), every ``param.data`` and buffer, and the whole model (``ds_numel``).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from support.llama import TINY_LLAMA
from support.multirank import read_spans
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv
from loadtrace.analysis.report import build_report
from loadtrace.cli import main

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "zero3_job.py"
CASES = {"right-bf16-off": ("before", "off"), "right-bf16-on": ("before", "on"), "config-after": ("after", "off")}


@pytest.fixture(scope="module")
def bf16_llama(tmp_path_factory) -> tuple[Path, int]:
    """A tiny Llama saved in bfloat16 in several shards: its folder and its tensor bytes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("bf16-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, max_position_embeddings=64)).to(torch.bfloat16)
    model.save_pretrained(path, max_shard_size="100KB")
    return path, sum(t.nbytes for t in model.state_dict().values())


class Run:
    def __init__(self, cwd: Path, out: Path):
        self.traces = cwd / "loadtrace-traces"
        self.counts = {r: json.loads((out / f"zero3-rank{r}.json").read_text()) for r in (0, 1)}
        self.spans = read_spans(self.traces)
        self.report = build_report(self.spans)

    def rank(self, number: int) -> dict:
        return next(rank for rank in self.report["ranks"] if rank["rank"] == number)

    def named(self, name: str) -> list:
        return [span for span in self.spans.spans if span.name == name]

    def forecast(self, model_bytes: int) -> dict:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            argv = ["report", str(self.traces), "--forecast-model-bytes", str(model_bytes), "--format", "json"]
            main(argv)
        return json.loads(out.getvalue())["forecast"]


@pytest.fixture(scope="module")
def runs(bf16_llama, tmp_path_factory):
    done: dict[str, Run] = {}

    def get(case: str) -> Run:
        if case not in done:
            config, bf16 = CASES[case]
            cwd = tmp_path_factory.mktemp(case)
            args = [str(bf16_llama[0]), "--config", config, "--bf16", bf16, "--out", str(cwd / "out")]
            torchrun(VENVS[0], WORKER, args, cwd=cwd, env={"LOADTRACE": "1"}).check()
            done[case] = Run(cwd, cwd / "out")
        return done[case]

    return get


@pytest.mark.parametrize("case", ["right-bf16-off", "right-bf16-on"])
def test_a_zero3_partition_in_either_dtype_is_no_finding(runs, bf16_llama, case):
    run = runs(case)
    _, checkpoint_bytes = bf16_llama
    assert run.report["findings"] == [], [f["detail"] for f in run.report["findings"]]
    for number, count in run.counts.items():
        loaded = count["loaded"]
        held = run.rank(number)["held_bytes"]
        # What the rank holds: its partitions, plus param.data (empty once partitioned) and the buffers.
        assert sum(held.values()) == loaded["partition_bytes"] + loaded["data_bytes"], number
        (load,) = [s for s in run.named(semconv.SPAN_FROM_PRETRAINED) if s.resource[semconv.RANK] == number]
        assert load.attributes[semconv.MODEL_BYTES] == loaded["whole_bytes"]
    whole = run.counts[1]["loaded"]["whole_bytes"]
    partition = run.counts[1]["loaded"]["partition_bytes"]
    if case == "right-bf16-off":  # built as fp32: a partition weighs as much as the whole bf16 checkpoint
        assert whole == pytest.approx(2 * checkpoint_bytes, rel=0.01)
        assert partition == pytest.approx(checkpoint_bytes, rel=0.01)
    else:
        assert whole == pytest.approx(checkpoint_bytes, rel=0.01)
    duplicated = run.forecast(checkpoint_bytes)["basis"]["categories"]["duplicated"]["ranks"]
    assert all(entry["to_bytes"] == 0 for entry in duplicated.values()), duplicated
    assert all(entry["from_bytes"] < 0.01 * checkpoint_bytes for entry in duplicated.values()), duplicated


def test_deepspeed_initialize_records_the_zero_stage(runs):
    run = runs("config-after")
    spans = run.named(semconv.SPAN_DEEPSPEED_INITIALIZE)
    assert len(spans) == 2
    assert {s.attributes[semconv.DEEPSPEED_ZERO_STAGE] for s in spans} == {run.counts[0]["zero_stage"]} == {3}


def test_the_config_made_after_from_pretrained_is_a_warning_with_the_bytes_per_node_and_the_fix(runs):
    run = runs("config-after")
    kinds = [f["kind"] for f in run.report["findings"]]
    assert kinds == [semconv.FINDING_WHOLE_MODEL_BEFORE_ZERO3], run.report["findings"]
    (finding,) = run.report["findings"]
    assert (finding["severity"], finding["ranks"]) == ("warning", [0, 1])
    whole = {number: count["loaded"]["data_bytes"] for number, count in run.counts.items()}  # nothing partitioned
    assert all(count["loaded"]["partition_bytes"] == 0 for count in run.counts.values())
    assert {entry["rank"]: entry["bytes"] for entry in finding["evidence"]["per_rank"]} == whole
    assert finding["projected_node_bytes"] == max(whole.values()) * 2  # 2 ranks on this node
    assert "Projected host memory: " in finding["detail"] and " per node" in finding["detail"]
    assert "HfDeepSpeedConfig" in finding["next_step"] and "zero.Init" in finding["next_step"]
    assert {rank["strategy"] for rank in run.report["ranks"]} == {"plain"}
    # Partitioned only by deepspeed.initialize: each rank then holds half.
    assert all(count["initialized"]["partition_bytes"] < count["loaded"]["data_bytes"] for count in run.counts.values())
