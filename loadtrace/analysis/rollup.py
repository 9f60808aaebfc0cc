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
import json
import time
from dataclasses import dataclass

from ..startup_split import STARTUP_PHASES
from ..version import __version__
from .jobs import (
    KEYS,
    NULL,
    GroupsReport,
    JobRow,
    JobsReport,
    check_keys,
    differences,
    group_from,
    group_order,
    job_row,
    jobs_report,
    matches,
    no_jobs,
    report_of_rows,
)
from .ranks import jobs_from_spans
from .sources.clickhouse import (
    Connection,
    Target,
    check_table,
    open_database_alone,
    parse_target,
    quote,
    read,
    read_since,
)
from .sources.files import SourceError
from .startup import Thresholds

BATCH = 20  # traces read and rolled per query: a few 512-rank jobs' spans at a time


@dataclass(frozen=True)
class Tables:
    spans: str
    traces: str
    view: str  # in the span table's database, beside it
    jobs: str


def rollup_database(target: Target) -> str:
    """The database of the rollup's two tables in a chDB directory: their own (``default_loadtrace``), so that
    ``jobs`` opens them without the span table (``sources.clickhouse.open_database_alone``)."""
    return f"{target.database}_loadtrace"


def tables_in(target: Target, database: str) -> Tables:
    base = f"{target.table}_loadtrace"
    view = f"{target.database}.{base}_traces_view"
    return Tables(target.name, f"{database}.{base}_traces", view, f"{database}.{base}_jobs")


def tables(connection: Connection) -> Tables:
    """Where the rollup's tables are; where there are none yet, where ``ensure`` makes them."""
    return _found(connection) or _made_at(connection.target)


def _places(target: Target) -> list[Tables]:
    """Where the rollup's tables can be, in the order they are looked for: in their own database (a chDB directory's
    since this version, or a server serving one), else beside the span table (a server's; a chDB directory an older
    loadtrace rolled up)."""
    return [tables_in(target, database) for database in (rollup_database(target), target.database)]


def _there(connection: Connection, places: list[Tables]) -> set[str]:
    """Which of the ``places``' two tables exist, in one query."""
    names = [name for place in places for name in (place.traces, place.jobs)]
    pairs = ", ".join(f"({quote(database)}, {quote(table)})" for database, table in (n.split(".", 1) for n in names))
    sql = f"SELECT database, name FROM system.tables WHERE (database, name) IN ({pairs})"
    return {f"{database}.{table}" for database, table in connection.rows(sql)}


def _whole(places: list[Tables], there: set[str]) -> Tables | None:
    """The first of ``places`` where both tables are ``there``."""
    return next((place for place in places if {place.traces, place.jobs} <= there), None)


def _found(connection: Connection) -> Tables | None:
    """Where both of the rollup's tables are (``_places``); None before the first rollup."""
    places = _places(connection.target)
    return _whole(places, _there(connection, places))


def _made_at(target: Target) -> Tables:
    """A chDB directory's rollup in its own database; a server's beside the span table (the one database the
    collector's user is granted, no second database to create)."""
    return tables_in(target, rollup_database(target) if target.path is not None else target.database)


def _key_columns() -> str:
    return ", ".join(f"`{key}` Nullable(String)" for key in KEYS)


TABLES_DDL = (
    # SimpleAggregateFunction: parts merge by min / max / sum; readers still GROUP BY TraceId (parts not yet merged).
    "CREATE TABLE IF NOT EXISTS {traces} (TraceId String, First SimpleAggregateFunction(min, DateTime64(9)), "
    "LastEnd SimpleAggregateFunction(max, UInt64), Spans SimpleAggregateFunction(sum, UInt64)) "
    "ENGINE = AggregatingMergeTree ORDER BY TraceId",
    # Made: the loadtrace that computed the row; Position: the job's place among its trace's (jobs_from_spans order);
    # Row '': a trace with no job (marked rolled).
    "CREATE TABLE IF NOT EXISTS {jobs} (TraceId String, Spans UInt64, RolledNs UInt64, Limits String, Made String, "
    "Position UInt32, {keys}, Row String) ENGINE = MergeTree ORDER BY (TraceId, RolledNs, Position)",
)
VIEW_DDL = "CREATE MATERIALIZED VIEW IF NOT EXISTS {view} TO {traces} AS {index}"
INDEX = (
    "SELECT TraceId, min(Timestamp) AS First, max(toUInt64(toUnixTimestamp64Nano(Timestamp)) + Duration) AS LastEnd, "
    "count() AS Spans FROM {spans} GROUP BY TraceId"
)


