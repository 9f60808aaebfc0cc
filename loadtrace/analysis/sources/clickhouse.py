"""ClickHouse's ``otel_traces`` table (what the collector-contrib ``clickhouseexporter`` writes) → the same ``SpanSet``
the file reader gives.

``--clickhouse URL``: ``http(s)://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]`` through ClickHouse's official driver
(``clickhouse-connect``, the ``loadtrace[clickhouse]`` extra, imported only then), or ``chdb:PATH``, a chDB database
directory read in-process (``chdb-core``). The exporter stores every attribute value as text
(``pcommon.Value.AsString``); ``typed`` turns it back into what the span carried (docs/report.md, ClickHouse). Every
failure (a bad URL, a server that refuses, a table that is missing or has another schema) is one ``SourceError`` line.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import urllib.parse
import zlib
from dataclasses import dataclass
from typing import Any

from ... import semconv as sc
from ... import statefile
from .files import SourceError, Span, SpanSet, StateFile

DEFAULT_TABLE = "otel_traces"
DEFAULT_DATABASE = "default"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INTEGER = re.compile(r"^-?(0|[1-9][0-9]{0,18})$")
_FLOAT = re.compile(r"^-?[0-9]+\.[0-9]+$")
# Keys whose values are text even when the text looks like a number (a SLURM job id, a version "2").
STRING_KEYS = frozenset(
    {
        sc.JOB_ID,
        sc.JOB_ID_SOURCE,
        sc.LAUNCH_ID,
        sc.LAUNCHER,
        sc.VERSION,
        sc.CLUSTER,
        sc.SERVICE_NAME,
        sc.SERVICE_INSTANCE_ID,
        sc.HOST_NAME,
        sc.CHECKPOINT,
        sc.STRATEGY,
        sc.DTYPE,
        sc.FILE_PATH,
        sc.MODEL_CLASS,
    }
)
# The exporter's spelling (pdata's StatusCode.String, 0.139), and the one of releases before it, in older tables.
STATUS_CODES = {"Unset": 0, "Ok": 1, "Error": 2, "STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
# The columns read back, and the ones a table must have to be the exporter's.
COLUMNS = (
    "TraceId, SpanId, ParentSpanId, SpanName, toUnixTimestamp64Nano(Timestamp), Duration, SpanAttributes, "
    "ResourceAttributes, StatusCode, ScopeName, "
    f"Events.Attributes[indexOf(Events.Name, {chr(39) + sc.DATA_EVENT + chr(39)})]"  # the values for machines
)
REQUIRED = {
    "Timestamp": "DateTime64(9)",
    "TraceId": "String",
    "SpanId": "String",
    "ParentSpanId": "String",
    "SpanName": "LowCardinality(String)",
    "ResourceAttributes": "Map(LowCardinality(String), String)",
    "SpanAttributes": "Map(LowCardinality(String), String)",
    "Duration": "UInt64",
    "StatusCode": "LowCardinality(String)",
    "ScopeName": "String",
    "Events.Name": "Array(LowCardinality(String))",
    "Events.Attributes": "Array(Map(LowCardinality(String), String))",
}


def typed(key: str, text: str) -> Any:
    """One ``AsString`` value back as the span's own: decimal text an int, ``true``/``false`` a bool, a JSON array a
    list, a decimal fraction a float; text for ``STRING_KEYS`` and anything else."""
    if key in STRING_KEYS or key.startswith(sc.LIB_PREFIX):
        return text
    if _INTEGER.match(text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("[") and text.endswith("]"):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        return value if isinstance(value, list) else text
    if _FLOAT.match(text):
        return float(text)
    return text


def typed_map(values: dict[str, str]) -> dict[str, Any]:
    return {key: typed(key, value) for key, value in values.items()}


@dataclass(frozen=True)
class Target:
    """Where the table is: ``url`` (http/https) or ``path`` (chdb), and the table's qualified name."""

    url: str | None
    path: str | None
    database: str
    table: str

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


def parse_target(url: str, table: str = DEFAULT_TABLE) -> Target:
    text = url.strip()
    if not _IDENTIFIER.match(table):
        raise SourceError(f"bad --clickhouse-table {table!r}: expected a name (letters, digits, _)")
    if text.startswith("chdb:"):
        path = text.removeprefix("chdb:")
        if not path:
            raise SourceError("bad --clickhouse URL 'chdb:': expected chdb:PATH, a chDB database directory")
        return Target(None, path, DEFAULT_DATABASE, table)
    parsed = urllib.parse.urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SourceError(f"bad --clickhouse URL {url!r}: expected http(s)://HOST:8123[/DATABASE] or chdb:PATH")
    database = parsed.path.strip("/") or DEFAULT_DATABASE
    if not _IDENTIFIER.match(database):
        raise SourceError(f"bad --clickhouse URL {url!r}: {database!r} is not a database name")
    return Target(text, None, database, table)


