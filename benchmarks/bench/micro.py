"""(e) ``torch.zeros_like`` / ``empty_like`` outside a load: the bare builtins, a plain ``wrapt.FunctionWrapper``
pass-through (the floor of any wrapt hook), and the functions once loadtrace is instrumented, in interleaved blocks."""

from __future__ import annotations

import json
import time
from typing import Any

from .common import clean_env, output, worker
from .stats import low, med


def passthrough(wrapped_, instance, args, kwargs):
    return wrapped_(*args, **kwargs)


def interleaved_ns(fns: dict[str, Any], tensor: Any, n: int, rounds: int) -> dict[str, list[float]]:
    """ns per call of each function, blocks of ``n`` calls, the order reversed every other round."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        for _ in range(n // 10):
            fn(tensor)
    for r in range(rounds):
        for key in list(fns) if r % 2 == 0 else list(fns)[::-1]:
            fn = fns[key]
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn(tensor)
            times[key].append((time.perf_counter_ns() - t0) / n)
    return times


def cmd_micro(argv: list[str]) -> int:
    """Worker: ``_micro [ROUNDS]``; prints the figures as JSON."""
    rounds = int(argv[0]) if argv else 30
    import torch

    bare = {"zeros_like": torch.zeros_like, "empty_like": torch.empty_like}  # taken before loadtrace is imported
    import wrapt

    import loadtrace

    floor = {name: wrapt.FunctionWrapper(fn, passthrough) for name, fn in bare.items()}
    loadtrace.instrument()
    # Instrumented, outside a load: loadtrace hooks zeros_like / empty_like only while a load is open.
    wrapped = {"zeros_like": torch.zeros_like, "empty_like": torch.empty_like}
    cases = [
        ("zeros_like", torch.empty(16), 20000),
        ("empty_like", torch.empty(16), 20000),
        ("zeros_like", torch.empty(256 * 1024), 1000),
    ]
    results = []
    for name, tensor, n in cases:
        fns = {
            "bare": bare[name],
            "bare (null)": bare[name],
            "wrapt pass-through": floor[name],
            "wrapped": wrapped[name],
        }
        times = interleaved_ns(fns, tensor, n, rounds)
        entry = {"function": name, "numel": tensor.numel(), "calls_per_sample": n, "rounds": rounds}
        for key, values in times.items():
            entry[key] = {"median_ns": med(values), "min_ns": low(values)}
        results.append(entry)
    loadtrace.uninstrument()
    print(json.dumps(results))
    return 0


def bench_micro(work: Any, rounds: int) -> list[dict[str, Any]]:
    env = clean_env(LOADTRACE_DIR=str(work / "traces-micro"), OMP_NUM_THREADS="1")
    return json.loads(output(worker("_micro", rounds), env).strip().splitlines()[-1])
