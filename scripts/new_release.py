"""Move the tests to a new transformers release, deliberately, in one command.

    python scripts/new_release.py 5.25.0           # into .venv: minutes for the counts, ~10 more for the large run
    python scripts/new_release.py 5.25.0 --venv .venv525 --no-large-run

CI tests the releases whose facts are recorded (``scripts/setup.sh`` pins them); a release without recorded facts
has its tests skipped ("no field facts", "no stored large run"). This records them:

1. installs ``transformers==VERSION`` into VENV with the venv's own pip, then loadtrace from this tree (a wheel);
2. counts, independently of loadtrace (``tests/workers/count_load.py`` under ``torchrun --nproc_per_node 2``), what
   each rank does in every mode on the default tiny checkpoint and under ZeRO-3 on seed 2's MoE; runs the same jobs
   under ``LOADTRACE=1`` and takes the findings ``loadtrace report`` makes of them;
3. appends them to ``tests/support/field_facts.py`` as the release's facts (``EXPECTED``, ``FINDINGS``, ``SEED2``);
4. measures the stored large run (``scripts/forecast_runs.py run``: FSDP, the 418 MB checkpoint) into
   ``tests/fixtures/forecast/<release>-fsdp-full/``;
5. pins the release in ``scripts/setup.sh`` for VENV.

Nothing is committed: read ``git diff`` (are the findings what this release should get? the notes in
``field_facts.py`` say what earlier releases did) and commit it yourself.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FACTS = REPO / "tests" / "support" / "field_facts.py"
FORECAST = REPO / "tests" / "fixtures" / "forecast"
SETUP = REPO / "scripts" / "setup.sh"
WORKER = REPO / "tests" / "workers" / "count_load.py"
MODES = ("plain", "fsdp", "zero3")
MODE_ENV = {"plain": {}, "fsdp": {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}, "zero3": {}}
FULL = ["--layers", "16", "--experts", "64", "--shard-size", "50MB"]  # the stored large run's 418 MB checkpoint

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))
from forecast_runs import clean_env  # noqa: E402
from support import field_facts  # noqa: E402

Counted = tuple[list[dict], list[dict]]  # each rank's independent count, the report's findings


def sh(*cmd: str | Path, **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def install(venv: Path, version: str) -> None:
    sh(venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", f"transformers=={version}")
    sh(venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--force-reinstall", REPO)


def make_checkpoint(venv: Path, out: Path, *args: str) -> Path:
    sh(venv / "bin" / "python", REPO / "examples" / "make_checkpoint.py", out, *args, cwd=out.parent)
    return out


def job(venv: Path, checkpoint: Path, mode: str, work: Path) -> Counted:
    """One two-rank job with ``LOADTRACE=1``: each rank's independent count, and the report's findings."""
    work.mkdir(parents=True)
    env = clean_env(venv, {**MODE_ENV[mode], "LOADTRACE": "1"})
    args: list[str | Path] = [checkpoint, "--mode", mode, "--out", work / "out"]
    sh(venv / "bin" / "torchrun", "--nproc_per_node", "2", WORKER, *args, cwd=work, env=env)
    counts = [json.loads((work / "out" / f"count-rank{rank}.json").read_text()) for rank in (0, 1)]
    report = subprocess.run(
        [str(venv / "bin" / "loadtrace"), "report", str(work / "loadtrace-traces"), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return counts, json.loads(report.stdout)["findings"]


def record(release: str, version: str, facts: dict[str, Counted], seed2: Counted) -> str:
    """The release's facts as Python appended to field_facts.py."""
    lines = [f"\n\n# transformers {version}, recorded by scripts/new_release.py (review before committing)."]
    for mode, (counts, findings) in facts.items():
        ranks = ", ".join(repr(field_facts.observed(count)) for count in counts)
        lines.append(f'EXPECTED[("{release}", "{mode}")] = ({ranks})')
        elsewhere = [f for f in findings if f["ranks"] != [1]]
        if elsewhere:
            print(f"note: {mode}: findings on other ranks than 1, not recorded: {[f['kind'] for f in elsewhere]}")
        kinds = sorted((f["kind"], f["severity"]) for f in findings if f["ranks"] == [1])
        lines.append(f'FINDINGS[("{release}", "{mode}")] = {set(kinds) if kinds else "set()"}')
    converted = tuple((count["conversions"], count["conversion_bytes"]) for count in seed2[0])
    seed2_kinds = {f["kind"] for f in seed2[1] if f["ranks"] == [1]}
    lines.append(f'SEED2["{release}"] = ({converted}, {seed2_kinds or "set()"})')
    return "\n".join(lines) + "\n"


def pin(venv: Path, version: str) -> None:
    """``make_venv <venv> transformers==X`` in setup.sh, for this venv's line."""
    text = SETUP.read_text()
    pattern = re.compile(rf"^(make_venv {re.escape(venv.name)} )transformers\S*", re.MULTILINE)
    if not pattern.search(text):
        print(f"note: no `make_venv {venv.name} ...` line in {SETUP}: pin it by hand")
        return
    SETUP.write_text(pattern.sub(rf"\g<1>transformers=={version}", text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="a transformers release, e.g. 5.25.0")
    parser.add_argument("--venv", type=Path, default=REPO / ".venv")
    parser.add_argument("--no-install", action="store_true", help="the venv already has it")
    parser.add_argument("--no-large-run", action="store_true", help="record the counts only")
    args = parser.parse_args(argv)
    venv = args.venv if args.venv.is_absolute() else REPO / args.venv
    release = ".".join(args.version.split(".")[:2])
    if any(key[0] == release for key in field_facts.EXPECTED):
        raise SystemExit(f"field_facts.py already has transformers {release}: remove its facts first to record anew")
    if not args.no_install:
        install(venv, args.version)
    with tempfile.TemporaryDirectory(prefix="loadtrace-new-release-") as temporary:
        work = Path(temporary)
        tiny = make_checkpoint(venv, work / "tiny")
        seed2_args = ["--layers", str(field_facts.SEED2_LAYERS), "--experts", str(field_facts.SEED2_EXPERTS)]
        seed2_args += ["--shard-size", field_facts.SEED2_SHARD_SIZE]
        seed2_args += [f"--set={key}={value}" for key, value in field_facts.SEED2_CONFIG.items()]
        seed2 = make_checkpoint(venv, work / "seed2", *seed2_args)
        facts = {mode: job(venv, tiny, mode, work / f"job-{mode}") for mode in MODES}
        seed2_job = job(venv, seed2, "zero3", work / "job-seed2")
        with FACTS.open("a") as handle:
            handle.write(record(release, args.version, facts, seed2_job))
        sh(venv / "bin" / "ruff", "format", FACTS)  # the recorded lines, wrapped as CI's lint wants them
        if not args.no_large_run:
            full = make_checkpoint(venv, work / "full", *FULL)
            tag = release.replace(".", "")
            runs = [sys.executable, REPO / "scripts" / "forecast_runs.py", "run", FORECAST, "--venv", venv]
            sh(*runs, "--mode", "fsdp", "--checkpoint", full, "--name", f"{tag}-fsdp-full")
    pin(venv, args.version)
    print(f"recorded transformers {args.version}: review `git diff` ({FACTS.name}, setup.sh, fixtures), then commit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
