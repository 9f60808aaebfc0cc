"""Jaeger v2's query API (``/api/v3``) as the tests' stand-ins speak it: its time parameters (Go's
``time.RFC3339Nano``, reduced to what loadtrace sends: UTC, nine fraction digits) and its error envelope."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

RFC3339_NANOS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{9})Z$")


def parse_rfc3339_nanos(text: str) -> int:
    """``2026-12-01T00:00:00.123456789Z`` → ns since the epoch; ValueError for anything else."""
    match = RFC3339_NANOS.match(text)
    if not match:
        raise ValueError(text)
    seconds = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return int(seconds) * 1_000_000_000 + int(match.group(2))


def error(code: int, message: str) -> bytes:
    """Jaeger's error answer: ``{"error": {"httpCode": 404, "message": "No traces found"}}``."""
    return json.dumps({"error": {"httpCode": code, "message": message}}).encode()


NO_TRACES = error(404, "No traces found")
