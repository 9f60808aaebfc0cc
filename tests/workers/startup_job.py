"""Test worker: a whole startup, rendezvous to preparation, with this rank's own account of it.

    torchrun --nproc_per_node 2 tests/workers/startup_job.py CKPT --mode plain|fsdp2|zero3 --out DIR
        [--late-rank R --late-s S] [--stop-rank R] [--fault stage]

- ``plain``: ``init_process_group`` (gloo), ``from_pretrained``; no preparation.
- ``fsdp2``: accelerate's own FSDP2 path with ``cpu_ram_efficient_loading``: ``Accelerator()`` joins the process
  group, ``from_pretrained``, then ``Accelerator.prepare(model, optimizer)``, which runs ``fsdp2_prepare_model`` and
  ``fsdp2_load_full_state_dict`` (rank 0 broadcasts every weight). accelerate selects FSDP only on an accelerator
  (``AcceleratorState`` turns ``ACCELERATE_USE_FSDP`` into ``DistributedType.FSDP`` for MULTI_GPU-like types, never
  MULTI_CPU), so on this CPU machine the worker sets the state's distributed type and FSDP2 plugin itself, as the
  launcher's config would; everything from ``prepare`` on is accelerate's and torch's code, on gloo.
- ``zero3``: ``deepspeed.init_distributed`` (gloo), ``HfDeepSpeedConfig`` stage 3 during ``from_pretrained`` (the
  model is built under ``zero.Init``), then ``deepspeed.initialize(model, optimizer)`` on deepspeed's CPU accelerator.

``--late-rank R --late-s S``: rank R sleeps S seconds before joining the process group (the others wait for it).
``--stop-rank R``: once every rank has loaded, before the preparation, rank R sends itself SIGTERM and dies by it;
the others wait (in ``time.sleep``) until torchrun stops them too. ``--fault stage``: loadtrace's startup-phase
code raises (injected after activation): the job must run as untraced.

Writes ``DIR/startup-rank<R>.json``, knowing nothing of loadtrace: the wall-clock times around
``init_process_group``, the bytes of the model's state dict before preparation (what FSDP2's broadcast must move:
one ``dist.broadcast`` per entry), the ``zero.Init`` and ``GatheredParameters`` contexts entered during
``from_pretrained`` (counted by wrappers of this worker's own), and a digest of the weights after preparation.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_load import load_example  # noqa: E402

load = load_example("load")


def join(late_rank: int, late_s: float) -> dict[str, int]:
    """Sleep when this is the late rank, then join; the times around the call, from this worker's own clock."""
    import torch.distributed as dist

    if int(os.environ["RANK"]) == late_rank:
        time.sleep(late_s)
    times = {}
    if os.environ["MODE"] == "fsdp2":
        from accelerate import Accelerator

        times["init_called_ns"] = time.time_ns()
        accelerator = Accelerator(cpu=True)  # PartialState: init_process_group (gloo)
        times["accelerator"] = accelerator  # type: ignore[assignment]
    elif os.environ["MODE"] == "zero3":
        import deepspeed

        times["init_called_ns"] = time.time_ns()
        deepspeed.init_distributed(dist_backend="gloo")
    else:
        times["init_called_ns"] = time.time_ns()
        dist.init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=5))
    times["init_returned_ns"] = time.time_ns()
    return times


class Contexts:
    """Counts the enabled contexts of a deepspeed class entered while ``active``; for ``zero.Init`` only the
    outermost (deepspeed's ``zero_init_context`` depth 0)."""

    def __init__(self, cls, outermost: bool):
        self.count = 0
        self.active = False
        original = cls.__enter__
        partition = sys.modules[cls.__module__]

        def enter(instance):
            if self.active and getattr(instance, "enabled", False):
                if not outermost or partition.zero_init_context == 0:
                    self.count += 1
            return original(instance)

        cls.__enter__ = enter


def digest(model) -> str:
    import torch
    from torch.distributed.tensor import DTensor

    sha = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
            sha.update(name.encode())
            sha.update(full.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def inject_fault() -> None:
    from loadtrace.instrumentation.tracing import spans

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    spans.Tracing.enter_stage = broken
    spans.Tracing.stage_span = broken


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--mode", choices=("plain", "fsdp2", "zero3"), default="plain")
    parser.add_argument("--out", required=True)
    parser.add_argument("--late-rank", type=int, default=-1)
    parser.add_argument("--late-s", type=float, default=0.0)
    parser.add_argument("--stop-rank", type=int, default=-1)
    parser.add_argument("--fault", choices=("stage",))
    args = parser.parse_args()
    os.environ["MODE"] = args.mode
    if args.fault:
        inject_fault()
    times = join(args.late_rank, args.late_s)
    if args.mode == "fsdp2":  # what accelerate launch's FSDP config puts in the environment (after Accelerator():
        os.environ["ACCELERATE_USE_FSDP"] = "true"  # with it set, its FSDP plugin asks for an accelerator device)
        os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "true"
    accelerator = times.pop("accelerator", None)
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    record: dict = {"rank": rank, **times}
    keep_alive = None
    zero_inits = gathered = None
    if args.mode == "zero3":
        import deepspeed
        from transformers.integrations import HfDeepSpeedConfig

        keep_alive = HfDeepSpeedConfig(load.zero3_config())
        zero_inits = Contexts(deepspeed.zero.Init, outermost=True)
        gathered = Contexts(deepspeed.zero.GatheredParameters, outermost=False)
        zero_inits.active = gathered.active = True
    model = load.from_pretrained(args.ckpt)
    if zero_inits is not None and gathered is not None:
        zero_inits.active = gathered.active = False
        record["zero_init_contexts"] = zero_inits.count
        record["gathered_contexts"] = gathered.count
    state = model.state_dict()
    record["state_dict_bytes"] = sum(tensor.nbytes for tensor in state.values())
    record["state_dict_tensors"] = len(state)
    del state
    if args.stop_rank >= 0:  # after every rank loaded, before the preparation their strategy awaits
        load.write_json(args.out, f"startup-rank{rank}.json", record)
        dist.barrier()
        if rank == args.stop_rank:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(120)  # torchrun stops the others when this rank dies
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.mode == "fsdp2":
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

        accelerator.state.distributed_type = DistributedType.FSDP
        accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=True)
        model, optimizer = accelerator.prepare(model, optimizer)
        record["digest"] = digest(model)
    elif args.mode == "zero3":
        import deepspeed

        engine, optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config={**load.zero3_config(), "zero_allow_untested_optimizer": True}
        )
        record["initialized"] = type(engine).__name__
        del keep_alive
    load.write_json(args.out, f"startup-rank{rank}.json", record)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
