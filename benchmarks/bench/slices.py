"""The per-tensor work that runs inside the job's own calls, not in a hook's handler, timed apart: the slice proxies
(``get_slice(name)[...]``) and transformers' per-tensor path through them (``_materialize_copy(get_slice(name),
device, dtype)``, what transformers 5.12 and 5.24 run for every tensor of a load), each bare and through loadtrace.
Neither ``own``'s meter nor a hook sees it all. Used by ``own`` and ``fit``."""

from __future__ import annotations

import json
import subprocess

from .common import PY, clean_env

SLICE_COST = r"""
import json, random, statistics, time, safetensors, safetensors.torch, torch, loadtrace
from transformers import core_model_loading
path = "/tmp/loadtrace-bench-slices.safetensors"
safetensors.torch.save_file({f"t{i}": torch.ones(64) for i in range(2000)}, path)
names = [f"t{i}" for i in range(2000)]
bare = safetensors.safe_open(path, framework="pt")
materialize = core_model_loading._materialize_copy  # transformers' own, before loadtrace hooks it
Renaming = core_model_loading.WeightRenaming


class BareRenaming(Renaming):  # transformers' own convert, looked up as the hooked one is
    __slots__ = ()
    convert = Renaming.convert


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
hooked = core_model_loading._materialize_copy
assert hooked is not materialize


def renamings(kind, block):  # a key no converter takes, kept as it is (a dense model's every key), its tensor read
    made = []
    for name in block:
        renaming = kind(name, name)
        renaming.add_tensor(name, name, name, torch.ones(1))
        made.append(renaming)
    return made


def convert(made):
    for renaming in made:
        renaming.convert(renaming.target_patterns[0], model=None, config=None, hf_quantizer=None, loading_info=None)


def read(handle, block):
    for name in block:
        handle.get_slice(name)[...]


def path_of(function):
    def path(handle, block):  # a CPU load in the checkpoint's dtype: what transformers passes
        for name in block:
            function(handle.get_slice(name), "cpu", torch.float32)
    return path


with loadtrace.traced_load("slices"):
    traced = safetensors.safe_open(path, framework="pt")
    arms = {"bare": (read, bare), "floor": (read, floor), "traced": (read, traced)}
    arms |= {"path_bare": (path_of(materialize), bare), "path_floor": (path_of(materialize), floor)}
    arms["path_traced"] = (path_of(hooked), traced)
    arms |= {"rename_bare": (convert, BareRenaming), "rename_traced": (convert, Renaming)}
    times = {label: [] for label in arms}
    order, shuffle = list(arms), random.Random(50).shuffle
    for r in range(600):  # blocks of 200 reads, the arms side by side in a new order each round
        block = names[(r % 10) * 200 : (r % 10) * 200 + 200]
        shuffle(order)
        for label in order:
            run, handle = arms[label]
            if run is convert:
                handle = renamings(handle, block)  # made untimed
            t = time.thread_time_ns()
            run(handle, block) if run is not convert else run(handle)
            times[label].append((time.thread_time_ns() - t) / len(block) / 1e3)


def extra(label, base="bare"):
    return statistics.median(t - b for b, t in zip(times[base], times[label]))


print(json.dumps({**{label: min(found) for label, found in times.items()}, "extra": extra("traced"),
                  "floor_extra": extra("floor"), "path_extra": extra("path_traced", "path_bare"),
                  "path_floor_extra": extra("path_floor", "path_bare"),
                  "rename_extra": extra("rename_traced", "rename_bare")}))
"""


def slice_cost_us() -> dict[str, float]:
    """Per tensor, in 600 rounds of blocks of 200 reads, every arm in each round in a new order (thread CPU time):
    ``get_slice(name)[...]`` bare, through loadtrace's proxies (``traced``), and through the least a Python-level
    interception can do (``floor``: a slice whose ``__getitem__`` only passes the read on); and transformers' path
    ``_materialize_copy(get_slice(name), "cpu", torch.float32)`` the same three ways (``path_*``: its original over
    the bare and floor slices, the hooked one over loadtrace's). ``extra``, ``floor_extra``, ``path_extra`` and
    ``path_floor_extra`` are the medians of the rounds' differences from the bare arm of their kind, with their share
    of the garbage collector's work (one more tracked object per tensor); the rest are each arm's best block, which
    at this scale (1 µs in 20) the machine's noise moves either way. ``path_extra`` is what a tensor of a
    default-detail transformers load costs in the job's own calls: the slice proxies, and the hook on the call that
    reads it (its wrapper included); ``floor_extra`` is what any counting in Python would pay before it counted
    anything. ``rename_extra``: the hook on ``WeightRenaming.convert`` per call, a kept key (every key no converter
    takes: all of a dense model's), ``rename_bare`` and ``rename_traced`` its arms. ``-P``: the installed loadtrace
    is measured, never a source tree in the working directory."""
    env = clean_env(LOADTRACE_DIR="/tmp/loadtrace-bench-slices")
    found = subprocess.run([PY, "-P", "-c", SLICE_COST], env=env, capture_output=True, text=True)
    if found.returncode != 0:
        raise RuntimeError(f"the slice benchmark failed:\n{found.stderr[-3000:]}")
    return json.loads(found.stdout)
