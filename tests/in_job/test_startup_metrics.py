"""Promise: with an OTLP endpoint, each rank's startup and each outermost load become one measurement of the histograms
``loadtrace.startup.duration`` and ``loadtrace.load.duration`` (seconds, the span's own duration to the nanosecond),
sent as deltas with an exemplar naming the span's trace and span, and attributes of a few values only: no job, trace,
rank or process in them or in their Resource. The job's thread never waits for the collector: a collector that never
answers, or refuses, costs one line at most. In process, against this test's own OTLP/HTTP receiver; the 2-rank job
on the wire is tests/e2e/test_wire_otlp.py's."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from support.inmemory import traced

import loadtrace
from loadtrace import semconv
from loadtrace.instrumentation.exporting.startup_metrics import LOAD_BUCKETS_S, STARTUP_BUCKETS_S
from loadtrace.instrumentation.tracing import spans

DELTA = 1  # AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA in the proto


@pytest.fixture(autouse=True)
def endpoint(monkeypatch):
    """The exporter reads the OTLP endpoint from the environment, as in a job (``traced`` gives the settings)."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", raising=False)

    def set_to(receiver: Receiver) -> str:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        return receiver.url

    return set_to


class Receiver(ThreadingHTTPServer):
    """POST /v1/metrics answered with ``status`` after ``delay_s``; what arrived, decoded."""

    daemon_threads = True

    def __init__(self, status: int = 200, delay_s: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.status, self.delay_s = status, delay_s
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.server.delay_s)
        if self.path == "/v1/metrics" and self.server.status == 200:
            self.server.requests.append(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def plain(attributes) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in attributes}


def histograms(requests) -> dict[str, list]:
    """metric name → [(resource, metric, data point)]."""
    found: dict[str, list] = {}
    for request in requests:
        for resource_metrics in request.resource_metrics:
            resource = plain(resource_metrics.resource.attributes)
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.histogram.data_points:
                        found.setdefault(metric.name, []).append((resource, metric, point))
    return found


def flush(timeout_s: float = 10.0) -> None:
    provider = spans.tracing()._provider
    provider.startup_metrics.flush(timeout_s)


def test_a_startup_and_its_load_are_one_measurement_each_with_an_exemplar_of_their_span(endpoint):
    receiver = Receiver()
    with traced(otlp_endpoint=endpoint(receiver), cluster="eu-1") as spans_:
        with loadtrace.traced_load("outer"):
            with loadtrace.traced_load("inner"):  # nested: its time is the outer load's, not a second load
                pass
        flush()
        startup, load = spans_.one(semconv.SPAN_STARTUP), spans_.spans(semconv.SPAN_LOAD)
    receiver.shutdown()
    outer = next(span for span in load if span.attributes[semconv.LOAD_NAME] == "outer")
    found = histograms(receiver.requests)
    assert set(found) == {semconv.METRIC_STARTUP_DURATION, semconv.METRIC_LOAD_DURATION}
    for name, span, buckets in (
        (semconv.METRIC_STARTUP_DURATION, startup, STARTUP_BUCKETS_S),
        (semconv.METRIC_LOAD_DURATION, outer, LOAD_BUCKETS_S),
    ):
        ((resource, metric, point),) = found[name]
        assert metric.unit == "s" and metric.histogram.aggregation_temporality == DELTA
        assert set(resource) == {"service.name", *(f"telemetry.sdk.{key}" for key in ("language", "name", "version"))}
        assert resource["service.name"] == semconv.DEFAULT_SERVICE_NAME
        assert point.count == 1 and point.sum == (span.end_time - span.start_time) / 1e9
        assert list(point.explicit_bounds) == list(buckets)
        (exemplar,) = point.exemplars
        assert exemplar.trace_id.hex() == format(span.context.trace_id, "032x")
        assert exemplar.span_id.hex() == format(span.context.span_id, "016x")
        assert exemplar.as_double == point.sum
    ((_, _, startup_point),) = found[semconv.METRIC_STARTUP_DURATION]
    ((_, _, load_point),) = found[semconv.METRIC_LOAD_DURATION]
    assert plain(startup_point.attributes) == {
        semconv.CLUSTER: "eu-1",
        semconv.STARTUP_END: semconv.STARTUP_END_LOAD,
    }, "traced_load has no strategy: absent, not empty"
    assert plain(load_point.attributes) == {semconv.CLUSTER: "eu-1"}


def test_a_failed_load_says_its_error_type_and_nothing_else_of_it(endpoint):
    receiver = Receiver()
    with traced(otlp_endpoint=endpoint(receiver)) as _:
        with pytest.raises(FileNotFoundError), loadtrace.traced_load("missing"):
            raise FileNotFoundError("/secret/path/model.safetensors")
        flush()
    receiver.shutdown()
    ((_, _, point),) = histograms(receiver.requests)[semconv.METRIC_LOAD_DURATION]
    assert plain(point.attributes) == {semconv.ERROR_TYPE: "FileNotFoundError"}


def test_no_endpoint_no_metrics():
    with traced() as _:
        with loadtrace.traced_load("x"):
            pass
        assert spans.tracing()._provider.startup_metrics is None


@pytest.mark.parametrize("status, delay_s", [(200, 30.0), (404, 0.0)], ids=["never-answers", "refuses"])
def test_the_jobs_thread_never_waits_for_the_collector_and_a_refusal_is_one_line(status, delay_s, capfd, endpoint):
    receiver = Receiver(status, delay_s)
    with traced(otlp_endpoint=endpoint(receiver)) as _:
        started = time.monotonic()
        for _ in range(3):
            with loadtrace.traced_load("x"):
                pass
        took = time.monotonic() - started
        flush(0.5)  # bounded: gives up on a collector that does not answer
    receiver.shutdown()
    assert took < 0.5, f"the job's thread waited {took:.3f} s for the metrics"
    err = capfd.readouterr().err  # a refusal on the wire of a real job: tests/e2e/test_progress_metrics_wire.py
    assert err.count("loadtrace:") <= 1, err
