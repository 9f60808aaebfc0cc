"""Test worker: torchrun SIGTERMs rank 0 in the middle of its load, because rank 1 failed.

    torchrun --nproc_per_node 2 tests/workers/stopped_load.py CKPT --out DIR [--stop-after N]

Rank 0 loads the checkpoint; at its N-th weight conversion it writes its own independent count of the bytes read so far
to ``DIR/count-rank0.json`` and waits there. Rank 1 waits for that file and exits with code 1, so torchrun stops rank 0
with SIGTERM while its load is open (the seed case: the ranks torchrun tears down after one fails). Run with
``HF_DEACTIVATE_ASYNC_LOAD=1`` so reads happen in the conversion loop, deterministically.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import Counter, load_example  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    parser.add_argument("--stop-after", type=int, default=10)
    args = parser.parse_args()

    load = load_example("load")
    rank, _ = load.init_distributed()
    count_file = Path(args.out) / "count-rank0.json"
    if rank == 1:
        deadline = time.monotonic() + 240
        while not count_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(1)

    from transformers.core_model_loading import WeightRenaming

    original = WeightRenaming.__dict__["convert"]
    calls = 0
    counter = Counter()

    def convert_then_wait(self, *a, **k):
        nonlocal calls
        calls += 1
        if calls == args.stop_after:
            load.write_json(args.out, count_file.name, counter.counts.as_dict())
            time.sleep(240)  # until torchrun stops this rank
        return original.__get__(self, type(self))(*a, **k)

    WeightRenaming.convert = convert_then_wait
    with counter:
        load.from_pretrained(args.ckpt)


if __name__ == "__main__":
    main()
