"""A loading rank's progress as OpenTelemetry metrics over OTLP: for fleets without a shared filesystem to run
``loadtrace top`` over.

Built by the monitor thread at the first sample of a load (progress.py), never on the loading thread, and only with an
OTLP endpoint: a process that never loads imports none of this. The metrics SDK's periodic reader collects every
``LOADTRACE_PROGRESS_INTERVAL`` seconds in its own thread; each instrument is observed from the state file
(statefile.py), so nothing is recorded per tensor. Outside a load the callbacks observe nothing, and the SDK then sends
nothing. The Resource is the traces' (job and rank on it, as the OTel conventions put them); the only data-point
attribute is the phase's span name, a few dozen values at most.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter, PeriodicExportingMetricReader

from ... import semconv, statefile
from ...version import __version__
from ..settings import Settings

TRACES_PATH, METRICS_PATH = "/v1/traces", "/v1/metrics"


def exporter(settings: Settings, temporality: dict[type, AggregationTemporality] | None = None) -> MetricExporter:
    """OTel's OTLP metric exporter for the traces' protocol. It reads ``OTEL_EXPORTER_OTLP_*`` itself; where only the
    traces' endpoint is set, the metrics go to the same collector. ``temporality``: by instrument class, where it must
    not be the exporter's default (the startup histograms' delta: startup_metrics.py)."""
    endpoint = None
    if not (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        endpoint = settings.otlp_endpoint
        if endpoint and settings.otlp_protocol != "grpc" and endpoint.rstrip("/").endswith(TRACES_PATH):
            endpoint = endpoint.rstrip("/").removesuffix(TRACES_PATH) + METRICS_PATH
    if settings.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

        return Grpc(endpoint=endpoint, preferred_temporality=temporality)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

    return Http(endpoint=endpoint, preferred_temporality=temporality)


class ProgressMetrics:
    def __init__(self, settings: Settings, resource: Any, state: statefile.Writer):
        self._state = state
        interval_ms = max(1.0, settings.progress_interval_s * 1000)
        reader = PeriodicExportingMetricReader(exporter(settings), export_interval_millis=interval_ms)
        self._provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
        meter = self._provider.get_meter(semconv.SCOPE_NAME, __version__)
        gauge = meter.create_observable_gauge
        gauge(semconv.METRIC_READ_BYTES, [self._read_bytes], unit="By", description="tensor bytes read by the load")
        gauge(semconv.METRIC_EXPECTED_BYTES, [self._expected], unit="By", description="the checkpoint's tensor bytes")
        gauge(semconv.METRIC_FILES_OPENED, [self._files], unit="{file}", description="files the load opened")
        gauge(semconv.METRIC_PHASE, [self._phase], unit="1", description="1 for the phase open now")
        gauge(semconv.METRIC_MEMORY_LIMIT, [self._limit], unit="By", description="the memory limit that applies")
        meter.create_observable_up_down_counter(
            semconv.METRIC_MEMORY_USAGE, [self._rss], unit="By", description="resident memory (VmRSS)"
        )

    def _loading(self) -> bool:
        return self._state["status"] == statefile.STATUS_LOADING

    def _one(self, value: int, attributes: dict[str, str] | None = None) -> Iterable[Observation]:
        return [Observation(value, attributes)] if self._loading() else []

    def _read_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._one(self._state.open_load_reads()[1])

    def _expected(self, options: CallbackOptions) -> Iterable[Observation]:
        expected = self._state["checkpoint_tensor_bytes"]
        return self._one(expected) if expected > 0 else []

    def _files(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._one(self._state["files_opened"] - self._state["load_files_opened"])

    def _phase(self, options: CallbackOptions) -> Iterable[Observation]:
        phase = self._state.text("phase") or self._state.text("load")
        return self._one(1, {semconv.METRIC_PHASE_ATTRIBUTE: phase}) if phase else []

    def _limit(self, options: CallbackOptions) -> Iterable[Observation]:
        limit = self._state["memory_limit"]
        return self._one(limit) if limit > 0 else []

    def _rss(self, options: CallbackOptions) -> Iterable[Observation]:
        rss = self._state.live("rss_now")
        return self._one(rss) if rss > 0 else []

    def shutdown(self, timeout_s: float) -> None:
        self._provider.shutdown(timeout_millis=max(1.0, timeout_s * 1000))
