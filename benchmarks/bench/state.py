"""``state``: what the state kept for a dying rank and the termination handlers cost per load: each operation's cost
(the best of many blocks) times how often one real load does it (counted during that load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import best_ns, clean_env, quiet_transformers, run_worker

# operation -> the tracing attribute (a method; dotted: of a member) that does it once
OPERATIONS = {
    "state updates": "state_file.update",
    "handler install+restore": "handlers.install",
    "state slots": "state_file.new_slot",
}


def counted_load(load: Any, ckpt: str, tracing: Any) -> dict[str, int]:
    """How often one load runs each operation: the tracing's methods replaced by counting ones for that load."""
    counts = dict.fromkeys(OPERATIONS, 0)
    restore = []
    for name, path in OPERATIONS.items():
        *members, method = path.split(".")
        owner = tracing
        for member in members:
            owner = getattr(owner, member)
        original = getattr(owner, method)

        def counting(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _original(*args, **kwargs)

        setattr(owner, method, counting)
        restore.append((owner, method, original))
    load(ckpt)
    for owner, method, original in restore:
        setattr(owner, method, original)
    return counts


def operation_costs_ns(tracing: Any) -> dict[str, float]:
    """ns per operation, the best of many blocks, outside a load."""
    from loadtrace import statefile
    from loadtrace.instrumentation.counting.statemirror import set_phase

    state = statefile.Writer(None, {}, {})  # slots in anonymous memory: the benchmark's own, not the process's

    def phase_updates(n: int) -> None:
        for _ in range(n):
            tracing.state_file.update(set_phase)

    def handlers(n: int) -> None:
        for _ in range(n):
            tracing.handlers.install()
            tracing.handlers.restore()

    def slots(n: int) -> None:
        for _ in range(n):
            state.new_slot()
            state.add("files_opened", 1)

    return {
        "state updates": best_ns(phase_updates, 2000),
        "handler install+restore": best_ns(handlers, 2000),
        "state slots": best_ns(slots, 200),
    }


def cmd_state(argv: list[str]) -> dict[str, Any]:
    """Worker: ``_state OUT CKPT``: per-call cost of the state writes and the signal handlers, times calls per load."""
    from transformers import AutoModelForCausalLM

    import loadtrace
    from loadtrace.instrumentation.tracing import spans

    quiet_transformers()
    loadtrace.instrument()
    AutoModelForCausalLM.from_pretrained(argv[0])  # set-up, not measured
    tracing = spans.tracing()
    assert tracing is not None and tracing.state_file.state() is not None
    counts = counted_load(AutoModelForCausalLM.from_pretrained, argv[0], tracing)
    costs_ns = operation_costs_ns(tracing)
    per_load_us = {name: costs_ns[name] * counts[name] / 1e3 for name in counts}
    return {"counts": counts, "costs_ns": costs_ns, "per_load_us": per_load_us}


def bench_state(ckpt: Path, work: Path) -> dict[str, Any]:
    env = clean_env(LOADTRACE_DIR=str(work / "traces" / "state"))
    return run_worker("_state", [ckpt], env, work, timeout=900)
