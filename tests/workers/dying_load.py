"""Test worker: jobs that die, fail or restart while loading (issue 11), made deterministic.

    torchrun --nproc_per_node 2 tests/workers/dying_load.py CKPT --out DIR --scenario SCENARIO [options]

Every rank counts its own tensor reads independently of loadtrace (``count_load.Counter``), with one difference: a
lock is held across each read, its count and whatever the scenario does right after it, so the reads of
transformers' thread pool are serialised and "the N-th read" is a single moment in the process.

Scenarios:

- ``teardown``: both ranks load at once (no barrier). Rank 0 sleeps ``--slow`` s after every read; after its
  ``--signal-after``-th read it writes ``DIR/rank0-loading.json`` (its own count so far). Rank 1, right after its
  ``--kill-after``-th read, waits for that file (so rank 0 is certainly still loading), writes ``DIR/count-rank1.json``
  and SIGKILLs itself. torchrun then SIGTERMs rank 0 in the middle of its load.
- ``oom``: rank 0 loads, then both meet at a barrier and rank 0 sleeps until torchrun stops it; rank 1 moves itself
  into the memory cgroup ``--oom-cgroup`` (v1 or v2 directory, limit already set) and loads; the kernel's OOM killer
  takes it. A rank 1 that survives writes ``DIR/survived-rank1.json``.
- ``raise``: rank 0 loads ``CKPT``, both ranks meet at a barrier, rank 0 exits; then rank 1 loads ``--rank1-ckpt`` (a
  copy with a shard missing) and the exception propagates: the job fails as any job would.
- ``restart``: under ``torchrun --max-restarts 1``. In attempt 0 (``TORCHELASTIC_RESTART_COUNT=0``, no process
  group) rank 0 loads, writes ``DIR/count-a0-rank0.json`` and waits in C++ (the launcher's store) for a key nobody
  sets, as a rank waits on a hung collective; rank 1 loads once that file exists and SIGKILLs itself right after its
  ``--kill-after``-th read (its count in ``DIR/count-a0-rank1.json``). In attempt 1 both ranks load in full
  (``DIR/count-a1-rank<R>.json``) and the job succeeds.
- ``multinode``: every rank loads; rank ``--kill-rank`` SIGKILLs itself right after its ``--kill-after``-th read
  (its count in ``DIR/count-rank<R>.json``), and its launcher then stops the other ranks of its node; the ranks of
  the other node finish.

Mode (plain or FSDP's ``cpu_ram_efficient_loading``) comes from the environment the test gives torchrun.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import count_load  # noqa: E402
from count_load import Counter, CountingFile, CountingSlice, Counts, load_example  # noqa: E402

READ_LOCK = threading.Lock()
SCENARIOS = ("teardown", "oom", "raise", "restart", "multinode")
HANDSHAKE_TIMEOUT_S = 120
WAIT_S = 180


class LockedSlice(CountingSlice):
    def __getitem__(self, index: Any) -> Any:
        with READ_LOCK:
            return super().__getitem__(index)


class LockedFile(CountingFile):
    def get_tensor(self, name: str) -> Any:
        with READ_LOCK:
            return super().get_tensor(name)

    def get_slice(self, name: str) -> Any:
        return LockedSlice(self._inner.get_slice(name), self._path, self._counts)


# ``count_load.CountingSafeOpen`` builds its file proxies from this module-level name: ours take the lock.
count_load.CountingFile = LockedFile


class ScriptedCounts(Counts):
    """The independent count, calling ``after_read(reads, counts)`` right after each read is counted (``READ_LOCK``
    held)."""

    def __init__(self, after_read: Any = None) -> None:
        super().__init__()
        self.reads = 0
        self.after_read = after_read

    def read(self, path: str, tensor: Any, how: str) -> None:
        super().read(path, tensor, how)
        self.reads += 1
        if self.after_read is not None:
            self.after_read(self.reads, self)


def storage_read() -> int:
    """This process's ``/proc/self/io`` ``read_bytes``, read here independently of loadtrace: what the kernel has
    fetched from storage for it so far."""
    with open("/proc/self/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("read_bytes:"))


STORAGE_AT_LOAD = [0]  # ``storage_read()`` just before ``from_pretrained``


def own_count(counts: Counts) -> dict[str, Any]:
    """This rank's own count so far, with what it fetched from storage since its load began."""
    return {"pid": os.getpid(), "storage_read_during_load": storage_read() - STORAGE_AT_LOAD[0], **counts.as_dict()}


def write_json(out: str, name: str, data: dict[str, Any]) -> None:
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)


def counted_load(load: Any, ckpt: str, after_read: Any = None) -> tuple[Any, Counts]:
    """``load.from_pretrained(ckpt)`` with this rank's own count, scripted by ``after_read(reads, counts)``."""
    counter = Counter()
    counter.counts = ScriptedCounts(after_read)
    with counter as counts:
        STORAGE_AT_LOAD[0] = storage_read()
        model = load.from_pretrained(ckpt)
    return model, counts


