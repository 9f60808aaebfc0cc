#!/usr/bin/env python
"""Before and after in one run: this tree's installed loadtrace against another commit's wheel, arms interleaved.

    .venv/bin/python benchmarks/bench_ab.py --base 1787e83                     # own,fit,instructions, 3 rounds
    .venv/bin/python benchmarks/bench_ab.py --base 1787e83 --parts own --rounds 4 --part-rounds 2

The base commit's loadtrace is built from ``git archive`` into a venv of its own under ``--work`` that sees this venv's
packages (torch, transformers, ...) through a ``.pth`` line, so the two arms differ in loadtrace alone. Each round runs
``bench_load.py --only PARTS`` (this tree's benchmark code) once per arm, the arms' order alternating round by round;
the summary gives each figure per arm (median over rounds, every round's value beside it) with the load average
each run started and ended at. Install this tree first (``pip install --no-deps --force-reinstall .``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def base_venv(commit: str, work: Path) -> Path:
    """A venv with ``commit``'s loadtrace installed from its source, and this venv's packages behind it."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=REPO, capture_output=True, text=True, check=True)
    where = work / "ab" / sha.stdout.strip()
    python = where / "venv" / "bin" / "python"
    if python.exists():
        return python
    source = where / "src"
    source.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "x", "-C", str(source)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    paths = [str(ours)]
    for pth in ours.glob("*.pth"):  # folders that this venv's own .pth files add (the shared torch)
        paths += [line for line in pth.read_text().splitlines() if line and not line.startswith("import")]
    Path(theirs, "zz_bench_ab.pth").write_text("\n".join(p for p in paths if Path(p).is_dir()) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(source)], check=True)
    return python


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_arm(python: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [str(python), str(HERE / "bench_load.py"), "--only", args.parts, "--work", str(args.work)]
    command += ["--rounds", str(args.part_rounds), "--json", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())


def figures(found: dict[str, Any]) -> dict[str, Any]:
    """The figures compared: per tensor, the path and the renaming hook (µs, instructions), own's fit, fit's pairs
    (a median pair with its interval: a tuple)."""
    out: dict[str, Any] = {}
    own = found.get("own")
    if own:
        sl = own["slice_us"]
        keys = ("path_extra", "extra", "floor_extra", "copy_extra", "rename_extra")
        out |= {f"µs: {key}": sl[key] for key in keys if key in sl}
        out |= {"µs: per tensor in all (own: metered slope + path extra)": own["fit_min"]["per_tensor_us"]}
        out |= {"ms: fixed per load (own, minima)": own["fit_min"]["fixed_ms"]}
    for size in (found.get("fit") or {}).get("sizes", []):
        name = f"{size['tensors']:,} tensors"
        for unit, title in (("wall", "wall"), ("thread", "loading thread CPU")):
            off = size[f"{unit}_off_median_s"] * 1e3
            for key, what in (("on", "on - off"), ("null", "null - off")):
                median, ci = size[f"{unit}_{key}_median_ms"], size.get(f"{unit}_{key}_ci_ms")
                out[f"ms: {name}, {title}, {what} (median pair [95 % interval])"] = (median, *(ci or ()))
                out[f"%: {name}, {title}, {what} over off"] = median / off * 100
    for key, value in (found.get("instructions") or {}).items():
        if key.endswith("extra"):
            out[f"instructions: {key}"] = value
    return out


def shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"{value[0]:+.1f} [{value[1]:+.0f}, {value[2]:+.0f}]" if len(value) == 3 else f"{value[0]:+.1f}"
    return f"{value:.2f}"


def summary(rows: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(name for row in rows for name in row["figures"]))
    lines = ["| figure | arm | median | each round |", "|---|---|---|---|"]
    for name in names:
        for arm in ("base", "head"):
            found = [row["figures"][name] for row in rows if row["arm"] == arm and name in row["figures"]]
            if found:
                values = [v[0] if isinstance(v, (list, tuple)) else v for v in found]
                each = ", ".join(shown(v) for v in found)
                lines.append(f"| {name} | {arm} | {statistics.median(values):.2f} | {each} |")
    runs = "; ".join(f"{row['arm']} {row['started']}-{row['ended']} (load {row['load']})" for row in rows)
    return "\n".join(lines) + f"\n\nRuns, in order (time, load average at start → end): {runs}."


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit whose wheel is the 'before' arm")
    parser.add_argument("--parts", default="own,fit,instructions", help="bench_load.py parts to run per arm")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each: one run of every arm)")
    parser.add_argument("--part-rounds", type=int, default=3, help="bench_load.py --rounds of each run")
    parser.add_argument("--work", type=Path, default=Path("/tmp/loadtrace-bench"))
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args(argv)
    arms = {"base": base_venv(args.base, args.work), "head": Path(sys.executable)}
    rows = []
    for r in range(args.rounds):
        for arm in ("base", "head") if r % 2 == 0 else ("head", "base"):
            started, before = time.strftime("%H:%M"), loadavg()
            found = run_arm(arms[arm], args, args.work / f"ab-{r}-{arm}.json")
            row = {"arm": arm, "round": r, "started": started, "ended": time.strftime("%H:%M")}
            row |= {"load": f"{before} → {loadavg()}", "figures": figures(found)}
            rows.append(row)
            print(f"[ab {row['ended']}] round {r} {arm} done (load {row['load']})", file=sys.stderr, flush=True)
    print(f"## loadtrace before (base {args.base}) and after (this tree), {args.parts}, arms interleaved\n")
    print(summary(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
