"""A recorded rank's spans made again, in-process, through the OpenTelemetry SDK and loadtrace's span budget.

``replay`` starts and ends each recorded span again with its own ids, parent, times, attributes and status, in the
order they started and ended, so a span processor sees what it saw in the rank's process. ``as_rank`` builds the
budget's processor as the provider does, for the rank the launcher's variables name (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``). Together they pose a recorded rank of a 2-rank job as any rank of a 1,024-rank
job: what that rank would export, from the spans a real job made.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from loadtrace import semconv as sc
from loadtrace.analysis.sources import Span, read_files
from loadtrace.instrumentation import context
from loadtrace.instrumentation.exporting import budget, export
from loadtrace.instrumentation.exporting.budget_processor import Budget
from loadtrace.instrumentation.settings import Settings

WORLD_SIZE, RANKS_PER_NODE = 1024, 8


class _Recorded(IdGenerator):
    """Hands out the recorded ids: set before each span starts."""

    span_id = trace_id = 0

    def generate_span_id(self) -> int:
        return self.span_id

    def generate_trace_id(self) -> int:
        return self.trace_id


def rank_spans(folder: Path, rank: int) -> list[Span]:
    return [s for s in read_files(folder).spans if s.resource.get(sc.RANK) == rank]


def _depth(span: Span, by_id: dict[str, Span]) -> int:
    depth, seen = 0, span
    while seen.parent_span_id in by_id and depth < 64:
        seen, depth = by_id[seen.parent_span_id], depth + 1
    return depth


def replay(spans: list[Span], processor: SpanProcessor) -> None:
    """Each span started and ended again (ties: a parent starts first and ends last) through ``processor``."""
    by_id = {s.span_id: s for s in spans}
    ids = _Recorded()
    provider = TracerProvider(resource=Resource(spans[0].resource), id_generator=ids, shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer(sc.SCOPE_NAME)
    events = [(s.start_ns, 0, _depth(s, by_id), s) for s in spans]
    events += [(s.end_ns, 1, -_depth(s, by_id), s) for s in spans]
    live: dict[str, trace.Span] = {}
    for _, ending, _, recorded in sorted(events, key=lambda e: e[:3]):
        if ending:
            made = live[recorded.span_id]
            if recorded.status_code == 2:
                made.set_status(Status(StatusCode.ERROR))
            made.end(end_time=recorded.end_ns)
            continue
        ids.span_id, ids.trace_id = int(recorded.span_id, 16), int(recorded.trace_id, 16)
        parent = otel_context.Context()
        if recorded.parent_span_id in live:
            parent = trace.set_span_in_context(live[recorded.parent_span_id])
        elif recorded.parent_span_id:
            remote = SpanContext(ids.trace_id, int(recorded.parent_span_id, 16), True, TraceFlags(1))
            parent = trace.set_span_in_context(NonRecordingSpan(remote))
        live[recorded.span_id] = tracer.start_span(
            recorded.name, context=parent, attributes=recorded.attributes, start_time=recorded.start_ns
        )
    provider.shutdown()  # its exporters' files closed


def as_rank(
    monkeypatch: pytest.MonkeyPatch,
    rank: int,
    processors: list[SpanProcessor],
    world: int = WORLD_SIZE,
    **settings: str,
) -> Budget:
    """The budget's processor in front of ``processors`` as the provider builds it for ``rank`` of a job of ``world``
    ranks, 8 a node."""
    for name, value in (
        ("RANK", rank),
        ("LOCAL_RANK", rank % RANKS_PER_NODE),
        ("WORLD_SIZE", world),
        ("LOCAL_WORLD_SIZE", RANKS_PER_NODE),
        ("GROUP_RANK", rank // RANKS_PER_NODE),
    ):
        monkeypatch.setenv(name, str(value))
    who, rule = context.current_rank(), Settings(enabled=True, **settings)  # type: ignore[arg-type]
    return Budget(processors, budget.file_spans_kept(rule, who), budget.folds(rule, who))


def exported(
    monkeypatch: pytest.MonkeyPatch, spans: list[Span], rank: int, world: int = WORLD_SIZE, **settings: str
) -> list:
    """What ``rank`` of a job of ``world`` ranks exports of ``spans`` (the SDK's finished spans)."""
    memory = InMemorySpanExporter()
    replay(spans, as_rank(monkeypatch, rank, [SimpleSpanProcessor(memory)], world, **settings))
    return [with_data(span) for span in memory.get_finished_spans()]


def with_data(span: ReadableSpan) -> ReadableSpan:
    """An exported span as the analysis reads it: its ``DATA_EVENT``'s attributes among its own (that event gone)."""
    data = [event for event in span.events if event.name == sc.DATA_EVENT]
    if not data:
        return span
    attributes = {**(span.attributes or {}), **{k: v for event in data for k, v in (event.attributes or {}).items()}}
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=[event for event in span.events if event.name != sc.DATA_EVENT],
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def write(monkeypatch: pytest.MonkeyPatch, spans: list[Span], rank: int, path: Path) -> None:
    """What ``rank`` of the big job exports of ``spans``, written to the trace file ``path`` as a rank writes it."""
    replay(spans, as_rank(monkeypatch, rank, [export.WriteAsItEnds(export.JsonLinesExporter(str(path)))]))


def with_files(spans: list[Span], files: int) -> list[Span]:
    """``spans`` with each load's file spans repeated (new ids, the same times) until there are ``files`` of them."""
    fresh: Iterator[int] = itertools.count(1 << 60)
    out = [s for s in spans if s.name not in sc.FILE_SPANS]
    recorded = [s for s in spans if s.name in sc.FILE_SPANS]
    for index in range(files):
        copy = recorded[index % len(recorded)]
        out.append(copy if index < len(recorded) else dataclasses.replace(copy, span_id=f"{next(fresh):016x}"))
    return out
