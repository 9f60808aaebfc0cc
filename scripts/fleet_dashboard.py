"""The fleet dashboard (exporters/grafana/loadtrace-fleet.json), generated from the SQL below, and a sample of what it
shows, from the same SQL run by chDB over an otel_traces table.

    .venv/bin/python scripts/fleet_dashboard.py                      # rewrite exporters/grafana/loadtrace-fleet.json
    .venv/bin/python scripts/fleet_dashboard.py --check              # exit 1 where the file differs
    .venv/bin/python scripts/fleet_dashboard.py --sample chdb:PATH   # each panel's rows, as text
    .venv/bin/python scripts/fleet_dashboard.py --readme             # README's sample: the recorded runs + 18 jobs

A job's startup here is the report's (docs/report.md, Startup): per rank, its ``loadtrace.startup`` span, else its own
spans from the first to the end of its last load or startup phase; the job's is its slowest rank's. (One shortcut: in
a job where some rank has a startup span, a rank without one is left out.) p50/p95 are
``quantileExactInclusive``, the report's percentile (docs/report.md, ``loadtrace jobs``).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from pathlib import Path

from loadtrace import semconv as sc
from loadtrace.startup_split import STARTUP_PHASES

OUT = Path(__file__).resolve().parents[1] / "exporters" / "grafana" / "loadtrace-fleet.json"
DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "loadtrace-clickhouse"}


def _names(names) -> str:
    return ", ".join(f"'{name}'" for name in sorted(names))


RES = "ResourceAttributes"
END = "(toUnixTimestamp64Nano(Timestamp) + Duration)"
WINDOW = _names(sc.LOAD_SPANS | sc.STARTUP_PHASE_SPANS)
RANK_KEYS = f"""TraceId AS trace_id, {RES}['{sc.ATTEMPT}'] AS attempt, {RES}['{sc.RANK}'] AS rank,
  any({RES}['{sc.JOB_ID}']) AS job_id, any({RES}['{sc.CLUSTER}']) AS cluster, min(Timestamp) AS start"""
GROUP_RANKS = f"GROUP BY trace_id, attempt, rank, {RES}['{sc.SERVICE_INSTANCE_ID}']"
STARTED = f"SELECT DISTINCT TraceId FROM otel_traces WHERE SpanName = '{sc.SPAN_STARTUP}' AND $__timeFilter(Timestamp)"
# Jobs whose ranks have startup spans: those rows alone (the primary key finds them); others: their own spans.
RANKS = f"""
SELECT {RANK_KEYS}, (max({END}) - min(toUnixTimestamp64Nano(Timestamp))) / 1e9 AS seconds
FROM otel_traces WHERE SpanName = '{sc.SPAN_STARTUP}' AND $__timeFilter(Timestamp) {GROUP_RANKS}
UNION ALL
SELECT {RANK_KEYS}, (maxIf({END}, SpanName IN ({WINDOW})) - min(toUnixTimestamp64Nano(Timestamp))) / 1e9 AS seconds
FROM otel_traces
WHERE SpanName NOT IN ('{sc.SPAN_JOB}', '{sc.SPAN_RANK_EXIT}') AND TraceId NOT IN ({STARTED})
  AND $__timeFilter(Timestamp)
{GROUP_RANKS}"""
JOBS = f"""
SELECT trace_id, attempt, any(job_id) AS job_id, if(any(cluster) = '', 'null', any(cluster)) AS cluster,
  min(start) AS start, round(max(seconds), 6) AS startup_seconds
