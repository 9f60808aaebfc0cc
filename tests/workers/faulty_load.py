"""Test worker: ``examples/load.py`` with a fault injected into one kind of loadtrace hook (``LOADTRACE_TEST_FAULT``).

The fault is put into loadtrace's own code after activation, in this process only, so the job must go on exactly as
it would untraced: same weights, exit 0, one line on stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import load_example  # noqa: E402


def broken(*args, **kwargs):
    raise RuntimeError("injected fault")


# Each kind of hook code: a handler before the call, a handler after it, a proxy on the per-tensor path, a phase.
FAULTS = {
    "file_open": ("loadtrace.instrumentation.hooks.safetensors", "TracedSafeOpen"),  # after safe_open returns
    "tensor_read": None,  # inside the slice proxy, in transformers' threads (see inject)
    "materialize": ("loadtrace.instrumentation.hooks.torch", "call_site"),  # before zeros_like / empty_like
    "phase": ("loadtrace.instrumentation.spans", "Tracing.enter_phase"),  # before convert / materialize_missing
    "conversion": ("loadtrace.instrumentation.spans", "Tracing.record_conversion"),  # after each weight conversion
}


class BrokenSlot:
    """A read slot whose counters cannot be written."""

    @property
    def counts(self):
        raise RuntimeError("injected fault")

    def add(self, nbytes):
        raise RuntimeError("injected fault")


def inject(kind: str) -> None:
    import importlib

    if kind == "tensor_read":  # every per-tensor count fails, on the hot path itself
        from loadtrace.instrumentation.hooks import safetensors as hook

        init = hook.TracedSafeOpen.__init__

        def broken_counts(self, wrapped, scope, tracing):
            scope.slot, working = BrokenSlot(), scope.slot  # what the proxy and its slices count into
            init(self, wrapped, scope, tracing)
            scope.slot = working  # the file's span still reads its counts

        hook.TracedSafeOpen.__init__ = broken_counts
        return

    module_name, path = FAULTS[kind]
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    setattr(owner, name, broken)


if __name__ == "__main__":
    inject(os.environ["LOADTRACE_TEST_FAULT"])
    raise SystemExit(load_example("load").main())
