"""Issue 34's user's own model: a randomly initialised Llama (hidden 256, 4 layers, 8 heads, 4 KV heads, vocab 8000,
untied, float32) saved in 5 shards, 27,993,088 bytes of tensors: a family the forecast's calibration (Qwen3-MoE) never
saw. Run with a test venv's Python (it needs torch and transformers):

    python tests/support/llama.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

TENSOR_BYTES = 27_993_088
SHARDS = 5
SHARD_SIZE = "5MB"  # the embedding and the head (8.2 MB each) a shard each, the layers and the norm in three
SEED = 1234


def make_llama(out_dir: str | Path) -> dict:
    """Save the model under ``out_dir``; its summary (files, tensors, bytes) as ``make_checkpoint.summarize`` gives."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from make_checkpoint import summarize

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=8000,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size=SHARD_SIZE)
    return summarize(out)


if __name__ == "__main__":
    summary = make_llama(sys.argv[1])
    print(f"wrote {len(summary['files'])} shards, {summary['tensors']} tensors, {summary['bytes']:,} bytes")