FROM ({RANKS}) WHERE seconds > 0 GROUP BY trace_id, attempt"""
# The split each rank's startup span carries (loadtrace.startup.phases: the report's, docs/report.md, Startup); per job
# its slowest rank's, as `jobs` compares groups by; the median over a cluster's jobs. Ranks without one (spans of a
# loadtrace before it) are left out.
PHASES = "[" + ", ".join(f"'{phase}'" for phase in STARTUP_PHASES) + "]"
CARRIED_SPLIT = f"JSONExtract(SpanAttributes['{sc.STARTUP_PHASE_NS}'], 'Array(Int64)')"
CARRYING = (
    f"SpanName = '{sc.SPAN_STARTUP}' AND mapContains(SpanAttributes, '{sc.STARTUP_PHASE_NS}') "
    "AND $__timeFilter(Timestamp)"
)
SPLIT = f"""SELECT cluster, phase, round(quantileExactInclusive(0.5)(ns) / 1e9, 6) AS seconds FROM (
  SELECT TraceId, {RES}['{sc.ATTEMPT}'] AS attempt,
    if(any({RES}['{sc.CLUSTER}']) = '', 'null', any({RES}['{sc.CLUSTER}'])) AS cluster,
    argMax({CARRIED_SPLIT},
      (Duration, -toInt64OrZero({RES}['{sc.RANK}']))) AS split
  FROM otel_traces
  WHERE {CARRYING}
  GROUP BY TraceId, attempt)
ARRAY JOIN split AS ns, {PHASES} AS phase
GROUP BY cluster, phase ORDER BY cluster, indexOf({PHASES}, phase)"""
# Per job, from the same carried splits, `jobs`' slowest_rank and slowest_phase (docs/report.md, Startup): the rank with
# the longest startup (the lowest rank of equals), and its phase furthest above the median of the other ranks' (its
# largest phase when alone), none when no phase is above theirs. In ns here, where jobs compares microseconds.
SLOWEST = f"""
SELECT TraceId AS trace_id, {RES}['{sc.ATTEMPT}'] AS attempt,
  groupArray((toInt64OrZero({RES}['{sc.RANK}']), Duration,
    {CARRIED_SPLIT})) AS ranks,
  arraySort(r -> (-r.2, r.1), ranks)[1] AS slowest,
  arrayFilter(r -> r.1 != slowest.1, ranks) AS others,
  arrayMap(p -> slowest.3[p] - if(empty(others), 0,
    arrayReduce('quantileExactInclusive(0.5)', arrayMap(o -> o.3[p], others))), range(1, {len(STARTUP_PHASES) + 1}))
    AS excess,
  toString(slowest.1) AS slowest_rank,
  if(arrayMax(excess) > 0, {PHASES}[arrayFirstIndex(x -> x = arrayMax(excess), excess)], '') AS slowest_phase
FROM otel_traces
WHERE {CARRYING}
GROUP BY trace_id, attempt"""

PANELS = {
    "Startup p50 / p95 by cluster": (
        "timeseries",
        f"""SELECT $__timeInterval(start) AS time, cluster,
  round(quantileExactInclusive(0.5)(startup_seconds), 6) AS p50,
  round(quantileExactInclusive(0.95)(startup_seconds), 6) AS p95
FROM ({JOBS}) GROUP BY time, cluster ORDER BY time, cluster""",
    ),
    "Startup phases of the slowest rank by cluster (median over jobs, seconds)": ("barchart", SPLIT),
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
        f"SELECT trace_id, job_id, attempt, cluster, start, startup_seconds, slowest_rank, slowest_phase"
        f" FROM ({JOBS}) AS j LEFT JOIN ({SLOWEST}) AS s USING (trace_id, attempt)"
        " ORDER BY startup_seconds DESC, trace_id LIMIT 20",
    ),
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
        for title, (_, sql) in PANELS.items():
            sql = sql.replace("$__timeFilter(Timestamp)", "1").replace("$__timeInterval(start)", "toStartOfDay(start)")
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
        return sample(f"chdb:{Path(scratch) / 'db'}")


def write_readme() -> None:
    readme = OUT.parents[2] / "README.md"
    head, marker, rest = readme.read_text().partition("<!-- fleet sample -->\n```\n")
    readme.write_text(head + marker + demo_sample().rstrip("\n") + "\n```" + rest.split("\n```", 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--sample", metavar="chdb:PATH")
    parser.add_argument("--readme", action="store_true")
    args = parser.parse_args()
    if args.readme:
        write_readme()
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
