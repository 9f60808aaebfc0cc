"""A chDB database with the exporter's ``otel_traces`` table, filled from trace files by the package's own mapping
(``loadtrace/analysis/sources/otel_traces.py``): the tests' and the benchmark's ClickHouse, holding what a collector
would have written (spans only: no state files)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from loadtrace.analysis.sources.otel_traces import DDL, as_string, insert_statement, json_line, rows

__all__ = ["DDL", "as_string", "create", "fill", "insert", "rows", "rows_of_files"]


def rows_of_files(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every row of these JSON Lines files (what the collector receives when each rank exports over OTLP)."""
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                yield from rows(json.loads(line))


def create(session: Any, database: str = "default", table: str = "otel_traces") -> None:
    session.query(f"CREATE DATABASE IF NOT EXISTS {database}")
    session.query(DDL.format(database=database, table=table))


def insert(session: Any, rows_: Iterable[dict[str, Any]], database: str = "default", table: str = "otel_traces") -> int:
    """The rows in one INSERT (the way the exporter's batch lands); how many."""
    lines = [json_line(row) for row in rows_]
    session.query(insert_statement(database, table) + "\n" + "\n".join(lines))
    return len(lines)


def fill(path: Path, sources: Iterable[Path], database: str = "default", table: str = "otel_traces") -> int:
    """A chDB database at ``path`` with the exporter's table, filled from these trace files; the rows inserted."""
    from chdb import session as chdb_session

    with chdb_session.Session(str(path)) as session:
        create(session, database, table)
        return insert(session, rows_of_files(sources), database, table)
