"""Test worker: rank 1 is SIGKILLed in the middle of transformers' weight conversion, as the OOM killer would.

    torchrun --nproc_per_node 2 tests/workers/killed_load.py CKPT --out DIR [--kill-after N]

Rank 0 loads the checkpoint, then both ranks meet at a barrier; then rank 1 loads, and at its N-th weight conversion
writes its own independent count of the bytes read so far to ``DIR/count-rank1.json`` and at once kills itself with
SIGKILL: no time for anything to catch up, as with the OOM killer. Run with ``HF_DEACTIVATE_ASYNC_LOAD=1`` so reads
happen in the conversion loop, deterministically.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import Counter, load_example  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-after", type=int, default=10)
    args = parser.parse_args()

    import torch.distributed as dist

    load = load_example("load")
    rank, _ = load.init_distributed()
    if rank == 0:
        load.from_pretrained(args.ckpt)
        dist.barrier()
        time.sleep(120)  # torchrun stops this rank when rank 1 dies
        return

    dist.barrier()
    from transformers.core_model_loading import WeightRenaming

    original = WeightRenaming.__dict__["convert"]
    calls = 0
    counter = Counter()

    def convert_then_die(self, *a, **k):
        nonlocal calls
        calls += 1
        if calls == args.kill_after:
            load.write_json(args.out, "count-rank1.json", counter.counts.as_dict())
            os.kill(os.getpid(), signal.SIGKILL)
        return original.__get__(self, type(self))(*a, **k)

    WeightRenaming.convert = convert_then_die
    with counter:
        load.from_pretrained(args.ckpt)


if __name__ == "__main__":
    main()