class Connection:
    """One query at a time, rows back as tuples; each driver error becomes one ``SourceError`` line. ``create``: a
    ``chdb:`` directory that is not there yet is made (``loadtrace ingest``); ``session``: a chDB session already open
    on the target's directory (``open_database_alone``)."""

    def __init__(self, target: Target, create: bool = False, session: Any = None) -> None:
        self.target = target
        self._chdb: Any = session
        self._http: Any = None
        self.reads_spans = session is None  # False: only one database of the directory is open, not the span table's
        if session is not None:
            return
        if target.path is not None:
            self._chdb = _open_chdb(target.path, create)
        else:
            self._http = _open_http(target)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            settings = _settings_for(sql)
            if self._chdb is not None:
                for name, value in settings.items():
                    self._chdb.query(f"SET {name} = {value}")
                answer = self._chdb.query(sql, "JSONCompact")
                return [tuple(row) for row in json.loads(answer.bytes() or b'{"data": []}')["data"]]
            return [tuple(row) for row in self._http.query(sql, settings=settings).result_rows]
        except Exception as error:  # the drivers raise their own types; the message is what the user needs
            raise SourceError(f"ClickHouse ({self.where}): {_first_line(error)}") from None

    def text(self, sql: str) -> str:
        """The one string value a query returns, as it is (no format around it to decode)."""
        try:
            if self._chdb is not None:
                return bytes(self._chdb.query(sql, "RawBLOB").bytes()).decode()
            return bytes(self._http.raw_query(sql, fmt="RawBLOB")).decode()
        except Exception as error:
            raise SourceError(f"ClickHouse ({self.where}): {_first_line(error)}") from None

    def execute(self, sql: str) -> None:
        """A statement that returns no rows (CREATE, INSERT ... VALUES)."""
        try:
            if self._chdb is not None:
                self._chdb.query(sql)
            else:
                self._http.command(sql)
        except Exception as error:
            raise SourceError(f"ClickHouse ({self.where}): {_first_line(error)}") from None

    def insert(self, statement: str, data: str) -> None:
        """An ``INSERT ... FORMAT`` with its data: the request's body over HTTP, the statement's tail in chDB."""
        try:
            if self._chdb is not None:
                self._chdb.query(f"{statement}\n{data}")
            else:
                self._http.command(statement, data=data.encode())
        except Exception as error:
            raise SourceError(f"ClickHouse ({self.where}): {_first_line(error)}") from None

    @property
    def where(self) -> str:
        return f"chdb:{self.target.path}" if self.target.path is not None else str(self.target.url)

    def close(self) -> None:
        for handle in (self._chdb, self._http):
            if handle is not None:
                try:
                    handle.close()
                except Exception:  # closing must not hide the answer already printed
                    pass


# ClickHouse parses at most this many bytes of a query unless told more (``max_query_size``, 256 KiB by default).
MAX_QUERY_SIZE = 262_144


def _settings_for(sql: str) -> dict[str, int]:
    """What a query needs set first: a larger ``max_query_size`` for one that carries rows with it."""
    size = len(sql.encode())
    return {"max_query_size": size + 1024} if size > MAX_QUERY_SIZE else {}


FIRST_LINE_CHARS = 300  # a driver's first line past this is cut at a word, with an ellipsis


def _first_line(error: BaseException) -> str:
    """The error's first line, whole up to ``FIRST_LINE_CHARS``, else cut after the last whole word that fits: a
    server's message cut mid-word (``Unknown tab``) reads as a different error."""
    line = (str(error).strip() or type(error).__name__).splitlines()[0].rstrip()
    if len(line) <= FIRST_LINE_CHARS:
        return line
    cut = line[: FIRST_LINE_CHARS - 1]
    if not line[FIRST_LINE_CHARS - 1].isspace() and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip() + "…"


def _open_chdb(path: str, create: bool = False) -> Any:
    if create and not os.path.exists(path):
        try:
            os.makedirs(path, mode=0o700)
        except OSError as error:
            raise SourceError(f"chdb:{path}: {error.strerror or error}") from None
    if not os.path.isdir(path):
        raise SourceError(f"chdb:{path}: not a chDB database directory")
    try:
        from chdb import session
    except ImportError:
        raise SourceError("--clickhouse chdb:PATH needs chDB: pip install chdb-core") from None
    try:
        return session.Session(path)
    except Exception as error:
        raise SourceError(f"chdb:{path}: {_first_line(error)}") from None


