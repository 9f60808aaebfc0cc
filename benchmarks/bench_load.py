#!/usr/bin/env python
"""loadtrace's cost benchmark: one invocation, interleaved runs, a null arm next to every comparison.

    .venv/bin/python benchmarks/bench_load.py                  # every part (~12 min on 2 cores)
    .venv/bin/python benchmarks/bench_load.py --quick          # smoke, fewer rounds (~3 min on 2 cores)
    .venv/bin/python benchmarks/bench_load.py --only own,fit   # some parts

The parts (see benchmarks/README.md for the figures and why each method was chosen), each a module of ``bench/``:

never  processes that never load (``python -c pass``, ``import torch``) with ``LOADTRACE=1`` vs unset;
own    loadtrace's own time on the loading thread per load, metered inside warm loads of two sizes, fitted into a
       fixed cost per load and a cost per tensor (with the slice proxies' per-tensor cost, timed apart);
fit    whole warm loads of the two sizes with the hooks off / on / off in one process: a bound;
instructions  the per-tensor path's instructions per tensor under valgrind's callgrind (bare, floor, loadtrace's):
       what the machine's load cannot move;
state  what the dying-rank state and the termination handlers cost per load;
progress  what a load pays for the progress metrics over OTLP (issue 25), exporting at 100x the default rate.

Run it with the venv's Python (it must have torch, transformers and an installed loadtrace). Internal subcommands
(``_own``, ``_fit``, ``_state``, ``_progress``, ``_checkpoint``) are the worker processes it starts: ``SUBCOMMAND
OUT ARGS...``, each writing its JSON result to OUT. The issue-6 parts are at commit 193fe06 (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import loadavg, log
from bench.fit import bench_fit, cmd_fit
from bench.never import bench_never
from bench.own import bench_own, cmd_own
from bench.progress import bench_progress, cmd_progress
from bench.render import render
from bench.slices import slice_instructions
from bench.state import bench_state, cmd_state
from bench.workloads import MANY, MOE, checkpoint, cmd_checkpoint

WORKERS = {"_own": cmd_own, "_fit": cmd_fit, "_state": cmd_state, "_progress": cmd_progress}
WORKERS["_checkpoint"] = cmd_checkpoint
PARTS = "never,own,fit,instructions,state,progress"
# part -> its rounds in a full run and with --quick
ROUNDS = {"never": (20, 6), "own": (8, 3), "fit": (18, 6), "progress": (12, 6)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke: fewer rounds (never 6, own 3, fit 6)")
    parser.add_argument("--rounds", type=int, help="rounds of every part (default: never 20, own 8, fit 18)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/loadtrace-bench"), help="checkpoints (cached), logs")
    parser.add_argument(
        "--fit-settle", action="store_true", help="fit: an untimed load of the arm before each timed one"
    )
    parser.add_argument("--only", default=PARTS, help=f"comma-separated parts: {PARTS}")
    parser.add_argument("--json", help="also write every raw figure here")
    parser.add_argument("--markdown", help="also write the report here")
    args = parser.parse_args(argv)
    args.parts = set(args.only.split(","))
    if args.parts - set(PARTS.split(",")):
        parser.error(f"unknown parts: {','.join(sorted(args.parts - set(PARTS.split(','))))} (known: {PARTS})")
    args.rounds_of = {part: args.rounds or pair[int(args.quick)] for part, pair in ROUNDS.items()}
    return args


def meta(quick: bool) -> dict[str, Any]:
    import importlib.metadata as md

    def git(*command: str) -> str:
        return subprocess.run(["git", *command], cwd=Path(__file__).parent, capture_output=True, text=True).stdout

    dirty = git("status", "--porcelain", "../loadtrace").strip()  # the measured code: the tree's, when installed
    return {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "torch": md.version("torch"),
        "transformers": md.version("transformers"),
        "mode": "quick" if quick else "full",
        "commit": git("rev-parse", "--short", "HEAD").strip() + (" + uncommitted changes" if dirty else ""),
        "loadavg_start": loadavg(),
    }


def run_parts(res: dict[str, Any], args: argparse.Namespace) -> None:
    moe_dir, moe = checkpoint(MOE, args.work)
    many_dir, many = checkpoint(MANY, args.work)
    res["checkpoints"] = {"moe": moe, "many": many}
    log(f"{moe['tensors']} and {many['tensors']} tensors, {len(moe['files'])} and {len(many['files'])} shards")
    sizes = [(moe_dir, moe["tensors"], len(moe["files"])), (many_dir, many["tensors"], len(many["files"]))]
    rounds = args.rounds_of
    if "never" in args.parts:
        log(f"(never) processes that never load: {rounds['never']} interleaved rounds")
        res["never"] = bench_never(rounds["never"], args.work)
    if "own" in args.parts:
        log(f"(own) loadtrace's own time on the loading thread, metered in warm loads: {rounds['own']} rounds")
        res["own"] = bench_own(sizes, rounds["own"], args.work)
    if "fit" in args.parts:
        how = ", each after an untimed one of its arm" if args.fit_settle else ""
        log(f"(fit) warm loads of two sizes, hooks off / on / off (null) in all 6 orders{how}: {rounds['fit']} rounds")
        res["fit"] = bench_fit(sizes, rounds["fit"], args.work, args.fit_settle)
    if "instructions" in args.parts:
        log("(instructions) the per-tensor path under callgrind (a few minutes: valgrind runs the imports too)")
        res["instructions"] = slice_instructions()
    if "state" in args.parts:
        log("(state) state file and termination handlers per load")
        res["state"] = bench_state(moe_dir, args.work)
    if "progress" in args.parts:
        log(f"(progress) warm loads, progress metrics every 0.1 s / none / none: {rounds['progress']} rounds")
        res["progress"] = bench_progress(sizes[0], rounds["progress"], args.work)


def main(argv: list[str]) -> int:
    if argv and argv[0] in WORKERS:  # a worker process: SUBCOMMAND OUT ARGS...
        result = WORKERS[argv[0]](argv[2:])
        Path(argv[1]).write_text(json.dumps(result))
        return 0
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    res: dict[str, Any] = {"meta": meta(args.quick)}
    run_parts(res, args)
    res["meta"] |= {"loadavg_end": loadavg(), "elapsed_s": time.perf_counter() - began}
    text = render(res) + f"\n\n(total {res['meta']['elapsed_s']:.0f} s)"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