def ensure(connection: Connection) -> Tables:
    """The tables and the view, and where they are; the index filled with the spans already there when it is new. (A
    block inserted between the view and that fill counts twice: harmless, rows compare with the index's own count.) A
    chDB directory an older loadtrace rolled up has its tables moved to their own database."""
    target = connection.target
    places = _places(target)
    there = _there(connection, places)
    found = _whole(places, there)
    names = _made_at(target) if target.path is not None or found is None else found
    older = tables_in(target, target.database)  # a chDB directory's, before this layout
    moving = target.path is not None and {older.traces, older.jobs} <= there
    new = not moving and found is None and names.traces not in there
    if target.path is not None:
        # Ordinary: a database chDB can attach alone (an Atomic one it cannot: its UUID is not mapped then).
        connection.execute("SET allow_deprecated_database_ordinary = 1")
        connection.execute(f"CREATE DATABASE IF NOT EXISTS {rollup_database(target)} ENGINE = Ordinary")
    for statement in TABLES_DDL:
        connection.execute(statement.format(**dataclasses.asdict(names), keys=_key_columns()))
    if moving:
        # Done again whole until the older tables are gone (a move that stopped half-way). One process holds a chDB
        # directory: no insert lands between the copy and the view's new target.
        for old, now in ((older.traces, names.traces), (older.jobs, names.jobs)):
            connection.execute(f"TRUNCATE TABLE {now}")
            connection.execute(f"INSERT INTO {now} SELECT * FROM {old}")
    if moving or (new and target.path is not None):  # a view an older layout left points at the older index
        connection.execute(f"DROP VIEW IF EXISTS {names.view} SYNC")
    index = INDEX.format(spans=names.spans)
    connection.execute(VIEW_DDL.format(**dataclasses.asdict(names), index=index))
    if moving:
        for old in (older.traces, older.jobs):
            connection.execute(f"DROP TABLE {old} SYNC")
    if new:
        connection.execute(f"INSERT INTO {names.traces} {index}")
    return names


def _window(since_seconds: float) -> str:
    return f"min(First) >= now64(9) - toIntervalNanosecond({int(since_seconds * 1e9)})"


def limits_text(limits: Thresholds) -> str:
    return json.dumps(dataclasses.asdict(limits), sort_keys=True)


def made_by() -> str:
    """This loadtrace's version: rows another one stored may differ from what this one computes, so they are not used
    (``jobs`` reads those traces' spans, and the next rollup computes them again)."""
    return __version__


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
    names = ensure(connection)
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
    """``jobs.matches`` as SQL over the key columns (``--where cluster=null``: no value, or the text "null"); never
    NULL, so that ``NOT`` it counts the rows that do not match."""
    tests = [
        f"(`{key}` IS NULL OR `{key}` = {quote(NULL)})" if value == NULL else f"ifNull(`{key}` = {quote(value)}, 0)"
        for key, value in pairs
    ]
    return " AND ".join(tests) or "1"


@dataclass
class Current:
    """The window's traces as the rollup answers them: ``latest``, the SQL of their current stored rows (with
    ``matched``: whether the row meets ``--where``); ``rest``, the traces to compute from their spans."""

    latest: str
    rest: list[str]
    stored: int  # current stored rows of a job (matching --where or not)
    unmatched: int  # of those, the ones that do not match


