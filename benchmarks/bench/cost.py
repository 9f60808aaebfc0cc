"""Issue 16's figures, each as ratios or differences measured in one run against a null arm.

- ``never``: processes that never load, ``LOADTRACE=1`` against unset (and unset again: the null), interleaved in
  rotating order, each a fresh process: ``python -c pass`` (any helper process) and ``python -c "import torch"`` (a
  spawned DataLoader worker, which imports torch and so loadtrace's hooks). Wall time around the process and its own
  peak RSS (``os.wait4``'s ``ru_maxrss``); the minimum of N for each arm, medians beside.
- ``fit``: in ONE process, warm ``from_pretrained`` loads of two checkpoints (3,219 and 20,259 tensors), loadtrace's
  hooks removed (off, and off again: the null) and installed (on) between loads, in all 6 orders in turn (or, with
  ``settle``, each timed load after an untimed one of the same checkpoint and arm). Per size the
  median of the paired differences on - off (and null - off); a line through the two sizes splits the cost into a
  fixed cost per load and a cost per tensor. Whole loads scatter by ±100 ms here: a bound, not the figure (``own``
  in own.py is the figure).
- ``state``: what the state kept for a dying rank and the termination handlers cost per load: each operation's cost
  (the best of many blocks) times how often one real load does it (counted during that load).
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import PY, best_ns, clean_env, run_checked, worker
from .stats import median_ci

PROGRAMS = {"python -c pass": "pass", 'python -c "import torch"': "import torch"}
NEVER_ARMS = ["off", "LOADTRACE=1", "off (null)"]


def one_process(code: str, env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``python -c code``."""
    started = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"python -c {code!r} exited {proc.returncode}")
    return wall, usage.ru_maxrss * 1024


def bench_never(rounds: int, work: Path) -> dict[str, Any]:
    envs = {
        "off": clean_env(),
        "off (null)": clean_env(),
        "LOADTRACE=1": clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces" / "never")),
    }
    result: dict[str, Any] = {"rounds": rounds}
    for title, code in PROGRAMS.items():
        samples: dict[str, list[tuple[float, int]]] = {arm: [] for arm in NEVER_ARMS}
        one_process(code, envs["off"])  # page cache and .pyc files warm for every arm
        for r in range(rounds):
            order = NEVER_ARMS[r % 3 :] + NEVER_ARMS[: r % 3]
            for arm in order:
                samples[arm].append(one_process(code, envs[arm]))
        arms = {}
        for arm, values in samples.items():
            walls = [w for w, _ in values]
            rss = [m for _, m in values]
            arms[arm] = {
                "min_ms": min(walls) * 1e3,
                "median_ms": statistics.median(walls) * 1e3,
                "min_rss_mb": min(rss) / 1e6,
                "median_rss_mb": statistics.median(rss) / 1e6,
            }
        off = arms["off"]
        for arm in arms.values():
            arm["extra_min_ms"] = arm["min_ms"] - off["min_ms"]
            arm["extra_median_ms"] = arm["median_ms"] - off["median_ms"]
            arm["extra_min_rss_mb"] = arm["min_rss_mb"] - off["min_rss_mb"]
            arm["extra_median_rss_mb"] = arm["median_rss_mb"] - off["median_rss_mb"]
        result[title] = arms
    result["import_us"] = activation_import_us(envs["LOADTRACE=1"], rounds)
    return result


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


# fit ----------------------------------------------------------------------------------------------------------------

FIT_ARMS = ["off", "on", "off (null)"]
# Round r runs the arms in the order FIT_ORDERS[r % 6]: over 6 rounds every arm follows every other arm twice and comes
# first twice. A rotation of one order made `off (null)` always follow `on` (or open the round), and the null came out
# 115 ms faster than `off`: the order, not the hooks. What the load before leaves behind moves the next one's minor
# page faults (counted per load) between ~35,000 and ~150,000 here, 100-200 ms of system time: after a traced load,
# ~70,000 fewer, measured in a row of loads with hooks off (an untraced load after a traced one faults least). With
# ``settle`` each timed load follows an untimed one of its own checkpoint and arm instead: each arm in its steady state
# (a job traces every load or none), where that carry-over counts for the arm that causes it.
FIT_ORDERS = list(itertools.permutations(FIT_ARMS))


