"""The fleet profile (`docker compose --profile fleet up -d`): ClickHouse, a collector exporting to it (and its startup
histograms to Prometheus), Grafana with the ClickHouse and Prometheus datasources and loadtrace's dashboard. No Docker
engine: Debian's docker-compose validates the file with the profile on; the collector configs go through
test_compose_config.py's checks (COLLECTOR_CONFIGS); the rest is checked here, and the dashboard's SQL runs on the real
engine (chDB) over the exporter's table, where its slowest jobs must be `loadtrace jobs`' own numbers and trace ids,
and its phase split by cluster the medians of `jobs`' own."""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from support.paths import REPO

from loadtrace.analysis.jobs import jobs_report
from loadtrace.analysis.sources import read_files
from loadtrace.startup_split import STARTUP_PHASES

COMPOSE_FILE = REPO / "docker-compose.yml"

GRAFANA = REPO / "exporters" / "grafana"

FLEET = {
    "clickhouse": "clickhouse/clickhouse-server:25.8",
    "fleet-collector": "otel/opentelemetry-collector-contrib:0.139.0",
    "grafana": "grafana/grafana:12.1.1",
    "loadtrace-rollup": "python:3.11-slim",
    "prometheus": "prom/prometheus:v3.5.0",
}


def _load(path: Path):
    return yaml.safe_load(path.read_text())


def _services() -> dict:
    return _load(COMPOSE_FILE)["services"]


