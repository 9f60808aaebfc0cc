"""The per-tensor work that runs inside the job's own calls, not in a hook's handler, timed apart: the slice proxies
(``get_slice(name)[...]``) and transformers' per-tensor path through them (``_materialize_copy(get_slice(name),
device, dtype)``, what transformers 5.12 and 5.24 run for every tensor of a load), each bare and through loadtrace;
and the hook on ``WeightRenaming.convert`` (every key no converter takes). Neither ``own``'s meter nor a hook's
handler sees it all. Timed in thread CPU (``slice_cost_us``, used by ``own`` and ``fit``), and counted in
instructions under valgrind's callgrind (``slice_instructions``: the same loops, which the machine's load cannot
move)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .common import PY, clean_env

SLICE_COST = r"""
import json, os, random, statistics, sys, time, safetensors, safetensors.torch, torch, loadtrace
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


def convert(made, block):
    for renaming in made:
        renaming.convert(renaming.target_patterns[0], model=None, config=None, hf_quantizer=None, loading_info=None)


def read(handle, block):
    for name in block:
        handle.get_slice(name)[...]


def path_of(function, device="cpu"):
    def path(handle, block):  # a CPU load in the checkpoint's dtype: what transformers passes
        for name in block:
            function(handle.get_slice(name), device, torch.float32)
    return path


def prepared(label, block):
    loop, handle = arms[label]
    return loop, renamings(handle, block) if loop is convert else handle  # renamings made untimed


def run(label, block):
    loop, handle = prepared(label, block)
    started = time.thread_time_ns()
    loop(handle, block)
    return (time.thread_time_ns() - started) / len(block) / 1e3


