#!/usr/bin/env python
"""Startups across a fleet from ClickHouse (issue 23): JOBS x RANKS of the real span shape in chDB's ``otel_traces``
(``loadtrace rollup``'s index view on it, as in a fleet), replicated in SQL from a recorded job as
``tests/support/jobtree.py`` does (new ids, hosts of 4 ranks, clusters alpha / beta / none, beta 2.5x slower, and each
job's times stretched by a further 0-30 % by ``job % 7``). Jobs 0-20 (every cluster and stretch) are rolled up for
real, the others' rows replicated likewise. Timed in fresh processes: ``jobs --clickhouse`` over the rollup (every row,
and ``--groups-only``: the groups computed in the server, from ``chdb:`` and over HTTP from a server that has the
database open), the dashboard's p50/p95 panel, and the span-reading paths (no rollup; ``jobs DIR``) at FILE_JOBS jobs.

``--rollup-only``: only jobs 0-20 have spans; the others are in the rollup alone (their trace index rows and job rows
replicated from those of the same ``job % 21``, as a full run makes them). ``jobs --clickhouse chdb:`` opens the
rollup's database alone (not the span table, whose parts chDB would otherwise load), so its start does not grow with
the span table; a full run shows it.
``--scratch`` naming a folder an earlier run left: its databases are timed as they are (so a build can run at a low
priority, ``nice -n 15 ... --build-only``, and the timings at the user's).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
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
from loadtrace.analysis.rollup import Connection, JobRow, Thresholds, parse_target  # noqa: E402
from loadtrace.analysis.sources.files import rfc3339_nanos  # noqa: E402

# The recorded job's rows with its rank number, replicated: rank 0 from rank 0, every other rank from rank 1.
REPLICATE = """
INSERT INTO default.otel_traces
WITH j.number AS job, r.number AS rank, concat('bench-', leftPad(toString(job), 5, '0')) AS job_id,
  ['alpha', 'beta', ''][job % 3 + 1] AS cluster, if(cluster = 'beta', 2.5, 1.0) * (1 + job % 7 / 20) AS stretch,
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


# The rollup's index rows of jobs VARIANTS.. (--rollup-only), each its template's (job % VARIANTS) moved to its time.
REPLICATE_INDEX = """
INSERT INTO {traces}
WITH j.number AS job, toUInt64((job - job % {variants}) * {spacing}) AS shift_ns
SELECT lower(hex(MD5(concat('bench-', leftPad(toString(job), 5, '0'))))),
  fromUnixTimestamp64Nano(toUnixTimestamp64Nano(t.first) + shift_ns), t.last_end + shift_ns, t.spans
FROM (SELECT TraceId, min(First) AS first, max(LastEnd) AS last_end, sum(Spans) AS spans FROM {traces} GROUP BY TraceId)
  AS t, numbers({variants}, {copies}) AS j
WHERE t.TraceId = lower(hex(MD5(concat('bench-', leftPad(toString(job % {variants}), 5, '0')))))
"""
VARIANTS = 21  # jobs of distinct rows: job % 3 their cluster, job % 7 their stretch

ID_COLUMNS = (("span_id", "SpanId"), ("parent_id", "ParentSpanId"))
BASE, RANK = 1_780_000_000 * 10**9, "toUInt8OrZero(ResourceAttributes['loadtrace.rank'])"


def fill(db: Path, jobs: int, ranks: int, template: Path = SOURCE, index: bool = False) -> tuple[int, float]:
    from chdb import session

    with session.Session(str(db)) as s:
        otel_traces.create(s)
    if index:  # the rollup's tables and view first, so the view indexes every insert (as a collector's)
        rollup.ensure(connection := Connection(parse_target(f"chdb:{db}")))
        connection.close()
    with session.Session(str(db)) as s:
        otel_traces.create(s, table="template")
        otel_traces.insert(s, otel_traces.rows_of_files(sorted(template.glob("*.jsonl"))), table="template")
        s.query(f"ALTER TABLE default.template ADD COLUMN rank UInt8 MATERIALIZED {RANK}")
        s.query("ALTER TABLE default.template MATERIALIZE COLUMN rank SETTINGS mutations_sync = 2")
        origin = int(s.query("SELECT min(toUnixTimestamp64Nano(Timestamp)) FROM default.template", "TSV").bytes())
        root = s.query("SELECT any(SpanId) FROM default.template WHERE SpanName = 'loadtrace.job'", "TSV").data()
        ids = {key: NEW_ID.format(x=x, root=root.strip()) for key, x in ID_COLUMNS}
        start = time.monotonic()
        s.query(REPLICATE.format(**ids, base=BASE, spacing=SPACING_S * 10**9, origin=origin, ranks=ranks, jobs=jobs))
        seconds = time.monotonic() - start
        return int(s.query("SELECT count() FROM default.otel_traces", "TSV").bytes()), seconds


