"""Test worker: one launch of a job whose id is used again (issue 48), ended by the job's own code or loaded.

    torchrun --nproc_per_node 2 tests/workers/relaunch_load.py CKPT [--crash-ranks 0,1]

Every rank joins the process group (gloo); the ranks that load (those not in ``--crash-ranks``) load CKPT as
``examples/load.py``'s plain mode does; then all meet at a barrier, so the rendezvous and every load are behind them.
A rank named in ``--crash-ranks`` then raises in its own code, having loaded nothing, as a job's bug would; the others
wait in ``time.sleep`` until torchrun stops them (a crashed peer) or, when no rank crashes, leave at once.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import load_example  # noqa: E402

WAIT_S = 120  # longer than torchrun takes to stop a rank once a peer has failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--crash-ranks", default="", help="comma-separated ranks that raise before loading anything")
    args = parser.parse_args()
    crash = {int(rank) for rank in args.crash_ranks.split(",") if rank}

    import torch.distributed as dist

    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=5))
    rank = dist.get_rank()
    if rank not in crash:
        load_example("load").from_pretrained(args.ckpt)
    dist.barrier()
    if rank in crash:
        raise RuntimeError(f"rank {rank}: the job's own code failed after the rendezvous")
    if crash:
        time.sleep(WAIT_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
