"""Test worker: a tiny Llama loaded with transformers' own tensor parallelism, or without, plus this rank's own count.

    torchrun --nproc_per_node 2 tests/workers/tp_load.py CKPT --mode tp|fsdp --out DIR

``tp`` loads with ``tp_plan="auto"`` (gloo, CPU); ``fsdp`` without, under accelerate's FSDP
``cpu_ram_efficient_loading`` environment. Writes ``DIR/count-rank<R>.json``: the reads this rank made (the same
counting proxies as ``count_load.py``, which know nothing of loadtrace) and the bytes its parameters and buffers hold,
a DTensor counted by its local shard (``to_local()``), by device type.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def count_module():
    spec = importlib.util.spec_from_file_location("_count_load", HERE / "count_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def local_held_bytes(model: Any) -> dict[str, int]:
    from torch.distributed.tensor import DTensor

    held: dict[str, int] = defaultdict(int)
    for tensor in (*model.parameters(), *model.buffers()):
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        held[local.device.type] += int(local.nbytes)
    return dict(sorted(held.items()))


def main(argv: list[str]) -> int:
    import torch.distributed as dist

    ckpt, mode, out = argv[0], argv[argv.index("--mode") + 1], Path(argv[argv.index("--out") + 1])
    if mode == "fsdp":
        os.environ.setdefault("ACCELERATE_USE_FSDP", "true")
        os.environ.setdefault("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    from transformers import AutoModelForCausalLM

    counter = count_module().Counter()
    with counter as counts:
        if mode == "tp":
            model = AutoModelForCausalLM.from_pretrained(ckpt, tp_plan="auto")
        else:
            model = AutoModelForCausalLM.from_pretrained(ckpt)
    result = {
        "rank": rank,
        "world_size": world,
        "mode": mode,
        "held_bytes": local_held_bytes(model),
        **counts.as_dict(),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"count-rank{rank}.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
