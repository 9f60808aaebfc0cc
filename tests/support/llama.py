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


def llama_sizes(vocab: int, hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int) -> dict:
    """``LlamaConfig`` keywords for an untied Llama of these sizes."""
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "tie_word_embeddings": False,
    }


# The tiny Llama of the tensor-parallel and DCP tests (its config carries a ``base_model_tp_plan``).
TINY_LLAMA = llama_sizes(vocab=256, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2)


def make_llama(out_dir: str | Path) -> dict:
    """Save the model under ``out_dir``; its summary (files, tensors, bytes) as ``make_checkpoint.summarize`` gives."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from make_checkpoint import summarize

    torch.manual_seed(SEED)
    sizes = llama_sizes(vocab=8000, hidden=256, intermediate=688, layers=4, heads=8, kv_heads=4)
    config = LlamaConfig(**sizes, max_position_embeddings=256)
    model = LlamaForCausalLM(config).to(torch.float32)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size=SHARD_SIZE)
    return summarize(out)


if __name__ == "__main__":
    summary = make_llama(sys.argv[1])
    print(f"wrote {len(summary['files'])} shards, {summary['tensors']} tensors, {summary['bytes']:,} bytes")