def current(
    connection: Connection, names: Tables, since_seconds: float, pairs: list[tuple[str, str]], limits: Thresholds
) -> Current:
    window = f"SELECT TraceId, sum(Spans) AS spans FROM {names.traces} GROUP BY TraceId HAVING {_window(since_seconds)}"

    def latest(columns: str) -> str:
        # Rows of the trace's current span count (rolled twice at that count, by two rollups at once: the newer).
        return (
            f"SELECT TraceId, Position, {columns}, {_matches(pairs)} AS matched "
            f"FROM {names.jobs} WHERE {_ours(limits)} AND (TraceId, Spans) IN ({window}) "
            "ORDER BY TraceId, Position, RolledNs DESC LIMIT 1 BY TraceId, Position"
        )

    # The counts need only whether a row holds a job: its length, not its JSON (a 512-rank job's is ~3.5 kB).
    flags = latest("notEmpty(Row) AS job")
    [(traces, rest, counts)] = connection.rows(
        f"SELECT count(), groupArrayIf(TraceId, TraceId NOT IN (SELECT TraceId FROM ({flags}))), "
        f"(SELECT (countIf(job), countIf(job AND NOT matched)) FROM ({flags})) FROM ({window})"
    )
    if not int(traces):
        raise SourceError(f"no traces in {connection.where} ({names.spans}) began in the last {since_seconds:g} s")
    keys = ", ".join(f"`{key}`" for key in KEYS)
    return Current(latest(f"{keys}, Row"), sorted(rest), int(counts[0]), int(counts[1]))


class SpansNeeded(Exception):
    """A trace of the window has no current rows, and the connection has the rollup's database alone open."""


def _computed(connection: Connection, traces: list[str], limits: Thresholds) -> list[JobRow]:
    """The rows of traces the rollup has no current rows for, from their spans."""
    if traces and not connection.reads_spans:
        raise SpansNeeded
    rows: list[JobRow] = []
    for start in range(0, len(traces), BATCH):
        rows += [
            row for found in rows_of_traces(connection, traces[start : start + BATCH], limits).values() for row in found
        ]
    return rows


def jobs_report_of_rollup(
    connection: Connection,
    names: Tables,
    since_seconds: float,
    where: list[str],
    group_by: list[str],
    limits: Thresholds,
) -> JobsReport:
    """``jobs_report`` of the window's traces: their stored rows where current, filtered in SQL (only the rows that
    match leave the server, as one JSON array), and the other traces' rows from their spans."""
    now = current(connection, names, since_seconds, check_keys(where, group_by), limits)
    text = connection.text(
        "SELECT concat('[', arrayStringConcat(arrayMap(row -> row.3, arraySort(row -> (row.1, row.2), "
        f"groupArrayIf((TraceId, Position, Row), Row != '' AND matched))), ','), ']') FROM ({now.latest})"
    )
    rows = [JobRow(**fields) for fields in json.loads(text)] + _computed(connection, now.rest, limits)
    return report_of_rows(rows, where, group_by, 0, now.unmatched)


def percentile_sql(values: str, share: float) -> str:
    """``jobs.percentile`` of a sorted, non-empty array, in SQL: the same float operations in the same order, so the
    same bits (ClickHouse's ``quantileExactInclusive`` is the same definition, but adds 1 before it takes the
    fraction: its last bit can differ)."""
    position = f"({share!r} * (length({values}) - 1))"
    low = f"(toUInt64(floor({position})) + 1)"
    high = f"least({low} + 1, length({values}))"
    return f"({values}[{low}] + ({values}[{high}] - {values}[{low}]) * ({position} - floor({position})))"


def median_sql(values: str) -> str:
    """``statistics.median`` of a sorted, non-empty array, in SQL: the middle value, or the mean of the two."""
    half = f"intDiv(length({values}), 2)"
    return f"if(length({values}) % 2 = 1, {values}[{half} + 1], ({values}[{half}] + {values}[{half} + 1]) / 2)"


# The fields of a row the groups need, read from its JSON in one pass.
_FIELDS = (
    "JSONExtract(Row, 'Tuple(startup_seconds Nullable(Float64), storage_bytes_per_second Nullable(Float64), "
    "phases Map(String, Float64))')"
)
_PHASE_ARRAYS = ", ".join(
    f"arraySort(groupArrayIf(f.3[{quote(phase)}], notEmpty(f.3))) AS `{phase}`" for phase in STARTUP_PHASES
)
# Per group: its jobs, startup p50 / p95 / max, the storage rate's p50, each phase's median over the jobs whose
# slowest rank's phases are known (each sorted once): what ``jobs.group_of`` and ``jobs.phase_medians_of`` compute.
GROUPS = (
    "SELECT {keys}jobs, "
    f"if(empty(startups), NULL, ({percentile_sql('startups', 0.5)}, {percentile_sql('startups', 0.95)}, "
    "arrayMax(startups))), "
    f"if(empty(rates), NULL, {percentile_sql('rates', 0.5)}), "
    f"if(empty(`{STARTUP_PHASES[0]}`), [], [{', '.join(median_sql(f'`{phase}`') for phase in STARTUP_PHASES)}]) "
    "FROM (SELECT {keys}count() AS jobs, arraySort(groupArray(f.1)) AS startups, arraySort(groupArray(f.2)) AS rates, "
    f"{_PHASE_ARRAYS} FROM (SELECT *, {_FIELDS} AS f FROM ({{rows}})) {{group_by}})"
)


