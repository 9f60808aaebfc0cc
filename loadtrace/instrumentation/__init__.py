"""The in-job half: what runs inside a traced job's processes. It imports the shared formats (``loadtrace.semconv``,
``loadtrace.statefile``) and nothing of the analysis half. Its rooms, each importing only the ones below it (tested:
tests/structure/test_structure.py):

- ``activation``: how a process turns tracing on (at once, or at the first hooked import);
- ``hooks/``: one module per hooked library; they reach the rest through one front, ``tracing.spans``;
- ``tracing/``: who opens and ends the scopes, and the OpenTelemetry SDK their spans go through;
- ``beside/``: what runs beside the job for when it dies (the launcher's witness, signals, uncaught exceptions);
- ``exporting/``: what leaves the process (span files and OTLP, the span budget, metrics, the exit line);
- ``counting/``: what counts (scopes and their ledgers, memory, the state file, the startup's phases);
- the floor: ``settings`` (every knob), ``context`` (who this process is), ``importclock``, ``_log`` and this file.

This file is its ground floor, imported by every process ``LOADTRACE=1`` reaches (so: the standard library's
already-loaded modules only), and importing nothing of loadtrace: what the modules above share without importing each
other, the hooked packages and the fork-safe lock around loadtrace's own lazy imports.

An import in flight while another thread forks leaves the child waiting forever on the import lock it inherited held,
as soon as it imports that module too (a DataLoader worker: CI hung once). So every lazy import of loadtrace's
machinery runs under ``importing()``, which holds a fork back until it has finished (``os.register_at_fork``).
"""

from __future__ import annotations

import _thread
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The hooked libraries, each with the releases loadtrace is tested against: from the one CI installs
# (scripts/setup.sh; transformers also at 5.12.0) up to its next major release. The one place they are written:
# ``LoadtraceInstrumentor.instrumentation_dependencies`` and the README's table read them (tested).
INSTRUMENTS = {
    "torch": ">= 2.13, < 3",
    "transformers": ">= 5.12, < 6",
    "safetensors": ">= 0.8, < 1",
    "accelerate": ">= 1.15, < 2",
    "deepspeed": ">= 0.19, < 1",
    "fastsafetensors": ">= 0.5, < 0.6",
    "runai_model_streamer": ">= 0.17, < 0.18",
}
# Their top-level packages: every hook's module is one of them or inside one (tested). accelerate and deepspeed import
# torch first, so torch alone would bring their hooks in; they are named for clarity.
HOOKED_PACKAGES = tuple(INSTRUMENTS)

# A fork waits at most this long for an import of ours to finish: a fork made from inside an import that ours waits
# on would otherwise never happen.
FORK_WAIT_S = 10.0

_import_lock = _thread.RLock()
_guarded_at = -1  # len(sys.modules) when the latest fork guard was registered


def importing() -> Any:
    """``with importing():`` around a lazy import of loadtrace's machinery: a fork waits until it has finished.

    Fork hooks run ``before`` in the reverse order of registration, and other libraries' hooks take locks that our
    import may need (``logging``'s, which OpenTelemetry's modules take when imported): so a guard is registered anew
    when modules were imported since the last one, and runs before theirs. Call it only when about to import."""
    global _guarded_at
    if _guarded_at != len(sys.modules):
        _guarded_at = len(sys.modules)
        held = _thread._local()

        def before() -> None:
            held.value = _import_lock.acquire(True, FORK_WAIT_S)

        def after_in_parent() -> None:
            if getattr(held, "value", False):
                held.value = False
                _import_lock.release()

        os.register_at_fork(before=before, after_in_parent=after_in_parent)
    return _import_lock


def _after_fork_in_child() -> None:
    global _import_lock
    _import_lock = _thread.RLock()  # the parent's is held by the forking thread, gone in this process


os.register_at_fork(after_in_child=_after_fork_in_child)
