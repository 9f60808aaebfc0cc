"""Each rank's startup and load durations as OpenTelemetry histograms over OTLP (issue 35): the fleet's startup p50/p95
by cluster in Prometheus, with an exemplar that links a bucket to the trace of a startup that fell in it.

With an OTLP endpoint, a rank records ``loadtrace.startup.duration`` when its startup ends and
``loadtrace.load.duration`` when an outermost load ends, each its span's own start to end. The measurement is made in
the span's context, so the SDK's exemplar filter (``OTEL_METRICS_EXEMPLAR_FILTER``, ``trace_based`` by default) keeps
the trace and span id beside it. Attributes have a few values each (the cluster, strategy, how the startup ended, the
error type), never the job, trace, rank or process, and the MeterProvider is this module's own, with a Resource that
names the service alone (not the traces', which names the rank): a fleet makes one series per attribute combination.
Each process sends its few measurements once, as deltas; the collector's ``deltatocumulative`` processor adds every
rank's into the fleet's series (exporters/collector-fleet.yaml).

The job's thread only queues a measurement: the metrics SDK is imported, built and exported in a thread of ours, and
what is left at exit or at a termination signal goes within the process's bounded flush (provider.py). A failure is
said once and costs the job nothing else.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ... import semconv
from ...version import __version__
from .. import importing
from .._log import warn_once
from ..settings import Settings

# Bucket bounds in seconds (an advisory the SDK applies): startups of a few seconds to an hour, loads from 0.1 s.
STARTUP_BUCKETS_S = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0)
LOAD_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)
HISTOGRAMS = {
    semconv.METRIC_STARTUP_DURATION: ("the rank's startup, from its process's start", STARTUP_BUCKETS_S),
    semconv.METRIC_LOAD_DURATION: ("an outermost load: from_pretrained, a DCP load, a traced_load", LOAD_BUCKETS_S),
}
SEND_TIMEOUT_S = 10.0  # a background send: off the job's threads, so the exporter's own timeout may run its course

Measurement = tuple[str, float, dict[str, Any], Any]  # (histogram, seconds, attributes, span)


class StartupMetrics:
    """``service_name()``: the traces' service name, the one identity these metrics carry."""

    def __init__(self, settings: Settings, service_name: Callable[[], str]):
        self._settings = settings
        self._service_name = service_name
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()
        self._pending: list[Measurement] = []
        self._sender: threading.Thread | None = None
        self._built: tuple[Any, dict[str, Any]] | None = None
        self._off = False

    def record(self, name: str, span: Any, attributes: dict[str, Any]) -> None:
        """Queue the span's duration under ``name`` and have it sent (any thread; never raises). A span without its
        times (not our SDK's, or not ended) is skipped."""
        try:
            start, end = getattr(span, "start_time", None), getattr(span, "end_time", None)
            if self._off or start is None or end is None or end < start:
                return
            attributes = {key: value for key, value in attributes.items() if value is not None}
            if self._settings.cluster:
                attributes[semconv.CLUSTER] = self._settings.cluster
            with self._lock:
                self._pending.append((name, (end - start) / 1e9, attributes, span))
                if self._sender is None or not self._sender.is_alive():
                    self._sender = threading.Thread(target=self._send, name="loadtrace-startup-metrics", daemon=True)
                    self._sender.start()
        except Exception as error:
            self._fail(error)

    def _send(self) -> None:
        try:
            self._export(SEND_TIMEOUT_S)
        except Exception as error:
            self._fail(error)

    def _export(self, timeout_s: float) -> None:
        """Record what is queued into the SDK (built at the first call) and export it, one caller at a time: one that
        waits past ``timeout_s`` for another's export leaves its measurements queued."""
        if not self._export_lock.acquire(timeout=timeout_s):
            return
        try:
            with self._lock:
                pending, self._pending = self._pending, []
            if not pending or self._off:
                return
            provider, histograms = self._sdk()
            from opentelemetry import trace

            for name, seconds, attributes, span in pending:
                histograms[name].record(seconds, attributes, context=trace.set_span_in_context(span))
            provider.force_flush(max(1.0, timeout_s * 1000))
        finally:
            self._export_lock.release()

    def _sdk(self) -> tuple[Any, dict[str, Any]]:
        if self._built is None:
            with importing():
                from opentelemetry.sdk.metrics import Histogram, MeterProvider
                from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.version import __version__ as sdk_version

                from .progress_metrics import exporter

            # No periodic thread: each send exports now, and only what was recorded since (delta).
            delta: dict[type, AggregationTemporality] = {Histogram: AggregationTemporality.DELTA}
            reader = PeriodicExportingMetricReader(exporter(self._settings, delta), export_interval_millis=math.inf)
            resource = Resource(
                {
                    semconv.SERVICE_NAME: self._service_name(),
                    "telemetry.sdk.language": "python",
                    "telemetry.sdk.name": "opentelemetry",
                    "telemetry.sdk.version": sdk_version,
                }
            )
            provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
            meter = provider.get_meter(semconv.SCOPE_NAME, __version__)
            histograms = {
                name: meter.create_histogram(
                    name, unit="s", description=description, explicit_bucket_boundaries_advisory=buckets
                )
                for name, (description, buckets) in HISTOGRAMS.items()
            }
            self._built = (provider, histograms)
        return self._built

    def flush(self, timeout_s: float) -> bool:
        """Send what is queued within ``timeout_s`` (a termination signal, the exit: the caller bounds the wait):
        whether no export is still under way."""
        deadline = time.monotonic() + timeout_s
        sender = self._sender
        if sender is not None:
            sender.join(max(0.0, deadline - time.monotonic()))
            if sender.is_alive():
                return False  # a collector that does not answer: what is queued waits no longer
        if self._pending:
            self._export(max(0.0, deadline - time.monotonic()))
        return True

    def shutdown(self, timeout_s: float) -> None:
        """Flush, then close the exporter, unless an export is still waiting on the collector: closing a channel
        under it can hold the exit (gRPC); the process ends it anyway."""
        deadline = time.monotonic() + timeout_s
        if self.flush(timeout_s) and self._built is not None:
            self._built[0].shutdown(timeout_millis=max(1.0, (deadline - time.monotonic()) * 1000))

    def _fail(self, error: Exception) -> None:
        self._off = True
        warn_once("startup-metrics", f"cannot export startup metrics ({type(error).__name__}: {error})")