def open_database_alone(target: Target, database: str) -> Connection | None:
    """A ``chdb:`` directory opened with ``database`` alone attached (an Ordinary database), none of the other
    databases' tables loaded: opening a directory otherwise reads the metadata of every part of every table, a
    fleet's span table's too (docs/report.md, ClickHouse rollup). None where it has no such database, or chDB
    cannot open it so (the caller then opens the directory whole, which says what is wrong)."""
    path = str(target.path)
    # A "?" would start the connection string's parameters.
    if "?" in path or not os.path.isfile(os.path.join(path, "metadata", f"{database}.sql")):
        return None
    try:
        from chdb import session
    except ImportError:
        return None
    try:
        # clickhouse-local's --only-system-tables: no database of the directory is loaded until attached.
        alone = session.Session(f"{path}?only-system-tables=1")
    except Exception:
        return None
    try:
        alone.query(f"ATTACH DATABASE {database}")
    except Exception:
        alone.close()
        return None
    return Connection(target, session=alone)


def _open_http(target: Target) -> Any:
    try:
        import clickhouse_connect
    except ImportError:
        raise SourceError("--clickhouse http://... needs the driver: pip install clickhouse-connect") from None
    # The driver logs each failure itself ("Unexpected Http Driver Exception", with the URL), then raises it: the
    # raised error is our one line; its log record would be a second, through logging's last-resort stderr handler.
    driver_log = logging.getLogger("clickhouse_connect")
    driver_log.addHandler(logging.NullHandler())
    driver_log.propagate = False
    parsed = urllib.parse.urlparse(str(target.url))
    secure = parsed.scheme == "https"
    try:
        return clickhouse_connect.get_client(
            host=parsed.hostname,
            port=parsed.port or (8443 if secure else 8123),
            username=urllib.parse.unquote(parsed.username or "default"),
            password=urllib.parse.unquote(parsed.password or ""),
            database=target.database,
            secure=secure,
            connect_timeout=10,
            send_receive_timeout=300,
        )
    except Exception as error:
        raise SourceError(f"cannot reach ClickHouse at {target.url}: {_first_line(error)}") from None


def quote(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def table_columns(connection: Connection) -> dict[str, str]:
    """The table's columns and their types; empty when there is no such table."""
    target = connection.target
    return dict(
        connection.rows(
            f"SELECT name, type FROM system.columns WHERE database = {quote(target.database)} "
            f"AND table = {quote(target.table)}"
        )
    )


def check_table(connection: Connection, required: dict[str, str] = REQUIRED) -> None:
    """The table exists and has the exporter's columns (their types as its DDL gives them): those read, or
    ``required``."""
    target = connection.target
    found = table_columns(connection)
    if not found:
        raise SourceError(f"ClickHouse ({connection.where}): no table {target.name} (--clickhouse-table)")
    wrong = [f"{name} {kind}" for name, kind in required.items() if found.get(name) != kind]
    if wrong:
        raise SourceError(
            f"ClickHouse ({connection.where}): {target.name} is not the clickhouseexporter's otel_traces table "
            f"(it lacks {', '.join(wrong)})"
        )


# A state file's bytes as ``loadtrace ingest`` wrote them, at most this long once decompressed (``statefile.read``'s).
STATE_FILE_MAX_BYTES = 64 * 1024 * 1024


def state_file_data(data: bytes) -> str:
    """A state file's bytes as its row carries them (``loadtrace.state_file.data``)."""
    return base64.b64encode(zlib.compress(data, 9)).decode()


def state_of_row(attributes: dict[str, str]) -> StateFile | None:
    """The state file a ``loadtrace.state_file`` row carries; None when it does not carry one that decodes."""
    try:
        packed = base64.b64decode(attributes.get(sc.STATE_FILE_DATA, ""), validate=True)
        unpacker = zlib.decompressobj()
        data = unpacker.decompress(packed, STATE_FILE_MAX_BYTES + 1)
    except (binascii.Error, ValueError, zlib.error):
        return None
    state = statefile.decode(data) if len(data) <= STATE_FILE_MAX_BYTES and unpacker.eof else None
    return StateFile(attributes.get(sc.STATE_FILE_PATH, ""), state) if state is not None else None


def spans_of_rows(rows: list[tuple[Any, ...]]) -> SpanSet:
    """Rows of ``COLUMNS`` → spans, and the state files ``loadtrace ingest`` put in rows of their own; the rows of
    one resource share its dict, as the file reader's do."""
    resources: dict[str, dict[str, Any]] = {}
    found = SpanSet()
    spans = found.spans
    for trace_id, span_id, parent, name, start, duration, attributes, resource, status, scope, data in rows:
        if scope in sc.NOT_MEASURED_SCOPES:
            continue  # the job's structure, its findings and its loads view (files.py leaves them out too)
        if name == sc.SPAN_STATE_FILE:
            state = state_of_row(attributes)
            if state is None:
                found.skipped_state_files += 1
            else:
                found.states.append(state)
            continue
        key = json.dumps(resource, sort_keys=True)
        if key not in resources:
            resources[key] = typed_map(resource)
        start_ns = int(start)
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name=name,
                start_ns=start_ns,
                end_ns=(start_ns + int(duration)) % (1 << 64),
                attributes=typed_map({**attributes, **(data or {})}),
                resource=resources[key],
                status_code=STATUS_CODES.get(status, 0),
            )
        )
    return found