def replicate_index(db: Path, jobs: int) -> None:
    """The trace index rows of jobs VARIANTS..JOBS as the view would have made them from their spans."""
    connection = Connection(parse_target(f"chdb:{db}"))
    traces = rollup.tables(connection).traces
    connection.execute(
        REPLICATE_INDEX.format(traces=traces, variants=VARIANTS, copies=jobs - VARIANTS, spacing=SPACING_S * 10**9)
    )
    connection.close()


def roll_up(db: Path, jobs: int) -> float:
    """Jobs 0..VARIANTS-1 rolled up (seconds per job); the others' rows are those of their ``job % VARIANTS`` with
    their own ids and times."""
    connection = Connection(parse_target(f"chdb:{db}"))
    names, ids = rollup.tables(connection), [f"bench-{job:05d}" for job in range(jobs)]
    traces = [connection.rows(f"SELECT lower(hex(MD5('{job_id}')))")[0][0] for job_id in ids]
    counts = {t: int(n) for t, n in connection.rows(f"SELECT TraceId, sum(Spans) FROM {names.traces} GROUP BY 1")}
    real = traces[:VARIANTS]
    start = time.monotonic()
    for at in range(0, len(real), rollup.BATCH):
        rollup.roll_traces(
            connection, names, {trace: counts[trace] for trace in real[at : at + rollup.BATCH]}, Thresholds()
        )
    seconds = (time.monotonic() - start) / len(real)
    rows = [JobRow(**json.loads(row)) for (row,) in connection.rows(f"SELECT Row FROM {names.jobs}")]
    first, copies = {row.trace_id: row for row in rows}, {}
    for job in range(len(real), jobs):
        row = first[traces[job % VARIANTS]]
        start_ns = row.start_ns + (job - job % VARIANTS) * SPACING_S * 10**9
        copy = json.loads(json.dumps(dataclasses.asdict(row)).replace(row.job_id or "", ids[job]))
        copy.update(trace_id=traces[job], start_ns=start_ns, start_time=rfc3339_nanos(start_ns))
        copies[traces[job]] = [JobRow(**copy)]
    rollup.store(connection, names, copies, counts, rollup.limits_text(Thresholds()))
    connection.close()
    return seconds


def settle(db: Path, quiet_s: float = 20, most_s: float = 1800) -> str:
    """Until chDB starts no merge for ``quiet_s`` (as a server's table between inserts, so that the timed processes
    do not merge the fresh parts under them); each table's active parts."""
    from chdb import session

    with session.Session(str(db)) as s:
        start = quiet = time.monotonic()
        while time.monotonic() - quiet < quiet_s and time.monotonic() - start < most_s:
            time.sleep(2)
            if int(s.query("SELECT count() FROM system.merges", "TSV").bytes()):
                quiet = time.monotonic()
        parts = s.query(
            "SELECT table, count() FROM system.parts WHERE active AND database LIKE 'default%' GROUP BY 1 ORDER BY 1",
            "TSV",
        ).data()
    waited = time.monotonic() - start
    return f"merges settled after {waited:.0f} s; active parts: " + ", ".join(
        parts.strip().replace("\t", " ").splitlines()
    )


def report(name: str, command: list[str], jobs: int, args: argparse.Namespace, server: int = 0) -> None:
    load = os.getloadavg()[0]
    walls, cpus, out = timed(command, args.runs, server)
    median, each = statistics.median(walls), ", ".join(f"{wall:.2f}" for wall in walls)
    whole = "dash" in name or "groups-only" in name
    shown = " ".join(out.split()) if whole else f"{len(out.encode()) / 1e6:.1f} MB out"
    cpu = f"CPU median {statistics.median(cpus):.2f} s" + (" with the server's" if server else "")
    loads = f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}"
    print(f"{name}, {jobs} jobs: median {median:.2f} s (runs {each}; {cpu}; {loads}) {shown}", flush=True)
    if jobs != args.jobs:
        print(f"  fresh processes; {median * args.jobs / jobs:.0f} s extrapolated to {args.jobs} jobs")


def timed(command: list[str], runs: int, server: int = 0) -> tuple[list[float], list[float], str]:
    """Each run's wall and CPU seconds (the command's, and the server's while it ran: on a shared machine the CPU
    is what the load does not stretch)."""
    walls, cpus, out = [], [], ""
    for _ in range(runs):
        start, cpu = time.monotonic(), cpu_seconds(server)
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        walls.append(time.monotonic() - start)
        cpus.append(cpu_seconds(server) - cpu)
    return walls, cpus, out


