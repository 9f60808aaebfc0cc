"""loadtrace as an OpenTelemetry instrumentation (``opentelemetry_instrumentor`` entry point ``loadtrace``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from . import settings as settings_module
from . import spans
from .hooks import Registry, all_hooks

_registry: Registry | None = None


def registry() -> Registry:
    global _registry
    if _registry is None:
        _registry = Registry(all_hooks())
    return _registry


class LoadtraceInstrumentor(BaseInstrumentor):
    """Hooks safetensors, torch and transformers where they are installed; none is required."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        current = kwargs.get("settings") or settings_module.from_env()
        tracing = spans.Tracing(current, kwargs.get("tracer_provider"))
        tracing.load_listeners = (registry().load_opened, registry().load_closed)
        spans.set_tracing(tracing)
        registry().install()

    def _uninstrument(self, **kwargs: Any) -> None:
        registry().uninstall()
        tracing = spans.tracing()
        spans.set_tracing(None)
        if tracing is not None:
            tracing.shutdown()
