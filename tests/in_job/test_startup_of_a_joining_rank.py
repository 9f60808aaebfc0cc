"""Promise: a rank's whole startup is traced, not only ``from_pretrained``: one ``loadtrace.startup`` span per rank from
the process's start, holding the rendezvous (``torch.init_process_group``: the wait for the other ranks), the loads,
and the strategy's preparation: accelerate's ``prepare`` with FSDP2's broadcast of rank 0's weights (the exact bytes
each rank sent and received), or ``deepspeed.initialize`` with ZeRO-3's ``zero.Init`` and ``GatheredParameters``
aggregated per load. A rank stopped before its startup is over still writes it; a faulty hook leaves the job as it
would run untraced.

Every case is a real ``torchrun --nproc_per_node 2`` job (gloo on CPU) of ``tests/workers/startup_job.py``, which
keeps its own account (times around ``init_process_group``, the state dict's bytes, the deepspeed contexts it entered,
a digest of the prepared weights) to check loadtrace's numbers against.

FSDP2 on this CPU machine: accelerate's ``AcceleratorState`` selects ``DistributedType.FSDP`` only for accelerator
types (MULTI_GPU and the like, never MULTI_CPU), and its FSDP plugin refuses to build without an accelerator device,
so ``accelerate launch --use_fsdp`` runs each rank as ``DistributedType.NO`` here. The worker therefore sets the
state's distributed type and FSDP2 plugin (``cpu_ram_efficient_loading``) itself after ``Accelerator(cpu=True)``;
from ``Accelerator.prepare(model, optimizer)`` on, everything is accelerate's and torch's own code (``_prepare_fsdp2``,
``fsdp2_prepare_model``, ``fully_shard``, ``fsdp2_load_full_state_dict``'s gloo broadcasts)."""

from __future__ import annotations

from loadtrace import semconv


def test_a_rank_that_only_joins_ends_its_startup_at_exit_where_its_rendezvous_ended(monkeypatch):
    """No load, no preparation: the startup, opened by the rendezvous, ends when the process exits, at the end of the
    last thing it held; meanwhile (and only meanwhile) loadtrace's signal handlers are in place."""
    import signal

    import torch.distributed as dist
    from support.inmemory import traced
    from support.torchrun import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    before = signal.getsignal(signal.SIGTERM)
    with traced() as spans:
        dist.init_process_group("gloo", rank=0, world_size=1)
        assert signal.getsignal(signal.SIGTERM) is not before
        dist.destroy_process_group()
        assert not spans.spans(semconv.SPAN_STARTUP), "open until exit"
    assert signal.getsignal(signal.SIGTERM) is before
    startup = spans.one(semconv.SPAN_STARTUP)
    rendezvous = spans.one(semconv.SPAN_INIT_PROCESS_GROUP)
    assert rendezvous.parent.span_id == startup.context.span_id
    assert rendezvous.attributes[semconv.RENDEZVOUS_BACKEND] == "gloo"
    assert startup.attributes[semconv.STARTUP_END] == semconv.STARTUP_END_EXIT
    assert startup.start_time < rendezvous.start_time <= rendezvous.end_time <= startup.end_time
    assert startup.end_time - rendezvous.end_time < 100_000_000
