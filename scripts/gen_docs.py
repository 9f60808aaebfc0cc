"""Every sample output in README.md, examples/README.md and the pages under docs/, generated from real runs.

    .venv/bin/python scripts/gen_docs.py            # rewrite the samples from the recorded runs (about a second)
    .venv/bin/python scripts/gen_docs.py --check    # exit 1 and show the diff where a document differs
    .venv/bin/python scripts/gen_docs.py --record   # run the jobs again (torchrun, both venvs; minutes), then rewrite
    .venv/bin/python scripts/gen_docs.py --record zero3_512     # only this run again

The ``top`` sample is a tmux capture of ``loadtrace top`` during a slow load, recorded by ``scripts/top_screenshot.py``
into ``docs/samples/top/capture.txt``.

docs/jaeger.md's pictures of Jaeger's own UI (``docs/jaeger-*.png``) are made by ``scripts/jaeger_screenshots.py`` from
the recorded ``fsdp524`` run and README's big job, after ``--record`` (where the built Jaeger, the built UI and
Chromium are here) or alone with ``--screenshots``. Pixels differ from one machine to the next, so ``--check`` never
compares them: it holds ``docs/samples/jaeger/screenshots.json`` (what each picture was made from) against the
recording, and fails when the pictures are missing or were made from another recording than the one the samples are.

A sample is the fenced block right after a marker line ``<!-- gen_docs: NAME -->``; the script replaces the block's
contents and nothing else, so running it twice changes nothing. The runs are recorded under ``docs/samples/<run>/``:
each rank's OTLP JSON Lines file and rank 0's closing line (``summary.txt``), exactly as the job wrote them
(``--record``: ``examples/load.py`` under ``LOADTRACE=1 torchrun --nproc_per_node 2``, on the 1 MB checkpoint of
``examples/make_checkpoint.py``). The samples are then the installed ``loadtrace`` CLI's output over those files, so a
change to the report's output shows up in the documents by rerunning this script, and
``tests/cli/test_docs_samples.py`` fails until it has been rerun. One edit since recording: ``zero3_524``'s rank 1
converted only ``meta`` tensors, which loadtrace then counted by their size; its conversion bytes were set to 0, what
loadtrace writes now (issue 39).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "docs" / "samples"
# Every page a sample may sit in: a section moved between them keeps its samples generated and checked.
DOCUMENTS = (REPO / "README.md", REPO / "examples" / "README.md", *sorted((REPO / "docs").glob("*.md")))
MARKER = re.compile(r"^<!-- gen_docs: (?P<name>[\w-]+) -->\n```[^\n]*\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
# run name → (venv, load.py mode): what --record runs.
RUNS = {
    "fsdp524": (".venv", "fsdp"),
    "fsdp512": (".venv512", "fsdp"),
    "zero3_524": (".venv", "zero3"),
    "zero3_512": (".venv512", "zero3"),
}
FORECAST = ["--forecast-model-bytes", "54e9", "--ranks-per-node", "16"]


def cli(*argv: str, cwd: Path = SAMPLES) -> tuple[str, str]:
    """``loadtrace ARGV`` in this process, run from docs/samples (sources are named as the run folders): stdout,
    stderr."""
    from loadtrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(argv))
    finally:
        os.chdir(here)
    return out.getvalue(), err.getvalue()


def report(run: str, *flags: str) -> str:
    return cli("report", run, *flags)[0].rstrip("\n")


def demo() -> str:
    """README's opening sample: the job's own closing line, then the command it names and its output."""
    line = (SAMPLES / "fsdp524" / "summary.txt").read_text().strip()
    command = line.split(" → ", 1)[1]
    return "\n".join(
        [
            "$ LOADTRACE=1 torchrun --nproc_per_node 2 examples/load.py checkpoint --mode fsdp     # transformers 5.24",
            line,
            f"$ {command}",
            report("fsdp524"),
        ]
    )


def forecast() -> str:
    text = report("fsdp524", *FORECAST)
    return (
        "$ loadtrace report SMALL_JOB --forecast-model-bytes 54e9 --ranks-per-node 16\n"
        + text[text.index("forecast: ") :]
    )


def compare_pick_error() -> str:
    return (
        "$ loadtrace compare samples/ samples/\n"
        + cli("compare", "samples/", "samples/", cwd=SAMPLES.parent)[1].rstrip()
    )


# README's big job's outliers: ranks 3 and 700 on otherwise healthy nodes and the whole of node077 20 s slower.
BIG_JOB_SLOW = (3, *range(616, 624), 700)


def big_job() -> str:
    """README's big job: the recorded 2-rank FSDP run copied to 1,024 ranks on 128 nodes (tests/support/big_job.py),
    ``BIG_JOB_SLOW`` made 20 s slower (a mix of single ranks and a whole node) and rank 300 cut short as a SIGKILL cuts
    its file; its grouped report."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.big_job import write_big_job

    with tempfile.TemporaryDirectory() as work:
        job = write_big_job(Path(work) / "big-job", ranks=1024, slow=BIG_JOB_SLOW, killed=300, slow_by=20.0)
        text = cli("report", str(job))[0].rstrip("\n")
    return f"$ loadtrace report big-job/     # {len(text.splitlines())} lines; --ranks all: a row per rank\n{text}"


