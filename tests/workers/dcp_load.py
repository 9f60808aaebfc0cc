"""Test worker: torch.distributed.checkpoint (DCP) saves and loads of a tiny Llama, FSDP2 ``fully_shard`` on CPU.

    torchrun --nproc_per_node N tests/workers/dcp_load.py MODE DIR --out OUT [--kill-after K]

MODE: ``save`` (dcp.save of the sharded model; ``save-plain`` the same without fully_shard), ``make-hf`` (rank 0
writes the same model as a Hugging Face safetensors checkpoint), ``native`` (dcp.load into the sharded model's state
dict), ``plain`` (the same into an unsharded model), ``hf`` (through HuggingFaceStorageReader; ``hf-threads``
with two reader threads), ``full`` (every rank
reads the whole checkpoint, then set_model_state_dict(full_state_dict=True)), ``broadcast`` (rank 0 reads it,
then set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True)), ``kill`` (``native``, rank 1 SIGKILLs
itself after its K-th read item).

Each rank writes its own count to ``OUT/count-rank<R>.json``, made without loadtrace: the bytes of its local shards
(``local_bytes``), of the saved chunks it reads (``read_bytes``, ``read_items``), and the checkpoint's
(``model_bytes``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path


def build_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support.llama, the tiny Llama's sizes
    from support.llama import TINY_LLAMA

    config = LlamaConfig(**TINY_LLAMA)
    return LlamaForCausalLM(config)


def shard(model, world: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def local(tensor):
    return getattr(tensor, "_local_tensor", tensor)


def whole_bytes(state_dict) -> int:
    return sum(value.numel() * value.element_size() for value in state_dict.values())


def local_bytes(state_dict) -> int:
    return sum(local(value).nbytes for value in state_dict.values())


def write(out: str, rank: int, counts: dict) -> None:
    Path(out, f"count-rank{rank}.json").write_text(json.dumps(counts))


class Counting:
    """A DefaultLoadPlanner that counts each read item as DCP commits it (after it was read): bytes of the saved
    chunk it came from (``read``: what FileSystemReader's ``torch.load`` reads), of the part of it this rank keeps
    (``sliced``: what HuggingFaceStorageReader's slice reads), and kills this process after ``kill_after`` items
    when asked."""

    def __new__(cls, out: str, rank: int, kill_after: int | None, known: dict | None = None):
        from torch.distributed.checkpoint import DefaultLoadPlanner

        class Planner(DefaultLoadPlanner):
            items = read = sliced = 0

            def commit_tensor(self, read_item, tensor):
                super().commit_tensor(read_item, tensor)
                entry = self.metadata.state_dict_metadata[read_item.storage_index.fqn]
                offsets = list(read_item.storage_index.offset)
                numel = 1
                for size in next(c.sizes for c in entry.chunks if list(c.offsets) == offsets):
                    numel *= size
                self.items += 1
                self.read += numel * tensor.element_size()
                self.sliced += tensor.nbytes
                if kill_after is not None and self.items == kill_after:
                    write(out, rank, {**(known or {}), "read_bytes": self.read, "read_items": self.items})
                    os.kill(os.getpid(), signal.SIGKILL)

        return Planner()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-after", type=int, default=None)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model()
    whole = model.state_dict()
    model_bytes = whole_bytes(whole)
    counts: dict = {"model_bytes": model_bytes, "world_size": world}

    if args.mode == "make-hf":
        if rank == 0:  # in several files: the reader's threads (``hf-threads``) read them in parallel
            model.save_pretrained(args.ckpt, safe_serialization=True, max_shard_size="150KB")
    elif args.mode in ("save", "save-plain"):
        if args.mode == "save":
            shard(model, world)
        dcp.save(model.state_dict(), checkpoint_id=args.ckpt)
    elif args.mode in ("native", "kill", "plain", "hf", "hf-threads"):
        if args.mode != "plain":
            shard(model, world)
        state_dict = model.state_dict()
        counts["local_bytes"] = local_bytes(state_dict)
        planner = Counting(args.out, rank, args.kill_after if rank == 1 else None, counts)
        if args.mode.startswith("hf"):
            from torch.distributed.checkpoint import HuggingFaceStorageReader

            reader = HuggingFaceStorageReader(args.ckpt, thread_count=2 if args.mode == "hf-threads" else 1)
            dcp.load(state_dict, storage_reader=reader, planner=planner)
        else:
            dcp.load(state_dict, checkpoint_id=args.ckpt, planner=planner)
        counts.update(read_bytes=planner.read, read_items=planner.items, sliced_bytes=planner.sliced)
    elif args.mode in ("full", "broadcast"):
        shard(model, world)
        reads = args.mode == "full" or rank == 0
        full = {key: torch.empty(value.shape, dtype=value.dtype) for key, value in whole.items()} if reads else {}
        if reads:
            planner = Counting(args.out, rank, None)
            dcp.load(full, checkpoint_id=args.ckpt, planner=planner, no_dist=True)
            counts.update(read_bytes=planner.read, read_items=planner.items)
        else:
            counts.update(read_bytes=0, read_items=0)
        counts["local_bytes"] = whole_bytes(full)
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=args.mode == "broadcast")
        set_model_state_dict(model, full, options=options)
        loaded = {key: value.full_tensor() for key, value in model.state_dict().items()}
        counts["identical"] = all(torch.equal(loaded[key], whole[key]) for key in whole)
    else:
        raise SystemExit(f"unknown mode {args.mode}")
    if args.mode not in ("make-hf", "save", "save-plain"):
        write(args.out, rank, counts)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