def cpu_seconds(server: int) -> float:
    """User and system seconds of this process's children that ended, and of the server process (a pid; 0: none)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks = (
        [int(field) for field in Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[11:13]]
        if server
        else []
    )
    return children.ru_utime + children.ru_stime + sum(ticks) / os.sysconf("SC_CLK_TCK")


def dashboard(db: Path) -> list[str]:
    """The dashboard's p50/p95 by cluster, all time; it prints the query's own seconds (a warm engine, as a server)."""
    sql = PANELS["Startup p50 / p95 by cluster"][1].replace("$__timeFilter(start)", "1")
    sql = sql.replace("$__timeInterval(start) AS time, ", "").replace("time, cluster", "cluster")
    sql = sql.replace(" otel_traces_loadtrace_jobs", " default_loadtrace.otel_traces_loadtrace_jobs")  # chDB's place
    code = f"import time; from chdb import session; s = session.Session({str(db)!r}); t = time.monotonic(); "
    return [sys.executable, "-c", code + f"s.query({sql!r}); print(f'(the query {{time.monotonic() - t:.3f}} s)')"]


# A warm server for the HTTP path: the loopback front over a chDB session of the database (tests/support), in its own
# process; it prints its URL once it listens.
SERVER = (
    "import sys; sys.path.insert(0, {tests!r}); from chdb import session; from support.clickhouse_front import Front; "
    "s = session.Session({db!r}); front = Front(s); url = front.__enter__(); s.query('SELECT count() FROM "
    "default_loadtrace.otel_traces_loadtrace_jobs'); print(url, flush=True); sys.stdin.read()"
)


def http_server(db: Path) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(tests=str(REPO / "tests"), db=str(db))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def build(big: Path, small: Path, tree: Path, args: argparse.Namespace) -> None:
    """The rollup's database (``big``) and the span-reading paths' (``small``, ``tree``)."""
    spanned = min(args.jobs, VARIANTS) if args.rollup_only else args.jobs
    rows, insert = fill(big, spanned, args.ranks, args.template, index=True)
    if spanned < args.jobs:
        replicate_index(big, args.jobs)
    size = sum(f.stat().st_size for f in big.rglob("*") if f.is_file()) / 1e9
    print(
        f"chdb: {spanned} x {args.ranks} ranks = {rows:,} spans, inserted in {insert:.1f} s, {size:.2f} GB", flush=True
    )
    per_job = roll_up(big, args.jobs)
    print(f"rollup: {per_job:.2f} s per {args.ranks}-rank job; {args.jobs} jobs in the rollup", flush=True)
    fill(small, args.file_jobs, args.ranks)
    write_tree(tree, args.file_jobs, args.ranks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--file-jobs", type=int, default=20, help="jobs for the span-reading paths (files, chdb:)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--template", type=Path, default=REPO / "docs" / "samples" / "fsdp524")  # today's spans
    parser.add_argument("--scratch", help="keep the databases in this folder (default: a temporary one)")
    parser.add_argument("--rollup-only", action="store_true", help="spans for jobs 0-20 only, the rest in the rollup")
    parser.add_argument("--build-only", action="store_true", help="make the databases (--scratch), time nothing")
    args = parser.parse_args()
    loadtrace = [str(Path(sys.executable).with_name("loadtrace")), "jobs", "--group-by", "cluster", "--format", "json"]
    with tempfile.TemporaryDirectory(prefix="bench-ch-") as temporary:
        big, small, tree = (Path(args.scratch or temporary) / name for name in ("big", "small", "tree"))
        if not big.exists():
            build(big, small, tree, args)
        print(settle(big), flush=True)
        if args.build_only:
            return 0
        since = ["--since", "36500d"]
        groups = [*since, "--groups-only"]
        for name, command, jobs in (
            ("jobs --clickhouse chdb: --groups-only (rollup)", [*loadtrace, "--clickhouse", f"chdb:{big}", *groups], 0),
            ("jobs --clickhouse chdb: (rollup)", [*loadtrace, "--clickhouse", f"chdb:{big}", *since], args.jobs),
            ("dashboard p50/p95 by cluster (rollup)", dashboard(big), args.jobs),
            ("jobs --clickhouse chdb: (spans)", [*loadtrace, "--clickhouse", f"chdb:{small}", *since], args.file_jobs),
            ("jobs DIR", [*loadtrace, str(tree)], args.file_jobs),
        ):
            report(name, command, jobs or args.jobs, args)
        server, url = http_server(big)
        try:
            for name, command in (
                ("jobs --clickhouse http:// --groups-only (rollup)", [*loadtrace, "--clickhouse", url, *groups]),
                ("jobs --clickhouse http:// (rollup)", [*loadtrace, "--clickhouse", url, *since]),
            ):
                report(name, command, args.jobs, args, server.pid)
        finally:
            server.terminate()
            server.wait()
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
