"""The span budget's rule (README, "The span budget of a big job"): which rank exports which file spans, the knob that
brings them all back, and the export processor that leaves a span out. The real 1,024-rank job is in
e2e/test_span_budget.py.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loadtrace.instrumentation import budget, export
from loadtrace.instrumentation.context import Rank
from loadtrace.instrumentation.settings import Settings, from_env


def test_who_keeps_which_file_spans():
    default, full = Settings(enabled=True), Settings(enabled=True, detail="full")
    big = dict(world_size=1024, local_world_size=8)
    assert budget.file_spans_kept(default, Rank(rank=0, local_rank=0, **big)) is None
    assert budget.file_spans_kept(default, Rank(rank=8, local_rank=0, **big)) == 24
    assert budget.file_spans_kept(default, Rank(rank=9, local_rank=1, **big)) == 0
    # Rank 0 keeps everything wherever it sits in its node; the node's number never matters.
    assert budget.file_spans_kept(default, Rank(rank=0, local_rank=3, **big)) is None
    assert budget.file_spans_kept(default, Rank(rank=1017, local_rank=1, node_rank=127, **big)) == 0
    for settings in (full, Settings(enabled=True, detail="tensor")):
        assert budget.file_spans_kept(settings, Rank(rank=9, local_rank=1, **big)) is None
    for small in (Rank(rank=9, local_rank=1, world_size=64, local_world_size=8), Rank(), Rank(rank=3, local_rank=3)):
        assert budget.file_spans_kept(default, small) is None


def test_the_knob():
    assert from_env({"LOADTRACE_DETAIL": "full"}).detail == "full"
    assert from_env({}).bsp_max_export_batch_size == 128
    assert from_env({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64"}).bsp_max_export_batch_size is None


def test_a_span_left_out_is_not_exported_and_the_rest_are():
    exporter = InMemorySpanExporter()
    kept = export.Budget([SimpleSpanProcessor(exporter)])
    provider = TracerProvider()
    provider.add_span_processor(kept)
    tracer = provider.get_tracer("test")
    left = tracer.start_span("safetensors.open")
    kept.leave_out(left.get_span_context().span_id)
    shown = tracer.start_span("safetensors.open")
    left.end()
    shown.end()
    assert [s.context.span_id for s in exporter.get_finished_spans()] == [shown.get_span_context().span_id]
