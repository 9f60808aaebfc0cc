"""``fit``: in ONE process, warm ``from_pretrained`` loads of two checkpoints (3,219 and 20,259 tensors), loadtrace's
hooks removed (off, and off again: the null) and installed (on) between loads, in all 6 orders in turn (or, with
``settle``, each timed load after an untimed one of the same checkpoint and arm). Per size the median of the paired
differences on - off (and null - off); a line through the two sizes splits the cost into a fixed cost per load and a
cost per tensor. Whole loads scatter by ±100 ms here: a bound, not the figure (``own`` is the figure)."""

from __future__ import annotations

import itertools
import resource
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import PY, clean_env, line_through, median_ci, quiet_transformers, run_worker
from .slices import slice_cost_us

ARMS = ["off", "on", "off (null)"]
# Round r runs the arms in the order ORDERS[r % 6]: over 6 rounds every arm follows every other arm twice and comes
# first twice. A rotation of one order made `off (null)` always follow `on` (or open the round), and the null came out
# 115 ms faster than `off`: the order, not the hooks. What the load before leaves behind moves the next one's minor
# page faults (counted per load) between ~35,000 and ~150,000 here, 100-200 ms of system time: after a traced load,
# ~70,000 fewer, measured in a row of loads with hooks off (an untraced load after a traced one faults least). With
# ``settle`` each timed load follows an untimed one of its own checkpoint and arm instead: each arm in its steady state
# (a job traces every load or none), where that carry-over counts for the arm that causes it.
ORDERS = list(itertools.permutations(ARMS))
UNITS = {"wall": "", "cpu": " cpu", "thread": " thread"}  # unit -> the suffix of its figures in a row


def timed_load(load: Any, ckpt: str, arm: str, row: dict[str, Any]) -> None:
    """One warm load's wall, process CPU, loading thread CPU (s) and minor page faults, into ``row``."""
    import gc

    gc.collect()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c0, l0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    model = load(ckpt)
    row[arm] = time.perf_counter() - t0
    row[arm + " faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    row[arm + " cpu"] = time.process_time() - c0
    row[arm + " thread"] = time.thread_time() - l0
    del model


def cmd_fit(argv: list[str]) -> list[dict[str, Any]]:
    """Worker (``LOADTRACE=1``): ``_fit OUT ROUNDS SETTLE CKPT...``: warm loads of each checkpoint, hooks off / on /
    off; with SETTLE 1, each timed load follows an untimed one of the same checkpoint and arm."""
    from transformers import AutoModelForCausalLM

    from loadtrace.instrumentor import registry

    quiet_transformers()
    rounds, settle, ckpts = int(argv[0]), argv[1] == "1", argv[2:]
    hooks, load = registry(), AutoModelForCausalLM.from_pretrained
    assert hooks.active, "start this worker with LOADTRACE=1"
    for ckpt in ckpts:  # imports, the tracer, the first span: not measured here (``never`` and ``first_span`` are)
        load(ckpt)
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for ckpt in ckpts:
            order = ORDERS[r % len(ORDERS)]
            row: dict[str, Any] = {"ckpt": ckpt, "order": order}
            for arm in order:
                hooks.install() if arm == "on" else hooks.uninstall()
                if settle:  # what the previous load left behind (heap, page cache, spans) is then the arm's own
                    load(ckpt)
                timed_load(load, ckpt, arm, row)
            hooks.install()
            rows.append(row)
    return rows


def first_span_ms() -> float:
    """The first span's one-time cost in a process that has imported torch and transformers: OpenTelemetry's import
    and the provider's set-up (resource, processors, state file, monitor); the minimum of 5 processes."""
    code = (
        "import time, torch, transformers, loadtrace\n"
        "from loadtrace.instrumentation.tracing import spans\n"
        "loadtrace.instrument()\n"
        "t = time.perf_counter(); spans.tracing().provider; print((time.perf_counter() - t) * 1e3)\n"
    )
    env = clean_env(LOADTRACE_DIR="/tmp/loadtrace-bench-first-span")
    values = [float(subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True).stdout) for _ in range(5)]
    return min(values)


def size_figures(rows: list[dict[str, Any]], tensors: int, files: int) -> dict[str, Any]:
    """One checkpoint's rounds, per unit: off's median, on - off and null - off as median pairs (with intervals) and
    as differences of minima (ms); minor page faults per arm."""
    entry: dict[str, Any] = {"tensors": tensors, "files": files, "rounds": len(rows)}
    for unit, suffix in UNITS.items():
        off = [row["off" + suffix] for row in rows]
        entry[f"{unit}_off_median_s"] = statistics.median(off)
        for arm, key in (("on", "on"), ("off (null)", "null")):
            pairs = [(row[arm + suffix] - row["off" + suffix]) * 1e3 for row in rows]
            entry[f"{unit}_{key}_median_ms"] = statistics.median(pairs)
            entry[f"{unit}_{key}_ci_ms"] = median_ci(pairs)
            entry[f"{unit}_{key}_min_ms"] = (min(row[arm + suffix] for row in rows) - min(off)) * 1e3
    entry["faults_median"] = {arm: statistics.median(row[arm + " faults"] for row in rows) for arm in ARMS}
    return entry


def bench_fit(ckpts: list[tuple[Path, int, int]], rounds: int, work: Path, settle: bool = False) -> dict[str, Any]:
    """``ckpts``: (directory, tensors, files) of two checkpoints; ``settle``: an untimed load before each timed one."""
    # Every tensor read on the loading thread (transformers' own switch), so that thread's CPU time holds all of
    # loadtrace's per-tensor work: the steadiest measure on a shared machine, where other jobs' CPU is not in it.
    env = clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces" / "fit"), HF_DEACTIVATE_ASYNC_LOAD="1")
    rows = run_worker("_fit", [rounds, int(settle), *(c for c, _, _ in ckpts)], env, work)
    sizes = [size_figures([r for r in rows if r["ckpt"] == str(c)], tensors, files) for c, tensors, files in ckpts]
    small, large = sorted(sizes, key=lambda entry: entry["tensors"])
    fit: dict[str, Any] = {"sizes": sizes, "settle": settle}
    for unit in UNITS:
        for stat in ("median", "min"):
            key = f"{unit}_on_{stat}_ms"
            fit[f"{unit}_{stat}"] = line_through((small["tensors"], small[key]), (large["tensors"], large[key]))
    fit["first_span_ms"] = first_span_ms()
    fit["slice_us"] = slice_cost_us()
    return fit
