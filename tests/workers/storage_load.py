"""Test worker: a load in the dtype asked for, and this rank's own count of what it fetched from storage meanwhile.

    torchrun --nproc_per_node 2 tests/workers/storage_load.py CKPT --out DIR [--dtype float32]

Each rank joins the job's process group, reads its ``/proc/self/io`` ``read_bytes`` (independently of loadtrace: the
count the kernel keeps of what it fetched from storage for this process), loads ``from_pretrained(CKPT,
dtype=DTYPE)`` (a bf16 checkpoint as float32: transformers casts every tensor as it materialises it, touching its
mapped pages then), reads the count again and writes ``DIR/count-rank<R>.json``: its rank, pid and
``storage_read_during_load``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import start  # noqa: E402


def storage_read() -> int:
    with open("/proc/self/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("read_bytes:"))


def main() -> None:
    args, load, rank, _ = start(("--out", {"required": True}), ("--dtype", {"default": None}))
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, args.dtype) if args.dtype else None
    before = storage_read()
    AutoModelForCausalLM.from_pretrained(args.ckpt, **({"dtype": dtype} if dtype is not None else {}))
    during = storage_read() - before
    load.write_json(
        args.out, f"count-rank{rank}.json", {"rank": rank, "pid": os.getpid(), "storage_read_during_load": during}
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
