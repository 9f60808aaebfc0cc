"""The worker a user would run: load a checkpoint on every rank, the way plain DDP, FSDP or ZeRO-3 jobs do.

    torchrun --nproc_per_node 2 examples/load.py CKPT --mode plain|fsdp|zero3 [--out DIR]

Nothing here knows about loadtrace: set ``LOADTRACE=1`` in the job's environment and every rank's loading is traced.

Modes, set up exactly as a user's job sets them up:

- ``plain``: replicated data parallel; every rank loads the whole model.
- ``fsdp``: what ``accelerate launch`` with an FSDP config does before the script runs: the *launcher* sets
  ``ACCELERATE_USE_FSDP=true`` and ``FSDP_CPU_RAM_EFFICIENT_LOADING=true`` (this script sets them only if they are
  absent, so that ``torchrun`` alone reproduces the job).
- ``zero3``: a DeepSpeed ZeRO stage-3 config held in an ``HfDeepSpeedConfig`` that stays alive during
  ``from_pretrained`` (the non-Trainer integration), so transformers builds the model under ``deepspeed.zero.Init``.

Each rank then makes its optimizer, as a training job does after loading, and prints one line ``rank R/W mode M
digest SHA256`` (and writes ``DIR/digest-rank<R>.json`` with ``--out``): a hash of every parameter and buffer the rank
ends up with (gathered across ranks for ZeRO-3), so two runs can be compared bit for bit.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Any

MODES = ("plain", "fsdp", "zero3")
DEFAULT_CHECKPOINT = "tiny-qwen3-moe"


def init_distributed() -> tuple[int, int]:
    """Join the job's gloo process group (torchrun's env:// rendezvous); returns (rank, world size)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=5))
    return dist.get_rank(), dist.get_world_size()


def ensure_checkpoint(ckpt: Path, rank: int) -> None:
    """Rank 0 writes the tiny example checkpoint when ``ckpt`` holds none; every rank waits for it."""
    import torch.distributed as dist
    from make_checkpoint import make_checkpoint

    if rank == 0 and not (ckpt / "config.json").exists():
        summary = make_checkpoint(ckpt)
        print(f"wrote {len(summary['files'])} shards, {summary['bytes']:,} bytes of tensors to {ckpt}", flush=True)
    dist.barrier()


def zero3_config() -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3},
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
    }


def prepare(mode: str) -> Any:
    """Set the job up for ``mode``; returns what must stay alive until loading is done (the ZeRO-3 config)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "fsdp":
        os.environ.setdefault("ACCELERATE_USE_FSDP", "true")
        os.environ.setdefault("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
        return None
    if mode == "zero3":
        import deepspeed
        from transformers.integrations import HfDeepSpeedConfig

        deepspeed.init_distributed(dist_backend="gloo")
        return HfDeepSpeedConfig(zero3_config())
    return None


def from_pretrained(ckpt: str | os.PathLike[str]):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(ckpt)


def weights_digest(model, mode: str) -> dict[str, Any]:
    """SHA-256 over (name, dtype, shape, bytes) of every parameter and buffer, in name order.

    Under ZeRO-3 each rank holds only a partition: the parameters are gathered first (a collective: every rank calls
    this)."""
    import contextlib

    import torch

    gather = contextlib.nullcontext()
    if mode == "zero3":
        import deepspeed

        gather = deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)
    digest = hashlib.sha256()
    tensors = 0
    nbytes = 0
    devices: dict[str, int] = {}
    with gather, torch.no_grad():
        named = dict(model.named_parameters(remove_duplicate=False))
        named.update(model.named_buffers(remove_duplicate=False))
        for name in sorted(named):
            tensor = named[name].detach()
            cpu = tensor.to("cpu").contiguous()
            digest.update(name.encode())
            digest.update(str(cpu.dtype).encode())
            digest.update(str(tuple(cpu.shape)).encode())
            digest.update(cpu.view(torch.uint8).numpy().tobytes() if cpu.numel() else b"")
            tensors += 1
            nbytes += cpu.nbytes
            devices[tensor.device.type] = devices.get(tensor.device.type, 0) + 1
    return {"sha256": digest.hexdigest(), "tensors": tensors, "bytes": nbytes, "devices": devices}


def write_json(out_dir: str | os.PathLike[str], name: str, data: dict[str, Any]) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", help="a transformers checkpoint directory (see examples/make_checkpoint.py)")
    parser.add_argument("--mode", choices=MODES, default="plain")
    parser.add_argument("--out", help="write digest-rank<R>.json here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    args = parse_args(argv)
    rank, world = init_distributed()
    keep_alive = prepare(args.mode)
    model = from_pretrained(args.ckpt)
    digest = weights_digest(model, args.mode)
    del keep_alive
    # A data-parallel job trains what it loaded: its optimizer comes next (made, never stepped: the load is the point).
    torch.optim.AdamW(model.parameters())
    print(f"rank {rank}/{world} mode {args.mode} digest {digest['sha256']}", flush=True)
    if args.out:
        write_json(
            args.out, f"digest-rank{rank}.json", {"rank": rank, "world_size": world, "mode": args.mode, **digest}
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
