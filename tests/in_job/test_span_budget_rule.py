"""The span budget's rule (docs/reference.md, "The span budget of a big job"): which rank exports which spans, under
each strategy, whatever the checkpoint's file count; the knob that brings them all back; no exported span names a parent
left out.

Each strategy's spans are a real 2-rank job's, recorded (plain: tests/fixtures/llama524; FSDP: docs/samples/fsdp524;
FSDP2 under accelerate's ``prepare``: tests/fixtures/fsdp2_prepare524; ZeRO-3 under deepspeed:
docs/samples/zero3_524), made again in-process through the budget's processor as the rank the launcher's variables
name (support/replay.py): rank 0 as rank 0 of a 1,024-rank job of 8 ranks a node, rank 1 as every other rank. Node 0
is rank 0 and 7 ranks like rank 1; every other node is a local rank 0 (rank 8) and 7 ranks like rank 9. The real
1,024-rank job of posing processes is in e2e/test_span_budget.py; the report of such ranks in
analysis/test_span_budget_analysis.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.paths import FIXTURES, REPO
from support.replay import RANKS_PER_NODE, WORLD_SIZE, exported, rank_spans, with_data, with_files

from loadtrace import semconv as sc
from loadtrace.instrumentation.context import Rank
from loadtrace.instrumentation.exporting import budget
from loadtrace.instrumentation.exporting.budget_processor import Budget
from loadtrace.instrumentation.settings import Settings, from_env

STRATEGIES = {
    "plain": FIXTURES / "llama524",
    "fsdp": REPO / "docs" / "samples" / "fsdp524",
    "fsdp2_prepare": FIXTURES / "fsdp2_prepare524",
    "zero3": REPO / "docs" / "samples" / "zero3_524",
}
NODES = WORLD_SIZE // RANKS_PER_NODE


def test_who_keeps_which_spans():
    default, full = Settings(enabled=True), Settings(enabled=True, detail="full")
    big = dict(world_size=1024, local_world_size=8)
    assert budget.file_spans_kept(default, Rank(rank=0, local_rank=0, **big)) == 1024
    assert budget.file_spans_kept(default, Rank(rank=8, local_rank=0, **big)) == 24
    assert budget.file_spans_kept(default, Rank(rank=9, local_rank=1, **big)) == 0
    assert [budget.folds(default, Rank(rank=r, local_rank=r % 8, **big)) for r in (0, 8, 9)] == [False, False, True]
    # Rank 0 keeps everything wherever it sits in its node; the node's number never matters.
    assert budget.file_spans_kept(default, Rank(rank=0, local_rank=3, **big)) == 1024
    assert not budget.folds(default, Rank(rank=0, local_rank=3, **big))
    assert budget.file_spans_kept(default, Rank(rank=1017, local_rank=1, node_rank=127, **big)) == 0
    assert budget.folds(default, Rank(rank=1017, local_rank=1, node_rank=127, **big))
    for settings in (full, Settings(enabled=True, detail="tensor")):
        assert budget.file_spans_kept(settings, Rank(rank=9, local_rank=1, **big)) is None
        assert not budget.folds(settings, Rank(rank=9, local_rank=1, **big))
    for small in (Rank(rank=9, local_rank=1, world_size=64, local_world_size=8), Rank(), Rank(rank=3, local_rank=3)):
        assert budget.file_spans_kept(default, small) is None
        assert not budget.folds(default, small)


def test_the_knob():
    assert from_env({"LOADTRACE_DETAIL": "full"}).detail == "full"
    assert from_env({}).bsp_max_export_batch_size == 128
    assert from_env({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64"}).bsp_max_export_batch_size is None


def names(spans) -> Counter[str]:
    return Counter(span.name for span in spans)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("files", [None, 22, 200, 2000])
def test_a_1024_rank_job_is_8_spans_a_rank_or_fewer(monkeypatch, strategy, files):
    """``files``: the checkpoint's file count (None: the recorded job's own, 5)."""
    first, other = (rank_spans(STRATEGIES[strategy], r) for r in (0, 1))
    if files is not None:
        first, other = with_files(first, files), with_files(other, files)
    rank0, local0, rest = (exported(monkeypatch, spans, r) for spans, r in ((first, 0), (other, 8), (other, 9)))
    job = len(rank0) + (RANKS_PER_NODE - 1) * len(rest) + (NODES - 1) * (len(local0) + (RANKS_PER_NODE - 1) * len(rest))
    assert job <= 8 * WORLD_SIZE, (strategy, files, len(rank0), len(local0), len(rest))
    opened = files or 5
    # Rank 0: every span, its files up to one a rank; a local rank 0: every span but 3 files a rank of its node.
    assert names(rank0) == names(s for s in first if s.name not in sc.FILE_SPANS) + Counter(
        {sc.SPAN_SAFETENSORS_OPEN: min(opened, WORLD_SIZE)}
    )
    assert names(local0) == names(s for s in other if s.name not in sc.FILE_SPANS) + Counter(
        {sc.SPAN_SAFETENSORS_OPEN: min(opened, 3 * RANKS_PER_NODE)}
    )
    # Every other rank: its startup and its load, each of its other spans folded into one of them, whole.
    assert names(rest) == Counter({sc.SPAN_STARTUP: 1, sc.SPAN_FROM_PRETRAINED: 1})
    folded = [sc.unfold_span(text) for span in rest for text in span.attributes.get(sc.FOLDED, ())]
    recorded = {s.span_id: s for s in other if s.name not in sc.FILE_SPANS | budget.EXPORTED_WHOLE}
    assert {f.span_id: (f.name, f.parent_span_id, f.start_ns, f.end_ns) for f in folded} == {
        i: (s.name, s.parent_span_id, s.start_ns, s.end_ns) for i, s in recorded.items()
    }
    for found in folded:
        assert found.attributes == recorded[found.span_id].attributes
    (load,) = [s for s in rest if s.name == sc.SPAN_FROM_PRETRAINED]
    assert load.attributes[sc.FILES_SUMMARIZED] == opened
    assert load.attributes[sc.LOAD_LAST_FILE_CLOSE] == max(s.end_ns for s in other if s.name in sc.FILE_SPANS)
    (recorded_load,) = [s for s in other if s.name == sc.SPAN_FROM_PRETRAINED]
    for key in (sc.READ_BYTES, sc.READ_TENSORS, sc.FILES_OPENED, sc.RSS_PEAK, sc.materialized_bytes_key("cpu")):
        assert load.attributes.get(key) == recorded_load.attributes.get(key), key


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_exported_span_names_a_parent_left_out(monkeypatch, strategy):
    """Within a rank, every exported span hangs from an exported span, or from the job's root (rank 0's)."""
    spans = rank_spans(STRATEGIES[strategy], 1)
    root = next(s.parent_span_id for s in spans if s.name == sc.SPAN_STARTUP)
    for rank in (8, 9):
        found = exported(monkeypatch, with_files(spans, 40), rank)
        ids = {s.context.span_id for s in found} | {int(root, 16)}
        assert all(s.parent.span_id in ids for s in found), rank


@pytest.mark.parametrize("settings, world", [({"detail": "full"}, WORLD_SIZE), ({}, 64)])
def test_every_span_comes_back(monkeypatch, settings, world):
    """``LOADTRACE_DETAIL=full`` in a 1,024-rank job, and any rank of a 64-rank job: every span, untouched."""
    spans = rank_spans(STRATEGIES["zero3"], 1)
    found = exported(monkeypatch, spans, 9, world, **settings)
    assert names(found) == names(spans)
    assert not any(sc.FOLDED in s.attributes or sc.FILES_SUMMARIZED in s.attributes for s in found)


def test_a_span_that_ends_after_the_one_it_folds_into_is_exported_where_it_hangs():
    """A rank stopped mid-way: a phase still open when its startup ended is exported as it is, hung from the startup,
    rather than lost; one that ended in time is folded."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(Budget([SimpleSpanProcessor(memory)], files_kept=0, folds=True))
    tracer = provider.get_tracer("test")
    startup = tracer.start_span(sc.SPAN_STARTUP)
    inside = trace.set_span_in_context(startup)
    prepare = tracer.start_span(sc.SPAN_ACCELERATE_PREPARE, context=inside)
    rendezvous = tracer.start_span(sc.SPAN_INIT_PROCESS_GROUP, context=inside)
    late = tracer.start_span(sc.SPAN_FSDP2_LOAD_FULL_STATE_DICT, context=trace.set_span_in_context(prepare))
    rendezvous.end()
    startup.end()
    late.end()
    prepare.end()
    by_name = {s.name: with_data(s) for s in memory.get_finished_spans()}
    assert set(by_name) == {sc.SPAN_STARTUP, sc.SPAN_FSDP2_LOAD_FULL_STATE_DICT, sc.SPAN_ACCELERATE_PREPARE}
    assert by_name[sc.SPAN_FSDP2_LOAD_FULL_STATE_DICT].parent.span_id == startup.get_span_context().span_id
    (folded,) = by_name[sc.SPAN_STARTUP].attributes[sc.FOLDED]
    assert sc.unfold_span(folded).name == sc.SPAN_INIT_PROCESS_GROUP


def test_a_file_span_past_its_loads_share_is_not_exported_and_the_rest_are():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(Budget([SimpleSpanProcessor(memory)], files_kept=1))
    tracer = provider.get_tracer("test")
    load = tracer.start_span(sc.SPAN_FROM_PRETRAINED)
    inside = trace.set_span_in_context(load)
    shown = tracer.start_span(sc.SPAN_SAFETENSORS_OPEN, context=inside)
    left = tracer.start_span(sc.SPAN_SAFETENSORS_OPEN, context=inside)
    shown.end()
    left.end(end_time=shown.end_time + 5)
    load.end()
    found = [with_data(span) for span in memory.get_finished_spans()]
    assert [s.context.span_id for s in found] == [shown.get_span_context().span_id, load.get_span_context().span_id]
    assert found[1].attributes[sc.FILES_SUMMARIZED] == 1
    assert found[1].attributes[sc.LOAD_LAST_FILE_CLOSE] == shown.end_time + 5
