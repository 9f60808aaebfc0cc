"""The spans a dead worker had open, ended by the launcher's witness in their place.

A span leaves a process only when it ends: a rank SIGKILLed mid-load never writes its startup, load or phase span, and
the spans that did finish under them (``torch.init_process_group``, a phase that ended before the kill) would point at
a parent that is not in the trace (Jaeger draws them as a second root). The rank's state file keeps its open non-file
scopes (statefile.py); the witness ends each at the death, with status ERROR and ``loadtrace.exit.source=launcher``,
under its own span id, parent and start time, so every span's parent is in the trace. The report leaves these spans
out of every number, as it leaves out ``loadtrace.rank_exit``: what the rank did is in its state file. Only the
startup span's length counts: it is the dead rank's startup (analysis/startup.py).
"""

from __future__ import annotations

from typing import Any

from ... import semconv, statefile
from ...version import __version__


def open_scope_spans(
    state: statefile.State, resource: dict[str, Any], attributes: dict[str, Any], description: str, end_ns: int
) -> list[Any]:
    """One ended span (an OTel SDK ``ReadableSpan``) per scope the state says was open; ``attributes``: how the rank
    ended (signal or exit code, ``loadtrace.exit.source``)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    flags = TraceFlags(TraceFlags.SAMPLED)
    made = Resource(resource)
    scope = InstrumentationScope(semconv.SCOPE_NAME, __version__)
    spans = []
    for found in state.open_scopes:
        parent = SpanContext(found.trace_id, found.parent_span_id, is_remote=True, trace_flags=flags)
        spans.append(
            ReadableSpan(
                found.name,
                context=SpanContext(found.trace_id, found.span_id, is_remote=False, trace_flags=flags),
                parent=parent if found.parent_span_id else None,
                resource=made,
                attributes=dict(attributes),
                kind=SpanKind.INTERNAL,
                start_time=min(found.start_ns, end_ns),
                end_time=end_ns,
                status=Status(StatusCode.ERROR, description),
                instrumentation_scope=scope,
            )
        )
    return spans


def ended_by_launcher(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a span the witness ended: how the rank ended, and who said so."""
    keep = (semconv.EXIT_SIGNAL, semconv.EXIT_CODE, semconv.EXIT_OOM_KILLED, semconv.EXIT_SOURCE)
    return {key: attributes[key] for key in keep if key in attributes}
