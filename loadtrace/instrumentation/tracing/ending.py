"""How a scope's span ends: its ledger's sums become its attributes (attributes.py), then an error or the signal that
stopped it; the job's exception itself goes on unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import semconv
from ..counting import attributes
from ..counting.scope import Scope, ScopeKind
from ..counting.statemirror import StateMirror
from ..settings import Settings

if TYPE_CHECKING:
    from opentelemetry import trace

    from .provider import ProviderSource


class Ends:
    """Ends scopes through ``source.provider`` (made by then: a scope's span made it); the state file's record of each
    goes as it ends (statemirror.py)."""

    def __init__(self, settings: Settings, source: ProviderSource, state_file: StateMirror):
        self.settings = settings
        self.source = source
        self.state_file = state_file

    def record_error(self, span: trace.Span, error: BaseException) -> None:
        # The job's own exception, raised on unchanged. Its message can name files: kept only when paths may be shown.
        if not self.settings.redact_paths:
            span.record_exception(error)
        self.source.provider.set_error(span, type(error).__name__)

    def finish(
        self,
        scope: Scope,
        end_time: int | None = None,
        error: BaseException | None = None,
        extra: dict[str, Any] | None = None,
        signal_name: str | None = None,
    ) -> None:
        if scope.ended:
            return
        scope.ended = True
        self.state_file.release(scope)
        span = scope.span
        if scope.recording:
            if scope.kind is ScopeKind.LOAD:
                span.set_attributes(attributes.load_end(scope, extra or {}))
            elif scope.kind is ScopeKind.PHASE:
                span.set_attributes(attributes.phase_end(scope))
            elif scope.kind is ScopeKind.STAGE:
                span.set_attributes(attributes.stage_end(scope, extra or {}))
            else:
                span.set_attributes(attributes.file_end(scope))
            if error is not None:
                self.record_error(span, error)
                if scope.kind is ScopeKind.LOAD:
                    span.set_attribute(semconv.ERROR_TYPE, type(error).__name__)
            if signal_name is not None:
                span.set_attribute(semconv.EXIT_SIGNAL, signal_name)
                self.source.provider.set_error(span, signal_name)
        span.end(end_time=end_time)
        if scope.kind is ScopeKind.LOAD and not scope.nested:
            self.source.provider.note_load(getattr(span, "attributes", None))
            failed = type(error).__name__ if error is not None else signal_name
            measured = {semconv.STRATEGY: strategy_of(span), semconv.ERROR_TYPE: failed}
            self.source.provider.measure(semconv.METRIC_LOAD_DURATION, span, measured)


def strategy_of(span: trace.Span) -> Any:
    """The load's strategy, as its span says it (set at its start, or learnt later: loads.py)."""
    return (getattr(span, "attributes", None) or {}).get(semconv.STRATEGY)
