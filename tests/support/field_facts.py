"""What each rank does, per transformers release and mode, for the default test checkpoint.

The numbers of ``shared/notes/field-facts.md`` ("The two reported problems, reproduced"), for the tiny Qwen3-MoE that
``examples/make_checkpoint.py`` writes by default (5 shards, 69 tensors, 1,009,152 bytes; the model has 25 parameters
and 2 non-persistent rotary buffers of 32 bytes each). Counted by ``tests/workers/count_load.py``, independently of
loadtrace. A release not listed here is still checked (loadtrace against the independent count), just not against
these.

``FINDINGS`` says what ``loadtrace report`` must make of each (release, mode), and ``SEED2`` what each rank converts
of the public ZeRO-3 report's own model. ``scripts/new_release.py VERSION`` records ``EXPECTED``, ``FINDINGS`` and
``SEED2`` for a new release.
"""

from __future__ import annotations

from dataclasses import dataclass

FILES = 5
TENSORS = 69
BYTES = 1_009_152
MODEL_BYTES = 1_009_216  # parameters + the two non-persistent buffers
BUFFER_BYTES = 64
CONVERSIONS = 4  # ``WeightConverter.convert`` calls: each layer's experts fused into gate_up_proj and down_proj
CONVERSION_BYTES = 393_216  # what they produce, on a rank that converts real tensors


@dataclass(frozen=True)
class Rank:
    opens: int
    read_tensors: int
    read_bytes: int
    get_tensor_calls: int  # reads through get_tensor (ZeRO-3 path)
    slice_reads: int  # reads through indexing get_slice results (conversion path)
    materialized_cpu_calls: int
    materialized_cpu_bytes: int
    materialized_functions: dict
    conversions: int = CONVERSIONS  # every rank converts, in every mode (ZeRO-3 too: on its own path)
    conversion_bytes: int = CONVERSION_BYTES  # real (non-meta) bytes produced


SLICES = Rank(FILES, TENSORS, BYTES, 0, TENSORS, 2, BUFFER_BYTES, {"empty_like cpu": 2})
FSDP_RANK1_524 = Rank(FILES, TENSORS, BYTES, 0, TENSORS, 2, BUFFER_BYTES, {"zeros_like cpu": 2})
FSDP_RANK1_512 = Rank(FILES, TENSORS, BYTES, 0, TENSORS, 27, MODEL_BYTES, {"zeros_like cpu": 27})
ZERO3_FULL_READ = Rank(FILES, TENSORS, BYTES, TENSORS, 0, 0, 0, {})
ZERO3_META = Rank(FILES, 0, 0, 0, 0, 0, 0, {}, conversion_bytes=0)  # converts meta tensors: shapes, no bytes

EXPECTED: dict[tuple[str, str], tuple[Rank, Rank]] = {
    ("5.24", "plain"): (SLICES, SLICES),
    ("5.24", "fsdp"): (SLICES, FSDP_RANK1_524),  # rank 1 still reads everything: through the read path
    ("5.24", "zero3"): (ZERO3_FULL_READ, ZERO3_META),  # rank 1: get_slice on meta, no bytes
    ("5.12", "plain"): (SLICES, SLICES),
    ("5.12", "fsdp"): (SLICES, FSDP_RANK1_512),  # rank 1: reads everything AND zeros_like a whole second model
    ("5.12", "zero3"): (ZERO3_FULL_READ, ZERO3_FULL_READ),  # rank 1 reads and converts everything, keeps nothing
}

WARN, INFO = "warning", "info"
_FSDP = {("duplicate_checkpoint_read", WARN), ("nonzero_rank_materialization", WARN), ("duplicate_conversion", WARN)}
# (release, mode) → the findings ``loadtrace report`` must make of that job, (kind, severity), each on rank 1 alone.
FINDINGS: dict[tuple[str, str], set[tuple[str, str]]] = {
    ("5.24", "plain"): {("replicated_load", INFO)},
    ("5.24", "fsdp"): _FSDP,  # zeros_like is gone, but rank 1 still reads everything and keeps it
    ("5.24", "zero3"): set(),  # rank 1 opens the files, reads 0 B, converts meta tensors
    ("5.12", "plain"): {("replicated_load", INFO)},
    ("5.12", "fsdp"): _FSDP,  # rank 1 reads, converts, and zeros_like fills a second model
    ("5.12", "zero3"): {("duplicate_checkpoint_read", WARN), ("duplicate_conversion", WARN)},  # keeps a partition
}


def expected(release: str, mode: str, rank: int) -> Rank | None:
    pair = EXPECTED.get((release, mode))
    return pair[rank] if pair else None


def observed(count: dict) -> Rank:
    cpu = count["materialized"].get("cpu", {"calls": 0, "bytes": 0})
    return Rank(
        opens=count["opens"],
        read_tensors=count["read_tensors"],
        read_bytes=count["read_bytes"],
        get_tensor_calls=count["get_tensor_calls"],
        slice_reads=count["slice_reads"],
        materialized_cpu_calls=cpu["calls"],
        materialized_cpu_bytes=cpu["bytes"],
        materialized_functions=count["materialized_by_function"],
        conversions=count["conversions"],
        conversion_bytes=count["conversion_bytes"],
    )


# Seed 2 told whole (issue 39): the public ZeRO-3 report's model, a 2-layer, 4-expert Qwen3 MoE (hidden 256,
# moe_intermediate_size 128) saved by ``save_pretrained`` in one file, loaded by 2 ranks under ZeRO-3. Each rank fuses
# the experts of both layers: 4 ``WeightConverter.convert`` calls producing 3,145,728 B; on 5.24 rank 1's are on meta.
SEED2_CONFIG = {"hidden_size": 256, "moe_intermediate_size": 128}
SEED2_LAYERS, SEED2_EXPERTS, SEED2_SHARD_SIZE = 2, 4, "50GB"
SEED2_SUMMARY = "wrote 1 shards, 45 tensors, 5,600,512 bytes"
SEED2_CONVERTED = 3_145_728
# release → ((conversions, real bytes) per rank, rank 1's findings)
SEED2: dict[str, tuple[tuple[tuple[int, int], ...], set[str]]] = {
    "5.12": (((4, SEED2_CONVERTED), (4, SEED2_CONVERTED)), {"duplicate_checkpoint_read", "duplicate_conversion"}),
    "5.24": (((4, SEED2_CONVERTED), (4, 0)), set()),
}
