"""Jaeger's own UI, as a person opens it: the built jaeger-ui that Jaeger 2.12.0 serves (``../shared/jaeger-ui/build``
beside the repository: CI clones it there), served by the Go-built Jaeger (``extensions.jaeger_query.ui.assets_path``
over exporters/jaeger.yaml, as its README says), opened in Debian's Chromium, headless, through Playwright's Python API
(the timeline page's browser test drives it the same way).

What a test reads is the rendered page: each timeline row's service and operation (its label), its colour (the
border of its name, which the UI colours by service) and where its bar sits (``left`` and ``width``, as fractions of
the timeline), collected while scrolling, as the UI renders only the rows in view.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadtrace import semconv as sc

from . import backends
from .paths import REPO

UI_BUILD = REPO.parent / "shared" / "jaeger-ui" / "build"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RENDER_TIMEOUT_S = 120


def require_ui() -> Any:
    """The Playwright module, once the backends, the UI build and Chromium are all here; else a one-line skip."""
    backends.require()
    if not (UI_BUILD / "index.html").is_file():
        pytest.skip(f"no built Jaeger UI at {UI_BUILD} (../shared/jaeger-ui/build beside the repository)")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium; scripts/setup.sh does as root)")
    return pytest.importorskip("playwright.sync_api", reason="playwright not installed (the test extra has it)")


class Jaeger(backends.Jaeger):
    """exporters/jaeger.yaml's Jaeger, serving the UI build too."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.argv.append(f"--set=extensions.jaeger_query.ui.assets_path={UI_BUILD}")


@contextlib.contextmanager
def browser(profile: Path, width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A fresh headless Chromium (its own profile: nothing of an earlier run carries over)."""
    sync_api = require_ui()
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": width, "height": height},
        )
        try:
            yield context
        finally:
            context.close()


@dataclass(frozen=True)
class Row:
    """One row of the trace's timeline, as the page shows it."""

    key: str  # the span id
    service: str
    operation: str
    colour: str
    left: float  # where its bar starts, as a fraction of the timeline's width
    width: float


@dataclass
class Opened:
    page: Any
    seconds: float  # from asking for the page to its first timeline row
    errors: list[str]


def open_trace(context: Any, url: str, trace_id: str, find: str = "") -> Opened:
    """The trace's page, from the request to its rows on screen; the page's errors (console and uncaught)."""
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    started = time.monotonic()
    page.goto(f"{url}/trace/{trace_id}" + (f"?uiFind={find}" if find else ""), wait_until="load")
    page.wait_for_selector(".span-row", timeout=RENDER_TIMEOUT_S * 1000)
    return Opened(page, time.monotonic() - started, errors)


def _fraction(style: str, name: str) -> float:
    match = re.search(rf"{name}:\s*([-\d.]+)%", style or "")
    return float(match.group(1)) / 100 if match else 0.0


_ROWS_JS = """() => Array.from(document.querySelectorAll('[data-item-key]')).map(item => {
  const row = item.querySelector('.span-row');
  if (!row) return null;
  const bar = row.querySelector('.SpanBar--bar');
  const name = row.querySelector('.span-name');
  return {
    key: item.getAttribute('data-item-key'),
    service: (row.querySelector('.span-svc-name') || {}).innerText || '',
    operation: (row.querySelector('.endpoint-name') || {}).innerText || '',
    colour: name ? getComputedStyle(name).borderLeftColor : '',
    style: bar ? bar.getAttribute('style') : '',
    top: item.getBoundingClientRect().top + window.scrollY,
  };
}).filter(Boolean)"""


def rows(page: Any) -> list[Row]:
    """Every row of the timeline, top to bottom: scrolled through, as the UI renders only those in view."""
    found: dict[str, tuple[float, Row]] = {}
    page.evaluate("window.scrollTo(0, 0)")
    while True:
        for item in page.evaluate(_ROWS_JS):
            key = item["key"].removesuffix("--bar")
            style = item["style"]
            made = Row(key, item["service"].strip(), item["operation"].strip(), item["colour"],
                       _fraction(style, "left"), _fraction(style, "width"))  # fmt: skip
            found.setdefault(key, (item["top"], made))
        before = page.evaluate("window.scrollY")
        page.evaluate("window.scrollBy(0, window.innerHeight * 0.8)")
        page.wait_for_timeout(150)
        if page.evaluate("window.scrollY") == before:
            break
    return [row for _, row in sorted(found.values(), key=lambda pair: pair[0])]


# What the UI reads, and checks on what it shows ---------------------------------------------------------------------


def api(jaeger, path: str) -> Any:
    """The UI's own API (``/api/...``, Jaeger's JSON model): what the pages render."""
    status, body = backends.get(f"{jaeger.url}/api/{path}")
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def ui_trace(jaeger, trace_id: str) -> dict[str, Any]:
    (trace,) = api(jaeger, f"traces/{trace_id}")["data"]
    return trace


def warnings(trace: dict[str, Any]) -> dict[str, list[str]]:
    return {f"{s['operationName']} {s['spanID']}": s["warnings"] for s in trace["spans"] if s.get("warnings")}


def by_rank(rows: list[Row]) -> list[tuple[int, list[Row]]]:
    """The timeline's rows below each rank's group, in the order the page shows them."""
    groups: list[tuple[int, list[Row]]] = []
    for row in rows:
        match = re.fullmatch(r"loadtrace rank (\d+)", row.service)
        if row.operation == sc.SPAN_RANK_GROUP and match:
            groups.append((int(match.group(1)), []))
        elif groups and match:
            assert int(match.group(1)) == groups[-1][0], f"a rank {match.group(1)} row among rank {groups[-1][0]}'s"
            groups[-1][1].append(row)
    return groups


def ranks_told_apart(rows: list[Row], world: int, empty: tuple[int, ...] = ()) -> None:
    """Every rank's group, in rank order, each row of it labelled with its rank, its colour the rank's own and not
    its neighbours'; ``empty``: ranks that left nothing under their group (killed before any span ended)."""
    groups = by_rank(rows)
    assert [rank for rank, _ in groups] == list(range(world))
    colours = {}
    for rank, members in groups:
        assert bool(members) != (rank in empty), f"rank {rank}: {len(members)} rows"
        if not members:
            continue
        assert {row.colour for row in members} == {members[0].colour}, rank
        colours[rank] = members[0].colour
    ranks = sorted(colours)
    assert all(colours[a] != colours[b] for a, b in zip(ranks, ranks[1:], strict=False)), colours


def tag(trace: dict[str, Any], span: dict[str, Any], key: str) -> Any:
    """A span's tag, else its process's."""
    for item in [*span["tags"], *trace["processes"][span["processID"]]["tags"]]:
        if item["key"] == key:
            return item["value"]
    return None


def matching(page: Any) -> list[str]:
    """The span ids of the rows the page highlights (its ``uiFind``)."""
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('[data-item-key] .span-row.is-matching-filter'))"
        ".map(row => row.closest('[data-item-key]').getAttribute('data-item-key').replace('--bar', ''))"
    )
