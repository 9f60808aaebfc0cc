"""Test worker: a tensor-parallel loader without transformers. Each of the ranks reads its own row block of every
tensor through ``safe_open(...).get_slice(name)[rows]`` inside ``loadtrace.traced_load``, and writes its own count.

    torchrun --nproc_per_node 2 tests/workers/slice_tp_load.py CKPT --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import loadtrace


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    from safetensors import safe_open

    read = tensors = 0
    with loadtrace.traced_load("tp shards"):
        for file in sorted(Path(args.ckpt).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():
                    part = handle.get_slice(name)
                    rows = part.get_shape()[0] if part.get_shape() else 0
                    if rows >= world:  # split by rows; a scalar or a short tensor is read whole by rank 0 only
                        block = rows // world
                        stop = rows if rank == world - 1 else (rank + 1) * block
                        tensor = part[rank * block : stop]
                    elif rank == 0:
                        tensor = part[...]
                    else:
                        continue
                    read += tensor.nbytes
                    tensors += 1
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"count-rank{rank}.json").write_text(json.dumps({"read_bytes": read, "tensors_read": tensors}))


if __name__ == "__main__":
    main()
