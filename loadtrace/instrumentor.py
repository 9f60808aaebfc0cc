"""loadtrace as an OpenTelemetry instrumentation (``opentelemetry_instrumentor`` entry point ``loadtrace``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# That module says ``# type: ignore`` of itself, so mypy sees no names in it (and none where OTel is not installed).
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined, unused-ignore]

from . import settings as settings_module
from . import spans
from .hooks import all_hooks
from .hooks.registry import Registry


class LoadtraceInstrumentor(BaseInstrumentor):
    """Hooks safetensors, torch and transformers where they are installed; none is required.

    One per process (``BaseInstrumentor`` is a singleton), and the owner of this process's loadtrace state: the hook
    registry, kept for the process's life (wrapt keeps post-import hooks forever), and the ``spans.Tracing`` that
    the hooks read, made anew by each ``instrument()``.
    """

    _registry: Registry | None = None

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry(all_hooks())
        return self._registry

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        current = kwargs.get("settings") or settings_module.from_env()
        spans.set_tracing(spans.Tracing(current, kwargs.get("tracer_provider"), listener=self.registry))
        self.registry.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        self.registry.uninstall()
        tracing = spans.tracing()
        spans.set_tracing(None)
        if tracing is not None:
            tracing.shutdown()


def registry() -> Registry:
    """The process's hook registry (benchmarks take hooks out and put them back between loads)."""
    return LoadtraceInstrumentor().registry
