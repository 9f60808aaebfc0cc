"""The hooked libraries, one module each: its ``HOOKS`` name the targets and their handlers (the engine that
installs them is ``registry.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .registry import Hook


def all_hooks() -> list[Hook]:
    from . import (
        accelerate,
        dcp,
        deepspeed,
        fastsafetensors,
        runai_streamer,
        safetensors,
        torch,
        torchelastic,
        transformers,
    )

    return [
        *safetensors.HOOKS,
        *torch.HOOKS,
        *transformers.HOOKS,
        *accelerate.HOOKS,
        *deepspeed.HOOKS,
        *torchelastic.HOOKS,
        *dcp.HOOKS,
        *fastsafetensors.HOOKS,
        *runai_streamer.HOOKS,
    ]