def die_by_sigkill(out: str, name: str, counts: Counts) -> None:
    write_json(out, name, own_count(counts))
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # never reached


def teardown(args: argparse.Namespace, load: Any, rank: int) -> None:
    marker = Path(args.out) / "rank0-loading.json"

    if rank == 0:

        def after_read(reads: int, counts: Counts) -> None:
            if reads == args.signal_after:
                write_json(args.out, marker.name, own_count(counts))
            time.sleep(args.slow)

    else:

        def after_read(reads: int, counts: Counts) -> None:
            if reads != args.kill_after:
                return
            deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            die_by_sigkill(args.out, "count-rank1.json", counts)

    _, counts = counted_load(load, args.ckpt, after_read)
    # Not reached by rank 1; rank 0 only if torchrun never stopped it.
    write_json(args.out, f"finished-rank{rank}.json", {"pid": os.getpid(), **counts.as_dict()})


def oom(args: argparse.Namespace, load: Any, rank: int) -> None:
    import torch.distributed as dist

    if rank == 0:
        _, counts = counted_load(load, args.ckpt)
        write_json(args.out, "count-rank0.json", {"pid": os.getpid(), **counts.as_dict()})
        dist.barrier()
        time.sleep(600)  # torchrun stops this rank when rank 1 dies
        return
    # Everything imported first: only the load's own allocations are charged to the cgroup (those made before moving
    # in stay where they were).
    import transformers.models.qwen3_moe.modeling_qwen3_moe  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401

    dist.barrier()  # rank 0 has loaded
    Path(args.oom_cgroup, "cgroup.procs").write_text(str(os.getpid()))
    _, counts = counted_load(load, args.ckpt)
    write_json(args.out, "survived-rank1.json", {"pid": os.getpid(), **counts.as_dict()})


def raise_(args: argparse.Namespace, load: Any, rank: int) -> None:
    import torch.distributed as dist

    if rank == 0:
        _, counts = counted_load(load, args.ckpt)
        write_json(args.out, "count-rank0.json", {"pid": os.getpid(), **counts.as_dict()})
        dist.barrier()
        dist.destroy_process_group()
        return
    dist.barrier()
    load.from_pretrained(args.rank1_ckpt)  # raises: a shard is missing
    write_json(args.out, "survived-rank1.json", {"pid": os.getpid()})


def restart(args: argparse.Namespace, load: Any, rank: int) -> None:
    import torch.distributed as dist

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt > 0:
        load.init_distributed()
        _, counts = counted_load(load, args.ckpt)
        write_json(args.out, f"count-a{attempt}-rank{rank}.json", {"pid": os.getpid(), **counts.as_dict()})
        dist.barrier()
        dist.destroy_process_group()
        return
    # Attempt 0 makes no process group: a restarted gloo group can read the dead attempt's addresses from the
    # launcher's store and fail to connect (seen here with and without loadtrace). Files order the ranks instead.
    rank0_done = Path(args.out) / "count-a0-rank0.json"
    if rank == 0:
        _, counts = counted_load(load, args.ckpt)
        write_json(args.out, rank0_done.name, {"pid": os.getpid(), **counts.as_dict()})
        # Wait in C++ for a key nobody sets, as a rank waits on a hung collective: torchrun stops it here.
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, wait_for_workers=False
        )
        store.wait(["dying-load-never-set"], datetime.timedelta(seconds=WAIT_S))
        return
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    while not rank0_done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)

    def after_read(reads: int, counts: Counts) -> None:
        if reads == args.kill_after:
            die_by_sigkill(args.out, "count-a0-rank1.json", counts)

    counted_load(load, args.ckpt, after_read)


def multinode(args: argparse.Namespace, load: Any, rank: int) -> None:
    def after_read(reads: int, counts: Counts) -> None:
        if rank == args.kill_rank and reads == args.kill_after:
            die_by_sigkill(args.out, f"count-rank{rank}.json", counts)

    _, counts = counted_load(load, args.ckpt, after_read)
    write_json(args.out, f"finished-rank{rank}.json", {"pid": os.getpid(), **counts.as_dict()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--kill-after", type=int, default=10, help="rank 1 dies right after this many reads")
    parser.add_argument("--signal-after", type=int, default=2, help="teardown: rank 0 says it is loading after this")
    parser.add_argument("--slow", type=float, default=0.5, help="teardown: rank 0 sleeps this long after each read")
    parser.add_argument("--oom-cgroup", help="oom: the memory cgroup directory rank 1 moves into")
    parser.add_argument("--rank1-ckpt", help="raise: the broken checkpoint rank 1 loads")
    parser.add_argument("--kill-rank", type=int, default=3, help="multinode: the rank that dies")
    args = parser.parse_args()

    load = load_example("load")
    if args.scenario == "restart":
        rank = int(os.environ["RANK"])  # its attempt 0 runs without a process group
    else:
        rank, _ = load.init_distributed()
    scenarios = {"teardown": teardown, "oom": oom, "raise": raise_, "restart": restart, "multinode": multinode}
    scenarios[args.scenario](args, load, rank)


if __name__ == "__main__":
    main()
