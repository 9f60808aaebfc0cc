"""What to do about a finding on a torch.distributed.checkpoint (DCP) load: the real cause, and the setting or call
that changes it (advice.py asks here when an offending rank's strategy is a DCP one)."""

from __future__ import annotations

from .. import semconv as sc

_BROADCAST = (
    "pass StateDictOptions(full_state_dict=True, broadcast_from_rank0=True) to set_model_state_dict and read the "
    "checkpoint on rank 0 only (the other ranks pass an empty state dict): rank 0 then broadcasts it"
)
_SHARDED = (
    "load into the sharded model's own state dict (dcp.load(model.state_dict(), checkpoint_id=...) after "
    "fully_shard) so that each rank reads only its shard"
)
_RESAVE = (
    "the checkpoint was saved at another world size or sharding: each rank reads every saved chunk that overlaps its "
    "shard in full; save it once at this world size (dcp.save) to read only each rank's own chunks"
)


def dcp_next_step(kind: str, strategies: set[str | None]) -> str | None:
    """One sentence per (kind, DCP strategy); None where there is nothing specific to say."""
    if kind == sc.FINDING_DUPLICATE_CHECKPOINT_READ:
        if sc.STRATEGY_DCP_BROADCAST in strategies:
            return (
                "under broadcast_from_rank0 only rank 0 needs the full state dict: skip the read on the other ranks "
                "and pass them an empty dict"
            )
        return f"every rank read the whole checkpoint for set_model_state_dict(full_state_dict=True): {_BROADCAST}"
    if kind == sc.FINDING_REPLICATED_LOAD:
        if sc.STRATEGY_DCP_RESHARDED in strategies:
            return _RESAVE
        return f"every rank read whole tensors: {_SHARDED}"
    if kind == sc.FINDING_SHARDED_READ:
        return "nothing to do: each rank read only its own shard of the checkpoint (a sharded DCP load)"
    return None