def read(connection: Connection, where: str = "1") -> SpanSet:
    """The spans of the rows ``where`` selects (a SQL condition), in time order."""
    check_table(connection)
    rows = connection.rows(f"SELECT {COLUMNS} FROM {connection.target.name} WHERE {where} ORDER BY Timestamp, SpanId")
    return spans_of_rows(rows)


def _open(url: str, table: str) -> Connection:
    return Connection(parse_target(url, table))


def job_traces(connection: Connection, pick: str) -> list[str]:
    """The trace ids ``--job ID`` can mean: the trace or job id itself (``ID@ATTEMPT`` too), else a unique prefix."""
    ids = [pick] + ([pick.rsplit("@", 1)[0]] if "@" in pick else [])
    job = f"ResourceAttributes[{quote(sc.JOB_ID)}]"
    for exact in (True, False):
        tests = [
            f"(TraceId = {quote(i.lower())} OR {job} = {quote(i)})"
            if exact
            else f"(startsWith(TraceId, {quote(i.lower())}) OR (startsWith({job}, {quote(i)}) AND {job} != ''))"
            for i in ids
            if i
        ]
        if not tests:
            break
        sql = f"SELECT DISTINCT TraceId FROM {connection.target.name} WHERE {' OR '.join(tests)} ORDER BY TraceId"
        traces = [row[0] for row in connection.rows(sql)]
        if traces:
            return traces
    return []


def read_job(url: str, table: str, pick: str, flag: str = "--job") -> SpanSet:
    """Only the spans of the trace ``pick`` names (every attempt: the analysis then picks the one asked for)."""
    connection = _open(url, table)
    try:
        check_table(connection)
        traces = job_traces(connection, pick)
        if not traces:
            raise SourceError(f"no job of {connection.where} ({connection.target.name}) matches {flag} {pick}")
        if len(traces) > 1:
            shown = ", ".join(traces[:5]) + (", ..." if len(traces) > 5 else "")
            raise SourceError(f"{flag} {pick} matches {len(traces)} traces ({shown}); give more of the id")
        return read(connection, f"TraceId = {quote(traces[0])}")
    finally:
        connection.close()


# ``jobs --where KEY=VALUE`` as SQL: a job whose KEY is VALUE has a span whose attribute is VALUE (the row's value is
# its ranks' distinct values, so one value is one of them). Only traces with such a span are read; the rows are then
# filtered exactly, as for files. Keys not here (and ``null``, and values of several, "a, b") are filtered after.
WHERE_COLUMNS = {
    "cluster": f"ResourceAttributes[{quote(sc.CLUSTER)}]",
    "job_id": f"ResourceAttributes[{quote(sc.JOB_ID)}]",
    "world_size": f"ResourceAttributes[{quote(sc.WORLD_SIZE)}]",
    "host": f"ResourceAttributes[{quote(sc.HOST_NAME)}]",
    "model": f"SpanAttributes[{quote(sc.CHECKPOINT)}]",
    "strategy": f"SpanAttributes[{quote(sc.STRATEGY)}]",
    **{
        lib: f"ResourceAttributes[{quote(sc.lib_key(lib))}]"
        for lib in ("torch", "transformers", "accelerate", "deepspeed")
    },
}


def where_sql(pairs: list[tuple[str, str]]) -> str:
    tests = [
        f"TraceId IN (SELECT TraceId FROM {{table}} WHERE {WHERE_COLUMNS[key]} = {quote(value)})"
        for key, value in pairs
        if key in WHERE_COLUMNS and value != "null" and ", " not in value
    ]
    return " AND ".join(tests) or "1"


def read_since(connection: Connection, since_seconds: float, where: list[tuple[str, str]] | None = None) -> SpanSet:
    """Every span of the traces that began in the last ``since_seconds`` (whole traces: a job is never cut) and may
    match ``where`` (``jobs --where``'s pairs)."""
    name = connection.target.name
    window = f"now64(9) - toIntervalNanosecond({int(since_seconds * 1e9)})"
    traces = f"SELECT TraceId FROM {name} GROUP BY TraceId HAVING min(Timestamp) >= {window}"
    traces += f" AND {where_sql(where or []).format(table=name)}"
    spans = read(connection, f"TraceId IN ({traces})")
    if not spans.spans and not spans.states:
        matching = " ".join(f"{key}={value}" for key, value in where or [])
        also = f" and match --where {matching}" if matching else ""
        raise SourceError(f"no traces in {connection.where} ({name}) began in the last {since_seconds:g} s{also}")
    return spans
