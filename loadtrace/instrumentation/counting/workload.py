"""What kind of job this process is, as far as it has shown: training, or inference (issue 49).

Told from what is cheap to see and happens anyway. A sign of training: an optimizer constructed (``torch.optim``'s
``Optimizer.__init__``, which every torch optimizer runs, DeepSpeed's included), ``deepspeed.initialize`` called, or a
training framework imported (TRL, Lightning). transformers imports accelerate and deepspeed itself when they are
installed (``from_pretrained`` does), so their import alone says nothing. A process with no sign of training is an
inference one: it reads its weights to serve them; the serving engine it imported (vLLM, SGLang) is named, so the
advice can name that engine's own option (analysis/advice.py).

The load spans and the rank's startup span carry what was seen by their end (``attributes``). An optimizer comes
after the load in most training jobs: a first sign of training seen after the startup span ended is a
``loadtrace.training_sign`` span of its own (hooks/torch.py), once per process.
"""

from __future__ import annotations

import sys
from typing import Any

from ... import semconv

TRAINING_MODULES = ("trl", "lightning", "pytorch_lightning")
SERVING_ENGINES = ("vllm", "sglang")
MAX_SIGNS = 8

_signs: list[str] = []  # the signs of training the hooks saw, in order


def forget() -> None:
    """A new tracing of the process starts with no sign seen (``instrument`` again, as the tests do)."""
    _signs.clear()


def saw_training(sign: str) -> bool:
    """Record a sign of training (``deepspeed.initialize``, ``optimizer AdamW``); True for the process's first."""
    first = not _signs
    if sign not in _signs and len(_signs) < MAX_SIGNS:
        _signs.append(sign)
    return first


def trained() -> bool:
    """Whether a hook has seen a sign of training in this process."""
    return bool(_signs)


def attributes() -> dict[str, Any]:
    """``loadtrace.workload`` (training or inference), the signs of training seen (or the engine's import; absent
    when there is none), and the serving engine imported, if any."""
    modules = sys.modules
    signs = [*_signs, *(f"{name} imported" for name in TRAINING_MODULES if name in modules)]
    engine = next((name for name in SERVING_ENGINES if name in modules), None)
    found: dict[str, Any] = {semconv.WORKLOAD: semconv.WORKLOAD_TRAINING if signs else semconv.WORKLOAD_INFERENCE}
    if engine is not None:
        found[semconv.SERVING_ENGINE] = engine
        signs = signs or [f"{engine} imported"]
    if signs:
        found[semconv.WORKLOAD_EVIDENCE] = signs
    return found
