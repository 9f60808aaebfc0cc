"""Test worker: rank 1 dies in the middle of transformers' weight conversion: SIGKILLed, as by the OOM killer, or, with
``--oom-cgroup``, by the kernel's OOM killer itself.

    torchrun --nproc_per_node 2 tests/workers/killed_load.py CKPT --out DIR [--kill-after N] [--oom-cgroup CGROUP]

Rank 0 loads the checkpoint, then both ranks meet at a barrier; then rank 1 loads, and at its N-th weight conversion
writes its own independent count of the bytes read so far to ``DIR/count-rank1.json`` and at once kills itself with
SIGKILL: no time for anything to catch up, as with the OOM killer. Rank 0 sleeps until torchrun stops it. Run with
``HF_DEACTIVATE_ASYNC_LOAD=1`` so reads happen in the conversion loop, deterministically.

``--oom-cgroup``: rank 1 moves itself into that (v1, limited) memory cgroup before it loads, and instead of killing
itself allocates memory until the kernel's OOM killer does.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_conversion, start  # noqa: E402
from count_load import Counter  # noqa: E402


def main() -> None:
    args, load, rank, _ = start(
        ("--out", {"required": True}), ("--kill-after", {"type": int, "default": 10}), ("--oom-cgroup", {})
    )
    import torch.distributed as dist

    if rank == 0:
        load.from_pretrained(args.ckpt)
        dist.barrier()
        time.sleep(120)  # torchrun stops this rank when rank 1 dies
        return

    dist.barrier()
    if args.oom_cgroup:
        Path(args.oom_cgroup, "cgroup.procs").write_text(str(os.getpid()))
    counter = Counter()

    def die() -> None:
        load.write_json(args.out, "count-rank1.json", counter.counts.as_dict())
        if args.oom_cgroup:
            hog = []
            while True:  # until the OOM killer stops it: every page written, so every page charged
                hog.append(b"\x01" * (1 << 20))
        os.kill(os.getpid(), signal.SIGKILL)

    at_conversion(args.kill_after, die)
    with counter:
        load.from_pretrained(args.ckpt)


if __name__ == "__main__":
    main()
