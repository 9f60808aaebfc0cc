"""Promise: forked children (multiprocessing pools, DataLoader workers) trace into files of their own, neither
duplicating nor losing spans, without deadlock; threads loading at once are each charged their own bytes."""

import os
import subprocess
import sys

import safetensors
import safetensors.torch
import torch

from loadtrace import semconv
from loadtrace.analysis.sources import read_files

FORKING_JOB = r"""
import multiprocessing, os, sys, threading, safetensors, torch, loadtrace
from torch.utils.data import DataLoader, Dataset

path = sys.argv[1]

def read(_):
    with safetensors.safe_open(path, framework="pt") as f:
        return int(f.get_tensor("w").sum())

class Shards(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return read(i)

# A thread busy exporting spans while the process forks must not leave a child deadlocked on a lock.
stop = threading.Event()
def spin():
    while not stop.is_set():
        read(0)
spinner = threading.Thread(target=spin)
spinner.start()

with loadtrace.traced_load("parent"):
    read(0)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(read, range(6)) == [16] * 6
    batches = list(DataLoader(Shards(), num_workers=2, multiprocessing_context="fork"))
stop.set()
spinner.join()
print("done", os.getpid(), flush=True)
"""


def test_forked_children_write_their_own_spans_once(tmp_path):
    ckpt = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(ckpt))
    traces = tmp_path / "traces"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(LOADTRACE="1", LOADTRACE_DIR=str(traces))
    result = subprocess.run(
        [sys.executable, "-c", FORKING_JOB, str(ckpt)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    parent = int(result.stdout.split()[1])
    spans = read_files(traces).spans
    assert len({s.span_id for s in spans}) == len(spans), "no span written twice"
    by_pid = {}
    for span in spans:
        by_pid.setdefault(span.resource["process.pid"], []).append(span)
    children = {pid: found for pid, found in by_pid.items() if pid != parent}
    assert len(children) >= 2  # pool workers and DataLoader workers, each its own process and file
    assert len(list(traces.glob("*.jsonl"))) == len(by_pid)
    child_opens = sum(1 for found in children.values() for s in found if s.name == "safetensors.open")
    assert child_opens >= 6 + 4  # every read in a child is there (the spinning thread is not copied by fork)
    # The job's own load (the spinning thread's reads before it opened are a load of their own: loose.py).
    (load,) = [s for s in by_pid[parent] if s.attributes.get(semconv.LOAD_NAME) == "parent"]
    # The parent's load counts the parent's own reads (its first read, and the spinning thread's while open) only.
    parent_opens_inside = [
        s for s in by_pid[parent] if s.name == "safetensors.open" and s.parent_span_id == load.span_id
    ]
    assert load.attributes["loadtrace.files.opened"] == len(parent_opens_inside) >= 1
    assert all(s.parent_span_id != load.span_id for found in children.values() for s in found)
