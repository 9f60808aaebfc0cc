"""The split of the rank's startup into phases, carried by its ``loadtrace.startup`` span
(``loadtrace.startup.phases``): a store that holds the spans (ClickHouse, the fleet dashboard) then reads a rank's split
from its one startup row instead of from all of its spans.

A span processor keeps, while the startup lasts, the few spans the split looks at (``startup_split.SPLIT_SPANS``:
loads, files, reads, conversions, the strategy's phases); when the startup ends, ``startup_split.split`` (the
definition ``loadtrace report`` applies to the same spans) runs over them. A span still open then counts up to the
startup's end, as the report clips it there.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from ... import semconv
from ...startup_split import SPLIT_SPANS, STARTUP_PHASES, PhaseSpan, split
from .._log import warn_once

_KEPT = SPLIT_SPANS - {semconv.SPAN_STARTUP}  # the startup span itself is given when it ends
# A startup that never ends (a preparation awaited until exit) while a process loads again and again: past this many
# kept spans the split is left out (the report still computes it from the spans) rather than memory growing.
MAX_KEPT = 100_000


def _phase_span(span: ReadableSpan, end_ns: int) -> PhaseSpan:
    parent = span.parent.span_id if span.parent is not None else None
    # Only a load's attributes are read (its first file's open): no other span's are kept alive.
    kept = (span.attributes or {}) if span.name in semconv.LOAD_SPANS else {}
    return PhaseSpan(span.name, span.start_time or 0, end_ns, span.context.span_id, parent, kept)


class PhaseRecorder(SpanProcessor):
    def __init__(self) -> None:
        self.recording = True
        self._lock = threading.RLock()  # a termination signal may end the startup while this thread holds it
        self._open: dict[int, ReadableSpan] = {}
        self._ended: dict[int, list[PhaseSpan]] = {}  # by trace id
        self._kept = 0
        os.register_at_fork(after_in_child=self.stop)  # a forked child's startup is its parent's

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.recording and span.name in _KEPT:
            self._open[span.context.span_id] = span

    def on_end(self, span: ReadableSpan) -> None:
        if self.recording and span.name in _KEPT:
            with self._lock:  # from open to ended at once: ``split`` sees it in one or the other
                self._open.pop(span.context.span_id, None)
                self._ended.setdefault(span.context.trace_id, []).append(_phase_span(span, span.end_time or 0))
                self._kept += 1
                if self._kept > MAX_KEPT:
                    self.stop()

    def split(self, startup: Any, end_ns: int, imports: list[int] | None) -> list[int] | None:
        """Nanoseconds per phase (``STARTUP_PHASES`` order) of the startup span about to end at ``end_ns``; None when
        it cannot be said (an error, or more spans than ``MAX_KEPT``). Its trace's spans are then forgotten."""
        if not self.recording:
            return None
        try:
            trace_id, start = startup.context.trace_id, startup.start_time or 0
            with self._lock:
                spans = self._ended.pop(trace_id, [])
                self._kept -= len(spans)  # forgotten now: no longer counted against MAX_KEPT
                still_open = [s for s in list(self._open.values()) if s.context.trace_id == trace_id]
            spans += [_phase_span(s, min(end_ns, s.end_time or end_ns)) for s in still_open]
            attributes = {semconv.STARTUP_IMPORTS: imports} if imports else {}
            spans.append(PhaseSpan(semconv.SPAN_STARTUP, start, end_ns, startup.context.span_id, None, attributes))
            found = split((start, end_ns), spans)
            return [found[phase] for phase in STARTUP_PHASES]
        except Exception as error:  # the split is a courtesy to the store; the startup span goes out without it
            warn_once("startup-split", f"the startup's phase split is left out: {type(error).__name__}: {error}")
            return None

    def stop(self) -> None:
        """The startup is over for good (or too long to keep): nothing more is kept."""
        self.recording = False
        self._open, self._ended, self._kept = {}, {}, 0

    def shutdown(self) -> None:
        self.stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
