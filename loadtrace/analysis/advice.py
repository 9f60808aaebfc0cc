"""What to do about a finding: the fix or setting that removes it, and the upstream report it matches where one is
known. One sentence per (kind, strategy); a kind without advice gets none (``Finding.next_step`` stays None).

The upstream links are the public reports this tool was built for (see README); each was read, none is guessed:

- huggingface/transformers#43749 (open): under FSDP ``cpu_ram_efficient_loading`` every rank reads the checkpoint
  and holds the whole model on CPU, because the flag is checked only after loading (what 5.24 does here);
- huggingface/transformers#45649 (open): ``torch.zeros_like`` on every non-zero rank in
  ``_move_missing_keys_from_meta_to_device`` commits a whole model of host memory per rank (what 5.12 does here);
- huggingface/transformers#24964 (merged 2023): under ZeRO-3 only rank 0 needs to read the checkpoint, the others
  receive its weights through ``deepspeed.zero.GatheredParameters``; a release that reads on every rank lost that.
"""

from __future__ import annotations

from .. import semconv as sc
from .dcp_advice import dcp_next_step
from .model import Finding

FSDP_READS = "https://github.com/huggingface/transformers/issues/43749"
FSDP_ZEROS_LIKE = "https://github.com/huggingface/transformers/pull/45649"
ZERO3_RANK0_ONLY = "https://github.com/huggingface/transformers/pull/24964"

_FSDP_META = (
    "build the model on the meta device on ranks other than 0 (accelerate's init_empty_weights()) instead of "
    "from_pretrained there, and let FSDP's prepare broadcast rank 0's weights"
)
_ZERO3 = (
    "under ZeRO-3 transformers 5.24 reads no tensor bytes on ranks other than 0 (measured; 5.12 reads everything): "
    "upgrade transformers, and keep the HfDeepSpeedConfig (or TrainingArguments(deepspeed=...)) alive before "
    f"from_pretrained; background: {ZERO3_RANK0_ONLY}"
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
    if kind == sc.FINDING_INCOMPLETE_RANK:
        return (
            "see how it ended in its row; an OOM kill means the node's memory did not hold the load: size it with "
            "loadtrace report SOURCE --forecast-model-bytes BYTES (docs/report.md, Forecast)"
        )
    if kind == sc.FINDING_FAILED_LOAD:
        return "the job's own exception: its type is the rank's failed mark; run the load alone to see its traceback"
    if kind == sc.FINDING_REPLICATED_LOAD:
        return (
            "expected for replicated data parallel; to read the checkpoint once per job, use FSDP with "
            "cpu_ram_efficient_loading or ZeRO-3"
        )
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
