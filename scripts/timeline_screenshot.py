"""Screenshot a job's ``loadtrace timeline`` page in headless Chromium: how docs/timeline.png is made.

    bash examples/demo.sh
    .venv/bin/python scripts/timeline_screenshot.py demo-run/loadtrace-traces/<job id> docs/timeline.png

Needs Debian's Chromium (/usr/bin/chromium) and playwright (the test extra), as tests/cli/test_timeline_browser.py does.
``--hover RANK:SPAN`` points at that rank's first span of that name, so the picture shows its attributes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from loadtrace.analysis.compare import pick_job
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.timeline import timeline
from loadtrace.cli.render_timeline import html_page

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
    *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("png")
    parser.add_argument("--job")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--hover", metavar="RANK:SPAN")
    args = parser.parse_args()
    spans = read_files(args.source)
    job = pick_job(jobs_from_spans(spans.spans, spans.states), args.job, args.source, "--job")
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        page_file = Path(folder) / "timeline.html"
        page_file.write_text(html_page(timeline(job)), encoding="utf-8")
        browser = playwright.chromium.launch_persistent_context(
            str(Path(folder) / "profile"),
            executable_path=CHROMIUM,
            args=ARGS,
            viewport={"width": args.width, "height": 800},
        )
        page = browser.new_page()
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.goto(page_file.as_uri())
        height = page.evaluate("window.loadtrace.height()")
        page.set_viewport_size({"width": args.width, "height": min(int(height) + 2, 2000)})
        if args.hover:
            rank, span = args.hover.split(":", 1)
            spot = page.evaluate("([rank, span]) => window.loadtrace.barCenter(rank, span)", [int(rank), span])
            page.mouse.move(spot["x"], spot["y"])
        page.screenshot(path=args.png)
        browser.close()
    if errors:
        print("console errors: " + "; ".join(errors), file=sys.stderr)
        return 1
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