def cmd_fit(argv: list[str]) -> int:
    """Worker (``LOADTRACE=1``): ``_fit ROUNDS SETTLE OUT CKPT...``: warm loads of each checkpoint, hooks off / on /
    off; with SETTLE 1, each timed load follows an untimed one of the same checkpoint and arm."""
    import gc

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from loadtrace.instrumentor import registry

    hf_logging.disable_progress_bar()
    rounds, settle, out, ckpts = int(argv[0]), argv[1] == "1", argv[2], argv[3:]
    hooks = registry()
    assert hooks.active, "start this worker with LOADTRACE=1"
    for ckpt in ckpts:  # imports, the tracer, the first span: not measured here (``never`` and ``first_span`` are)
        AutoModelForCausalLM.from_pretrained(ckpt)
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for ckpt in ckpts:
            order = FIT_ORDERS[r % len(FIT_ORDERS)]
            row: dict[str, Any] = {"ckpt": ckpt, "order": order}
            for arm in order:
                hooks.install() if arm == "on" else hooks.uninstall()
                if settle:  # what the previous load left behind (heap, page cache, spans) is then the arm's own
                    AutoModelForCausalLM.from_pretrained(ckpt)
                gc.collect()
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                c0, l0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                model = AutoModelForCausalLM.from_pretrained(ckpt)
                row[arm] = time.perf_counter() - t0
                row[arm + " faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
                row[arm + " cpu"] = time.process_time() - c0
                row[arm + " thread"] = time.thread_time() - l0
                del model
            hooks.install()
            rows.append(row)
    Path(out).write_text(json.dumps(rows))
    return 0


def first_span_ms() -> float:
    """The first span's one-time cost in a process that has imported torch and transformers: OpenTelemetry's import
    and the provider's set-up (resource, processors, state file, monitor)."""
    code = (
        "import time, torch, transformers, loadtrace\n"
        "from loadtrace.instrumentation import spans\n"
        "loadtrace.instrument()\n"
        "t = time.perf_counter(); spans.tracing().provider; print((time.perf_counter() - t) * 1e3)\n"
    )
    env = clean_env(LOADTRACE_DIR="/tmp/loadtrace-bench-first-span")
    values = [float(subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True).stdout) for _ in range(5)]
    return min(values)


def bench_fit(ckpts: list[tuple[Path, int, int]], rounds: int, work: Path, settle: bool = False) -> dict[str, Any]:
    """``ckpts``: (directory, tensors, files) of two checkpoints; ``settle``: an untimed load before each timed one."""
    out = work / "results" / "fit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Every tensor read on the loading thread (transformers' own switch), so that thread's CPU time holds all of
    # loadtrace's per-tensor work: the steadiest measure on a shared machine, where other jobs' CPU is not in it.
    env = clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces" / "fit"), HF_DEACTIVATE_ASYNC_LOAD="1")
    command = worker("_fit", rounds, int(settle), out, *(c for c, _, _ in ckpts))
    run_checked(command, env, 3600, work / "results" / "fit.log", cwd=work)
    rows = json.loads(out.read_text())
    sizes = []
    for ckpt, tensors, files in ckpts:
        mine = [row for row in rows if row["ckpt"] == str(ckpt)]
        entry: dict[str, Any] = {"tensors": tensors, "files": files, "rounds": len(mine)}
        for unit, suffix in (("wall", ""), ("cpu", " cpu"), ("thread", " thread")):
            off = [row["off" + suffix] for row in mine]
            entry[f"{unit}_off_median_s"] = statistics.median(off)
            entry[f"{unit}_on_median_ms"] = (
                statistics.median(row["on" + suffix] - row["off" + suffix] for row in mine) * 1e3
            )
            entry[f"{unit}_null_median_ms"] = (
                statistics.median(row["off (null)" + suffix] - row["off" + suffix] for row in mine) * 1e3
            )
            for arm, key in (("on", "on"), ("off (null)", "null")):
                ci = median_ci([(row[arm + suffix] - row["off" + suffix]) * 1e3 for row in mine])
                entry[f"{unit}_{key}_ci_ms"] = ci
            entry[f"{unit}_on_min_ms"] = (min(row["on" + suffix] for row in mine) - min(off)) * 1e3
            entry[f"{unit}_null_min_ms"] = (min(row["off (null)" + suffix] for row in mine) - min(off)) * 1e3
            entry[f"{unit}_ratio_median"] = statistics.median(row["on" + suffix] / row["off" + suffix] for row in mine)
            entry[f"{unit}_null_ratio_median"] = statistics.median(
                row["off (null)" + suffix] / row["off" + suffix] for row in mine
            )
        entry["faults_median"] = {arm: statistics.median(row[arm + " faults"] for row in mine) for arm in FIT_ARMS}
        sizes.append(entry)
    fit: dict[str, Any] = {"sizes": sizes, "settle": settle}
    (small, large) = sorted(sizes, key=lambda entry: entry["tensors"])
    for unit in ("wall", "cpu", "thread"):
        for stat in ("median", "min"):
            a, b = small[f"{unit}_on_{stat}_ms"], large[f"{unit}_on_{stat}_ms"]
            per_tensor_us = (b - a) / (large["tensors"] - small["tensors"]) * 1e3
            fit[f"{unit}_{stat}"] = {
                "per_tensor_us": per_tensor_us,
                "fixed_ms": a - per_tensor_us * small["tensors"] / 1e3,
            }
    fit["first_span_ms"] = first_span_ms()
    fit["slice_us"] = slice_cost_us()
    return fit


