"""Promise: a rank's whole startup is traced (e2e/test_startup_spans.py runs the real jobs); here, in this process, a
rank that only joins the rendezvous (no load, no preparation) still ends its startup span, at exit."""

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
