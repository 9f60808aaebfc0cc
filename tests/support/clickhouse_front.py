"""A loopback ClickHouse HTTP interface over a chDB session: enough of the protocol for ``clickhouse-connect``.

The driver sends ``POST /`` with the SQL in the body (``FORMAT Native`` at its end; ``query_id``, ``session_id``,
``database``, settings as URL parameters) and reads ``Native`` bytes back; on connect it asks ``SELECT version(),
timezone()`` and reads ``system.settings``. An error is HTTP 500 with the message in the body and
``X-ClickHouse-Exception-Code`` (what a server sends). Of the settings the driver sends as URL parameters, only
``max_query_size`` is applied (a query that carries rows needs it). So ``--clickhouse http://...`` is tested against
the real engine and the official driver, with no server to install.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlparse

from support import loopback

_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_CODE = re.compile(r"Code:\s*(\d+)")


class Front(loopback.Loopback):
    """``with Front(session) as url:``: the session answers queries at ``url`` until the block ends."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.lock = threading.Lock()  # one query at a time into the session
        self.queries: list[str] = []
        front = self

        class Handler(loopback.Handler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length).decode()
                params = parse_qs(urlparse(self.path).query)
                query = params.get("query", [""])[0]
                self.answer((query + "\n" + body).strip(), params.get("max_query_size", [""])[0])

            def do_GET(self):  # noqa: N802
                query = parse_qs(urlparse(self.path).query).get("query", [""])[0]
                self.answer(query or "SELECT 1 FORMAT TabSeparated")

            def answer(self, sql: str, max_query_size: str = "") -> None:
                match = _FORMAT.search(sql)
                fmt = match.group(1) if match else "TabSeparated"
                sql = sql[: match.start()] if match else sql
                front.queries.append(sql)
                try:
                    with front.lock:
                        if max_query_size.isdigit():  # a setting the driver sends beside the query
                            front.session.query(f"SET max_query_size = {max_query_size}")
                        data = front.session.query(sql, fmt).bytes()
                except Exception as error:  # the engine's message, as a server sends it
                    code = _CODE.search(str(error))
                    exception_code = {"X-ClickHouse-Exception-Code": code.group(1) if code else "1"}
                    return self.reply(500, str(error).encode(), "text/plain", exception_code)
                shown = {"X-ClickHouse-Format": fmt, "X-ClickHouse-Server-Display-Name": "chdb-front"}
                self.reply(200, data, "application/octet-stream", shown)

        super().__init__(Handler)

    def __enter__(self) -> str:  # type: ignore[override]  # the URL: what a test hands the driver
        return super().__enter__().url
