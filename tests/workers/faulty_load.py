"""Test worker: ``examples/load.py``, with faults injected into loadtrace's hooks by rank.

    torchrun --nproc_per_node 2 tests/workers/faulty_load.py CKPT --out DIR [--faults RANK:KIND,KIND ...] [options]

A fault is put into loadtrace's own code after activation, in this rank only, so the job must go on exactly as it
would untraced: same weights, exit 0, one line on stderr. Each rank takes the kinds its ``--faults`` names (none when
it is not named) and writes ``DIR/faults-rank<R>.json``: how many times each injected fault was raised.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import load_example  # noqa: E402

# Each kind of hook code: a handler before the call, a handler after it, a proxy on the per-tensor path, a phase.
FAULTS = {
    "file_open": ("loadtrace.instrumentation.hooks.safetensors", "TracedSafeOpen"),  # after safe_open returns
    "tensor_read": None,  # inside the slice proxy, in transformers' threads (see inject)
    "materialize": ("loadtrace.instrumentation.hooks.torch", "call_site"),  # before zeros_like / empty_like
    "phase": ("loadtrace.instrumentation.tracing.spans", "Tracing.enter_phase"),  # before convert / materialize_missing
    "conversion": (
        "loadtrace.instrumentation.tracing.spans",
        "Tracing.record_conversion",
    ),  # after each weight conversion
}
FIRED: Counter[str] = Counter()  # raises of each injected fault in this process
_fired_lock = threading.Lock()  # transformers reads from a thread pool


def fire(kind: str) -> RuntimeError:
    with _fired_lock:
        FIRED[kind] += 1
    return RuntimeError("injected fault")


class BrokenSlot:
    """A read slot whose counters cannot be written."""

    @property
    def counts(self):
        raise fire("tensor_read")

    def add(self, nbytes):
        raise fire("tensor_read")


def inject(kind: str) -> None:
    if kind == "tensor_read":  # every per-tensor count fails, on the hot path itself
        from loadtrace.instrumentation.hooks import safetensors as hook

        init = hook.TracedSafeOpen.__init__

        def broken_counts(self, wrapped, scope, tracing):
            scope.slot, working = BrokenSlot(), scope.slot  # what the proxy and its slices count into
            init(self, wrapped, scope, tracing)
            scope.slot = working  # the file's span still reads its counts

        hook.TracedSafeOpen.__init__ = broken_counts
        return

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise fire(kind)

    module_name, path = FAULTS[kind]
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    setattr(owner, name, broken)


def faults_of(rank: int, given: list[str]) -> list[str]:
    """The kinds ``--faults RANK:KIND,KIND`` gives this rank."""
    kinds = []
    for item in given:
        named, _, listed = item.partition(":")
        if int(named) == rank:
            kinds += [kind for kind in listed.split(",") if kind]
    unknown = sorted(set(kinds) - set(FAULTS))
    if unknown:
        raise SystemExit(f"unknown faults {unknown}; known: {sorted(FAULTS)}")
    return kinds


def main() -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--faults", action="append", default=[], help="RANK:KIND,KIND (repeatable)")
    ours, rest = parser.parse_known_args()
    load = load_example("load")
    out = load.parse_args(rest).out
    rank = int(os.environ["RANK"])
    kinds = faults_of(rank, ours.faults)
    for kind in kinds:
        inject(kind)
    code = load.main(rest)
    load.write_json(out, f"faults-rank{rank}.json", {"injected": kinds, "fired": dict(FIRED)})
    return code


if __name__ == "__main__":
    raise SystemExit(main())
