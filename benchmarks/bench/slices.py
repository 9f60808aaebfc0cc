"""The slice proxies' per-tensor work (``get_slice(name)[...]``), timed apart: it runs inside the job's own
``[...]``, not in a hook, so neither ``own``'s meter nor a hook sees it. Used by ``own`` and ``fit``."""

from __future__ import annotations

import json
import subprocess

from .common import PY, clean_env

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
