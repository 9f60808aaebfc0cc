"""What to do about a finding: the fix or setting that removes it, and the upstream report it matches where one is
known. One sentence per (kind, strategy); a kind without advice gets none (``Finding.next_step`` stays None).

The upstream links are the public reports this tool was built for (see README); each was read, none is guessed:

- huggingface/transformers#43749 (open): under FSDP ``cpu_ram_efficient_loading`` every rank reads the checkpoint
  and holds the whole model on CPU, because the flag is checked only after loading (what 5.24 does here);
- huggingface/transformers#45649 (open): ``torch.zeros_like`` on every non-zero rank in
  ``_move_missing_keys_from_meta_to_device`` commits a whole model of host memory per rank (what 5.12 does here);
- huggingface/transformers#24964 (merged 2023): under ZeRO-3 only rank 0 needs to read the checkpoint, the others
  receive its weights through ``deepspeed.zero.GatheredParameters``; a release that reads on every rank lost that;
- Roblox/FAI-RL#66 (closed by #68): the ``HfDeepSpeedConfig`` made only after ``from_pretrained`` (its training
  arguments built after the model), so ``zero.Init`` never ran and every rank held a whole 30B model (~230 GB);
- vllm-project/vllm#5405 (closed): tensor parallel 4 read 436 GB from disk for a 144 GB model, every rank the whole
  checkpoint; the maintainers' answer is the ``sharded_state`` load format (each rank saved once, then read alone).
  SGLang has the same format (``Engine.save_sharded_model``, ``--load-format sharded_state``), and both have
  ``--load-format fastsafetensors``, whose loader spreads the files over the ranks and shares what each read.

FSDP and ZeRO-3 are for training: an inference job's replicas (no optimizer, no training framework:
``loadtrace.workload``) are told the serving engines' own ways to read a checkpoint once.
"""

from __future__ import annotations

from .. import semconv as sc
from .dcp_advice import dcp_next_step
from .model import Finding

FSDP_READS = "https://github.com/huggingface/transformers/issues/43749"
FSDP_ZEROS_LIKE = "https://github.com/huggingface/transformers/pull/45649"
ZERO3_RANK0_ONLY = "https://github.com/huggingface/transformers/pull/24964"
ZERO3_CONFIG_TOO_LATE = "https://github.com/Roblox/FAI-RL/issues/66"
TP_READS_ALL = "https://github.com/vllm-project/vllm/issues/5405"

_FSDP_META = (
    "build the model on the meta device on ranks other than 0 (accelerate's init_empty_weights()) instead of "
    "from_pretrained there, and let FSDP's prepare broadcast rank 0's weights"
)
_ZERO3 = (
    "under ZeRO-3 transformers 5.24 reads no tensor bytes on ranks other than 0 (measured; 5.12 reads everything): "
    "upgrade transformers, and keep the HfDeepSpeedConfig (or TrainingArguments(deepspeed=...)) alive before "
    f"from_pretrained; background: {ZERO3_RANK0_ONLY}"
)
_ZERO3_CONFIG_FIRST = (
    "make the ZeRO-3 config before from_pretrained and keep it alive during it: HfDeepSpeedConfig(ds_config) (with "
    'no "auto" values left in it), or TrainingArguments(deepspeed=ds_config) built before the model, or build the '
    "model under deepspeed.zero.Init(config_dict_or_path=ds_config); then each rank holds only its partition as it "
    f"loads; upstream: {ZERO3_CONFIG_TOO_LATE}"
)


_REPLICAS_TRAINING = (
    "expected for replicated data parallel; to read the checkpoint once per job, use FSDP with "
    "cpu_ram_efficient_loading or ZeRO-3"
)
_SHARDED_STATE = {
    "vllm": "save each rank's part once with vLLM's save_sharded_state example and serve with --load-format "
    "sharded_state",
    "sglang": "save each rank's part once with SGLang's Engine.save_sharded_model(path=..., pattern=..., max_size=...) "
    "and serve with --load-format sharded_state",
    None: "save each rank's part once and load only that (vLLM: its save_sharded_state example; SGLang: "
    "Engine.save_sharded_model; then --load-format sharded_state)",
}


