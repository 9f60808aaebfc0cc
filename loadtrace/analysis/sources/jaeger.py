"""Jaeger v2 query API (``/api/v3``) → the same ``SpanSet`` the file reader gives.

Both endpoints answer ``{"result": <OTLP TracesData>}`` (several matching traces merged into one TracesData); nothing
found is HTTP 404 with ``{"error": {"httpCode": 404, "message": "No traces found"}}``, bad parameters 400 in the same
envelope. Standard library only (urllib).
"""

from __future__ import annotations

import io
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

from .files import SourceError, SpanSet, decode_line, read_stream, rfc3339_nanos

TIMEOUT_SECONDS = 30.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``1h``, ``2d`` → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise SourceError(f"bad duration {text!r}: expected a number and a unit, e.g. 30m, 1h, 2d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


class NoTraces(SourceError):
    """Jaeger's 404 "No traces found"."""


def trace_url(base_url: str, trace_id: str, raw: bool = False) -> str:
    """The trace's URL; ``raw``: as stored, without the query service's adjusters, whose warnings Jaeger's in-memory
    storage keeps on the stored spans (jaeger#787): a trace read while still arriving keeps them once whole."""
    url = f"{_api(base_url)}/traces/{urllib.parse.quote(trace_id.strip(), safe='')}"
    return url + "?raw_traces=true" if raw else url


def _api(base_url: str) -> str:
    parsed = urllib.parse.urlparse(base_url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SourceError(f"bad Jaeger URL {base_url!r}: expected http://HOST:PORT (the query port, 16686 by default)")
    return base_url.strip().rstrip("/") + "/api/v3"


def fetch(url: str, timeout: float = TIMEOUT_SECONDS) -> SpanSet:
    """GET one /api/v3 traces URL and decode the answer; every failure becomes one ``SourceError`` line."""
    return decode_body(get(url, timeout), url)


def fetch_documents(url: str, timeout: float = TIMEOUT_SECONDS) -> tuple[SpanSet, list[dict]]:
    """``fetch``, and the answer's ``TracesData`` as Jaeger gave it (``loadtrace annotate`` reads its structure)."""
    body = get(url, timeout)
    spans = decode_body(body, url)
    try:
        data = json.loads(body)
    except ValueError:
        return spans, []
    return spans, [data.get("result", data)] if isinstance(data, dict) else []


def get(url: str, timeout: float = TIMEOUT_SECONDS) -> bytes:
    """The body of a GET of an /api/v3 URL; every failure becomes one ``SourceError`` line."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers={"Accept": "application/json"}), timeout=timeout
        ) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise NoTraces(f"no traces found ({url})") from None
        raise SourceError(f"Jaeger answered HTTP {error.code}: {_error_message(error)} ({url})") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise SourceError(f"cannot reach Jaeger at {url}: {reason}") from None
    return body


def decode_body(body: bytes, url: str = "Jaeger") -> SpanSet:
    """One ``{"result": ...}`` document; older grpc-gateway versions stream one per line, which is read the same way."""
    result = SpanSet()
    spans = decode_line(body)
    if spans is not None:
        result.spans.extend(spans)
    else:
        read_stream(io.BytesIO(body), result)
        if not result.spans:
            raise SourceError(f"Jaeger's answer is not OTLP JSON ({url})")
    return result


def _error_message(error: urllib.error.HTTPError) -> str:
    """The message of Jaeger's error envelope, else the HTTP reason."""
    try:
        envelope = json.loads(error.read(64 * 1024))
        return str(envelope["error"]["message"])
    except (ValueError, TypeError, KeyError, OSError):
        return str(error.reason)


# Many jobs: a search paged back in time -------------------------------------------------------------------------------

PAGE_TRACES = 100  # traces per search (``query.num_traces``; newer Jaeger also calls it ``query.search_depth``)


def page_url(base_url: str, service: str, start_ns: int, end_ns: int, traces: int = PAGE_TRACES) -> str:
    query = urllib.parse.urlencode(
        {
            "query.service_name": service,
            "query.start_time_min": rfc3339_nanos(start_ns),
            "query.start_time_max": rfc3339_nanos(end_ns),
            "query.num_traces": traces,
        }
    )
    return f"{_api(base_url)}/traces?{query}"


def search_all(
    base_url: str, service: str, since_seconds: float, now_ns: int | None = None, traces: int | None = None
) -> SpanSet:
    """Every trace of ``service`` that started in the last ``since_seconds``: one search per page of ``traces``
    traces, each page's window ending where the previous page's earliest trace began (a trace found twice, at a page's
    edge, counts once). Ends at a page with fewer traces, a page with no new trace, or 404."""
    traces = traces or PAGE_TRACES
    end_ns = time.time_ns() if now_ns is None else now_ns
    start_ns = end_ns - int(since_seconds * 1e9)
    result, seen = SpanSet(), set[str]()
    while end_ns > start_ns:
        try:
            page = fetch(page_url(base_url, service, start_ns, end_ns, traces))
        except NoTraces:
            break
        starts: dict[str, int] = {}
        for span in page.spans:
            starts[span.trace_id] = min(starts.get(span.trace_id, span.start_ns), span.start_ns)
        new = set(starts) - seen
        result.spans.extend(span for span in page.spans if span.trace_id in new)
        result.skipped_lines += page.skipped_lines
        seen |= new
        if len(starts) < traces or not new:
            break
        end_ns = min(min(starts.values()), end_ns - 1)
    if not result.spans:
        raise NoTraces(f"no traces found: service {service!r} in the last {since_seconds:g} s ({_api(base_url)})")
    return result
