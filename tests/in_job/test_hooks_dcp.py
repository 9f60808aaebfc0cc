"""The DCP hook's own rules, on torch's real metadata and plan types: the checkpoint's tensor bytes from its metadata,
and the strategy from a rank's plan against the saved chunks (tests/e2e/test_dcp.py runs them on real jobs)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.distributed.checkpoint.metadata import (  # noqa: E402
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem  # noqa: E402

from loadtrace import semconv as sc  # noqa: E402
from loadtrace.instrumentation.hooks.dcp import strategy_of, tensor_bytes_of  # noqa: E402


def saved(chunks: list[tuple[int, int]], rows: int = 8, cols: int = 4) -> Metadata:
    """One float32 tensor of ``rows`` x ``cols``, saved as row chunks (offset, rows); and one entry saved as bytes."""
    entry = TensorStorageMetadata(
        properties=TensorProperties(dtype=torch.float32),
        size=torch.Size([rows, cols]),
        chunks=[ChunkStorageMetadata(torch.Size([o, 0]), torch.Size([n, cols])) for o, n in chunks],
    )
    return Metadata(state_dict_metadata={"w": entry, "extra": BytesStorageMetadata()})


def read(storage_offset: int, stored_at: int, rows: int, cols: int = 4) -> ReadItem:
    return ReadItem(
        type=LoadItemType.TENSOR,
        dest_index=MetadataIndex("w"),
        dest_offsets=torch.Size([0, 0]),
        storage_index=MetadataIndex("w", torch.Size([stored_at, 0])),
        storage_offsets=torch.Size([storage_offset, 0]),
        lengths=torch.Size([rows, cols]),
    )


def test_tensor_bytes_are_the_global_sizes_of_every_tensor():
    assert tensor_bytes_of(saved([(0, 4), (4, 4)])) == 8 * 4 * 4
    assert tensor_bytes_of(Metadata(state_dict_metadata={"extra": BytesStorageMetadata()})) is None


def test_own_chunks_are_a_sharded_read():
    assert strategy_of([read(0, 4, 4)], saved([(0, 4), (4, 4)])) == (sc.STRATEGY_DCP_SHARDED, 0)


def test_whole_tensors_are_a_full_read():
    assert strategy_of([read(0, 0, 8)], saved([(0, 8)])) == (sc.STRATEGY_DCP_FULL, 0)


def test_saved_at_two_loaded_at_one_is_resharded():
    items = [read(0, 0, 4), read(0, 4, 4)]
    assert strategy_of(items, saved([(0, 4), (4, 4)])) == (sc.STRATEGY_DCP_RESHARDED, 2)


def test_part_of_a_saved_chunk_is_resharded_unless_the_reader_slices():
    metadata = saved([(0, 8)])
    assert strategy_of([read(4, 0, 4)], metadata) == (sc.STRATEGY_DCP_RESHARDED, 1)
    assert strategy_of([read(4, 0, 4)], metadata, slices=True) == (sc.STRATEGY_DCP_SHARDED, 0)
