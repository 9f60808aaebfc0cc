"""Test worker: a tensor-parallel inference server's weight loading, as vLLM does it, plus this rank's own count.

    torchrun --nproc_per_node 2 tests/workers/tp_serving_load.py CKPT --out DIR

No serving engine is installed here (vLLM alone is gigabytes and wants an accelerator), so this worker reproduces
vLLM's default loading path (``DefaultModelLoader``, vLLM 0.11 to 0.19): the checkpoint's files as its safetensors
index names them (``filter_duplicate_safetensors_files``), in natural order (``_natural_sort_key``), read by
``safetensors_weights_iterator`` with its default ``lazy`` strategy (``safe_open``, then ``get_tensor`` for every key,
the whole tensor), and each weight handed to a tensor-parallel weight loader that keeps only this rank's part
(``ColumnParallelLinear.weight_loader``'s ``narrow`` along the output dimension; a tensor too small to split is kept
whole, as a replicated layer's). Every rank reads the whole checkpoint and keeps half of it: what vllm#5405 reported.
Nothing here makes an optimizer or imports a training framework.

Writes ``DIR/serving-rank<R>.json``: the ``safe_open`` calls per file and the tensors and bytes read through them
(count_load.py's counting proxies, which know nothing of loadtrace), and the bytes this rank kept.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load, safe_open

HERE = Path(__file__).resolve().parent
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"


def _natural_sort_key(filename: str) -> list[Any]:
    return [int(text) if text.isdigit() else text for text in re.split(r"(\d+)", filename)]


def filter_duplicate_safetensors_files(hf_weights_files: list[str], hf_folder: str) -> list[str]:
    index_file_name = os.path.join(hf_folder, SAFE_WEIGHTS_INDEX_NAME)
    if not os.path.isfile(index_file_name):
        return hf_weights_files
    with open(index_file_name) as index_file:
        weight_map = json.load(index_file)["weight_map"]
    weight_files_in_index = {os.path.join(hf_folder, weight_map[name]) for name in weight_map}
    return [f for f in hf_weights_files if f in weight_files_in_index]


def safetensors_weights_iterator(
    hf_weights_files: list[str], safetensors_load_strategy: str = "lazy"
) -> Generator[tuple[str, torch.Tensor], None, None]:
    """Iterate over the weights in the model safetensor files (vLLM's, without its progress bar)."""
    for st_file in sorted(hf_weights_files, key=_natural_sort_key):
        if safetensors_load_strategy == "eager":
            with open(st_file, "rb") as f:
                state_dict = load(f.read())
            yield from state_dict.items()
        else:
            with safe_open(st_file, framework="pt") as f:
                for name in f.keys():  # noqa: SIM118
                    param = f.get_tensor(name)
                    yield name, param


def weight_loader(loaded_weight: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """This rank's part of a weight: its slice of the output dimension when that splits evenly, else all of it."""
    if loaded_weight.dim() == 0 or loaded_weight.shape[0] % world:
        return loaded_weight.clone()
    shard_size = loaded_weight.shape[0] // world
    return loaded_weight.narrow(0, rank * shard_size, shard_size).clone()


def counting(module_globals: dict[str, Any]) -> Any:
    """count_load.py's counting ``safe_open`` in place of this module's own binding (vLLM binds it at import)."""
    spec = importlib.util.spec_from_file_location("_count_load", HERE / "count_load.py")
    count = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(count)
    counts = count.Counts()
    module_globals["safe_open"] = count.CountingSafeOpen(module_globals["safe_open"], counts)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    counts = counting(globals())
    files = [os.path.join(args.ckpt, name) for name in os.listdir(args.ckpt) if name.endswith(".safetensors")]
    files = filter_duplicate_safetensors_files(files, args.ckpt)
    kept = {name: weight_loader(weight, rank, world) for name, weight in safetensors_weights_iterator(files)}
    record = {"rank": rank, "kept_bytes": sum(t.nbytes for t in kept.values()), **counts.as_dict()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"serving-rank{rank}.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
