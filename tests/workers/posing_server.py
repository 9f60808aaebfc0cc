"""Test worker: the posing ranks of ``support/posing.py``, each a child forked from one interpreter that imported the
libraries once.

    python tests/workers/posing_server.py PLAN.json

``PLAN.json``: ``{"checkpoint": CKPT, "checkpoint_args": [...], "at_once": N, "ranks": [{"rank": R, "env": {...},
"folder": DIR, "host": "node-1" or null}, ...]}``. A fresh interpreter spends 3.5-4.5 s of CPU here importing torch
and transformers before it loads anything; this one imports them, the count and the example's load once, with
loadtrace off (the plan's variables are not in its environment), and forks: first a child that writes the checkpoint
(``examples/make_checkpoint.py CKPT ARGS``; the server itself runs no torch operation, whose thread pools every fork
would inherit), then a child per rank, ``N`` at a time. Each rank's child is that rank from its start (its fork) to
its exit:

- its node's host name in a UTS namespace of its own, where ``host`` is given (as ``unshare -u`` and ``hostname``);
- the rank's launcher variables and ``LOADTRACE=1`` in ``os.environ``, then the installed ``loadtrace.pth`` run as
  the interpreter runs it at start (``site.addpackage``): loadtrace activates at once, the hooked libraries being
  imported already, and installs its hooks on the imported modules as on those imported later (hooks/registry.py);
- the load (``from_pretrained``: every rank reads the whole model) inside ``count_load.Counter``, the count that knows
  nothing of loadtrace, written to ``DIR/counts/count-rank<R>.json``;
- the interpreter's normal exit (``atexit``: loadtrace's flush, state file and end of job; then finalization), not
  ``os._exit``.

A child's output goes to ``DIR/posing-rank<R>.log`` (the checkpoint's to ``CKPT.log``). The server prints one line per
child as it ends, ``checkpoint exit CODE cpu SECONDS`` or ``rank R exit CODE cpu SECONDS``, and exits 0 unless the
checkpoint could not be written.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import site
import socket
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import count_load

CLONE_NEWUTS = 0x04000000  # <sched.h>


def prepare() -> Any:
    """Import what every rank's load runs: the example's load (returned), the count, the libraries they use."""
    import safetensors  # noqa: F401
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401  (the lazy module's class, resolved)

    return count_load.load_example("load")


def load_and_count(load: Any, checkpoint: str, out: str) -> int:
    rank = int(os.environ["RANK"])
    with count_load.Counter() as counts:
        load.from_pretrained(checkpoint)
    load.write_json(out, f"count-rank{rank}.json", {"rank": rank, "pid": os.getpid(), **counts.as_dict()})
    return 0


def own_host_name(host: str) -> None:
    """This process alone (and its children) is ``host`` from now: a UTS namespace of its own."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWUTS): {os.strerror(ctypes.get_errno())}")
    socket.sethostname(host)


def activate_loadtrace() -> None:
    """What the interpreter does with ``loadtrace.pth`` at start, now (``site`` skips a missing file silently)."""
    site_packages = sysconfig.get_paths()["purelib"]
    if not (Path(site_packages) / "loadtrace.pth").is_file():
        raise RuntimeError(f"no loadtrace.pth in {site_packages}: loadtrace is not installed in this venv")
    site.addpackage(site_packages, "loadtrace.pth", set())


def pose(load: Any, checkpoint: str, rank: dict[str, Any]) -> int:
    """In the forked child: become the rank, load, count."""
    if rank["host"] is not None:
        own_host_name(rank["host"])
    os.chdir(rank["folder"])
    os.environ.update(rank["env"])
    activate_loadtrace()
    return load_and_count(load, checkpoint, str(Path(rank["folder"]) / "counts"))


def make_checkpoint(plan: dict[str, Any]) -> int:
    return count_load.load_example("make_checkpoint").main([plan["checkpoint"], *plan["checkpoint_args"]])


Task = tuple[str, Path, Callable[[], int]]  # its name, its log, what its child runs (its exit status)


def fork_each(tasks: list[Task], at_once: int) -> tuple[bool, int]:
    """Run each task in a child of its own, ``at_once`` at a time. In the parent, once all have ended: (False, how
    many failed). In a child: (True, its exit status), for the caller to return up to the interpreter's exit."""
    running: dict[int, str] = {}
    failed = 0

    def reap() -> None:
        nonlocal failed
        pid, status, usage = os.wait4(-1, 0)
        code = os.waitstatus_to_exitcode(status)
        failed += code != 0
        print(f"{running.pop(pid)} exit {code} cpu {usage.ru_utime + usage.ru_stime:.2f}", flush=True)

    for name, log, run in tasks:
        while len(running) >= at_once:
            reap()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return True, in_child(log, run)
        running[pid] = name
    while running:
        reap()
    return False, failed


def in_child(log: Path, run: Callable[[], int]) -> int:
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    try:
        return run()
    except BaseException:
        traceback.print_exc()
        return 1


def main(plan_file: str) -> int:
    plan = json.loads(Path(plan_file).read_text())
    load = prepare()
    assert "loadtrace" not in sys.modules, "loadtrace is active in the server: its children would inherit it"
    # The libraries' objects out of the collector's reach: a child's collections and its exit would otherwise walk
    # them all and copy every page they sit on (1.8 s of CPU a rank here; 0.6 s with this).
    gc.freeze()
    checkpoint = Path(plan["checkpoint"])
    child, status = fork_each([("checkpoint", checkpoint.with_suffix(".log"), lambda: make_checkpoint(plan))], 1)
    if child or status:  # the checkpoint's child, or its failure: no rank could load
        return status
    ranks: list[Task] = [
        (
            f"rank {rank['rank']}",
            Path(rank["folder"]) / f"posing-rank{rank['rank']}.log",
            lambda r=rank: pose(load, plan["checkpoint"], r),
        )
        for rank in plan["ranks"]
    ]
    child, status = fork_each(ranks, plan["at_once"])
    return status if child else 0


if __name__ == "__main__":
    # A child returns here too, with no ``finally`` or ``with`` of the parent's on its way: the interpreter's own exit
    # follows, as for any process.
    raise SystemExit(main(sys.argv[1]))