def groups_of_rollup(
    connection: Connection,
    names: Tables,
    since_seconds: float,
    where: list[str],
    group_by: list[str],
    limits: Thresholds,
) -> GroupsReport:
    """``jobs --groups-only`` of the window's traces: the groups' statistics computed in the server, over the stored
    rows where current and, sent with the query, the rows of the other traces computed from their spans."""
    pairs = check_keys(where, group_by)
    now = current(connection, names, since_seconds, pairs, limits)
    computed = _computed(connection, now.rest, limits)
    matching = [row for row in computed if matches(row, pairs)]
    columns = ", ".join(f"`{key}`" for key in KEYS)
    rows = f"SELECT {columns}, Row FROM ({now.latest}) WHERE Row != '' AND matched"
    if matching:
        structure = ", ".join(f"`{key}` Nullable(String)" for key in KEYS) + ", Row String"
        literal = ", ".join(f"({_keys(row)}, {quote(_dump(row))})" for row in matching)
        rows += f" UNION ALL SELECT * FROM values({quote(structure)}, {literal})"
    if now.stored - now.unmatched + len(matching) == 0:
        raise no_jobs(pairs, now.stored + len(computed))
    keys = "".join(f"`{key}`, " for key in group_by)
    found = []
    for *values, jobs, startup, rate, medians in connection.rows(
        GROUPS.format(keys=keys, rows=rows, group_by=f"GROUP BY {keys.rstrip(', ')}" if group_by else "")
    ):
        group = group_from(dict(zip(group_by, values, strict=True)), int(jobs), startup and tuple(startup), rate)
        found.append(
            (
                group_order(tuple(values), int(jobs)),
                group,
                dict(zip(STARTUP_PHASES, medians, strict=True)) if medians else {},
            )
        )
    found.sort(key=lambda item: item[0])
    groups = [group for _, group, _ in found]
    return GroupsReport(groups, differences(groups, [phases for _, _, phases in found]), 0)


def roll_up_url(url: str, table: str, limits: Thresholds, since_seconds: float, quiet_seconds: float) -> Rolled:
    """``loadtrace rollup --clickhouse URL``."""
    connection = Connection(parse_target(url, table))
    try:
        return roll_up(connection, limits, since_seconds, quiet_seconds)
    finally:
        connection.close()


def jobs_of_clickhouse(
    url: str,
    table: str,
    since_seconds: float,
    where: list[str],
    group_by: list[str],
    limits: Thresholds,
    groups_only: bool = False,
) -> JobsReport | GroupsReport:
    """``loadtrace jobs --clickhouse URL [--groups-only]``: from the rollup where one has run, else from every span of
    the window. A chDB directory's rollup is read first with its database alone open (a fleet's span table is not
    loaded); only where a trace of the window has no current rows is the directory opened whole."""
    target = parse_target(url, table)
    answer = groups_of_rollup if groups_only else jobs_report_of_rollup
    alone = open_database_alone(target, rollup_database(target)) if target.path is not None else None
    if alone is not None:
        try:
            if (names := _found(alone)) is not None:
                return answer(alone, names, since_seconds, where, group_by, limits)
        except SpansNeeded:
            pass
        finally:
            alone.close()
    connection = Connection(target)
    try:
        check_table(connection)
        if (names := _found(connection)) is not None:
            return answer(connection, names, since_seconds, where, group_by, limits)
        spans = read_since(connection, since_seconds, check_keys(where, []))
    finally:
        connection.close()
    report = jobs_report(spans, where, group_by, limits)
    return GroupsReport.of(report) if groups_only else report
