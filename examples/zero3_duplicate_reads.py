"""Reported problem 2: DeepSpeed ZeRO-3, and every rank reading the whole checkpoint.

    python examples/make_checkpoint.py tiny-qwen3-moe          # once (this script also writes it when it is missing)
    LOADTRACE=1 torchrun --nproc_per_node 2 examples/zero3_duplicate_reads.py tiny-qwen3-moe
    loadtrace report loadtrace-traces/

What a user's job does, on CPU (gloo, DeepSpeed's CPU accelerator) so that it runs on a laptop:

1. DeepSpeed's process group and a ZeRO stage-3 config held in an ``HfDeepSpeedConfig`` that stays alive during
   ``from_pretrained`` (transformers' non-Trainer DeepSpeed integration; ``examples/load.py``'s ``zero3`` mode). The
   model is then built under ``deepspeed.zero.Init``: each rank keeps only its partition of every parameter.
2. Every rank calls ``from_pretrained``. Rank 0 needs the checkpoint's bytes: it reads them and scatters them into the
   partitions. The other ranks need none of them.

Each rank prints the partition it holds (about half the model here) and a digest of the gathered weights (the same on
every rank). On transformers 5.12 rank 1 reads every tensor of the checkpoint anyway (``load_state_dict`` to CPU per
file) and throws it away: a full read per rank, times the ranks of a node, for nothing. On 5.24 rank 1 opens the files
but reads them on ``meta``: no bytes. ``loadtrace report`` shows which one your release does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import load  # examples/load.py: the job's distributed setup, its ZeRO-3 config and its from_pretrained


def partition_bytes(model) -> int:
    """Bytes of this rank's ZeRO-3 partitions (``ds_tensor``) of every parameter."""
    return sum(p.ds_tensor.numel() * p.ds_tensor.element_size() for p in model.parameters() if hasattr(p, "ds_tensor"))


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "ckpt", nargs="?", default=load.DEFAULT_CHECKPOINT, help="checkpoint directory (written if missing)"
    )
    args = parser.parse_args(argv)
    ckpt = Path(args.ckpt)

    rank, world = load.init_distributed()
    load.ensure_checkpoint(ckpt, rank)
    ds_config = load.prepare("zero3")  # deepspeed.init_distributed + HfDeepSpeedConfig(stage 3), kept alive
    model = load.from_pretrained(ckpt)
    print(f"rank {rank}/{world} holds its ZeRO-3 partition: {partition_bytes(model):,} B", flush=True)
    digest = load.weights_digest(model, "zero3")  # gathers the partitions: a collective, every rank calls it
    print(
        f"rank {rank}/{world} gathered {digest['tensors']} tensors, {digest['bytes']:,} B, "
        f"sha256 {digest['sha256'][:16]}",
        flush=True,
    )
    del ds_config

    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
