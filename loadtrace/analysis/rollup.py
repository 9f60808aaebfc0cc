"""Each job's ``loadtrace jobs`` row, computed once and kept in ClickHouse beside its spans (``loadtrace rollup``), so
``jobs --clickhouse`` over a fleet's 10,000 jobs reads 10,000 rows, not 150 M spans.

Two tables beside the exporter's (``otel_traces`` names them ``otel_traces_loadtrace_traces`` and ``..._jobs``):

- the trace index: per trace its span count, first start and last end, kept by the server itself (a materialized view
  adds every block the collector inserts; a rollup's first run adds the spans already there);
- the job rows: each trace's rows as ``jobs`` computes them from its spans (``jobs.job_row``: the same code, so no
  second definition), with the trace's span count at the time and the thresholds used.

A row is used only while its trace's count and the asked thresholds are still those it was computed with. A trace that
gained spans since (a late rank, a restart under the same trace id, the launcher's exit witness), was never rolled up,
or was rolled with other thresholds is computed from its spans at query time, as before: the answer is always the one
the spans give. docs/report.md, ClickHouse rollup, has the tables and the method.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import time
from dataclasses import dataclass

from .jobs import KEYS, NULL, JobRow, JobsReport, check_keys, job_row, jobs_report, report_of_rows
from .ranks import jobs_from_spans
from .sources.clickhouse import Connection, check_table, parse_target, quote, read, read_since
from .sources.files import SourceError
from .startup import Thresholds

BATCH = 20  # traces read and rolled per query: a few 512-rank jobs' spans at a time


@dataclass(frozen=True)
class Tables:
    spans: str
    traces: str
    view: str
    jobs: str


def tables(connection: Connection) -> Tables:
    target = connection.target
    base = f"{target.database}.{target.table}_loadtrace"
    return Tables(target.name, f"{base}_traces", f"{base}_traces_view", f"{base}_jobs")


def _key_columns() -> str:
    return ", ".join(f"`{key}` Nullable(String)" for key in KEYS)


DDL = (
    # SimpleAggregateFunction: parts merge by min / max / sum; readers still GROUP BY TraceId (parts not yet merged).
    "CREATE TABLE IF NOT EXISTS {traces} (TraceId String, First SimpleAggregateFunction(min, DateTime64(9)), "
    "LastEnd SimpleAggregateFunction(max, UInt64), Spans SimpleAggregateFunction(sum, UInt64)) "
    "ENGINE = AggregatingMergeTree ORDER BY TraceId",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS {view} TO {traces} AS " + "{index}",
    # Made: the loadtrace that computed the row; Position: the job's place among its trace's (jobs_from_spans order);
    # Row '': a trace with no job (marked rolled).
    "CREATE TABLE IF NOT EXISTS {jobs} (TraceId String, Spans UInt64, RolledNs UInt64, Limits String, Made String, "
    "Position UInt32, {keys}, Row String) ENGINE = MergeTree ORDER BY (TraceId, RolledNs, Position)",
)
INDEX = (
    "SELECT TraceId, min(Timestamp) AS First, max(toUInt64(toUnixTimestamp64Nano(Timestamp)) + Duration) AS LastEnd, "
    "count() AS Spans FROM {spans} GROUP BY TraceId"
)


def _exists(connection: Connection, name: str) -> bool:
    database, table = name.split(".", 1)
    sql = f"SELECT count() FROM system.tables WHERE database = {quote(database)} AND name = {quote(table)}"
    return int(connection.rows(sql)[0][0]) > 0


def present(connection: Connection) -> bool:
    """Whether a rollup has run against this table (both of its tables are there)."""
    names = tables(connection)
    return _exists(connection, names.traces) and _exists(connection, names.jobs)


def ensure(connection: Connection) -> None:
    """The tables and the view; the index filled with the spans already there when it is new. (A block inserted
    between the view and that fill counts twice: harmless, rows compare with the index's own count.)"""
    names = tables(connection)
    new = not _exists(connection, names.traces)
    index = INDEX.format(spans=names.spans)
    for statement in DDL:
        connection.execute(statement.format(**dataclasses.asdict(names), index=index, keys=_key_columns()))
    if new:
        connection.execute(f"INSERT INTO {names.traces} {index}")


def _window(since_seconds: float) -> str:
    return f"min(First) >= now64(9) - toIntervalNanosecond({int(since_seconds * 1e9)})"


def limits_text(limits: Thresholds) -> str:
    return json.dumps(dataclasses.asdict(limits), sort_keys=True)


def made_by() -> str:
    """This loadtrace's version: rows another one stored may differ from what this one computes, so they are not used
    (``jobs`` reads those traces' spans, and the next rollup computes them again)."""
    try:
        return importlib.metadata.version("loadtrace")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _ours(limits: Thresholds) -> str:
    return f"Limits = {quote(limits_text(limits))} AND Made = {quote(made_by())}"


# Rolling up --------------------------------------------------------------------------------------------------------


@dataclass
class Rolled:
    traces: int  # traces rolled up now
    jobs: int  # their jobs
    waiting: int  # traces in the window not rolled up: a span ended in the last ``quiet`` seconds
    table: str


def roll_up(connection: Connection, limits: Thresholds, since_seconds: float, quiet_seconds: float) -> Rolled:
    """Every trace of the window whose last span ended ``quiet_seconds`` ago and whose rows are missing or older than
    its spans: its rows computed and stored."""
    check_table(connection)
    ensure(connection)
    names = tables(connection)
    quiet = int(quiet_seconds * 1e9)
    stored = f"SELECT TraceId, Spans FROM {names.jobs} WHERE {_ours(limits)}"
    found = connection.rows(
        f"SELECT TraceId, sum(Spans) AS spans, max(LastEnd) < toUInt64(toUnixTimestamp64Nano(now64(9))) - {quiet} "
        f"FROM {names.traces} GROUP BY TraceId HAVING {_window(since_seconds)} AND (TraceId, spans) NOT IN ({stored}) "
        "ORDER BY TraceId"
    )
    due = [(trace, int(spans)) for trace, spans, quiet_now in found if quiet_now in (1, True)]
    jobs = 0
    for start in range(0, len(due), BATCH):
        jobs += roll_traces(connection, names, dict(due[start : start + BATCH]), limits)
    return Rolled(len(due), jobs, len(found) - len(due), names.jobs)


def roll_traces(connection: Connection, names: Tables, counts: dict[str, int], limits: Thresholds) -> int:
    """The rows of these traces, each with the span count read before its spans (a span that lands in between
    makes the count stale, so the trace is computed from its spans until it is rolled again)."""
    rows_of = rows_of_traces(connection, list(counts), limits)
    store(connection, names, rows_of, counts, limits_text(limits))
    return sum(len(rows) for rows in rows_of.values())


def rows_of_traces(connection: Connection, traces: list[str], limits: Thresholds) -> dict[str, list[JobRow]]:
    """Each trace's rows (none for a trace without a job), computed from its spans as for files."""
    spans = read(connection, f"TraceId IN ({', '.join(quote(trace) for trace in traces)})")
    rows_of: dict[str, list[JobRow]] = {trace: [] for trace in traces}
    for job in jobs_from_spans(spans.spans, spans.states):
        rows_of.setdefault(job.trace_id, []).append(job_row(job, limits))
    return rows_of


def store(
    connection: Connection, names: Tables, rows_of: dict[str, list[JobRow]], counts: dict[str, int], limits: str
) -> None:
    """Each trace's rows, with its span count and the thresholds they were computed with (JSON)."""
    rolled_ns = time.time_ns()
    values = []
    for trace, rows in rows_of.items():
        head = f"({quote(trace)}, {counts.get(trace, 0)}, {rolled_ns}, {quote(limits)}, {quote(made_by())}"
        values += [f"{head}, {i}, {_keys(row)}, {quote(_dump(row))})" for i, row in enumerate(rows)]
        if not rows:
            values.append(f"{head}, 0, {', '.join('NULL' for _ in KEYS)}, '')")
    for start in range(0, len(values), 1000):
        connection.execute(f"INSERT INTO {names.jobs} VALUES {', '.join(values[start : start + 1000])}")


def _keys(row: JobRow) -> str:
    return ", ".join("NULL" if (value := pick(row)) is None else quote(value) for pick in KEYS.values())


def _dump(row: JobRow) -> str:
    return json.dumps(dataclasses.asdict(row), separators=(",", ":"))


# Answering ``jobs`` --------------------------------------------------------------------------------------------------


def _matches(pairs: list[tuple[str, str]]) -> str:
    """``jobs.matches`` as SQL over the key columns (``--where cluster=null``: no value, or the text "null")."""
    tests = [
        f"(`{key}` IS NULL OR `{key}` = {quote(NULL)})" if value == NULL else f"`{key}` = {quote(value)}"
        for key, value in pairs
    ]
    return " AND ".join(tests) or "1"


def jobs_report_of_rollup(
    connection: Connection,
    since_seconds: float,
    where: list[str],
    group_by: list[str],
    limits: Thresholds,
) -> JobsReport:
    """``jobs_report`` of the window's traces: their stored rows where current, filtered in SQL (only the rows that
    match leave the server, as one JSON array), and the other traces' rows from their spans."""
    names, pairs = tables(connection), check_keys(where, group_by)
    window = f"SELECT TraceId, sum(Spans) AS spans FROM {names.traces} GROUP BY TraceId HAVING {_window(since_seconds)}"
    # Rows of the trace's current span count (rolled twice at that count, by two rollups at once: the newer).
    latest = (
        f"SELECT TraceId, Position, Row, {_matches(pairs)} AS matched FROM {names.jobs} "
        f"WHERE {_ours(limits)} AND (TraceId, Spans) IN ({window}) "
        "ORDER BY TraceId, Position, RolledNs DESC LIMIT 1 BY TraceId, Position"
    )
    [(traces, rest, unmatched)] = connection.rows(
        f"SELECT count(), groupArrayIf(TraceId, TraceId NOT IN (SELECT TraceId FROM ({latest}))), "
        f"(SELECT countIf(Row != '' AND NOT matched) FROM ({latest})) FROM ({window})"
    )
    if not int(traces):
        raise SourceError(f"no traces in {connection.where} ({names.spans}) began in the last {since_seconds:g} s")
    text = connection.text(
        "SELECT concat('[', arrayStringConcat(arrayMap(row -> row.3, arraySort(row -> (row.1, row.2), "
        f"groupArrayIf((TraceId, Position, Row), Row != '' AND matched))), ','), ']') FROM ({latest})"
    )
    rows = [JobRow(**fields) for fields in json.loads(text)]
    rest = sorted(rest)
    for start in range(0, len(rest), BATCH):
        rows += [
            row for found in rows_of_traces(connection, rest[start : start + BATCH], limits).values() for row in found
        ]
    return report_of_rows(rows, where, group_by, 0, int(unmatched))


def roll_up_url(url: str, table: str, limits: Thresholds, since_seconds: float, quiet_seconds: float) -> Rolled:
    """``loadtrace rollup --clickhouse URL``."""
    connection = Connection(parse_target(url, table))
    try:
        return roll_up(connection, limits, since_seconds, quiet_seconds)
    finally:
        connection.close()


def jobs_of_clickhouse(
    url: str, table: str, since_seconds: float, where: list[str], group_by: list[str], limits: Thresholds
) -> JobsReport:
    """``loadtrace jobs --clickhouse URL``: from the rollup where one has run, else from every span of the window."""
    connection = Connection(parse_target(url, table))
    try:
        check_table(connection)
        if present(connection):
            return jobs_report_of_rollup(connection, since_seconds, where, group_by, limits)
        spans = read_since(connection, since_seconds, check_keys(where, []))
    finally:
        connection.close()
    return jobs_report(spans, where, group_by, limits)
