"""Test worker for startups (issue 14): every rank loads a checkpoint; one rank may read slowly, and each rank may read
its own copy of the checkpoint.

    torchrun --nproc_per_node 2 tests/workers/startup_load.py CKPT [--slow-rank R --sleep S]

``CKPT`` may hold ``{rank}``: each rank then loads its own copy (one evicted from the page cache, one not: a cold and a
warm node). On ``--slow-rank`` every tensor read sleeps ``S`` seconds first, inside the checkpoint file's span, as a
slow file system would make it wait (the reads go through ``count_load.py``'s counting proxy around ``safe_open``).
Nothing here knows about loadtrace. Prints ``rank R loaded`` per rank.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import count_load  # noqa: E402
from _common import start  # noqa: E402


def main() -> None:
    args, load, rank, _ = start(("--slow-rank", {"type": int}), ("--sleep", {"type": float, "default": 0.0}))
    import torch.distributed as dist

    if rank == args.slow_rank:
        read = count_load.Counts.read

        def slow_read(self: Any, path: str, tensor: Any, how: str) -> None:
            time.sleep(args.sleep)
            read(self, path, tensor, how)

        count_load.Counts.read = slow_read
    with count_load.Counter():
        load.from_pretrained(args.ckpt.format(rank=rank))
    print(f"rank {rank} loaded", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
