"""Test worker: a checkpoint loaded with accelerate's own loaders, plus this process's own count of its files.

    python tests/workers/accelerate_load.py CKPT --mode dispatch|in_model --out DIR

- ``dispatch``: ``load_checkpoint_and_dispatch(model, CKPT, device_map={"": "cpu"})`` into a model built on the meta
  device (``init_empty_weights``), as accelerate's big-model inference does;
- ``in_model``: ``load_checkpoint_in_model(model, CKPT)`` into a model built on the CPU (no device map: accelerate
  loads each file with its ``load_state_dict``, then ``set_model_state_dict`` of torch.distributed.checkpoint).

Writes ``DIR/accelerate-<mode>.json``: per checkpoint file, the ``safe_open`` calls that opened it and the tensors and
bytes read through them (count_load.py's counting proxies, in ``safetensors``, ``safetensors.torch`` and
``accelerate.utils.modeling``, which know nothing of loadtrace), and the wall-clock time around the call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def count_module() -> Any:
    spec = importlib.util.spec_from_file_location("_count_load", HERE / "count_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Opens:
    """``safe_open`` replaced by a counting proxy where accelerate and safetensors look it up; restored after."""

    def __init__(self) -> None:
        self.count = count_module()
        self.counts = self.count.Counts()
        self.restore: list[tuple[Any, Any]] = []

    def __enter__(self) -> Any:
        import accelerate.utils.modeling as modeling
        import safetensors
        import safetensors.torch

        for module in (safetensors, safetensors.torch, modeling):
            current = module.safe_open
            self.restore.append((module, current))
            module.safe_open = self.count.CountingSafeOpen(current, self.counts)
        return self.counts

    def __exit__(self, *exc: Any) -> None:
        for module, original in reversed(self.restore):
            module.safe_open = original


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--mode", choices=("dispatch", "in_model"), required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from accelerate import init_empty_weights, load_checkpoint_and_dispatch, load_checkpoint_in_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(args.ckpt)
    if args.mode == "dispatch":
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config)
    else:
        model = AutoModelForCausalLM.from_config(config)
    with Opens() as counts:
        started = time.time_ns()
        if args.mode == "dispatch":
            load_checkpoint_and_dispatch(model, args.ckpt, device_map={"": "cpu"})
        else:
            load_checkpoint_in_model(model, args.ckpt)
        ended = time.time_ns()
    record = {"mode": args.mode, "started_ns": started, "ended_ns": ended, **counts.as_dict()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"accelerate-{args.mode}.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
