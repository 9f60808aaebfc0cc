#!/usr/bin/env python
"""``loadtrace report``, ``timeline``, ``top --once`` and ``jobs`` over one big job (issue 33): 1,024 and 4,096 ranks
side by side, each command a fresh process as a user runs it.

The jobs are a recorded 2-rank FSDP run (``docs/samples/fsdp524``: startup spans, launch ids) replicated by
``tests/support/big_job.py`` onto 8 ranks a node, with rank 700 20 s slower, rank 20 SIGKILLed mid-read (its state
file), rank 30's file cut mid-line; ``top`` reads a live job's state files (``write_live_job``: two ranks behind, one
stuck, one dead, one near its memory limit). With Chromium and Playwright installed, the 4,096-rank timeline page is
also opened in headless Chromium and timed until its script has drawn it.

    .venv/bin/python benchmarks/bench_scale.py                      # 1,024 and 4,096 ranks, 3 runs each
    .venv/bin/python benchmarks/bench_scale.py --ranks 1024 --runs 1

Prints per command and size the median and best wall time and the median CPU time (user + system, the command and
what it forked), with the machine's load average: on a shared machine wall time is what the others leave.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.big_job import RECORDED, write_big_job, write_live_job  # noqa: E402

COMMANDS = {
    "report": lambda job, live, out: ["report", str(job)],
    "timeline": lambda job, live, out: ["timeline", str(job), "-o", str(out / "timeline.html")],
    "top --once": lambda job, live, out: ["top", str(live), "--once"],
    "jobs": lambda job, live, out: ["jobs", str(job)],
}
CHROMIUM = Path("/usr/bin/chromium")


def prepare(work: Path, ranks: int) -> tuple[Path, Path]:
    job, live = work / f"job{ranks}", work / f"live{ranks}"
    if not job.exists():
        started = time.monotonic()
        write_big_job(job, ranks, slow=700, killed=-1, slow_by=20.0, dead=20, partial=30, source=RECORDED)
        print(f"generated {ranks} ranks in {time.monotonic() - started:.1f} s under {job}")
    shutil.rmtree(live, ignore_errors=True)  # a live job is live now: written afresh for every run of the benchmark
    write_live_job(live, ranks, time.time_ns(), behind=(5, ranks // 2), stuck=(6,), dead=(7,), near_limit=(8,))
    return job, live


def timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def chromium_seconds(page: Path) -> float | None:
    """Seconds from opening the page in headless Chromium to its script having drawn it; None without Chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not CHROMIUM.exists():
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1280, "height": 800})
        started = time.monotonic()
        tab.goto(page.as_uri(), wait_until="load")
        tab.wait_for_function("window.loadtrace !== undefined")
        seconds = time.monotonic() - started
        browser.close()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/loadtrace-bench-scale"))
    args = parser.parse_args()
    loadtrace = str(Path(sys.executable).with_name("loadtrace"))
    results: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    pages: dict[int, float | None] = {}
    for ranks in args.ranks:
        job, live = prepare(args.work, ranks)
        out = args.work / f"out{ranks}"
        out.mkdir(parents=True, exist_ok=True)
        for run in range(args.runs):
            for name, argv in COMMANDS.items():
                wall, cpu = timed([loadtrace, *argv(job, live, out)])
                results.setdefault((name, ranks), ([], []))[0].append(wall)
                results[(name, ranks)][1].append(cpu)
                load = os.getloadavg()[0]
                print(f"{ranks} ranks, run {run + 1}: {name} wall {wall:.2f} s, cpu {cpu:.2f} s, load {load:.1f}")
        pages[ranks] = chromium_seconds(out / "timeline.html")
        if pages[ranks] is not None:
            size = (out / "timeline.html").stat().st_size / 1e6
            print(f"{ranks} ranks: the timeline page ({size:.1f} MB) drawn in Chromium in {pages[ranks]:.2f} s")
    print()
    print("| command | " + " | ".join(f"{ranks:,} ranks: wall median (best), cpu" for ranks in args.ranks) + " |")
    print("|---|" + "---|" * len(args.ranks))
    for name in COMMANDS:
        cells = []
        for ranks in args.ranks:
            walls, cpus = results[(name, ranks)]
            cells.append(f"{statistics.median(walls):.2f} s ({min(walls):.2f}), {statistics.median(cpus):.2f} s")
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    cells = [f"{pages[r]:.2f} s" if pages.get(r) is not None else "n/a" for r in args.ranks]
    print("| the timeline page in Chromium | " + " | ".join(cells) + " |")
    print(f"\n{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
