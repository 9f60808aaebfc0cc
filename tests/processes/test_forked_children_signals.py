"""Promise (issue 40): a process forked while a traced load is open (a ``Pool`` or DataLoader worker) starts with the
termination signals as the job had them before loadtrace (default, ignored, or the job's own handler) and installs
loadtrace's again only when it loads itself (not for its reads outside any load, whose load stays open while the worker
waits for work); so ``Pool.terminate()`` and a DataLoader's teardown during an open load
finish, every time (once, a Pool worker holding loadtrace's handler lost the SIGTERM and its parent waited forever).

Real processes: a handler only matters to a real signal, a disposition only to a real fork."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loadtrace.instrumentation.beside import termination

# A job that sets up ``--before`` for the three signals, opens a traced load, forks, and prints what the child finds:
# at its start, while it loads itself, after its load closed. ``--kill-at-fork``: the child is sent SIGTERM from the
# first thing it runs (an at-fork hook registered before loadtrace's), before loadtrace gave anything back.
DISPOSITIONS = r"""
import argparse, json, os, signal, sys
parser = argparse.ArgumentParser()
parser.add_argument("ckpt")
parser.add_argument("--before", choices=["default", "ignore", "handler"], required=True)
parser.add_argument("--kill-at-fork", action="store_true")
args = parser.parse_args()
if args.kill_at_fork:
    os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
import safetensors, loadtrace

NAMES = ("SIGTERM", "SIGINT", "SIGHUP")


def job_handler(number, frame):
    pass


for name in NAMES:
    signo = getattr(signal, name)
    signal.signal(signo, {"default": signal.SIG_DFL, "ignore": signal.SIG_IGN, "handler": job_handler}[args.before])


def dispositions():
    def named(handler):
        if handler == signal.SIG_DFL:
            return "default"
        if handler == signal.SIG_IGN:
            return "ignored"
        if handler is job_handler:
            return "job"
        return type(getattr(handler, "__self__", None)).__name__  # loadtrace's: termination.Handlers
    return {name: named(signal.getsignal(getattr(signal, name))) for name in NAMES}


def read():
    with safetensors.safe_open(args.ckpt, framework="pt") as f:
        f.get_tensor("w")


seen = {}
with loadtrace.traced_load("parent"):
    read()
    seen["parent loading"] = dispositions()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        child = {"child": dispositions()}
        with loadtrace.traced_load("child"):
            read()
            child["child loading"] = dispositions()
        child["child after"] = dispositions()
        read()  # a read outside any load (a Pool task's): its load stays open while the worker waits for work
        child["child reading alone"] = dispositions()
        os.write(writer, json.dumps(child).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as answer:
        said = answer.read()
    _, status = os.waitpid(pid, 0)
seen.update(json.loads(said) if said else {})
seen["child status"] = os.waitstatus_to_exitcode(status)
seen["parent after"] = dispositions()
print(json.dumps(seen), flush=True)
"""

OURS = termination.Handlers.__name__


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    import safetensors.torch
    import torch

    path = tmp_path_factory.mktemp("ckpt") / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(path))
    return path


def traced_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(LOADTRACE="1", LOADTRACE_DIR=str(tmp_path / "traces"))
    return env


def run(tmp_path: Path, script: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    path = tmp_path / "job.py"
    path.write_text(script)
    return subprocess.run(
        [sys.executable, str(path), *args], env=traced_env(tmp_path), capture_output=True, text=True, timeout=timeout
    )


def every(value: str) -> dict[str, str]:
    return dict.fromkeys(("SIGTERM", "SIGINT", "SIGHUP"), value)


@pytest.mark.parametrize(
    "before, job_had, while_loading",
    [
        ("default", "default", OURS),
        ("ignore", "ignored", "ignored"),  # an ignored signal is never ours: the job asked not to be stopped by it
        ("handler", "job", OURS),
    ],
)
def test_a_child_forked_during_a_load_starts_with_the_jobs_dispositions(tmp_path, ckpt, before, job_had, while_loading):
    result = run(tmp_path, DISPOSITIONS, str(ckpt), "--before", before, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["parent loading"] == every(while_loading)
    assert seen["child"] == every(job_had), "the child's start: the job's own, not loadtrace's"
    assert seen["child loading"] == every(while_loading), "loadtrace's again only while the child loads itself"
    assert seen["child after"] == every(job_had)
    assert seen["child reading alone"] == every(job_had), "an idle worker's load keeps no handler of ours in place"
    assert seen["parent after"] == every(job_had)
    assert seen["child status"] == 0


def test_a_sigterm_that_meets_the_child_before_anything_ran_kills_it_as_untraced(tmp_path, ckpt):
    """SIGTERM sent to the child from its first instruction, when loadtrace's handler is still its disposition: it
    dies by it (default action), as it would untraced; the parent's load goes on."""
    result = run(tmp_path, DISPOSITIONS, str(ckpt), "--before", "default", "--kill-at-fork", timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["child status"] == -signal.SIGTERM
    assert seen["parent after"] == every("default")


# Pools terminated at once and while busy, and DataLoaders torn down with their workers mid-epoch, all inside one open
# traced load. Each round is bounded by faulthandler: a worker that survives its SIGTERM makes ``terminate()`` wait
# forever; the dump says where.
TEARDOWNS = r"""
import faulthandler, multiprocessing, sys, time, safetensors, torch, loadtrace
from torch.utils.data import DataLoader, Dataset

path, rounds = sys.argv[1], int(sys.argv[2])


def read(_=None):
    with safetensors.safe_open(path, framework="pt") as f:
        return int(f.get_tensor("w").sum())


def nap(_):
    time.sleep(30)  # still busy when terminated


class Shards(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return read()


fork = multiprocessing.get_context("fork")
with loadtrace.traced_load("parent"):
    read()
    for round in range(rounds):
        faulthandler.dump_traceback_later(60, exit=True)
        fork.Pool(2).terminate()  # workers maybe not yet waiting for work
        with fork.Pool(2) as idle:  # its workers wait for work in ``sem_wait`` (the hang seen once)
            assert idle.map(read, range(2)) == [16, 16]
        busy = fork.Pool(2)
        busy.map_async(nap, range(2))
        busy.terminate()
        busy.join()
        batches = iter(DataLoader(Shards(), num_workers=2, multiprocessing_context=fork))
        assert int(next(batches)) == 16
        del batches  # the workers' teardown: asked to stop, joined, terminated if still there
        faulthandler.cancel_dump_traceback_later()
print("rounds", rounds, flush=True)
"""


def test_pool_terminate_and_dataloader_teardowns_during_a_load_always_finish(tmp_path, ckpt):
    rounds = 30
    result = run(tmp_path, TEARDOWNS, str(ckpt), str(rounds), timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"rounds {rounds}" in result.stdout
    assert "loadtrace:" not in result.stderr, result.stderr[-4000:]