def view_without_docker() -> str:
    """``loadtrace view`` where Docker is absent: loadtrace/cli/view.py's script, the very lines
    tests/backends/test_view_without_docker.py runs against the built binaries, with a person's paths."""
    from loadtrace.cli import view

    clone = Path("/home/me/loadtrace")
    found = (clone / ".backends" / "bin" / view.JAEGER, clone / ".backends" / "bin" / view.COLLECTOR)
    folder = "/home/me/run/loadtrace-traces"
    lines = view.binaries_script(folder, found, clone / "exporters", Path("/tmp/loadtrace-view-1000"), view.Ports())
    return "$ loadtrace view loadtrace-traces/        # no Docker here; | sh runs it\n" + "\n".join(lines)


def top() -> str:
    """``loadtrace top`` in tmux mid-load, as scripts/top_screenshot.py captured it (a run of its own: minutes)."""
    return (SAMPLES / "top" / "capture.txt").read_text().rstrip()


SAMPLE: dict[str, Callable[[], str]] = {
    "demo": demo,
    **{f"report-{run}": (lambda run=run: report(run)) for run in RUNS},
    "forecast": forecast,
    "compare-pick-error": compare_pick_error,
    "report-big": big_job,
    "top": top,
    "view-without-docker": view_without_docker,
}


def generate(text: str, document: Path) -> str:
    def body(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SAMPLE:
            raise SystemExit(f"{document}: unknown sample {name!r} (known: {', '.join(SAMPLE)})")
        start = match.group(0)[: match.start("body") - match.start(0)]
        return f"{start}{SAMPLE[name]()}\n```"

    return MARKER.sub(body, text)


def record(runs: list[str]) -> None:
    """Run each job anew and keep its trace files and rank 0's line under docs/samples/<run>/."""
    for run in runs:
        venv, mode = RUNS[run]
        bin_dir = REPO / venv / "bin"
        with tempfile.TemporaryDirectory() as work:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "ACCELERATE_"))}
            env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
            env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / venv / "torch_extensions"))  # DeepSpeed's op (setup.sh)
            subprocess.run(
                [bin_dir / "python", REPO / "examples" / "make_checkpoint.py", "checkpoint"],
                cwd=work,
                env=env,
                check=True,
            )
            env.update(LOADTRACE="1", LOADTRACE_QUIET="0")
            job = subprocess.run(
                [bin_dir / "torchrun", "--nproc_per_node", "2", REPO / "examples" / "load.py", "checkpoint"]
                + ["--mode", mode],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
            )
            if job.returncode != 0:
                raise SystemExit(f"{run}: the job failed:\n{job.stderr[-3000:]}")
            (line,) = [text for text in job.stderr.splitlines() if text.startswith("loadtrace: job ")]
            (folder,) = (Path(work) / "loadtrace-traces").iterdir()
            shutil.rmtree(SAMPLES / run, ignore_errors=True)
            (SAMPLES / run).mkdir(parents=True)
            for trace in folder.glob("*.jsonl"):
                shutil.copy(trace, SAMPLES / run / trace.name)
            (SAMPLES / run / "summary.txt").write_text(line + "\n")
            print(f"recorded {run}: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a document differs")
    parser.add_argument(
        "--record",
        nargs="*",
        metavar="RUN",
        help=f"run these jobs again first (default all: {', '.join(RUNS)}; minutes)",
    )
    parser.add_argument("--screenshots", action="store_true", help="make docs/jaeger-*.png again (a minute)")
    args = parser.parse_args()
    if args.record is not None:
        record(args.record or list(RUNS))
    if args.screenshots or (args.record is not None and "fsdp524" in (args.record or list(RUNS))):
        subprocess.run([sys.executable, REPO / "scripts" / "jaeger_screenshots.py"], check=args.screenshots)
    stale = screenshots_stale()
    if stale:
        print(f"docs/jaeger-*.png: {stale}; make them again: scripts/gen_docs.py --screenshots", file=sys.stderr)
    differs = False
    placed: set[str] = set()
    for document in DOCUMENTS:
        text = document.read_text()
        placed |= {match.group("name") for match in MARKER.finditer(text)}
        new = generate(text, document)
        if new == text:
            continue
        differs = True
        if args.check:
            name = str(document.relative_to(REPO))
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), name, name))
        else:
            document.write_text(new)
            print(f"rewrote {document.relative_to(REPO)}")
    lost = [name for name in SAMPLE if name not in placed]  # a section moved without its marker
    if lost:
        print(f"samples in no document: {', '.join(lost)}", file=sys.stderr)
    return 1 if (differs and args.check) or lost or stale else 0


def screenshots_stale() -> str | None:
    """Why docs/jaeger-*.png are not those of the recording the samples are (None: they are); never their pixels."""
    manifest = SAMPLES / "jaeger" / "screenshots.json"
    if not manifest.exists():
        return f"no {manifest.relative_to(REPO)}"
    shots = json.loads(manifest.read_text())
    named = set(re.findall(r"\((jaeger-[\w-]+\.png)\)", (REPO / "docs" / "jaeger.md").read_text()))
    if named - set(shots) or any(not (REPO / "docs" / name).exists() for name in shots):
        return f"docs/jaeger.md shows {sorted(named)}, made: {sorted(shots)}"
    recorded = recorded_job_id()
    made = {shot["job_id"] for shot in shots.values() if shot["made_from"] == "fsdp524"}
    return None if made == {recorded} else f"made from job {made}, the fsdp524 recording is job {recorded}"


def recorded_job_id() -> str:
    """The job id of the recorded fsdp524 run (rank 0's closing line names it)."""
    line = (SAMPLES / "fsdp524" / "summary.txt").read_text()
    return line.split("loadtrace: job ", 1)[1].split(",", 1)[0].split(" ", 1)[0]


if __name__ == "__main__":
    sys.exit(main())