def counted(order, size):
    # Under callgrind: each arm's loop of ``size`` reads between a getppid and a getpgrp (the driver zeroes the
    # counts at one, dumps them at the other), once the driver has turned instrumentation on.
    open(os.environ["LOADTRACE_BENCH_READY"], "w").close()
    while not os.path.exists(os.environ["LOADTRACE_BENCH_GO"]):
        time.sleep(0.05)
    block = (names * (size // len(names) + 1))[:size]
    for label in order:
        loop, handle = prepared(label, names[:50])
        loop(handle, names[:50])  # warm
        loop, handle = prepared(label, block)
        os.getppid()
        loop(handle, block)
        os.getpgrp()


with loadtrace.traced_load("slices"):
    traced = safetensors.safe_open(path, framework="pt")
    arms = {"bare": (read, bare), "floor": (read, floor), "traced": (read, traced)}
    arms |= {"path_bare": (path_of(materialize), bare), "path_floor": (path_of(materialize), floor)}
    arms["path_traced"] = (path_of(hooked), traced)
    # A load onto a device copies every tensor, which the hook times: ``meta`` stands in for the device here.
    arms |= {"copy_bare": (path_of(materialize, "meta"), bare), "copy_traced": (path_of(hooked, "meta"), traced)}
    arms |= {"rename_bare": (convert, BareRenaming), "rename_traced": (convert, Renaming)}
    if len(sys.argv) > 1:
        counted(list(arms), int(sys.argv[1]))
        raise SystemExit
    times = {label: [] for label in arms}
    order, shuffle = list(arms), random.Random(50).shuffle
    for r in range(600):  # blocks of 200 reads, the arms side by side in a new order each round
        block = names[(r % 10) * 200 : (r % 10) * 200 + 200]
        shuffle(order)
        for label in order:
            times[label].append(run(label, block))


def extra(label, base="bare"):
    return statistics.median(t - b for b, t in zip(times[base], times[label]))


print(json.dumps({**{label: min(found) for label, found in times.items()}, "extra": extra("traced"),
                  "floor_extra": extra("floor"), "path_extra": extra("path_traced", "path_bare"),
                  "path_floor_extra": extra("path_floor", "path_bare"),
                  "copy_extra": extra("copy_traced", "copy_bare"),
                  "rename_extra": extra("rename_traced", "rename_bare")}))
"""
ARMS = ["bare", "floor", "traced", "path_bare", "path_floor", "path_traced", "copy_bare", "copy_traced"]
ARMS += ["rename_bare", "rename_traced"]
EXTRAS = {  # figure: (arm, its bare arm)
    "extra": ("traced", "bare"),
    "floor_extra": ("floor", "bare"),
    "path_extra": ("path_traced", "path_bare"),
    "path_floor_extra": ("path_floor", "path_bare"),
    "copy_extra": ("copy_traced", "copy_bare"),
    "rename_extra": ("rename_traced", "rename_bare"),
}


def slice_cost_us() -> dict[str, float]:
    """Per tensor, in 600 rounds of blocks of 200 reads, every arm in each round in a new order (thread CPU time):
    ``get_slice(name)[...]`` bare, through loadtrace's proxies (``traced``), and through the least a Python-level
    interception can do (``floor``: a slice whose ``__getitem__`` only passes the read on); and transformers' path
    ``_materialize_copy(get_slice(name), "cpu", torch.float32)`` the same three ways (``path_*``: its original over
    the bare and floor slices, the hooked one over loadtrace's). The ``EXTRAS`` are the medians of the rounds'
    differences from the bare arm of their kind, with their share of the garbage collector's work (one more tracked
    object per tensor); the arms' own figures are each one's best block, which at this scale (1 µs in 20) the
    machine's noise moves either way. ``path_extra`` is what a tensor of a default-detail transformers load costs in
    the job's own calls: the slice proxies, and the hook on the call that reads it (its wrapper included);
    ``floor_extra`` is what any counting in Python would pay before it counted anything. ``copy_extra``: the same
    path copying each tensor to ``meta`` (a stand-in for a load onto a device, where the hook times every copy).
    ``rename_extra``: the hook on ``WeightRenaming.convert`` per call, a kept key (every key no converter takes: all
    of a dense model's).
    ``-P``: the installed loadtrace is measured, never a source tree in the working directory."""
    env = clean_env(LOADTRACE_DIR="/tmp/loadtrace-bench-slices")
    found = subprocess.run([PY, "-P", "-c", SLICE_COST], env=env, capture_output=True, text=True)
    if found.returncode != 0:
        raise RuntimeError(f"the slice benchmark failed:\n{found.stderr[-3000:]}")
    return json.loads(found.stdout)


def slice_instructions(size: int = 2000) -> dict[str, float] | None:
    """Instructions per tensor of each arm's loop, on the loading thread (callgrind, ``--separate-threads``): the
    loop of ``size`` reads bracketed by the counts zeroed and dumped, instrumentation on only from just before (the
    imports run uninstrumented: minutes less). None without valgrind."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="loadtrace-callgrind-") as folder:
        where = Path(folder)
        ready, go, out = where / "ready", where / "go", where / "callgrind.out"
        env = clean_env(LOADTRACE_DIR=str(where / "traces"), LOADTRACE_BENCH_READY=str(ready))
        env |= {"LOADTRACE_BENCH_GO": str(go), "PYTHONHASHSEED": "0"}  # the same dicts' layouts from run to run
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes"]
        command += [f"--callgrind-out-file={out}", "--zero-before=getppid", "--dump-before=getpgrp"]
        proc = subprocess.Popen([*command, PY, "-P", "-c", SLICE_COST, str(size)], env=env, stderr=subprocess.DEVNULL)
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the slice benchmark under callgrind exited {proc.returncode}")
            time.sleep(0.2)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True, check=True)
        go.touch()
        if proc.wait() != 0:
            raise RuntimeError(f"the slice benchmark under callgrind exited {proc.returncode}")
        counts = {arm: dumped(where / f"callgrind.out.{index}-01") / size for index, arm in enumerate(ARMS, 1)}
    return counts | {name: counts[arm] - counts[base] for name, (arm, base) in EXTRAS.items()}


def dumped(path: Path) -> int:
    """The instructions in one callgrind dump (its ``summary:`` line)."""
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")
