"""Paths, the job's environment, running workers, and the few statistics every part uses."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent.parent / "bench_load.py"  # workers are its internal subcommands
REPO = SCRIPT.parent.parent
PY = sys.executable


def worker(subcommand: str, *args: Any) -> list[str]:
    """The command line of one of ``bench_load.py``'s internal subcommands, run by this Python."""
    return [PY, str(SCRIPT), subcommand, *map(str, args)]


def clean_env(**extra: str) -> dict[str, str]:
    """The job's environment without any loadtrace / OTel knob the caller may have set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_")) and k != "PYTHONPATH"}
    env |= {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    env |= {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    return env | extra


def run_worker(subcommand: str, args: list[Any], env: dict[str, str], work: Path, timeout: float = 3600) -> Any:
    """Run ``bench_load.py SUBCOMMAND OUT ARGS...`` and return the JSON it wrote to OUT; on failure raise with the
    tail of its log (``work/results/SUBCOMMAND.log``)."""
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    out, logfile = results / f"{subcommand.lstrip('_')}.json", results / f"{subcommand.lstrip('_')}.log"
    with open(logfile, "wb") as handle:
        command = worker(subcommand, out, *args)
        proc = subprocess.run(command, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, cwd=work)
    if proc.returncode != 0:
        tail = logfile.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{tail}")
    return json.loads(out.read_text())


def quiet_transformers() -> None:
    """No progress bars: a worker's output goes to its log, and drawing them would be timed with the loads."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def best_ns(fn: Callable[[int], Any], n: int, reps: int = 9) -> float:
    """ns per call: the best of ``reps`` blocks of ``n`` calls (the minimum filters out other jobs' preemptions)."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def min_median(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values)}


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median: the order statistics k and n + 1 - k, k the largest for which
    the binomial(n, 1/2) coverage is still ``level``; None for fewer than 6 values (no such k)."""
    ordered, n = sorted(values), len(values)
    found = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n < level:
            break
        found = k
    return None if found is None else (ordered[found - 1], ordered[n - found])


def line_through(small: tuple[int, float], large: tuple[int, float]) -> dict[str, float]:
    """The line through two (tensors, ms per load) points: a fixed cost per load (ms) and a cost per tensor (µs)."""
    per_tensor_us = (large[1] - small[1]) / (large[0] - small[0]) * 1e3
    return {"fixed_ms": small[1] - per_tensor_us * small[0] / 1e3, "per_tensor_us": per_tensor_us}
