"""loadtrace: OpenTelemetry spans for distributed model loading.

Set ``LOADTRACE=1`` in a job's environment and nothing else, or call ``instrument()`` yourself. Importing this package
is cheap: OpenTelemetry and the hooks load only when tracing is turned on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__version__ = "0.1.0"
__all__ = ["instrument", "uninstrument", "traced_load", "__version__"]


def instrument(**kwargs: Any) -> None:
    """Hook the loading libraries (now, or when they are imported). Idempotent.

    ``tracer_provider=`` sends spans to your own provider instead of loadtrace's files / OTLP export.
    """
    from .instrumentor import LoadtraceInstrumentor

    instrumentor = LoadtraceInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:  # idempotent without BaseInstrumentor's warning
        instrumentor.instrument(**kwargs)


def uninstrument() -> None:
    """Remove every hook ``instrument()`` installed, exactly; flush what was traced. Idempotent."""
    from .instrumentor import LoadtraceInstrumentor

    instrumentor = LoadtraceInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


@contextmanager
def traced_load(name: str) -> Iterator[None]:
    """Trace your own loading code as one load: a ``loadtrace.load`` span (``semconv.SPAN_LOAD``) with the load totals.

    A no-op when loadtrace is not instrumented.
    """
    from . import semconv, spans

    tracing = spans.tracing()
    opened = None
    if tracing is not None:
        try:
            opened = tracing.start_load(semconv.SPAN_LOAD, {semconv.LOAD_NAME: name})
        except Exception:
            pass
    error: BaseException | None = None
    try:
        yield
    except BaseException as raised:
        error = raised
        raise
    finally:
        if tracing is not None and opened is not None:
            try:
                tracing.end_load(*opened, {}, error)
            except Exception:
                pass
