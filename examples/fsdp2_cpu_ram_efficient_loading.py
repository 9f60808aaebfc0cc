"""Reported problem 1: FSDP2 with ``cpu_ram_efficient_loading``, and a whole model on CPU on every rank.

    python examples/make_checkpoint.py tiny-qwen3-moe          # once (this script also writes it when it is missing)
    LOADTRACE=1 torchrun --nproc_per_node 2 examples/fsdp2_cpu_ram_efficient_loading.py tiny-qwen3-moe
    loadtrace report loadtrace-traces/

What a user's job does, on CPU (gloo) so that it runs on a laptop:

1. ``accelerate launch`` with ``fsdp_version: 2`` and ``fsdp_cpu_ram_efficient_loading: true`` puts
   ``ACCELERATE_USE_FSDP=true`` and ``FSDP_CPU_RAM_EFFICIENT_LOADING=true`` in every rank's environment. Under plain
   ``torchrun`` this script sets them itself (``examples/load.py``'s ``fsdp`` mode), unless they are already set.
2. Every rank calls ``from_pretrained``. The promise of ``cpu_ram_efficient_loading``: only rank 0 reads the
   checkpoint; the other ranks keep empty weights until FSDP hands them their shard.
3. The model is sharded with FSDP2 (``fully_shard``) the way accelerate's ``fsdp2_prepare_model`` does it: moved to
   ``meta``, each decoder layer and then the root sharded, and rank 0's weights broadcast into every rank's shard.

Each rank prints what ``from_pretrained`` left it holding, and what it holds after sharding. On transformers 5.12 rank
1 reads the whole checkpoint and also fills a whole second model with ``torch.zeros_like`` on CPU; on 5.24 that
``zeros_like`` is gone, but rank 1 still reads the whole checkpoint and keeps every parameter on CPU. Either way the
copy is thrown away at step 3, after every rank of the node held a full model in host memory at once (16 ranks x a
54 GB model in the original report). ``loadtrace report`` shows it per rank.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import load  # examples/load.py: the job's distributed setup and its from_pretrained


def held(model) -> dict[str, int]:
    """Bytes of parameters and buffers this rank holds, per device type (a sharded parameter counts its local shard)."""
    from torch.distributed.tensor import DTensor

    out: dict[str, int] = {}
    tensors = list(model.parameters()) + list(model.buffers())
    for tensor in tensors:
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        out[local.device.type] = out.get(local.device.type, 0) + local.nbytes
    return out


def shard_like_accelerate(model, rank: int):
    """FSDP2 with cpu_ram_efficient_loading, as accelerate's ``fsdp2_prepare_model`` does it: only rank 0's weights are
    used; every other rank's loaded weights are dropped when the model moves to ``meta``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    full_state = model.state_dict() if rank == 0 else None
    persistent = set(model.state_dict())
    buffers = {name: copy.deepcopy(b) for name, b in model.named_buffers() if name not in persistent}
    model = model.to(torch.device("meta"))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = {}
    for name, empty in model.state_dict().items():
        full = full_state[name].detach().contiguous() if rank == 0 else torch.empty(empty.shape, dtype=empty.dtype)
        dist.broadcast(full, src=0)
        sharded[name] = torch.nn.Parameter(distribute_tensor(full, empty.device_mesh, empty.placements))
    model.load_state_dict(sharded, assign=True)
    for name, buffer in buffers.items():  # non-persistent buffers are not in the state dict: put them back
        owner, _, local = name.rpartition(".")
        model.get_submodule(owner).register_buffer(local, buffer, persistent=False)
    return model


def show(rank: int, world: int, what: str, nbytes: dict[str, int]) -> None:
    text = ", ".join(f"{n:,} B on {device}" for device, n in sorted(nbytes.items())) or "nothing"
    print(f"rank {rank}/{world} {what}: {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "ckpt", nargs="?", default=load.DEFAULT_CHECKPOINT, help="checkpoint directory (written if missing)"
    )
    args = parser.parse_args(argv)
    ckpt = Path(args.ckpt)

    rank, world = load.init_distributed()
    load.ensure_checkpoint(ckpt, rank)
    load.prepare("fsdp")  # what `accelerate launch` with fsdp_cpu_ram_efficient_loading puts in the environment
    model = load.from_pretrained(ckpt)
    show(rank, world, "after from_pretrained holds", held(model))

    model = shard_like_accelerate(model, rank)
    show(rank, world, "after FSDP2 sharding holds", held(model))
    with torch.no_grad():
        logits = model(torch.arange(8).unsqueeze(0)).logits
    print(f"rank {rank}/{world} forward ok: logits {tuple(logits.shape)}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
