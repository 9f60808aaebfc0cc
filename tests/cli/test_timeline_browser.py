"""Promise (issue 15): the timeline page works in a real browser, offline: it loads with no console error and no
request beyond its own file, shows a lane for every rank, and hovering a bar shows the span's attributes; a 512-rank
job's page loads quickly and shows all 512.

Debian's Chromium (``/usr/bin/chromium``, installed by scripts/setup.sh where apt may run), driven by Playwright's
Python API: the same calls the README's screenshot script makes. Chromium runs headless, without sandbox (root), GPU,
QUIC, first-run, background networking, component updates or sync, with a fresh profile: nothing leaves the machine.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support.big_job import write_big_job
from support.multirank import WORLD_SIZE
from support.paths import SPANS
from support.venvs import discover

from loadtrace import semconv as sc
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.timeline import timeline
from loadtrace.cli.render_timeline import html_page

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

if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} not installed (apt-get install chromium; scripts/setup.sh does as root)", allow_module_level=True
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (the test extra has it)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh one: nothing of an earlier run carries over
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 800},
        )
        yield context
        context.close()


def write_page(folder: Path, out: Path) -> Path:
    spans = read_files(folder)
    (job,) = jobs_from_spans(spans.spans, spans.states)
    out.write_text(html_page(timeline(job)), encoding="utf-8")
    return out


class Visit:
    """A page opened from its file, with every console message, page error and request it made."""

    def __init__(self, browser, path: Path):
        self.page = browser.new_page()
        self.messages: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.messages.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.messages.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        started = time.monotonic()
        self.page.goto(path.as_uri(), wait_until="load")
        self.page.wait_for_function("window.loadtrace !== undefined")
        self.seconds = time.monotonic() - started
        self.url = path.as_uri()


@pytest.mark.parametrize("fixture", ["fsdp524", "killed524"])
def test_the_page_loads_offline_without_errors_and_shows_every_rank(browser, tmp_path, fixture):
    visit = Visit(browser, write_page(SPANS / fixture, tmp_path / "job.html"))
    assert visit.messages == [] and visit.requests == [visit.url]
    page = visit.page
    assert page.locator(".lane").count() == 2 and page.evaluate("window.loadtrace.lanes") == 2
    assert page.locator(".lane").all_inner_texts()[0].startswith("rank 0")
    assert page.locator(".node").all_inner_texts() == ["node vm \u00b7 2 ranks"]
    if fixture == "killed524":
        assert page.locator('.lane[data-state="incomplete"]').inner_text().startswith("rank 1")
        assert page.locator("#findings").inner_text().count("incomplete_rank") == 1
    else:
        assert page.locator("#findings li").count() == 3
    page.close()


def test_a_rank_missing_from_the_source_is_named(browser, tmp_path):
    one = next((SPANS / "fsdp524").glob("rank00000-*.jsonl"))
    visit = Visit(browser, write_page(one, tmp_path / "job.html"))
    assert visit.messages == [] and visit.page.locator(".lane").count() == 1
    assert "1 of 2 ranks present (missing: 1)" in visit.page.locator("#meta").inner_text()
    visit.page.close()


def test_hovering_a_bar_shows_its_attributes(browser, tmp_path):
    visit = Visit(browser, write_page(SPANS / "fsdp524", tmp_path / "job.html"))
    page = visit.page
    tip = page.locator("#tip")
    assert tip.is_hidden()
    spot = page.evaluate("window.loadtrace.barCenter(1, 'transformers.from_pretrained')")
    page.mouse.move(spot["x"], spot["y"])
    assert tip.is_visible()
    text = tip.inner_text()
    assert text.startswith(sc.SPAN_FROM_PRETRAINED) and "rank 1 on vm" in text
    assert sc.READ_BYTES in text and "1,009,152 B (1.0 MB)" in text and sc.STRATEGY in text
    spot = page.evaluate("window.loadtrace.barCenter(0, 'transformers.convert')")
    page.mouse.move(spot["x"], spot["y"])
    assert tip.inner_text().startswith(sc.SPAN_CONVERT) and sc.CONVERT_BYTES in tip.inner_text()
    assert visit.messages == []
    page.close()


def test_a_512_rank_page_loads_quickly_and_shows_every_rank(browser, tmp_path):
    path = write_page(write_big_job(tmp_path / "big"), tmp_path / "big.html")
    assert os.path.getsize(path) < 16 * 2**20
    visit = Visit(browser, path)
    page = visit.page
    assert visit.messages == [] and visit.requests == [visit.url]
    assert visit.seconds < 10, f"the 512-rank page took {visit.seconds:.1f} s to load"
    assert page.locator(".lane").count() == 512 and page.locator(".node").count() == 64
    summaries = page.locator("#findings summary").all_inner_texts()
    assert summaries and all(len(text) < 160 for text in summaries), summaries  # 511 ranks as ranges: "1–6, 8–..."
    assert page.locator('.lane[data-state="slow"]').inner_text().startswith("rank 7")
    assert page.locator('.lane[data-state="incomplete"]').inner_text().startswith("rank 300")
    spot = page.evaluate("window.loadtrace.barCenter(511, 'transformers.from_pretrained')")
    page.mouse.move(spot["x"], spot["y"])
    assert "rank 511 on node063" in page.locator("#tip").inner_text()
    assert visit.messages == []
    page.close()


@pytest.mark.integration
@pytest.mark.skipif(not discover(), reason="no venv with torchrun and transformers (see tests/support/venvs.py)")
def test_a_real_torchrun_job_in_the_browser(browser, jobs, tmp_path):
    """A 2-rank FSDP job run here: each rank's load bar carries the bytes the worker itself counted."""
    job = jobs.get(discover()[0], "fsdp", traced=True)
    visit = Visit(browser, write_page(job.trace_root, tmp_path / "job.html"))
    page = visit.page
    assert visit.messages == [] and visit.requests == [visit.url]
    assert page.locator(".lane").count() == WORLD_SIZE
    lanes = page.evaluate("window.loadtrace.data.nodes.flatMap((node) => node.lanes)")
    names = page.evaluate("window.loadtrace.data.names")
    for lane in lanes:
        loads = [bar for bar in lane["bars"] if names[bar[0]] == sc.SPAN_FROM_PRETRAINED]
        assert [bar[4] for bar in loads] == [job.counts[lane["rank"]]["read_bytes"]], lane["label"]
    page.close()
