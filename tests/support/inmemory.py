"""In-process tracing for unit tests: loadtrace instrumented against an InMemorySpanExporter."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loadtrace
from loadtrace.instrumentation import settings


class Traced:
    def __init__(self, exporter: InMemorySpanExporter):
        self.exporter = exporter

    def spans(self, name: str | None = None):
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def one(self, name: str):
        found = self.spans(name)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]


@contextlib.contextmanager
def traced(**overrides):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    loadtrace.instrument(tracer_provider=provider, settings=replace(settings.Settings(enabled=True), **overrides))
    try:
        yield Traced(exporter)
    finally:
        loadtrace.uninstrument()
