"""loadtrace as an OpenTelemetry instrumentation (``opentelemetry_instrumentor`` entry point ``loadtrace``).

The work is ``activation.instrument`` / ``uninstrument``, which ``loadtrace.instrument()`` and ``LOADTRACE=1`` use too
(without importing ``opentelemetry.instrumentation``: ~80 ms); this class only adapts them to ``BaseInstrumentor``.
"""

from __future__ import annotations

from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# That module says ``# type: ignore`` of itself, so mypy sees no names in it (and none where OTel is not installed).
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined, unused-ignore]

from .instrumentation import INSTRUMENTS, activation
from .instrumentation.activation import registry as registry
from .instrumentation.hooks.registry import Registry


class LoadtraceInstrumentor(BaseInstrumentor):
    """Hooks safetensors, torch and transformers where they are installed; none is required.

    One per process (``BaseInstrumentor`` is a singleton). Whether it is instrumented is the process's state, however
    it was instrumented (``loadtrace.instrument()``, ``LOADTRACE=1`` or this class).
    """

    @property  # type: ignore[misc, unused-ignore]
    def _is_instrumented_by_opentelemetry(self) -> bool:
        return activation.instrumented()

    @_is_instrumented_by_opentelemetry.setter
    def _is_instrumented_by_opentelemetry(self, value: bool) -> None:
        pass  # BaseInstrumentor sets it after (un)instrumenting: activation already knows

    @property
    def registry(self) -> Registry:
        return activation.registry()

    def instrumentation_dependencies(self) -> Collection[str]:
        """The tested releases (``INSTRUMENTS``) of the hooked libraries installed here. ``BaseInstrumentor.instrument``
        refuses where one is outside its range; it would refuse where one is missing too (a listed package that is not
        installed is a conflict to it), so the missing are left out: loadtrace hooks each library only where present.
        """
        return [f"{name} {releases}" for name, releases in INSTRUMENTS.items() if installed(name)]

    def _instrument(self, **kwargs: Any) -> None:
        activation.instrument(kwargs.get("settings"), kwargs.get("tracer_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        activation.uninstrument()


def installed(distribution: str) -> bool:
    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True
