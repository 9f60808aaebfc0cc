#!/usr/bin/env python
"""Startups across a fleet from ClickHouse (issue 23): JOBS jobs x RANKS ranks of the real span shape in chDB's
``otel_traces`` (the exporter's DDL, with ``loadtrace rollup``'s index view on it, as in a fleet), replicated IN SQL
(``INSERT ... SELECT`` over ``numbers()``) from a recorded job (docs/samples/fsdp524, ``--template``), as
``tests/support/jobtree.py`` replicates one: new ids, hosts of 4 ranks, clusters alpha / beta / none, beta 2.5x
slower. The rollup computes the rows of jobs 0-2 (one per cluster: the others are the same but for ids and times, so
their rows are those rows with new ids, inserted); then timed:

- ``jobs``: ``loadtrace jobs --clickhouse chdb:DB --group-by cluster --format json`` (a fresh process) over the
  rollup's rows; the rollup's own seconds per job;
- ``sql``: the dashboard's startup p50/p95 by cluster in the engine, over the spans;
- the span-reading paths at FILE_JOBS jobs (no rollup: ``jobs --clickhouse``; the files: ``jobs DIR``), extrapolated.

    .venv/bin/python benchmarks/bench_clickhouse.py              # 10,000 x 512; span paths at 20 x 512
    .venv/bin/python benchmarks/bench_clickhouse.py --jobs 1000 --file-jobs 10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))

from fleet_dashboard import PANELS  # noqa: E402
from support import otel_traces  # noqa: E402
from support.jobtree import SOURCE, SPACING_S, write_tree  # noqa: E402

from loadtrace.analysis import rollup  # noqa: E402
from loadtrace.analysis.jobs import JobRow  # noqa: E402
from loadtrace.analysis.sources.clickhouse import Connection, parse_target  # noqa: E402
from loadtrace.analysis.sources.files import rfc3339_nanos  # noqa: E402
from loadtrace.analysis.startup import Thresholds  # noqa: E402

# The recorded job's rows with its rank number, replicated: rank 0 from rank 0, every other rank from rank 1.
REPLICATE = """
INSERT INTO default.otel_traces
WITH j.number AS job, r.number AS rank, concat('bench-', leftPad(toString(job), 5, '0')) AS job_id,
  ['alpha', 'beta', ''][job % 3 + 1] AS cluster, if(cluster = 'beta', 2.5, 1.0) AS stretch,
  {base} + job * {spacing} + toInt64((toUnixTimestamp64Nano(Timestamp) - {origin}) * stretch) AS start_ns
SELECT fromUnixTimestamp64Nano(start_ns), lower(hex(MD5(job_id))), {span_id}, {parent_id}, TraceState, SpanName,
  SpanKind, ServiceName,
  mapFilter((k, v) -> v != '', mapUpdate(ResourceAttributes, map('loadtrace.job.id', job_id, 'loadtrace.rank',
    toString(rank), 'service.instance.id', concat(job_id, '/rank-', toString(rank)), 'host.name',
    concat(job_id, '-node', toString(intDiv(rank, 4))), 'loadtrace.world_size', '{ranks}',
    'loadtrace.cluster', cluster))),
  ScopeName, ScopeVersion, SpanAttributes, toUInt64(Duration * stretch), StatusCode, StatusMessage,
  `Events.Timestamp`, `Events.Name`, `Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`,
  `Links.Attributes`
