"""Test worker for startups (issue 14): every rank loads a checkpoint; one rank may read slowly, and each rank may read
its own copy of the checkpoint.

    torchrun --nproc_per_node 2 tests/workers/startup_load.py CKPT [--slow-rank R --sleep S]

``CKPT`` may hold ``{rank}``: each rank then loads its own copy (one evicted from the page cache, one not: a cold and a
warm node). On ``--slow-rank`` every tensor read sleeps ``S`` seconds first, inside the checkpoint file's span, as a
slow file system would make it wait (the reads go through ``count_load.py``'s counting proxy around ``safe_open``).
Nothing here knows about loadtrace. Prints ``rank R loaded`` per rank.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any


def count_load() -> Any:
    spec = importlib.util.spec_from_file_location("_count_load", Path(__file__).with_name("count_load.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--slow-rank", type=int)
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()

    import torch.distributed as dist

    count = count_load()
    load = count.load_example("load")
    rank, _ = load.init_distributed()
    if rank == args.slow_rank:
        read = count.Counts.read

        def slow_read(self: Any, path: str, tensor: Any, how: str) -> None:
            time.sleep(args.sleep)
            read(self, path, tensor, how)

        count.Counts.read = slow_read
    with count.Counter():
        load.from_pretrained(args.ckpt.format(rank=rank))
    print(f"rank {rank} loaded", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
