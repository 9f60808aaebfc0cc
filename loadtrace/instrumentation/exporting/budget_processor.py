"""The span budget applied as spans end (budget.py says which spans a rank exports, and why): the span processor in
front of this process's exporters. The startup's phase recorder sits beside it, not behind it, so it still sees every
span.

Each span is judged when it starts, by its name and what it hangs from: a file span past what its load may export is
left out (its load then says how many were, ``loadtrace.files.summarized``, and when its last file closed); on a rank
that folds, any span but its startup and loads is folded into the nearest exported span above it (``loadtrace.folded``,
``semconv.fold_span``) when it ends. An exported span hangs from the nearest exported span above it, so no span in the
trace names a parent that is not there. A folded span that ends after the span it would go into (a rank stopped
mid-way) is exported as it is instead, hung the same way: nothing it measured is lost.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanContext, StatusCode

from ... import semconv
from .budget import EXPORTED_WHOLE


class _Seen:
    """What the budget knows of a span it saw start: where it hangs, its load, what it does with it."""

    __slots__ = (
        "name",
        "context",
        "above",
        "load",
        "exported",
        "left_out",
        "files",
        "summarized",
        "last_close",
        "folded",
    )

    def __init__(self, name: str, context: SpanContext, above: SpanContext | None, load: _Seen | None) -> None:
        self.name = name
        self.context = context
        self.above = above  # the nearest exported span above it (or the remote parent it names): where it hangs
        self.load = load  # the load it belongs to (its nearest load above it)
        self.exported = True
        self.left_out = False
        self.files = 0  # loads: file spans started inside it,
        self.summarized = 0  # of them left out,
        self.last_close = 0  # and when the last of them ended
        self.folded: list[str] = []  # exported spans: the spans folded into it

    def hangs_here(self) -> SpanContext | None:
        """Where a span started under this one hangs: this one when it is exported, else where this one hangs."""
        return self.context if self.exported else self.above


class Budget(SpanProcessor):
    """``files_kept``: the file spans of each load this rank exports (None: all); ``folds``: it exports only
    ``budget.EXPORTED_WHOLE`` spans. With neither, every span goes through untouched."""

    def __init__(self, processors: list[SpanProcessor], files_kept: int | None = None, folds: bool = False):
        self.processors = processors
        self.files_kept = files_kept
        self.folds = folds
        self.active = files_kept is not None or folds
        self._seen: dict[int, _Seen] = {}  # open spans, and folded ones (ended) that a late child may hang below
        self._lock = threading.Lock()  # spans start and end in the job's worker threads too

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.active:
            with self._lock:
                self._judge(span)
        for processor in self.processors:
            processor.on_start(span, parent_context=parent_context)

    def _judge(self, span: Any) -> None:
        parent: SpanContext | None = span.parent
        up = self._seen.get(parent.span_id) if parent is not None else None
        load = up if up is not None and up.name in semconv.LOAD_SPANS else (up.load if up is not None else None)
        seen = _Seen(span.name, span.context, up.hangs_here() if up is not None else parent, load)
        if span.name in semconv.FILE_SPANS and load is not None:
            load.files += 1
            if self.files_kept is not None and load.files > self.files_kept:
                seen.left_out, seen.exported = True, False
                load.summarized += 1
        if self.folds and span.name not in EXPORTED_WHOLE:
            seen.exported = False
        self._seen[span.context.span_id] = seen

    def on_end(self, span: ReadableSpan) -> None:
        if self.active and span.context is not None:
            with self._lock:
                ended = self._end(span)
            if ended is None:
                return
            span = ended
        span = _data_in_event(span)
        for processor in self.processors:
            processor.on_end(span)

    def _end(self, span: ReadableSpan) -> ReadableSpan | None:
        """The span to export in its place; None when it is left out or folded."""
        seen = self._seen.pop(span.context.span_id, None)
        if seen is None:
            return span
        if seen.load is not None and span.name in semconv.FILE_SPANS:
            seen.load.last_close = max(seen.load.last_close, span.end_time or 0)
        if seen.left_out:
            return None
        if not seen.exported:
            self._seen[span.context.span_id] = seen  # a span that starts under it later still hangs where it did
            into = self._seen.get(seen.above.span_id) if seen.above is not None else None
            if into is not None and into.exported:  # the span it goes into is still open: exported ones leave at end
                into.folded.append(_folded(span))
                return None
        extra: dict[str, Any] = {}
        if seen.summarized:
            extra[semconv.FILES_SUMMARIZED] = seen.summarized
            extra[semconv.LOAD_LAST_FILE_CLOSE] = seen.last_close
        if seen.folded:
            extra[semconv.FOLDED] = tuple(seen.folded)
        parent = span.parent
        if parent is not None and seen.above is not None and seen.above.span_id != parent.span_id:
            parent = seen.above
        return span if not extra and parent is span.parent else _copy(span, parent, extra)

    def shutdown(self) -> None:
        for processor in self.processors:
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(processor.force_flush(timeout_millis) for processor in self.processors)


def _folded(span: ReadableSpan) -> str:
    parent = span.parent.span_id if span.parent is not None else None
    times = (span.start_time or 0, span.end_time or 0)
    error = span.status.status_code is StatusCode.ERROR
    return semconv.fold_span(span.name, span.context.span_id, parent, times, error, span.attributes or {})


def _data_in_event(span: ReadableSpan) -> ReadableSpan:
    """The span with its values for machines (``semconv.DATA_KEYS``) on one ``DATA_EVENT`` at its end instead of among
    its attributes, which Jaeger's UI lists for a person (the analysis reads them back as the span's own)."""
    attributes = span.attributes or {}
    if not any(key in semconv.DATA_KEYS for key in attributes):
        return span
    data = {key: value for key, value in attributes.items() if key in semconv.DATA_KEYS}
    kept = {key: value for key, value in attributes.items() if key not in semconv.DATA_KEYS}
    event = Event(semconv.DATA_EVENT, attributes=data, timestamp=span.end_time)
    return _copy(span, span.parent, {}, kept, (*span.events, event))


def _copy(
    span: ReadableSpan,
    parent: SpanContext | None,
    extra: dict[str, Any],
    attributes: Any = None,
    events: Any = None,
) -> ReadableSpan:
    """The span as exported: hung from ``parent``, with ``extra`` attributes (over ``attributes``: the span's own by
    default), and ``events`` (the span's own by default)."""
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=parent,
        resource=span.resource,
        attributes={**(span.attributes or {} if attributes is None else attributes), **extra},
        events=span.events if events is None else events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
