"""Promise (docs/fleet.md, "From Prometheus"): the ranks' startup histograms, through the collector's fleet
config (exporters/collector-fleet.yaml, its spans to Jaeger) and scraped by a real Prometheus (exporters/prometheus.yml,
exemplar storage on), answer the dashboard's PromQL with the bucket the jobs' startups fell in, per cluster; and
Prometheus's exemplars are those jobs' startups, their trace ids the ones Jaeger holds.

No ClickHouse runs here: the fleet config is started with exporters/fleet-without-clickhouse.yaml merged over it, as
docs/fleet.md says to where there is none. Prometheus is Debian's (2.42, where docker-compose.yml runs 3.5), with the
project's file but for its target and a 1 s scrape interval (15 s in the file: the test would wait minutes).

The jobs: real processes (tests/workers/posed_startup.py), one a job, whose startups take about 2.5 s (cluster
``alpha``, bucket 2-5 s) and 6 s (``beta``, 5-10 s), sent over OTLP/HTTP while also writing their files. Three rounds,
one job of each cluster a round, each round scraped before the next: ``rate`` counts what a series gained after its
first sample, so the first round only makes the series; the series' exemplar stays the first round's (below).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml
from support import backends
from support.installed import file_spans, require_installed
from support.paths import WORKERS
from support.torchrun import clean_env
from support.venvs import discover

from loadtrace import semconv as sc

SLEEP_S = {"alpha": 2.5, "beta": 6.0}
BUCKET_S = {"alpha": (2.0, 5.0), "beta": (5.0, 10.0)}  # loadtrace's startup buckets (startup_metrics.py) around them
ROUNDS = 3
STARTUP_BUCKETS = "loadtrace_startup_duration_seconds_bucket"
CLUSTER = "loadtrace_cluster"


def scraping(target: str, folder: Path) -> Path:
    """exporters/prometheus.yml pointed at the test's collector, every second."""
    config = yaml.safe_load((backends.EXPORTERS / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = "1s"
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [target]}]
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def dashboard_queries() -> dict[str, str]:
    """The legend → PromQL of the dashboard's Prometheus panel (exporters/grafana/loadtrace-fleet.json)."""
    dashboard = json.loads((backends.EXPORTERS / "grafana" / "loadtrace-fleet.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["datasource"]["type"] == "prometheus"]
    return {t["legendFormat"].split()[0]: t["expr"] for t in panel["targets"]}


def run_jobs(venv, folder: Path, round_: int, endpoint: str) -> dict[str, dict]:
    """One job of each cluster, at once: cluster → its startup span (from its files) and trace id."""
    running = {}
    for cluster, sleep_s in SLEEP_S.items():
        files = folder / f"{cluster}-{round_}"
        env = {
            "LOADTRACE_CLUSTER": cluster,
            "LOADTRACE_DIR": str(files),
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        argv = [str(venv.python), str(WORKERS / "posed_startup.py"), str(sleep_s)]
        process = subprocess.Popen(argv, env=clean_env(venv, env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        running[cluster] = (process, files)
    startups = {}
    for cluster, (process, files) in running.items():
        out = process.communicate(timeout=120)[0].decode(errors="replace")
        assert process.returncode == 0 and "loadtrace" not in out, out  # not a word from loadtrace: nothing failed
        (startup,) = [span for _, span in file_spans(files) if span["name"] == sc.SPAN_STARTUP]
        seconds = (int(startup["endTimeUnixNano"]) - int(startup["startTimeUnixNano"])) / 1e9
        low, high = BUCKET_S[cluster]
        assert low < seconds <= high, f"{cluster}: startup {seconds:.3f} s, outside its bucket (a very busy machine?)"
        startups[cluster] = {**startup, "seconds": seconds}
    return startups


def counts(prometheus: backends.Prometheus) -> dict[str, float]:
    """cluster → startups Prometheus has scraped."""
    result = prometheus.api("query", query=f"sum by ({CLUSTER}) (loadtrace_startup_duration_seconds_count)")["result"]
    return {r["metric"][CLUSTER]: float(r["value"][1]) for r in result}


def trace_label() -> str:
    """The exemplar label the Grafana datasource opens as a trace (exporters/grafana/datasource.yaml)."""
    datasources = yaml.safe_load((backends.EXPORTERS / "grafana" / "datasource.yaml").read_text())["datasources"]
    (prometheus,) = [d for d in datasources if d["type"] == "prometheus"]
    (destination,) = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    return destination["name"]


def test_startup_quantiles_by_cluster_and_exemplars_of_the_jobs(tmp_path):
    backends.require_prometheus()
    venv = discover()[0]
    require_installed(venv)
    queries = dashboard_queries()
    assert set(queries) == {"p50", "p95"}, queries
    started = time.time()
    with backends.Jaeger(tmp_path) as jaeger:
        scrape = backends.loopback()
        sets = {"exporters.otlp/jaeger.endpoint": jaeger.otlp_grpc, "exporters.prometheus.endpoint": scrape}
        overlay = ("fleet-without-clickhouse.yaml",)
        with (
            backends.Collector(tmp_path, "collector-fleet.yaml", sets, overlays=overlay) as collector,
            backends.Prometheus(tmp_path, scraping(scrape, tmp_path)) as prometheus,
        ):
            jobs: list[dict[str, dict]] = []
            for round_ in range(ROUNDS):
                jobs.append(run_jobs(venv, tmp_path / "jobs", round_, collector.http))
                want = {cluster: float(round_ + 1) for cluster in SLEEP_S}
                backends.wait_for(f"round {round_} scraped", lambda w=want: counts(prometheus) == w, timeout_s=60)
            quantiles = {
                q: {r["metric"][CLUSTER]: float(r["value"][1]) for r in prometheus.api("query", query=expr)["result"]}
                for q, expr in queries.items()
            }
            exemplars = prometheus.api(
                "query_exemplars", query=STARTUP_BUCKETS, start=str(started - 60), end=str(time.time() + 60)
            )
        (tmp_path / "answers.json").write_text(json.dumps({"quantiles": quantiles, "exemplars": exemplars}, indent=1))
        startups = {(s["traceId"], s["spanId"]): (cluster, s) for round_ in jobs for cluster, s in round_.items()}

        def in_jaeger(trace_id: str, span_id: str) -> bool:
            status, answer = jaeger.trace(trace_id)
            spans = (
                [
                    span
                    for r in answer.get("result", {}).get("resourceSpans", [])
                    for ss in r["scopeSpans"]
                    for span in ss["spans"]
                ]
                if status == 200
                else []
            )
            return span_id in {span["spanId"] for span in spans}

        # An exemplar's link opens the job's trace: each startup's trace is in Jaeger, its startup span in it.
        for trace_id, span_id in startups:
            backends.wait_for(f"trace {trace_id} in Jaeger", lambda t=trace_id, s=span_id: in_jaeger(t, s))
    for q, by_cluster in quantiles.items():
        assert set(by_cluster) == set(SLEEP_S), (q, by_cluster)
        for cluster, seconds in by_cluster.items():
            low, high = BUCKET_S[cluster]
            assert low < seconds <= high, (q, cluster, seconds)
    # The exemplars are the jobs' startups: each in its cluster's series and bucket, its trace and span, its duration.
    # Only the first of each series, though: deltatocumulative (0.139, and 0.161 still) adds a delta's bucket counts
    # into the series and never its exemplars, so the series keeps the exemplar of the startup that made it.
    seen = {}
    for series in exemplars:
        labels = series["seriesLabels"]
        for exemplar in series["exemplars"]:
            key = (exemplar["labels"][trace_label()], exemplar["labels"]["span_id"])
            assert key in startups, (labels, exemplar)
            cluster, startup = startups[key]
            assert labels[CLUSTER] == cluster and float(labels["le"]) == BUCKET_S[cluster][1], (labels, exemplar)
            assert abs(float(exemplar["value"]) - startup["seconds"]) < 1e-6, (exemplar, startup["seconds"])
            seen[key] = cluster
    first = {(s["traceId"], s["spanId"]): cluster for cluster, s in jobs[0].items()}
    assert seen == first, f"exemplars {seen}; the first round's startups {first}"
    print(f"[fleet metrics] Prometheus {'.'.join(map(str, backends.prometheus_version()))}: {quantiles}")
