"""Promise: with an OTLP endpoint, a loading rank exports its progress as OpenTelemetry metrics every
``LOADTRACE_PROGRESS_INTERVAL`` seconds (bytes read, expected bytes, files, phase, ``process.memory.usage``, its memory
limit), with the traces' Resource; a process that never loads (the traced launcher) exports none. Received on the wire
by an OTLP/HTTP receiver decoding with opentelemetry-proto (support/wire.py), while a real 2-rank job loads (rank 1
slowed): the session's watched slow job (support/live.py, which test_top_live.py watches with ``loadtrace top``)."""

from __future__ import annotations

import statistics

from support.live import PROGRESS_EXPORTS, PROGRESS_INTERVAL_S, SLOW_WORKER, Job, watched_slow_load
from support.venvs import discover
from support.wire import HttpReceiver

from loadtrace import semconv, statefile

VENVS = discover()


def value(attributes) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in attributes}


def points(requests) -> dict[int, list]:
    """pid → [(collection time in s, resource, {metric: [(value, attributes)]})]: the progress metrics, with the traces'
    Resource (the startup histograms, whose Resource names no process, are tests/in_job/test_startup_metrics.py's)."""
    found: dict[int, list] = {}
    for request in requests:
        for resource_metrics in request.resource_metrics:
            resource = value(resource_metrics.resource.attributes)
            if semconv.PROCESS_PID not in resource:
                continue
            metrics: dict[str, list] = {}
            collected = set()
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    data = getattr(metric, metric.WhichOneof("data"))
                    for point in data.data_points:
                        metrics.setdefault(metric.name, []).append((point.as_int, value(point.attributes)))
                        collected.add(point.time_unix_nano)
            if collected:
                found.setdefault(resource[semconv.PROCESS_PID], []).append((max(collected) / 1e9, resource, metrics))
    return found


def test_a_loading_rank_exports_progress_at_the_interval_and_the_launcher_exports_none(checkpoint, tmp_path_factory):
    watched = watched_slow_load(VENVS[0], checkpoint, tmp_path_factory)
    by_pid = points(watched.metrics)
    states = {s.rank: s for s in map(statefile.read, watched.traces.glob(f"*{semconv.STATE_SUFFIX}")) if s is not None}
    rank_pids = {rank: state.pid for rank, state in states.items() if rank is not None}
    assert set(by_pid) <= set(rank_pids.values()), "only ranks that load export: not the launcher"
    assert watched.launcher_pid not in by_pid

    slow = by_pid[rank_pids[1]]
    assert len(slow) >= 5, f"rank 1 loads until it is killed, after {PROGRESS_EXPORTS} exports: {len(slow)}"
    gaps = [b[0] - a[0] for a, b in zip(slow, slow[1:], strict=False)]
    assert 0.5 * PROGRESS_INTERVAL_S <= statistics.median(gaps) <= 2 * PROGRESS_INTERVAL_S, gaps
    read = [metrics[semconv.METRIC_READ_BYTES][0][0] for _, _, metrics in slow if semconv.METRIC_READ_BYTES in metrics]
    assert read == sorted(read) and read[-1] > read[0] >= 0 and read[-1] > 0, read  # rising (the first may be 0)
    _, resource, metrics = slow[len(slow) // 2]
    assert resource[semconv.RANK] == 1 and resource[semconv.JOB_ID] == states[1].job_id
    assert metrics[semconv.METRIC_EXPECTED_BYTES][0][0] == 1_009_152
    assert metrics[semconv.METRIC_MEMORY_USAGE][0][0] > 0 and metrics[semconv.METRIC_MEMORY_LIMIT][0][0] > 0
    ((one, attributes),) = metrics[semconv.METRIC_PHASE]
    assert one == 1 and attributes[semconv.METRIC_PHASE_ATTRIBUTE]
    for _, _, metrics in slow:  # one data point per metric: nothing but the phase as an attribute
        assert all(len(values) == 1 for values in metrics.values())


def test_a_collector_that_refuses_metrics_costs_a_rank_one_line_and_the_job_goes_on(checkpoint, tmp_path):
    """Every export of rank 1's ~3 s load is refused (404, every 0.2 s): the job ends as it would, its spans still
    arrive, and each rank says so at most once, as "metrics export failing" (not as a span export failure). The
    collector has no metrics pipeline: its receiver takes traces and answers 404 on the metrics' path."""
    with HttpReceiver() as receiver:
        endpoint = f"http://127.0.0.1:{receiver.port}"
        env = {
            "LOADTRACE": "1",
            "HF_DEACTIVATE_ASYNC_LOAD": "1",
            "LOADTRACE_DIR": str(tmp_path / "traces"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{endpoint}/v1/no-metrics-pipeline",
            "LOADTRACE_PROGRESS_INTERVAL": "0.2",
        }
        job = Job(VENVS[0], SLOW_WORKER, [str(checkpoint), "--delay", "0.05"], tmp_path, env)
        assert job.finish(300) == 0, job.tail()
    log = job.log.read_text(errors="replace")
    said = log.count("metrics export failing")
    assert 1 <= said <= 2, f"once per rank at most, and the slow rank must say it:\n{job.tail()}"
    assert "span export failing" not in log
    assert receiver.received.arrivals and not receiver.received.metrics
    assert receiver.received.rejected and all("/v1/no-metrics-pipeline" in r for r in receiver.received.rejected)