FROM default.template AS t, numbers({jobs}) AS j, numbers({ranks}) AS r
WHERE t.rank = least(r.number, 1)
"""
# A new span id per job and rank (the job's root span: one per job, its children on every rank point to it).
NEW_ID = (
    "if({x} = '', '', substring(lower(hex(MD5(concat(toString(job), '/', "
    "toString(if({x} = '{root}', 0, rank + 1)), '/', {x})))), 1, 16))"
)


def fill(db: Path, jobs: int, ranks: int, template: Path = SOURCE, index: bool = False) -> tuple[int, float]:
    from chdb import session

    with session.Session(str(db)) as s:
        otel_traces.create(s)
    if index:  # the rollup's tables and view first, so the view indexes every insert (as a collector's)
        with_connection(db, rollup.ensure)
    with session.Session(str(db)) as s:
        otel_traces.create(s, table="template")
        otel_traces.insert(s, otel_traces.rows_of_files(sorted(template.glob("*.jsonl"))), table="template")
        s.query(
            "ALTER TABLE default.template ADD COLUMN rank UInt8 MATERIALIZED "
            "toUInt8OrZero(ResourceAttributes['loadtrace.rank'])"
        )
        s.query("ALTER TABLE default.template MATERIALIZE COLUMN rank SETTINGS mutations_sync = 2")
        origin = int(s.query("SELECT min(toUnixTimestamp64Nano(Timestamp)) FROM default.template", "TSV").bytes())
        root = s.query("SELECT any(SpanId) FROM default.template WHERE SpanName = 'loadtrace.job'", "TSV").bytes()
        root = root.decode().strip()
        start = time.monotonic()
        s.query(
            REPLICATE.format(
                span_id=NEW_ID.format(x="SpanId", root=root),
                parent_id=NEW_ID.format(x="ParentSpanId", root=root),
                base=1_780_000_000 * 10**9,
                spacing=SPACING_S * 10**9,
                origin=origin,
                ranks=ranks,
                jobs=jobs,
            )
        )
        seconds = time.monotonic() - start
        return int(s.query("SELECT count() FROM default.otel_traces", "TSV").bytes()), seconds


def with_connection(db: Path, work):
    connection = Connection(parse_target(f"chdb:{db}"))
    try:
        return work(connection)
    finally:
        connection.close()


def roll_up(db: Path, jobs: int) -> float:
    """Jobs 0-2 rolled up for real (the rollup's seconds per job); every other job's row is its cluster's with the
    ids and times the replication gave its spans."""

    def work(connection: Connection) -> float:
        names, ids = rollup.tables(connection), [f"bench-{job:05d}" for job in range(jobs)]
        traces = [connection.rows(f"SELECT lower(hex(MD5('{job_id}')))")[0][0] for job_id in ids]
        counts = {t: int(n) for t, n in connection.rows(f"SELECT TraceId, sum(Spans) FROM {names.traces} GROUP BY 1")}
        start = time.monotonic()
        rollup.roll_traces(connection, names, {trace: counts[trace] for trace in traces[:3]}, Thresholds())
        seconds = (time.monotonic() - start) / 3
        rows = [JobRow(**json.loads(row)) for (row,) in connection.rows(f"SELECT Row FROM {names.jobs} ORDER BY 1")]
        first = {row.trace_id: row for row in rows}
        copies: dict[str, list[JobRow]] = {}
        for job in range(3, jobs):
            row = first[traces[job % 3]]
            start_ns = row.start_ns + (job - job % 3) * SPACING_S * 10**9
            copy = json.loads(json.dumps(dataclasses.asdict(row)).replace(row.job_id or "", ids[job]))
            copy.update(trace_id=traces[job], start_ns=start_ns, start_time=rfc3339_nanos(start_ns))
            copies[traces[job]] = [JobRow(**copy)]
        rollup.store(connection, names, copies, counts, rollup.limits_text(Thresholds()))
        return seconds

    return with_connection(db, work)


def timed(command: list[str], runs: int) -> list[float]:
    walls = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run(command, capture_output=True, check=True)
        walls.append(time.monotonic() - start)
    return walls


def sql_seconds(db: Path, runs: int) -> tuple[list[float], str]:
    """The dashboard's p50/p95 by cluster, all time (one row per cluster), in a fresh process each run."""
    sql = PANELS["Startup p50 / p95 by cluster"][1].replace("$__timeFilter(Timestamp)", "1")
    sql = sql.replace("$__timeInterval(start) AS time, ", "").replace(
        "GROUP BY time, cluster ORDER BY time, cluster", "GROUP BY cluster ORDER BY cluster"
    )
    code = (
        f"import time; from chdb import session; s = session.Session({str(db)!r}); t = time.monotonic(); "
        f"out = s.query({sql!r}, 'TSV').bytes().decode(); print(f'{{time.monotonic() - t:.3f}}'); print(out)"
    )
    walls = timed([sys.executable, "-c", code], runs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return walls, out  # the query's own seconds (a warm engine, as a server runs it) first, then its rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--file-jobs", type=int, default=20, help="jobs for the span-reading paths (files, chdb:)")
    parser.add_argument("--runs", type=int, default=3)
    # Today's span shape (a loadtrace.startup span per rank), recorded by scripts/gen_docs.py; jobtree's plain524
    # predates it, so the dashboard's startup falls back to every span of a rank there.
    parser.add_argument("--template", type=Path, default=REPO / "docs" / "samples" / "fsdp524")
    parser.add_argument("--scratch", help="keep the databases in this new folder (default: a temporary one)")
    args = parser.parse_args()
    loadtrace = str(Path(sys.executable).with_name("loadtrace"))
    with tempfile.TemporaryDirectory(prefix="bench-ch-") as temporary:
        scratch = args.scratch or temporary
        big, small, tree = Path(scratch) / "big", Path(scratch) / "small", Path(scratch) / "tree"
        rows, insert = fill(big, args.jobs, args.ranks, args.template, index=True)
        size = sum(f.stat().st_size for f in big.rglob("*") if f.is_file()) / 1e9
        print(
            f"chdb: {args.jobs} jobs x {args.ranks} ranks = {rows:,} spans, inserted in {insert:.1f} s, {size:.2f} GB"
        )
        per_job = roll_up(big, args.jobs)
        walls, answer = sql_seconds(big, args.runs)
        print(
            f"sql p50/p95 by cluster, {args.jobs} jobs: median {statistics.median(walls):.2f} s "
            f"(runs {', '.join(f'{w:.2f}' for w in walls)}; a fresh process, chDB's import included); "
            f"the query alone {answer}"
        )
        fill(small, args.file_jobs, args.ranks)
        write_tree(tree, args.file_jobs, args.ranks)
        since = ["--since", "36500d"]
        for name, source, jobs in (
            ("jobs --clickhouse chdb: (rollup)", ["--clickhouse", f"chdb:{big}", *since], args.jobs),
            ("jobs --clickhouse chdb: (no rollup)", ["--clickhouse", f"chdb:{small}", *since], args.file_jobs),
            ("jobs DIR", [str(tree)], args.file_jobs),
        ):
            walls = timed([loadtrace, "jobs", *source, "--group-by", "cluster", "--format", "json"], args.runs)
            median = statistics.median(walls)
            print(
                f"{name} {jobs} jobs: median {median:.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}); "
                f"x{args.jobs / jobs:g} = {median * args.jobs / jobs:.0f} s for {args.jobs} jobs"
            )
        print(f"rollup: {per_job:.2f} s per {args.ranks}-rank job (3 jobs rolled up, each read from the table)")
        print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