def _dashboard_script():
    spec = importlib.util.spec_from_file_location("fleet_dashboard", REPO / "scripts" / "fleet_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fleet_services_are_pinned_and_only_in_the_profile():
    services = _services()
    for name, image in FLEET.items():
        assert services[name]["image"] == image, f"{name}: re-check its configs against the new release first"
        assert services[name]["profiles"] == ["fleet"], "`docker compose up` alone stays the laptop setup"
    assert all("profiles" not in services[name] for name in ("collector", "jaeger"))


def test_the_fleet_collector_writes_to_the_clickhouse_service_and_to_jaeger():
    services = _services()
    collector = _load(REPO / "exporters" / "collector-fleet.yaml")
    host_port = collector["exporters"]["clickhouse"]["endpoint"].split("://", 1)[1].split("?", 1)[0]
    assert host_port == "clickhouse:9000", "the native protocol port inside the compose network"
    assert collector["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert collector["service"]["pipelines"]["traces"]["exporters"] == ["clickhouse", "otlp/jaeger"]
    ports = [str(p) for p in services["fleet-collector"]["ports"]]
    assert "4327:4317" in ports and "4328:4318" in ports, "beside the laptop collector's 4317/4318"
    assert "8123:8123" in [str(p) for p in services["clickhouse"]["ports"]]
    central = _load(REPO / "exporters" / "collector-central-clickhouse.yaml")
    assert central["service"]["pipelines"]["traces"]["exporters"] == ["clickhouse"]
    assert "groupbytrace" not in central["service"]["pipelines"]["traces"]["processors"]


def test_the_rollup_service_installs_this_checkout_and_rolls_up_the_clickhouse_service_each_minute():
    service = _services()["loadtrace-rollup"]
    assert service["volumes"] == [".:/src:ro"] and (REPO / "pyproject.toml").is_file(), "installs this checkout"
    (script,) = service["command"]
    assert "pip install --quiet --no-cache-dir '/src[clickhouse]'" in script
    url = "http://$LOADTRACE_CLICKHOUSE_USER:$LOADTRACE_CLICKHOUSE_PASSWORD@clickhouse:8123"
    assert f'loadtrace rollup --clickhouse "{url}"' in script.replace("$$", "$") and "sleep 60" in script
    grafana = _services()["grafana"]["environment"]
    assert all(value == grafana[key] for key, value in service["environment"].items()), "the same ClickHouse user"
    assert service["depends_on"] == {"clickhouse": {"condition": "service_healthy"}}


def test_grafana_mounts_a_datasource_and_dashboard_that_line_up():
    grafana = _services()["grafana"]
    mounts = {v.split(":")[1]: REPO / v.split(":")[0] for v in grafana["volumes"]}
    assert all(path.is_file() for path in mounts.values())
    source, prometheus = _load(GRAFANA / "datasource.yaml")["datasources"]
    assert source["type"] == "grafana-clickhouse-datasource"
    assert grafana["environment"]["GF_PLUGINS_PREINSTALL"].startswith(source["type"] + "@")
    assert (source["jsonData"]["host"], source["jsonData"]["port"]) == ("clickhouse", 8123)
    assert source["jsonData"]["traces"]["defaultTable"] == "otel_traces"
    dashboard = json.loads((GRAFANA / "loadtrace-fleet.json").read_text())
    assert {panel["datasource"]["uid"] for panel in dashboard["panels"]} == {source["uid"], prometheus["uid"]}
    assert prometheus["url"] == "http://prometheus:9090" and "prometheus" in _services()
    provider = _load(GRAFANA / "dashboards.yaml")["providers"][0]
    assert mounts[provider["options"]["path"] + "/loadtrace-fleet.json"].name == "loadtrace-fleet.json"


def test_the_dashboard_file_is_the_generated_one():
    assert (GRAFANA / "loadtrace-fleet.json").read_text() == _dashboard_script().text(), (
        "run scripts/fleet_dashboard.py"
    )


def test_the_dashboards_sql_runs_on_the_engine_and_agrees_with_jobs(tmp_path, capsys):
    chdb_session = pytest.importorskip("chdb.session")
    from support import otel_traces
    from support.big_job import RECORDED, write_big_job
    from support.jobtree import write_tree

    from loadtrace.cli import main

    files = write_tree(tmp_path / "tree", 6, 4)  # spans of a loadtrace before startup spans and their split
    sample = RECORDED  # startup spans carrying their split (docs/samples/fsdp524 as recorded on 2026-12-01)
    write_tree(files / "split", 6, 4, source=sample, prefix="split")
    (files / "sample").mkdir()
    for path in sample.glob("*.jsonl"):
        shutil.copy(path, files / "sample" / path.name)
    # A job whose rank 1 is 20 s behind the others: a slowest phase worth naming (issue 34).
    write_big_job(files / "slow", ranks=4, slow=1, killed=-1, slow_by=20.0)
    otel_traces.fill(tmp_path / "db", sorted(files.rglob("*.jsonl")))
    url = f"chdb:{tmp_path / 'db'}"
    assert main(["rollup", "--clickhouse", url, "--since", "36500d", "--quiet", "1s"]) == 0
    capsys.readouterr()
    with chdb_session.Session(str(tmp_path / "db")) as session:
        # A row rolled up with other thresholds, and an older roll-up of a trace: neither is what the panels show.
        # A chDB directory keeps the rollup's tables in their own database; a server (the dashboard's) beside the spans.
        table = "default_loadtrace.otel_traces_loadtrace_jobs"
        wrong = "replace(Row, 'startup_seconds', 'startup_seconds_') AS Row"
        session.query(
            f"INSERT INTO {table} SELECT * REPLACE (RolledNs + 1 AS RolledNs, '{{}}' AS Limits, {wrong}) FROM {table}"
        )
        session.query(
            f"INSERT INTO {table} SELECT * REPLACE (RolledNs - 1 AS RolledNs, {wrong}) FROM {table} "
            "WHERE Limits != '{}'"
        )
        answers = {}
        for title, (_, sql) in _dashboard_script().PANELS.items():
            sql = sql.replace("$__timeFilter(Timestamp)", "1").replace("$__timeFilter(start)", "1")
            sql = sql.replace("$__timeInterval(start)", "toDate(0)")  # one bucket
            sql = sql.replace(" otel_traces_loadtrace_jobs", f" {table}")
            answers[title] = json.loads(session.query(sql, "JSON").bytes())["data"]
    report = jobs_report(read_files(files), group_by=["cluster"])
    slowest = answers["Slowest jobs (trace id opens the trace)"]
    expected = sorted(report.jobs, key=lambda row: (-(row.startup_seconds or 0), row.trace_id))
    assert [(r["trace_id"], r["startup_seconds"], r["slowest_rank"], r["slowest_phase"]) for r in slowest] == [
        (r.trace_id, r.startup_seconds, r.slowest_rank, r.slowest_phase) for r in expected
    ], "the slowest jobs, their slowest rank and phase: jobs' own rows"
    by_cluster = {g.by["cluster"] or "null": (g.startup_seconds.p50, g.startup_seconds.p95) for g in report.groups}
    percentiles = {r["cluster"]: (r["p50"], r["p95"]) for r in answers["Startup p50 / p95 by cluster"]}
    assert percentiles == by_cluster, "one definition of p50/p95: the jobs'"
    assert all(int(r["duplicated_bytes"]) >= 0 for r in answers[next(t for t in answers if t.startswith("Bytes"))])
    medians = {}
    for cluster in {row.cluster for row in report.jobs}:
        mine = [row.phases for row in report.jobs if row.cluster == cluster and row.phases]
        for phase in STARTUP_PHASES:
            medians[(cluster or "null", phase)] = statistics.median(phases[phase] for phases in mine)
    split = answers["Startup phases of the slowest rank by cluster (median over jobs, seconds)"]
    assert {(r["cluster"], r["phase"]) for r in split} == set(medians)
    for r in split:  # the medians of jobs' own slowest-rank phases (what `jobs` compares groups by)
        assert r["seconds"] == pytest.approx(medians[(r["cluster"], r["phase"])], abs=1.5e-6), r
    assert [(row.slowest_rank, row.slowest_phase) for row in report.jobs if row.slowest_phase] == [(1, "other")]


def test_the_startup_histograms_reach_prometheus_and_the_dashboard_links_their_exemplars_to_traces():
    """The fleet collector passes the ranks' startup histograms alone (semconv's names) through deltatocumulative to
    its Prometheus exporter, with OpenMetrics (the format with exemplars); Prometheus scrapes that port with exemplar
    storage on; the dashboard's Prometheus panel asks p50 and p95 by cluster of the exporter's name for the histogram,
    with exemplars, and the datasource opens an exemplar's trace id in the ClickHouse trace view."""
    from loadtrace import semconv

    script = _dashboard_script()
    for name in ("collector-fleet.yaml", "collector-central-clickhouse.yaml"):
        collector = _load(REPO / "exporters" / name)
        pipeline = collector["service"]["pipelines"]["metrics/prometheus"]
        assert pipeline["processors"][-1] == "deltatocumulative" and pipeline["exporters"] == ["prometheus"], name
        (condition,) = collector["processors"]["filter/startup"]["metrics"]["metric"]
        kept = {semconv.METRIC_STARTUP_DURATION, semconv.METRIC_LOAD_DURATION}
        assert condition == " and ".join(f'name != "{metric}"' for metric in sorted(kept, reverse=True)), condition
        exporter = collector["exporters"]["prometheus"]
        assert exporter["enable_open_metrics"] is True and exporter["endpoint"] == "0.0.0.0:8889"
    services = _services()
    prometheus = services["prometheus"]
    assert "--enable-feature=exemplar-storage" in prometheus["command"]
    mounted = {v.split(":")[1]: REPO / v.split(":")[0] for v in prometheus["volumes"] if v.startswith("./")}
    config = _load(mounted["/etc/prometheus/prometheus.yml"])
    (job,) = config["scrape_configs"]
    # Prometheus asks OpenMetrics (the format with exemplars) first by default; Debian's 2.42 refuses the whole file
    # for a `scrape_protocols` key (tests/backends/test_fleet_metrics.py runs it).
    assert "scrape_protocols" not in job, job
    assert job["static_configs"] == [{"targets": ["fleet-collector:8889"]}]
    dashboard = json.loads((GRAFANA / "loadtrace-fleet.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["datasource"]["uid"] == "loadtrace-prometheus"]
    assert [t["expr"] for t in panel["targets"]] == [
        f"histogram_quantile({q}, sum by (le, loadtrace_cluster) (rate(loadtrace_startup_duration_seconds_bucket[1d])))"
        for q in (0.5, 0.95)
    ]
    assert all(target["exemplar"] for target in panel["targets"])
    (_, source) = _load(GRAFANA / "datasource.yaml")["datasources"]
    (destination,) = source["jsonData"]["exemplarTraceIdDestinations"]
    assert destination["name"] == "trace_id", "the label the collector's Prometheus exporter gives an exemplar's trace"
    assert destination["url"] == script.trace_link().replace("$", "$$"), "Grafana reads $$ as a literal $"
