"""Write a small sharded safetensors checkpoint from a randomly initialised transformers model (no downloads).

The default is the tiny Qwen3-MoE of ``field-facts.md``: 2 layers x 8 experts, float32, saved with
``max_shard_size="200KB"`` -> 5 shards, 69 tensors, 1,009,152 bytes of tensor data. The same seed and sizes always give
the same bytes, so a checkpoint made on one machine equals one made on another.

    python examples/make_checkpoint.py OUT_DIR [--layers N] [--experts N] [--shard-size 200KB] [--set KEY=INT ...]

or, from Python: ``make_checkpoint(out_dir, layers=2, experts=8)``. ``--set`` (``**config`` from Python) overrides any
other field of the config, e.g. ``--set hidden_size=256 --set vocab_size=8000`` for a bigger model.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

DEFAULT_LAYERS = 2
DEFAULT_EXPERTS = 8
DEFAULT_SHARD_SIZE = "200KB"
SEED = 1234


def tiny_qwen3_moe_config(layers: int = DEFAULT_LAYERS, experts: int = DEFAULT_EXPERTS, **config: int):
    """A Qwen3-MoE config small enough for CPU tests; every layer is sparse (MoE), nothing is tied. ``config``
    overrides any field (``hidden_size``, ``vocab_size``, ...)."""
    from transformers import Qwen3MoeConfig

    fields = dict(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=experts,
        num_experts_per_tok=min(2, experts),
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    fields.update(config)
    return Qwen3MoeConfig(**fields)


def make_checkpoint(
    out_dir: str | os.PathLike[str],
    layers: int = DEFAULT_LAYERS,
    experts: int = DEFAULT_EXPERTS,
    shard_size: str = DEFAULT_SHARD_SIZE,
    seed: int = SEED,
    **config: int,
) -> dict:
    """Save a randomly initialised tiny Qwen3-MoE under ``out_dir``; return a summary (files, tensors, bytes)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model_config = tiny_qwen3_moe_config(layers, experts, **config)
    model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size=shard_size)
    return summarize(out)


def summarize(ckpt_dir: str | os.PathLike[str]) -> dict:
    """Files, tensor count and tensor bytes of a safetensors checkpoint directory, read from the file headers."""
    files = sorted(Path(ckpt_dir).glob("*.safetensors"))
    tensors = 0
    nbytes = 0
    for file in files:
        with open(file, "rb") as handle:
            header_len = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(header_len))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            tensors += 1
            start, end = info["data_offsets"]
            nbytes += end - start
    return {"dir": str(ckpt_dir), "files": [f.name for f in files], "tensors": tensors, "bytes": nbytes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS)
    parser.add_argument("--experts", type=int, default=DEFAULT_EXPERTS)
    parser.add_argument("--shard-size", default=DEFAULT_SHARD_SIZE, help='max_shard_size for save_pretrained ("200KB")')
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=INT", help="override a config field (hidden_size=256)"
    )
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            overrides[key] = int(value)
        except ValueError:
            parser.error(f"--set {item!r}: expected KEY=INT")
    summary = make_checkpoint(args.out_dir, args.layers, args.experts, args.shard_size, args.seed, **overrides)
    print(
        f"wrote {len(summary['files'])} shards, {summary['tensors']} tensors, "
        f"{summary['bytes']:,} bytes to {summary['dir']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