SLICE_COST = r"""
import itertools, json, statistics, time, safetensors, safetensors.torch, torch, loadtrace
path = "/tmp/loadtrace-bench-slices.safetensors"
safetensors.torch.save_file({f"t{i}": torch.ones(64) for i in range(2000)}, path)
names = [f"t{i}" for i in range(2000)]
bare = safetensors.safe_open(path, framework="pt")


class Passing:  # the least a Python-level interception of each read can do: a slot, a call, no counting
    __slots__ = ("_slice",)

    def __getitem__(self, index):
        return self._slice[index]


class Floor:  # a file whose get_slice hands out such slices, made the way loadtrace makes its own
    def __init__(self, handle):
        read = handle.get_slice

        def get_slice(name):
            piece = Passing()
            piece._slice = read(name)
            return piece

        self.get_slice = get_slice


floor = Floor(safetensors.safe_open(path, framework="pt"))
loadtrace.instrument()
with loadtrace.traced_load("slices"):
    traced = safetensors.safe_open(path, framework="pt")
    handles = {"bare": bare, "floor": floor, "traced": traced}
    orders = list(itertools.permutations(handles))
    times = {label: [] for label in handles}
    for r in range(600):  # blocks of 200 reads, the three arms side by side in every order in turn
        block = names[(r % 10) * 200 : (r % 10) * 200 + 200]
        for label in orders[r % len(orders)]:
            handle = handles[label]
            t = time.thread_time_ns()
            for name in block:
                handle.get_slice(name)[...]
            times[label].append((time.thread_time_ns() - t) / len(block) / 1e3)


def extra(label):
    return statistics.median(t - b for b, t in zip(times["bare"], times[label]))


print(json.dumps({**{label: min(found) for label, found in times.items()}, "extra": extra("traced"),
                  "floor_extra": extra("floor")}))
"""


def slice_cost_us() -> dict[str, float]:
    """``get_slice(name)[...]`` per tensor, bare, through loadtrace's proxies, and through the least a Python-level
    interception can do (``floor``: a slice whose ``__getitem__`` only passes the read on), in 600 rounds of blocks of
    200 reads, the three arms in every order in turn (thread CPU time). ``extra`` and ``floor_extra`` are the medians of
    the rounds' differences from ``bare``, with their share of the garbage collector's work (one more tracked object
    per tensor); ``bare``, ``floor`` and ``traced`` are each arm's best block, which at this scale (1 µs in 20) the
    machine's noise moves either way. ``extra`` is the per-tensor cost of a default-detail load; ``floor_extra`` is
    what any counting in Python would pay before it counted anything."""
    env = clean_env(LOADTRACE_DIR="/tmp/loadtrace-bench-slices")
    return json.loads(subprocess.run([PY, "-c", SLICE_COST], env=env, capture_output=True, text=True).stdout)


# state --------------------------------------------------------------------------------------------------------------


def cmd_state(argv: list[str]) -> int:
    """Worker: ``_state CKPT OUT``: per-call cost of the state writes and the signal handlers, times calls per load."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    import loadtrace
    from loadtrace import statefile
    from loadtrace.instrumentation import spans

    hf_logging.disable_progress_bar()
    ckpt, out = argv[0], argv[1]
    loadtrace.instrument()
    AutoModelForCausalLM.from_pretrained(ckpt)  # set-up, not measured
    tracing = spans.tracing()
    assert tracing is not None and tracing.state is not None
    counts = {"state updates": 0, "handler install+restore": 0, "state slots": 0}
    update, install, new_slot = tracing._update_state, tracing.handlers.install, tracing._new_slot

    def counted_update(*args: Any, **kwargs: Any) -> None:
        counts["state updates"] += 1
        update(*args, **kwargs)

    def counted_install() -> None:
        counts["handler install+restore"] += 1
        install()

    def counted_slot(scope: Any) -> Any:
        counts["state slots"] += 1
        return new_slot(scope)

    tracing._update_state = counted_update  # type: ignore[method-assign]
    tracing.handlers.install = counted_install  # type: ignore[method-assign]
    tracing._new_slot = counted_slot  # type: ignore[method-assign]
    AutoModelForCausalLM.from_pretrained(ckpt)
    tracing._update_state, tracing.handlers.install, tracing._new_slot = update, install, new_slot  # type: ignore[method-assign]

    def phase_updates(n: int) -> None:
        for _ in range(n):
            tracing._update_state(tracing._state_phase)

    def handlers(n: int) -> None:
        for _ in range(n):
            tracing.handlers.install()
            tracing.handlers.restore()

    def slots(n: int) -> None:
        for _ in range(n):
            state.new_slot()
            state.add("files_opened", 1)

    state = statefile.Writer(None, {}, {})  # slots in anonymous memory: the benchmark's own, not the process's
    costs_ns = {
        "state updates": best_ns(phase_updates, 2000),
        "handler install+restore": best_ns(handlers, 2000),
        "state slots": best_ns(slots, 200),
    }
    per_load_us = {name: costs_ns[name] * counts[name] / 1e3 for name in counts}
    Path(out).write_text(json.dumps({"counts": counts, "costs_ns": costs_ns, "per_load_us": per_load_us}))
    return 0


def bench_state(ckpt: Path, work: Path) -> dict[str, Any]:
    out = work / "results" / "state.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = clean_env(LOADTRACE_DIR=str(work / "traces" / "state"))
    run_checked(worker("_state", ckpt, out), env, 900, work / "results" / "state.log", cwd=work)
    return json.loads(out.read_text())
