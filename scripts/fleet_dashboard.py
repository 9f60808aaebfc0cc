"""The fleet dashboard (exporters/grafana/loadtrace-fleet.json), generated from the SQL below, and a sample of what it
shows, from the same SQL run by chDB over an otel_traces table and its rollup.

    .venv/bin/python scripts/fleet_dashboard.py                      # rewrite exporters/grafana/loadtrace-fleet.json
    .venv/bin/python scripts/fleet_dashboard.py --check              # exit 1 where the file differs
    .venv/bin/python scripts/fleet_dashboard.py --sample chdb:PATH   # each panel's rows, as text
    .venv/bin/python scripts/fleet_dashboard.py --docs               # docs/fleet.md sample: the recorded runs + 18 jobs

A fifth panel reads Prometheus: the ranks' startup histograms (``loadtrace.startup.duration``, docs/reference.md's
Metrics), whose buckets' exemplars link to the trace of a startup in them, through the same trace view as the slowest
jobs' ids.

Three panels read the rows `loadtrace rollup` keeps beside the spans (docs/report.md, ClickHouse rollup): each job's
`jobs` row, computed by `jobs`' own code, so the dashboard's startup, slowest rank and phase and phase split are
`jobs`' to the digit, and a panel reads one row per job, not every span. p50/p95 and medians are
``quantileExactInclusive``, the report's percentile (docs/report.md, ``loadtrace jobs``). The duplicated-bytes panel
reads the load spans themselves.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from pathlib import Path

from loadtrace import semconv as sc
from loadtrace.analysis.rollup import limits_text, roll_up_url
from loadtrace.analysis.startup import Thresholds
from loadtrace.startup_split import STARTUP_PHASES

OUT = Path(__file__).resolve().parents[1] / "exporters" / "grafana" / "loadtrace-fleet.json"
DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "loadtrace-clickhouse"}
PROMETHEUS = {"type": "prometheus", "uid": "loadtrace-prometheus"}


def _names(names) -> str:
    return ", ".join(f"'{name}'" for name in sorted(names))


# Each trace's newest rows at the default thresholds (what `loadtrace rollup` stores unless told other thresholds).
ROLLED = "otel_traces_loadtrace_jobs"
LIMITS = f"Limits = '{limits_text(Thresholds())}'"
JOBS = f"""SELECT * FROM (
  SELECT JSONExtractString(Row, 'trace_id') AS trace_id, JSONExtractString(Row, 'job_id') AS job_id,
    JSONExtract(Row, 'attempt', 'Nullable(Int64)') AS attempt, ifNull(cluster, 'null') AS cluster,
    fromUnixTimestamp64Nano(JSONExtractInt(Row, 'start_ns')) AS start,
    JSONExtract(Row, 'startup_seconds', 'Nullable(Float64)') AS startup_seconds,
    JSONExtract(Row, 'slowest_rank', 'Nullable(Int64)') AS slowest_rank,
    JSONExtract(Row, 'slowest_phase', 'Nullable(String)') AS slowest_phase,
    JSONExtract(Row, 'phases', 'Map(String, Float64)') AS phases
  FROM {ROLLED}
  WHERE Row != '' AND {LIMITS}
    AND (TraceId, RolledNs) IN (SELECT TraceId, max(RolledNs) FROM {ROLLED} WHERE {LIMITS} GROUP BY TraceId))
WHERE $__timeFilter(start)"""
PHASES = "[" + ", ".join(f"'{phase}'" for phase in STARTUP_PHASES) + "]"

PANELS = {
    "Startup p50 / p95 by cluster": (
        "timeseries",
        f"""SELECT $__timeInterval(start) AS time, cluster,
  round(quantileExactInclusive(0.5)(startup_seconds), 6) AS p50,
  round(quantileExactInclusive(0.95)(startup_seconds), 6) AS p95
FROM ({JOBS}) WHERE startup_seconds IS NOT NULL GROUP BY time, cluster ORDER BY time, cluster""",
    ),
    # jobs' phases of each job's slowest rank (what `jobs` compares groups by), the median over a cluster's jobs.
    "Startup phases of the slowest rank by cluster (median over jobs, seconds)": (
        "barchart",
        f"""SELECT cluster, phase, round(quantileExactInclusive(0.5)(phases[phase]), 6) AS seconds
