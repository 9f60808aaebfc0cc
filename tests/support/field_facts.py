"""What each rank does, per transformers release and mode, for the default test checkpoint.

The numbers of ``shared/notes/field-facts.md`` ("The two reported problems, reproduced"), for the tiny Qwen3-MoE that
``examples/make_checkpoint.py`` writes by default (5 shards, 69 tensors, 1,009,152 bytes; the model has 25 parameters
and 2 non-persistent rotary buffers of 32 bytes each). Counted by ``tests/workers/count_load.py``, independently of
loadtrace. A release not listed here is still checked (loadtrace against the independent count), just not against
these.
"""

from __future__ import annotations

from dataclasses import dataclass

FILES = 5
TENSORS = 69
BYTES = 1_009_152
MODEL_BYTES = 1_009_216  # parameters + the two non-persistent buffers
BUFFER_BYTES = 64


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


SLICES = Rank(FILES, TENSORS, BYTES, 0, TENSORS, 2, BUFFER_BYTES, {"empty_like cpu": 2})
FSDP_RANK1_524 = Rank(FILES, TENSORS, BYTES, 0, TENSORS, 2, BUFFER_BYTES, {"zeros_like cpu": 2})
FSDP_RANK1_512 = Rank(FILES, TENSORS, BYTES, 0, TENSORS, 27, MODEL_BYTES, {"zeros_like cpu": 27})
ZERO3_FULL_READ = Rank(FILES, TENSORS, BYTES, TENSORS, 0, 0, 0, {})
ZERO3_META = Rank(FILES, 0, 0, 0, 0, 0, 0, {})

EXPECTED: dict[tuple[str, str], tuple[Rank, Rank]] = {
    ("5.24", "plain"): (SLICES, SLICES),
    ("5.24", "fsdp"): (SLICES, FSDP_RANK1_524),  # rank 1 still reads everything: through the read path
    ("5.24", "zero3"): (ZERO3_FULL_READ, ZERO3_META),  # rank 1: get_slice on meta, no bytes
    ("5.12", "plain"): (SLICES, SLICES),
    ("5.12", "fsdp"): (SLICES, FSDP_RANK1_512),  # rank 1: reads everything AND zeros_like a whole second model
    ("5.12", "zero3"): (ZERO3_FULL_READ, ZERO3_FULL_READ),  # rank 1 reads everything and keeps nothing
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
    )
