"""Test worker: rank 1 SIGKILLs itself in the middle of its load; the launcher (torchrun with LOADTRACE=1) witnesses it.

    torchrun --nproc_per_node 2 tests/workers/witnessed_load.py CKPT --out DIR [--kill-after N] [--own-state]
        [--oom-cgroup CGROUP]

Rank 0 loads the checkpoint, then both ranks meet at a barrier; then rank 1 loads, and at its N-th weight conversion
writes its own independent count of what it read so far to ``DIR/count-rank1.json`` and kills itself with SIGKILL.
Rank 0 sleeps until torchrun stops it. Run with ``HF_DEACTIVATE_ASYNC_LOAD=1`` so reads happen in the conversion loop.

``--oom-cgroup``: rank 1 moves itself into that (v1, limited) memory cgroup before it loads, and instead of killing
itself allocates memory until the kernel's OOM killer does.

``--own-state``: rank 1 keeps the state file itself (a ``statefile.Writer`` beside its trace file, announced to the
launcher with ``witness.announce``, counting the bytes its independent counter sees), for a loadtrace whose workers
do not yet write one. Without it, loadtrace's own state is what the launcher reads.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import Counter, Counts, load_example  # noqa: E402


class StateCounts(Counts):
    """The independent count, also added to a state file's read slot."""

    def __init__(self, slot: Any) -> None:
        super().__init__()
        self.slot = slot

    def read(self, path: str, tensor: Any, how: str) -> None:
        super().read(path, tensor, how)
        self.slot.add(int(tensor.nbytes))


def own_state(rank: int, world: int, cgroup: str | None) -> Any:
    """A state file where loadtrace's would be, announced to the witnessing launcher; its load already begun."""
    from loadtrace import semconv, statefile
    from loadtrace.instrumentation import export, spans, witness

    tracing = spans.tracing()
    if tracing is None or tracing.job.id is None:
        return None
    trace_file = os.path.abspath(
        export.trace_file_path(tracing.settings, {semconv.JOB_ID: tracing.job.id, semconv.RANK: rank})
    )
    path = trace_file.removesuffix(semconv.TRACE_FILE_SUFFIX) + semconv.STATE_SUFFIX
    identity = {
        "pid": os.getpid(),
        "rank": rank,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "world_size": world,
        "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
        "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
    }
    texts = {
        "job_id": tracing.job.id,
        "launch_id": os.environ.get(semconv.ENV_LAUNCH_ID, ""),
        "host": socket.gethostname(),
        "trace_file": trace_file,
        "load": semconv.SPAN_FROM_PRETRAINED,
        "phase": semconv.SPAN_CONVERT,
    }
    state = statefile.Writer(path, identity, texts)
    state.load_started()
    state["loads_open"] = 1
    state["status"] = statefile.STATUS_LOADING
    if cgroup:
        state.set_text("cgroup", cgroup)
        before = witness.oom_kill_count(cgroup)
        state["oom_kill_before"] = -1 if before is None else before
    state.add("files_opened", 1)
    witness.announce(path)
    return state


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-after", type=int, default=10)
    parser.add_argument("--own-state", action="store_true")
    parser.add_argument("--oom-cgroup")
    args = parser.parse_args()

    import torch.distributed as dist

    load = load_example("load")
    rank, world = load.init_distributed()
    if rank == 0:
        load.from_pretrained(args.ckpt)
        dist.barrier()
        time.sleep(120)  # torchrun stops this rank when rank 1 dies
        return

    dist.barrier()
    if args.oom_cgroup:
        Path(args.oom_cgroup, "cgroup.procs").write_text(str(os.getpid()))
    from transformers.core_model_loading import WeightRenaming

    counter = Counter()
    state = own_state(rank, world, args.oom_cgroup) if args.own_state else None
    if state is not None:
        counter.counts = StateCounts(state.new_slot())
    original = WeightRenaming.__dict__["convert"]
    calls = 0

    def convert_then_die(self, *a, **k):
        nonlocal calls
        calls += 1
        if calls == args.kill_after:
            load.write_json(args.out, "count-rank1.json", counter.counts.as_dict())
            if args.oom_cgroup:
                hog = []
                while True:  # until the OOM killer stops it: every page written, so every page charged
                    hog.append(b"\x01" * (1 << 20))
            os.kill(os.getpid(), signal.SIGKILL)
        return original.__get__(self, type(self))(*a, **k)

    WeightRenaming.convert = convert_then_die
    with counter:
        load.from_pretrained(args.ckpt)


if __name__ == "__main__":
    main()
