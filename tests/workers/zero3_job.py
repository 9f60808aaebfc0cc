"""Test worker: a ZeRO-3 training job's start, with the DeepSpeed config made before ``from_pretrained`` or after it,
bf16 on or off, plus this rank's own count of the bytes its model holds.

    torchrun --nproc_per_node 2 tests/workers/zero3_job.py CKPT --config before|after --bf16 on|off --out DIR

- ``before`` (done right): ``HfDeepSpeedConfig`` stage 3 alive during ``from_pretrained``, so transformers builds the
  model under ``deepspeed.zero.Init`` and each rank keeps only its partition;
- ``after`` (Roblox/FAI-RL#66): ``from_pretrained`` first, a whole model on every rank, then the config;

then, either way, ``deepspeed.initialize(model, optimizer)`` with that stage-3 config on deepspeed's CPU accelerator
(gloo). ``--bf16 off`` is ``examples/load.py --mode zero3``'s config (``bf16.enabled: false``: a bf16 checkpoint is
built as fp32); ``on`` enables it.

Writes ``DIR/zero3-rank<R>.json``, knowing nothing of loadtrace: after ``from_pretrained`` and after
``deepspeed.initialize``, the bytes of every parameter's partition (``ds_tensor.numel() * element_size()``), of
every parameter's ``data`` and every buffer (``numel() * element_size()``), and of the whole model at full size
(``ds_numel`` for a partitioned parameter).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any


def config(bf16: bool) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3},
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": False},
        "zero_allow_untested_optimizer": True,
    }


def holdings(model: Any) -> dict[str, int]:
    """Bytes by what holds them, each tensor once (tied weights are one tensor)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    partitions = data = whole = 0
    for tensor in tensors.values():
        size = tensor.element_size()
        data += tensor.data.numel() * size
        partition = getattr(tensor, "ds_tensor", None)
        if partition is not None:
            partitions += partition.numel() * partition.element_size()
            whole += tensor.ds_numel * partition.element_size()
        else:
            whole += tensor.numel() * size
    return {"partition_bytes": partitions, "data_bytes": data, "whole_bytes": whole}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--config", choices=("before", "after"), required=True)
    parser.add_argument("--bf16", choices=("on", "off"), required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import deepspeed
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(minutes=5))
    rank = dist.get_rank()
    ds_config = config(args.bf16 == "on")
    keep_alive = HfDeepSpeedConfig(ds_config) if args.config == "before" else None
    model = AutoModelForCausalLM.from_pretrained(args.ckpt)
    record: dict[str, Any] = {"rank": rank, "loaded": holdings(model)}
    if keep_alive is None:
        keep_alive = HfDeepSpeedConfig(ds_config)  # the mistake: the config only now
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
    record["zero_stage"] = engine.zero_optimization_stage()
    record["initialized"] = holdings(engine.module)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"zero3-rank{rank}.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    dist.barrier()
    del keep_alive
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
