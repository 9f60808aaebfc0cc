"""``loadtrace ingest FOLDER --clickhouse URL``: a folder's trace files (the launcher's witness files among them) and
state files into the collector exporter's ``otel_traces`` table, so ``jobs``, ``report`` and ``rollup --clickhouse``
answer for jobs that never had a collector (a laptop, ``LOADTRACE_DIR`` on a shared file system).

- Spans become rows by the exporter's own mapping (``sources/otel_traces.py``); a line the file reader skips is
  skipped here too, so the table holds what ``loadtrace report FOLDER`` reads.
- Each state file becomes one ``loadtrace.state_file`` row carrying its bytes, read back as the state file it was
  (``clickhouse.state_of_row``): a rank killed before it exported a span is in the table as it is in the folder.
- Idempotent: a row whose span (trace and span id) or state file (the same bytes) the table holds already is not
  written again, so a second ingest adds nothing and a job that gained spans since gains only those.
- The table is created where missing, with the exporter's DDL; one that exists must have every column it writes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import semconv as sc
from .. import statefile
from .processes import state_resource, state_trace_id
from .rollup import made_by
from .sources import SourceError, source_files
from .sources.clickhouse import (
    STATE_FILE_MAX_BYTES,
    Connection,
    check_table,
    parse_target,
    quote,
    state_file_data,
    table_columns,
)
from .sources.files import traces_data
from .sources.otel_traces import COLUMNS, DDL, SPAN_KINDS, STATUS_CODES, as_string, insert_statement, json_line, rows

BATCH_ROWS = 20_000  # rows looked up and written per INSERT: a few 512-rank jobs
LOOKUP_TRACES = 500  # trace ids per lookup of the rows already there
# What a line's rows can raise where the file reader took its spans (an event or link of the wrong shape, a time the
# column cannot hold): the line is skipped.
_UNMAPPABLE = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


@dataclass
class Ingested:
    spans: int = 0  # rows written: spans
    states: int = 0  # rows written: state files
    present: int = 0  # rows of the folder the table held already
    traces: set[str] = field(default_factory=set)  # the folder's traces
    skipped_lines: int = 0
    skipped_state_files: int = 0
    created: bool = False
    table: str = ""


def ingest(folder: str, url: str, table: str) -> Ingested:
    """Every span and state file of ``folder`` into the table at ``url`` that is not there yet."""
    files, states = source_files(folder)  # a missing or empty folder is bad input before any connection
    connection = Connection(parse_target(url, table), create=True)
    try:
        done = Ingested(created=ensure_table(connection), table=connection.target.name)
        statement = insert_statement(connection.target.database, connection.target.table)
        batch: dict[tuple[Any, ...], tuple[bool, str]] = {}
        for key, is_state, line in _lines(Path(folder), files, states, done):
            batch.setdefault(key, (is_state, line))
            if len(batch) >= BATCH_ROWS:
                _write(connection, statement, batch, done)
                batch = {}
        _write(connection, statement, batch, done)
    finally:
        connection.close()
    if not done.traces:
        unreadable = f"{done.skipped_lines} unreadable lines and {done.skipped_state_files} unreadable state files"
        raise SourceError(f"{folder}: no spans or state files to ingest ({unreadable} skipped)")
    return done


def ensure_table(connection: Connection) -> bool:
    """The exporter's table, created when there is none (True then); one of another schema is one line, exit 2."""
    target = connection.target
    if table_columns(connection):
        check_table(connection, COLUMNS)
        return False
    connection.execute(f"CREATE DATABASE IF NOT EXISTS {target.database}")
    connection.execute(DDL.format(database=target.database, table=target.table))
    return True


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's identity: its trace and span id (a state file's span id is its bytes' hash); a span without an id by
    its start and name."""
    if row["SpanId"]:
        return (row["TraceId"], row["SpanId"], 0, "")
    return (row["TraceId"], "", row["Timestamp"], row["SpanName"])


def _lines(
    root: Path, files: list[Path], states: list[Path], done: Ingested
) -> Iterator[tuple[tuple[Any, ...], bool, str]]:
    """(identity, whether a state file's, JSON line) of every row: the trace files' spans, then the state files
    (whose trace may be known only from the spans: a trace id cut short)."""
    for path in files:
        try:
            with open(path, "rb") as handle:
                for data in traces_data(handle):
                    try:
                        mapped = [(_key(row), json_line(row)) for row in rows(data)] if data is not None else None
                    except _UNMAPPABLE:
                        mapped = None
                    if mapped is None:
                        done.skipped_lines += 1
                        continue
                    done.traces.update(key[0] for key, _ in mapped)
                    yield from ((key, False, line) for key, line in mapped)
        except OSError as error:
            raise SourceError(f"{path}: {error.strerror or error}") from None
    known = set(done.traces)
    for path in states:
        row = _state_row(path, root, known)
        if row is None:
            done.skipped_state_files += 1
            continue
        done.traces.add(row["TraceId"])
        yield _key(row), True, json_line(row)


def _state_row(path: Path, root: Path, known: set[str]) -> dict[str, Any] | None:
    """The ``loadtrace.state_file`` row of one state file, under its job's root span; None when it is not one."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(STATE_FILE_MAX_BYTES + 1)
    except OSError:
        return None
    state = statefile.decode(data) if len(data) <= STATE_FILE_MAX_BYTES else None
    if state is None:
        return None
    job_id = state.job_id
    host, pid = state.host or None, state.pid if state.pid > 0 else None
    resource = {sc.SERVICE_NAME: sc.DEFAULT_SERVICE_NAME, **state_resource(state, host, pid)}
    start = state.created_ns
    end = max(start, state.updated_ns, state.progress_ns, state.rss_sampled_ns, state.exception_ns)
    attributes = {sc.STATE_FILE_PATH: os.path.relpath(path, root), sc.STATE_FILE_DATA: state_file_data(data)}
    return {
        "Timestamp": start,
        "TraceId": state_trace_id(state, known),
        "SpanId": hashlib.sha256(data).hexdigest()[:16],
        "ParentSpanId": format(sc.job_trace_ids(job_id)[1], "016x") if job_id else "",
        "TraceState": "",
        "SpanName": sc.SPAN_STATE_FILE,
        "SpanKind": SPAN_KINDS[1],
        "ServiceName": sc.DEFAULT_SERVICE_NAME,
        "ResourceAttributes": {key: _text(value) for key, value in resource.items() if value is not None},
        "ScopeName": sc.SCOPE_NAME,
        "ScopeVersion": made_by(),
        "SpanAttributes": attributes,
        "Duration": end - start,
        "StatusCode": STATUS_CODES[0],
        "StatusMessage": "",
        **{f"{nested}.{column}": [] for nested in ("Events", "Links") for column in _NESTED[nested]},
    }


_NESTED = {"Events": ("Timestamp", "Name", "Attributes"), "Links": ("TraceId", "SpanId", "TraceState", "Attributes")}


def _text(value: Any) -> str:
    """A resource value as the exporter writes it (``AsString``)."""
    kind = "boolValue" if isinstance(value, bool) else "intValue" if isinstance(value, int) else "stringValue"
    return as_string({kind: value})


def _write(
    connection: Connection, statement: str, batch: dict[tuple[Any, ...], tuple[bool, str]], done: Ingested
) -> None:
    """The rows of ``batch`` the table does not hold yet, in one INSERT."""
    if not batch:
        return
    traces = sorted({key[0] for key in batch})
    present: set[tuple[Any, ...]] = set()
    for start in range(0, len(traces), LOOKUP_TRACES):
        chosen = ", ".join(quote(trace) for trace in traces[start : start + LOOKUP_TRACES])
        present.update(
            (trace, span, int(time), name)
            for trace, span, time, name in connection.rows(
                "SELECT TraceId, SpanId, if(SpanId = '', toUnixTimestamp64Nano(Timestamp), 0), "
                f"if(SpanId = '', SpanName, '') FROM {connection.target.name} WHERE TraceId IN ({chosen})"
            )
        )
    new = [row for key, row in batch.items() if key not in present]
    done.present += len(batch) - len(new)
    if new:
        connection.insert(statement, "\n".join(line for _, line in new))
    states = sum(1 for is_state, _ in new if is_state)
    done.states += states
    done.spans += len(new) - states
