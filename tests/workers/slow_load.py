"""Test worker: one rank loads slowly inside ``from_pretrained`` (slow storage), so a load can be watched while it
happens and its skew can kill the job.

    torchrun --nproc_per_node 2 tests/workers/slow_load.py CKPT [--slow-rank 1] [--delay 0.3] [--pg-timeout 1800]
        [--grow-mb N --cgroup DIR --headroom-mb M]

Every rank joins a gloo process group with ``--pg-timeout`` seconds, loads the checkpoint, then meets the others at a
barrier. The slow rank sleeps ``--delay`` seconds before each tensor transformers reads (``_materialize_copy``, on the
loading thread with ``HF_DEACTIVATE_ASYNC_LOAD=1``). With ``--pg-timeout 5`` the fast rank's barrier times out while the
slow rank is still loading: the skew that kills (field-facts.md). With ``--grow-mb`` the slow rank also keeps N MB more
per tensor, and with ``--cgroup`` (the cgroup v1 memory directory the whole job runs in) it first sets the cgroup's
limit to its usage plus ``--headroom-mb``: it heads for the OOM killer while loading.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import load_example  # noqa: E402


def limit_cgroup(directory: Path, headroom_mb: int) -> None:
    """The job runs inside this cgroup v1 memory directory: its limit becomes its usage now plus the headroom."""
    usage = int((directory / "memory.usage_in_bytes").read_text())
    (directory / "memory.limit_in_bytes").write_text(str(usage + headroom_mb * 2**20))


def warm_up(ckpt: str) -> None:
    """What ``from_pretrained`` would import first: the config and the model's modeling module."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(ckpt)
    transformers.AutoModelForCausalLM._model_mapping[type(config)]


def slow_down(delay_s: float, grow_mb: int) -> None:
    from transformers import core_model_loading

    original = core_model_loading._materialize_copy
    kept = []

    def slow_copy(*args, **kwargs):
        time.sleep(delay_s)
        if grow_mb:
            kept.append(bytearray(b"\x01") * (grow_mb * 2**20))  # written, so resident
        return original(*args, **kwargs)

    core_model_loading._materialize_copy = slow_copy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--pg-timeout", type=float, default=1800)
    parser.add_argument("--grow-mb", type=int, default=0)
    parser.add_argument("--cgroup")
    parser.add_argument("--headroom-mb", type=int, default=200)
    args = parser.parse_args()

    import torch.distributed as dist

    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank = dist.get_rank()
    load = load_example("load")
    if args.cgroup:
        # A container's limit is set before the job starts, so the limit is set before the load (loadtrace reads it
        # then); but both ranks first import what the load would (~100 MB each), which would eat the headroom before a
        # tensor is read, and meet, so the limit is taken once all that is resident.
        warm_up(args.ckpt)
        dist.barrier()
        if rank == args.slow_rank:
            limit_cgroup(Path(args.cgroup), args.headroom_mb)
        dist.barrier()
    if rank == args.slow_rank:
        slow_down(args.delay, args.grow_mb)
    load.from_pretrained(args.ckpt)
    dist.barrier()


if __name__ == "__main__":
    main()
