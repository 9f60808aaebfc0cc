"""Small checkpoints written by the tests themselves."""

from pathlib import Path

import safetensors.torch
import torch


def private_checkpoint(folder: Path) -> Path:
    """One 4-element tensor (all 7.0) in ``folder/private-project/model.safetensors``: a path worth redacting."""
    path = folder / "private-project" / "model.safetensors"
    path.parent.mkdir()
    safetensors.torch.save_file({"w": torch.full((4,), 7.0)}, str(path))
    return path