def _replicas(finding: Finding) -> str:
    """Replicas of a training job are told the training strategies; those of an inference job (every rank said so)
    how a serving engine reads a checkpoint once, in the words of the engine it imported."""
    entries = finding.evidence.get("per_rank", [])
    if not entries or any(entry.get("workload") != sc.WORKLOAD_INFERENCE for entry in entries):
        return _REPLICAS_TRAINING
    engines = {entry.get("serving_engine") for entry in entries}
    engine = engines.pop() if len(engines) == 1 else None
    named = {"vllm": "vLLM", "sglang": "SGLang"}.get(engine or "", "an inference job")
    return (
        f"{named}: where the ranks are tensor-parallel, {_SHARDED_STATE.get(engine, _SHARDED_STATE[None])}, so that "
        "each rank reads only its own part; or let the ranks share the reading with a distributed loader "
        f"(fastsafetensors: --load-format fastsafetensors); upstream: {TP_READS_ALL}"
    )


def next_step(finding: Finding) -> str | None:
    """The advice for one finding, or None where there is nothing specific to say."""
    strategies = {entry.get("strategy") for entry in finding.evidence.get("per_rank", [])}
    if strategies & set(sc.DCP_STRATEGIES):
        return dcp_next_step(finding.kind, strategies)
    fsdp_efficient = bool(strategies & {sc.STRATEGY_FSDP_CPU_RAM_EFFICIENT, sc.STRATEGY_FSDP_CPU_RAM_EFFICIENT_TP})
    zero3 = sc.STRATEGY_ZERO3 in strategies
    kind = finding.kind
    if kind in (sc.FINDING_DUPLICATE_CHECKPOINT_READ, sc.FINDING_DUPLICATE_CONVERSION):
        if zero3:
            return _ZERO3
        if fsdp_efficient:
            return f"{_FSDP_META}; upstream: {FSDP_READS}"
        if strategies & {sc.STRATEGY_FSDP, sc.STRATEGY_FSDP_TP}:
            return "set fsdp_cpu_ram_efficient_loading: true (accelerate config) so that only rank 0 reads"
        return None
    if kind == sc.FINDING_NONZERO_RANK_MATERIALIZATION:
        created = any(entry.get("created") for entry in finding.evidence.get("per_rank", []))
        upstream = FSDP_ZEROS_LIKE if created else FSDP_READS
        if zero3:
            return f"check that deepspeed.zero.Init was active during from_pretrained; background: {ZERO3_RANK0_ONLY}"
        return f"{_FSDP_META}; upstream: {upstream}"
    if kind == sc.FINDING_WHOLE_MODEL_BEFORE_ZERO3:
        return _ZERO3_CONFIG_FIRST
    if kind == sc.FINDING_INCOMPLETE_RANK:
        return (
            "see how it ended in its row; an OOM kill means the node's memory did not hold the load: size it with "
            "loadtrace report SOURCE --forecast-model-bytes BYTES (docs/report.md, Forecast)"
        )
    if kind == sc.FINDING_FAILED_LOAD:
        return "the job's own exception: its type is the rank's failed mark; run the load alone to see its traceback"
    if kind == sc.FINDING_REPLICATED_LOAD:
        return _replicas(finding)
    if kind == sc.FINDING_SHARDED_READ:
        if strategies & {sc.STRATEGY_TP, sc.STRATEGY_FSDP_TP, sc.STRATEGY_FSDP_CPU_RAM_EFFICIENT_TP}:
            return "nothing to do: each tensor parallel rank read its own slice"
        return "nothing to do: each rank read only its own slices of the tensors"
    if kind == sc.FINDING_COLLECTIVE_TIMEOUT:
        return (
            "raise the process group's timeout (init_process_group(timeout=timedelta(...))) above the slowest rank's "
            "load, or make the slow rank's storage faster (loadtrace top shows each rank's read rate while it loads)"
        )
    return None
