"""Promise: with an OTLP endpoint, a loading rank exports its progress as OpenTelemetry metrics every
``LOADTRACE_PROGRESS_INTERVAL`` seconds (bytes read, expected bytes, files, phase, ``process.memory.usage``, its memory
limit), with the traces' Resource; a process that never loads (the traced launcher) exports none. Received on the wire
by an OTLP/HTTP receiver decoding with opentelemetry-proto, while a real 2-rank job loads (rank 1 slowed)."""

from __future__ import annotations

import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from support.live import Job
from support.venvs import REPO, discover

from loadtrace import semconv, statefile

VENVS = discover()
INTERVAL_S = 1.0


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.metrics: list[tuple[float, metrics_service_pb2.ExportMetricsServiceRequest]] = []


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/metrics":
            request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
            with self.server.lock:
                self.server.metrics.append((time.monotonic(), request))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def value(attributes) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in attributes}


def points(arrivals):
    """pid → [(arrival time, resource, {metric: [(value, attributes)]})]: the progress metrics, with the traces'
    Resource (the startup histograms, whose Resource names no process, are tests/in_job/test_startup_metrics.py's)."""
    found: dict[int, list] = {}
    for at, request in arrivals:
        for resource_metrics in request.resource_metrics:
            resource = value(resource_metrics.resource.attributes)
            if semconv.PROCESS_PID not in resource:
                continue
            metrics: dict[str, list] = {}
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    data = getattr(metric, metric.WhichOneof("data"))
                    for point in data.data_points:
                        metrics.setdefault(metric.name, []).append((point.as_int, value(point.attributes)))
            found.setdefault(resource[semconv.PROCESS_PID], []).append((at, resource, metrics))
    return found


def test_a_loading_rank_exports_progress_at_the_interval_and_the_launcher_exports_none(checkpoint, tmp_path):
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    traces = tmp_path / "traces"
    env = {
        "LOADTRACE": "1",
        "HF_DEACTIVATE_ASYNC_LOAD": "1",
        "LOADTRACE_DIR": str(traces),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
        "LOADTRACE_PROGRESS_INTERVAL": str(INTERVAL_S),
    }
    job = Job(VENVS[0], REPO / "tests" / "workers" / "slow_load.py", [str(checkpoint), "--delay", "0.3"], tmp_path, env)
    try:
        assert job.finish(300) == 0, job.tail()
    finally:
        receiver.shutdown()
    with receiver.lock:
        by_pid = points(receiver.metrics)
    states = {s.rank: s for s in map(statefile.read, traces.glob(f"*{semconv.STATE_SUFFIX}")) if s is not None}
    rank_pids = {rank: state["pid"] for rank, state in states.items() if rank is not None}
    assert set(by_pid) <= set(rank_pids.values()), "only ranks that load export: not the launcher"
    assert job.proc.pid not in by_pid

    slow = by_pid[rank_pids[1]]
    assert len(slow) >= 5, f"rank 1 loads ~20 s: {len(slow)} exports"
    gaps = [b[0] - a[0] for a, b in zip(slow, slow[1:], strict=False)]
    assert 0.5 * INTERVAL_S <= statistics.median(gaps) <= 2 * INTERVAL_S, gaps
    read = [metrics[semconv.METRIC_READ_BYTES][0][0] for _, _, metrics in slow if semconv.METRIC_READ_BYTES in metrics]
    assert read == sorted(read) and read[-1] > read[0] > 0, read
    _, resource, metrics = slow[len(slow) // 2]
    assert resource[semconv.RANK] == 1 and resource[semconv.JOB_ID] == states[1].texts["job_id"]
    assert metrics[semconv.METRIC_EXPECTED_BYTES][0][0] == 1_009_152
    assert metrics[semconv.METRIC_MEMORY_USAGE][0][0] > 0 and metrics[semconv.METRIC_MEMORY_LIMIT][0][0] > 0
    ((one, attributes),) = metrics[semconv.METRIC_PHASE]
    assert one == 1 and attributes[semconv.METRIC_PHASE_ATTRIBUTE]
    for _, _, metrics in slow:  # one data point per metric: nothing but the phase as an attribute
        assert all(len(values) == 1 for values in metrics.values())


class NoMetricsHandler(Handler):
    """A collector without a metrics pipeline: its OTLP receiver takes traces and answers 404 for metrics."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/traces":
            with self.server.lock:
                self.server.traces += 1
        self.send_response(404 if self.path == "/v1/metrics" else 200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_collector_that_refuses_metrics_costs_a_rank_one_line_and_the_job_goes_on(checkpoint, tmp_path):
    """Every export of rank 1's ~3 s load is refused (404, every 0.2 s): the job ends as it would, its spans still
    arrive, and each rank says so at most once, as "metrics export failing" (not as a span export failure)."""
    receiver = Receiver()
    receiver.RequestHandlerClass = NoMetricsHandler
    receiver.traces = 0  # type: ignore[attr-defined]
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    env = {
        "LOADTRACE": "1",
        "HF_DEACTIVATE_ASYNC_LOAD": "1",
        "LOADTRACE_DIR": str(tmp_path / "traces"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
        "LOADTRACE_PROGRESS_INTERVAL": "0.2",
    }
    job = Job(
        VENVS[0], REPO / "tests" / "workers" / "slow_load.py", [str(checkpoint), "--delay", "0.05"], tmp_path, env
    )
    try:
        assert job.finish(300) == 0, job.tail()
    finally:
        receiver.shutdown()
    log = job.log.read_text(errors="replace")
    said = log.count("metrics export failing")
    assert 1 <= said <= 2, f"once per rank at most, and the slow rank must say it:\n{job.tail()}"
    assert "span export failing" not in log
    assert receiver.traces > 0  # type: ignore[attr-defined]
