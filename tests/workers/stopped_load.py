"""Test worker: torchrun SIGTERMs rank 0 in the middle of its load, because rank 1 failed.

    torchrun --nproc_per_node 2 tests/workers/stopped_load.py CKPT --out DIR [--stop-after N]

Rank 0 loads the checkpoint; at its N-th weight conversion it writes its own independent count of the bytes read so far
to ``DIR/count-rank0.json`` and waits there. Rank 1 waits for that file and exits with code 1, so torchrun stops rank 0
with SIGTERM while its load is open (the seed case: the ranks torchrun tears down after one fails). Run with
``HF_DEACTIVATE_ASYNC_LOAD=1`` so reads happen in the conversion loop, deterministically.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_conversion, start  # noqa: E402
from count_load import Counter  # noqa: E402


def main() -> None:
    args, load, rank, _ = start(("--out", {"required": True}), ("--stop-after", {"type": int, "default": 10}))
    count_file = Path(args.out) / "count-rank0.json"
    if rank == 1:
        deadline = time.monotonic() + 240
        while not count_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(1)

    counter = Counter()

    def wait_to_be_stopped() -> None:
        load.write_json(args.out, count_file.name, counter.counts.as_dict())
        time.sleep(240)  # until torchrun stops this rank

    at_conversion(args.stop_after, wait_to_be_stopped)
    with counter:
        load.from_pretrained(args.ckpt)


if __name__ == "__main__":
    main()
