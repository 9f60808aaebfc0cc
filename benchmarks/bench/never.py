"""``never``: processes that never load, ``LOADTRACE=1`` against unset (and unset again: the null), interleaved in
rotating order, each a fresh process: ``python -c pass`` (any helper process) and ``python -c "import torch"`` (a
spawned DataLoader worker, which imports torch and so loadtrace's hooks). Wall time around the process and its own
peak RSS (``os.wait4``'s ``ru_maxrss``); the minimum of N for each arm, medians beside."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import PY, clean_env, min_median

PROGRAMS = {"python -c pass": "pass", 'python -c "import torch"': "import torch"}
ARMS = ["off", "LOADTRACE=1", "off (null)"]


def one_process(code: str, env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``python -c code``."""
    started = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"python -c {code!r} exited {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_maxrss * 1024


def arm_figures(samples: list[tuple[float, int]], off: list[tuple[float, int]]) -> dict[str, float]:
    """Min and median wall (ms) and peak RSS (MB) of one arm, and their distance from ``off``'s."""
    wall, rss = min_median([w * 1e3 for w, _ in samples]), min_median([m / 1e6 for _, m in samples])
    off_wall, off_rss = min_median([w * 1e3 for w, _ in off]), min_median([m / 1e6 for _, m in off])
    return {
        "min_ms": wall["min"],
        "median_ms": wall["median"],
        "min_rss_mb": rss["min"],
        "extra_min_ms": wall["min"] - off_wall["min"],
        "extra_median_ms": wall["median"] - off_wall["median"],
        "extra_min_rss_mb": rss["min"] - off_rss["min"],
        "extra_median_rss_mb": rss["median"] - off_rss["median"],
    }


def activation_import_us(env: dict[str, str], rounds: int) -> float:
    """What ``LOADTRACE=1`` adds to a bare interpreter's start, measured inside it: the cumulative ``-X importtime``
    of ``loadtrace._activate`` (everything the ``.pth`` line imports), the minimum over ``rounds`` processes."""
    best = float("inf")
    for _ in range(rounds):
        err = subprocess.run([PY, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True).stderr
        for line in err.splitlines():
            if line.rstrip().endswith("loadtrace._activate"):
                best = min(best, float(line.split("|")[1]))
    return best


def bench_never(rounds: int, work: Path) -> dict[str, Any]:
    envs = {"off": clean_env(), "off (null)": clean_env()}
    envs["LOADTRACE=1"] = clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces" / "never"))
    result: dict[str, Any] = {"rounds": rounds, "programs": {}}
    for title, code in PROGRAMS.items():
        samples: dict[str, list[tuple[float, int]]] = {arm: [] for arm in ARMS}
        one_process(code, envs["off"])  # page cache and .pyc files warm for every arm
        for r in range(rounds):
            for arm in ARMS[r % 3 :] + ARMS[: r % 3]:
                samples[arm].append(one_process(code, envs[arm]))
        result["programs"][title] = {arm: arm_figures(found, samples["off"]) for arm, found in samples.items()}
    result["import_us"] = activation_import_us(envs["LOADTRACE=1"], rounds)
    return result
