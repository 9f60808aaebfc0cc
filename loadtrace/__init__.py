"""loadtrace: OpenTelemetry spans for distributed model loading.

Set ``LOADTRACE=1`` in a job's environment and nothing else, or call ``instrument()`` yourself. Importing this package
is cheap (it runs in every process of a traced job): the hooks load with the first hooked library, OpenTelemetry at
the first span.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

__all__ = ["instrument", "uninstrument", "traced_load", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read when asked: the processes ``LOADTRACE=1`` reaches import no module for it
        from .version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def instrument(**kwargs: Any) -> None:
    """Hook the loading libraries (now, or when they are imported). Idempotent.

    ``tracer_provider=`` sends spans to your own provider instead of loadtrace's files / OTLP export.
    """
    from .instrumentation import activation

    activation.instrument(kwargs.get("settings"), kwargs.get("tracer_provider"))


def uninstrument() -> None:
    """Remove every hook ``instrument()`` installed, exactly; flush what was traced. Idempotent."""
    from .instrumentation import activation

    activation.uninstrument()


class traced_load:  # noqa: N801 - used as a function: ``with loadtrace.traced_load(name):``
    """Trace your own loading code as one load: a ``loadtrace.load`` span (``semconv.SPAN_LOAD``) with the load totals.

    A no-op when loadtrace is not instrumented.
    """

    def __init__(self, name: str):
        self.name = name
        self._tracing: Any = None
        self._opened: Any = None

    def __enter__(self) -> None:
        from . import semconv
        from .instrumentation.tracing import spans

        self._tracing = tracing = spans.tracing()
        if tracing is not None:
            try:
                self._opened = tracing.start_load(semconv.SPAN_LOAD, {semconv.LOAD_NAME: self.name})
            except Exception:
                pass

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._tracing is not None and self._opened is not None:
            try:
                self._tracing.end_load(*self._opened, {}, error)
            except Exception:
                pass
