"""Screenshots of Jaeger's own UI for docs/jaeger.md, from the recorded real run and README's big job: how
docs/jaeger-*.png are made (``scripts/gen_docs.py --record`` and ``--screenshots`` run it).

    .venv/bin/python scripts/jaeger_screenshots.py        # needs .backends/bin (scripts/build_backends.sh),
                                                          # ../shared/jaeger-ui/build and /usr/bin/chromium

It starts the built Jaeger with exporters/jaeger.yaml serving the built UI (as tests/backends/test_jaeger_ui.py does),
sends it docs/samples/fsdp524 (the recorded FSDP job: its ranks' files and the findings rank 0 wrote beside them) and
README's 1,024-rank job (tests/support/big_job.py, annotated as rank 0 annotates from the files it sees), then opens:

- docs/jaeger-job.png: the job's trace, as ``/trace/<id>`` opens it;
- docs/jaeger-loads.png: its loads view, as rank 0's closing line links it (``?uiFind=`` the flagged rank's load);
- docs/jaeger-big-job.png: the 1,024-rank job's trace, its findings first.

What each picture was made from is written to docs/samples/jaeger/screenshots.json (the recording's job id, the trace
and the URL opened, the UI's release): ``gen_docs.py --check`` holds it against the recording, never the pixels.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support import jaeger_ui  # noqa: E402
from support.big_job import write_big_job  # noqa: E402

from loadtrace.analysis.annotate import job_finds, trace_link  # noqa: E402
from loadtrace.analysis.report import report  # noqa: E402
from loadtrace.analysis.sources import read_files  # noqa: E402

SAMPLES = REPO / "docs" / "samples"
RECORDED = SAMPLES / "fsdp524"
MANIFEST = SAMPLES / "jaeger" / "screenshots.json"
BIG_JOB_SLOW = (3, *range(616, 624), 700)
VIEWPORT = (1100, 720)
NAME_COLUMN = 0.42  # of the page's width, for the rows' names (the UI keeps a person's choice in localStorage; 0.25)
UI_RELEASE = "jaeger-ui v1.74.0 (Jaeger v2.12.0)"


def send(folder: Path, endpoint: str) -> None:
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                request = urllib.request.Request(
                    f"{endpoint}/v1/traces", data=line, headers={"Content-Type": "application/json"}, method="POST"
                )
                urllib.request.urlopen(request, timeout=60).read()


def job_of(folder: Path) -> tuple[str, str, str, str, str]:
    """(job id, trace id, its uiFind, loads view's trace id, its uiFind) of the folder's one job."""
    result = report(read_files(folder))
    ((trace_id, job_find, loads_id, loads_find),) = job_finds(result)
    return result.traces[0].job_id or "", trace_id, job_find, loads_id, loads_find


def shoot(context, url: str, trace_id: str, path: Path, find: str = "", settle_s: float = 1.5) -> float:
    """The trace's page's picture; how long it took to show its first row."""
    opened = jaeger_ui.open_trace(context, url, trace_id, find)
    time.sleep(settle_s)
    opened.page.evaluate("window.scrollTo(0, 0)")
    opened.page.screenshot(path=str(path))
    opened.page.close()
    return opened.seconds


def missing() -> str | None:
    """Why the screenshots cannot be made here; None when they can."""
    for needed, why in (
        (jaeger_ui.backends.JAEGER, "no Go-built Jaeger: bash scripts/build_backends.sh (Go needed)"),
        (jaeger_ui.UI_BUILD / "index.html", f"no built Jaeger UI at {jaeger_ui.UI_BUILD}"),
        (jaeger_ui.CHROMIUM, f"no {jaeger_ui.CHROMIUM} (apt-get install chromium)"),
    ):
        if not Path(needed).exists():
            return why
    return None


def main() -> int:
    why = missing()
    if why is not None:
        print(f"jaeger_screenshots: not made: {why}", file=sys.stderr)
        return 1
    shots: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as work, jaeger_ui.Jaeger(Path(work)) as jaeger:
        endpoint = f"http://{jaeger.otlp_http}"
        send(RECORDED, endpoint)
        big = write_big_job(Path(work) / "big-job", ranks=1024, slow=BIG_JOB_SLOW, killed=300, slow_by=20.0)
        subprocess.run([sys.executable, "-m", "loadtrace", "annotate", str(big)], check=True, capture_output=True)
        send(big, endpoint)
        time.sleep(3)  # Jaeger's own batch
        job_id, trace_id, _, loads_id, loads_find = job_of(RECORDED)
        big_job_id, big_trace, *_ = job_of(big)
        with jaeger_ui.browser(Path(work) / "profile", *VIEWPORT) as context:
            context.add_init_script(f"localStorage.setItem('spanNameColumnWidth', '{NAME_COLUMN}')")
            for name, trace, find, made_from, job in (
                ("jaeger-job.png", trace_id, "", "fsdp524", job_id),
                ("jaeger-loads.png", loads_id, loads_find, "fsdp524", job_id),
                ("jaeger-big-job.png", big_trace, "", "tests/support/big_job.py (1,024 ranks)", big_job_id),
            ):
                path = REPO / "docs" / name
                seconds = shoot(context, jaeger.url, trace, path, find)
                shots[name] = {
                    "made_from": made_from,
                    "job_id": job,
                    "opened": trace_link("http://localhost:16686", trace, find),
                    "ui": UI_RELEASE,
                    "viewport": f"{VIEWPORT[0]}x{VIEWPORT[1]}",
                }
                print(f"{path.relative_to(REPO)}: {path.stat().st_size:,} B, first row in {seconds:.1f} s")
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(json.dumps(shots, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
