"""What several test workers share: their command line (a checkpoint, then the worker's own options), joining the
job's process group, and a hook at this rank's N-th weight conversion.

Workers run as scripts: each puts this folder on ``sys.path`` and imports it by name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from count_load import load_example


def start(*options: tuple[str, dict[str, Any]]) -> tuple[argparse.Namespace, Any, int, int]:
    """Parse ``CKPT`` and ``options`` (``(flag, add_argument's keywords)``), then join the gloo process group:
    (arguments, ``examples/load.py`` as a module, rank, world size)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    for flag, how in options:
        parser.add_argument(flag, **how)
    args = parser.parse_args()
    load = load_example("load")
    rank, world = load.init_distributed()
    return args, load, rank, world


def at_conversion(n: int, then: Callable[[], None]) -> None:
    """Call ``then`` at this rank's ``n``-th weight conversion (transformers' ``WeightRenaming.convert``), before the
    conversion runs. With ``HF_DEACTIVATE_ASYNC_LOAD=1`` the reads happen in that loop, so the moment is a rank's
    load in the middle of its reads."""
    from transformers.core_model_loading import WeightRenaming

    original = WeightRenaming.__dict__["convert"]
    calls = 0

    def convert(self, *args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == n:
            then()
        return original.__get__(self, type(self))(*args, **kwargs)

    WeightRenaming.convert = convert