FROM ({JOBS}) ARRAY JOIN {PHASES} AS phase WHERE notEmpty(phases)
GROUP BY cluster, phase ORDER BY cluster, indexOf({PHASES}, phase)""",
    ),
    "Bytes read beyond one copy of the checkpoint, by model and strategy": (
        "table",
        f"""SELECT model, strategy, count() AS jobs, sum(beyond) AS duplicated_bytes FROM (
  SELECT TraceId, any(SpanAttributes['{sc.CHECKPOINT}']) AS model, any(SpanAttributes['{sc.STRATEGY}']) AS strategy,
    greatest(0, sum(toInt64OrZero(SpanAttributes['{sc.READ_BYTES}']))
      - max(toInt64OrZero(SpanAttributes['{sc.CHECKPOINT_BYTES}']))) AS beyond
  FROM otel_traces WHERE SpanName IN ({_names(sc.LOAD_SPANS)}) AND $__timeFilter(Timestamp) GROUP BY TraceId)
GROUP BY model, strategy ORDER BY duplicated_bytes DESC LIMIT 20""",
    ),
    "Slowest jobs (trace id opens the trace)": (
        "table",
        "SELECT trace_id, job_id, attempt, cluster, start, startup_seconds, slowest_rank, slowest_phase"
        f" FROM ({JOBS}) WHERE startup_seconds IS NOT NULL ORDER BY startup_seconds DESC, trace_id LIMIT 20",
    ),
}


# The startup histogram as the collector's Prometheus exporter names it (dots to underscores, the unit as a suffix).
STARTUP_BUCKETS = sc.METRIC_STARTUP_DURATION.replace(".", "_") + "_seconds_bucket"
CLUSTER_LABEL = sc.CLUSTER.replace(".", "_")
PROMETHEUS_PANELS = {
    "Startup p50 / p95 by cluster, from the ranks' histograms (Prometheus; an exemplar opens its trace)": [
        (
            f"p{int(q * 100)} {{{{{CLUSTER_LABEL}}}}}",
            f"histogram_quantile({q}, sum by (le, {CLUSTER_LABEL}) (rate({STARTUP_BUCKETS}[1d])))",
        )
        for q in (0.5, 0.95)
    ],
}


def trace_link() -> str:
    """Grafana Explore, the ClickHouse datasource in trace-id mode over otel_traces: the trace view of one trace."""
    query = {
        "refId": "A",
        "datasource": DATASOURCE,
        "editorType": "builder",
        "queryType": "traces",
        "builderOptions": {
            "database": "default",
            "table": "otel_traces",
            "queryType": "traces",
            "meta": {"isTraceIdMode": True, "traceId": "${__value.raw}", "otelEnabled": True, "otelVersion": "latest"},
        },
    }
    panes = {"trace": {"datasource": DATASOURCE["uid"], "queries": [query], "range": {"from": "now-30d", "to": "now"}}}
    return "/explore?schemaVersion=1&panes=" + urllib.parse.quote(json.dumps(panes, separators=(",", ":")), safe="$")


def dashboard() -> dict:
    panels = []
    for index, (title, (kind, sql)) in enumerate(PANELS.items()):
        panel = {
            "id": index + 1,
            "title": title,
            "type": kind,
            "datasource": DATASOURCE,
            "gridPos": {"x": 12 * (index % 2), "y": 9 * (index // 2), "w": 12, "h": 9},
            "targets": [{"refId": "A", "datasource": DATASOURCE, "editorType": "sql", "format": 1, "rawSql": sql}],
        }
        if kind == "timeseries":
            panel["transformations"] = [{"id": "prepareTimeSeries", "options": {"format": "multi"}}]
        if title.startswith("Slowest"):
            link = {"title": "Open trace", "url": trace_link()}
            override = {"matcher": {"id": "byName", "options": "trace_id"}, "properties": []}
            override["properties"].append({"id": "links", "value": [link]})
            panel["fieldConfig"] = {"defaults": {}, "overrides": [override]}
        panels.append(panel)
    for title, queries in PROMETHEUS_PANELS.items():
        index = len(panels)
        targets = [
            {"refId": ref, "datasource": PROMETHEUS, "expr": expr, "legendFormat": legend, "exemplar": True}
            for ref, (legend, expr) in zip("ABCDEFGH", queries, strict=False)
        ]
        panels.append(
            {
                "id": index + 1,
                "title": title,
                "type": "timeseries",
                "datasource": PROMETHEUS,
                "gridPos": {"x": 12 * (index % 2), "y": 9 * (index // 2), "w": 12, "h": 9},
                "fieldConfig": {"defaults": {"unit": "s"}, "overrides": []},
                "targets": targets,
            }
        )
    return {
        "uid": "loadtrace-fleet",
        "title": "loadtrace: startups across the fleet",
        "schemaVersion": 39,
        "time": {"from": "now-7d", "to": "now"},
        "tags": ["loadtrace"],
        "panels": panels,
    }


def text() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def sample(url: str) -> str:
    """Each panel's rows over a chDB database, Grafana's macros read as 'all time, by day'."""
    from chdb import session

    out = []
    with session.Session(url.removeprefix("chdb:")) as db:
        # A chDB directory keeps the rollup in its own database (analysis/rollup.py); a server, beside the span table,
        # where the dashboard's queries name it.
        own = f"SELECT count() FROM system.tables WHERE database = 'default_loadtrace' AND name = '{ROLLED}'"
        rolled = f"default_loadtrace.{ROLLED}" if db.query(own, "CSV").bytes().strip() == b"1" else ROLLED
        for title, (_, sql) in PANELS.items():
            sql = sql.replace(f"FROM {ROLLED}", f"FROM {rolled}")
            sql = sql.replace("$__timeFilter(Timestamp)", "1").replace("$__timeFilter(start)", "1")
            sql = sql.replace("$__timeInterval(start)", "toStartOfDay(start)")
            out.append(f"{title}\n" + db.query(sql, "PrettyCompactMonoBlock").bytes().decode())
    return "\n".join(out)


def demo_sample() -> str:
    """The sample over the recorded runs (tests/fixtures/spans) and 9 + 9 jobs of 3 clusters (tests/support/jobtree.py,
    from an old run and from docs/samples/fsdp524)."""
    import tempfile

    sys.path.insert(0, str(OUT.parents[2] / "tests"))
    from support import otel_traces
    from support.jobtree import write_tree

    with tempfile.TemporaryDirectory() as scratch:
        files = sorted((OUT.parents[2] / "tests" / "fixtures" / "spans").rglob("*.jsonl"))
        files += sorted(write_tree(Path(scratch) / "tree", 9, 4).rglob("*.jsonl"))
        split = OUT.parents[2] / "docs" / "samples" / "fsdp524"  # today's spans: startup spans carry their split
        later = 1_780_000_000 * 10**9 + 86_400 * 10**9  # the next day: a point of its own on the time axis
        files += sorted(write_tree(Path(scratch) / "split", 9, 4, later, split, "split").rglob("*.jsonl"))
        otel_traces.fill(Path(scratch) / "db", files)
        roll_up_url(f"chdb:{Path(scratch) / 'db'}", "otel_traces", Thresholds(), 36_500 * 86_400, 1)
        return sample(f"chdb:{Path(scratch) / 'db'}")


def write_docs() -> None:
    page = OUT.parents[2] / "docs" / "fleet.md"
    head, marker, rest = page.read_text().partition("<!-- fleet sample -->\n```\n")
    page.write_text(head + marker + demo_sample().rstrip("\n") + "\n```" + rest.split("\n```", 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--sample", metavar="chdb:PATH")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args()
    if args.docs:
        write_docs()
        return 0
    if args.sample:
        print(sample(args.sample))
        return 0
    if args.check:
        return 0 if OUT.read_text() == text() else 1
    OUT.write_text(text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
