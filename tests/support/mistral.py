"""Issue 40's user's model family: a randomly initialised Mistral at two sizes 35x apart, saved as float32 (or
bfloat16), the forecast's second family (its calibration is Qwen3-MoE). Run with a test venv's Python:

    python tests/support/mistral.py OUT_DIR small|large [bf16]

``small``: 37.6 MB of tensors in 8 shards; ``large``: 1.34 GB in 60 (the stored runs of
tests/fixtures/forecast-mistral were measured on these, scripts/forecast_runs.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

SEED = 1234
# (config keywords, max shard size) of each size.
SIZES = {
    "small": (
        {"vocab_size": 8000, "hidden_size": 256, "intermediate_size": 896, "num_hidden_layers": 6},
        {"num_attention_heads": 8, "num_key_value_heads": 4, "shard": "4MB"},
    ),
    "large": (
        {"vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 19},
        {"num_attention_heads": 16, "num_key_value_heads": 8, "shard": "24MB"},
    ),
}


def make_mistral(out_dir: str | Path, size: str, dtype: str = "fp32") -> dict:
    """Save the model under ``out_dir``; its summary (files, tensors, bytes) as ``make_checkpoint.summarize`` gives."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from make_checkpoint import summarize

    torch.manual_seed(SEED)
    shape, rest = SIZES[size]
    heads = {key: value for key, value in rest.items() if key != "shard"}
    config = MistralConfig(**shape, **heads, max_position_embeddings=256, tie_word_embeddings=False)
    model = MistralForCausalLM(config).to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size=rest["shard"])
    return summarize(out)


if __name__ == "__main__":
    summary = make_mistral(sys.argv[1], sys.argv[2], *sys.argv[3:4])
    print(f"wrote {len(summary['files'])} shards, {summary['tensors']} tensors, {summary['bytes']:,} bytes")
