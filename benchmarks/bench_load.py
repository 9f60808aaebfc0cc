#!/usr/bin/env python
"""loadtrace's overhead benchmark (issue 6): one invocation, interleaved runs, medians, minima and per-pair ratios.

    .venv/bin/python benchmarks/bench_load.py            # the full run (~8-10 min on 2 cores)
    .venv/bin/python benchmarks/bench_load.py --quick    # smoke, every part once (~2.5 min on 2 cores)

What it measures (see benchmarks/README.md for the figures and why each method was chosen):

(a) interpreter start, ``python -c pass``: a shadow venv *without* loadtrace vs one *with* it installed but off (and,
    for information, on); plus the in-process cost of processing ``loadtrace.pth`` and a check that nothing is
    imported or patched when off.
(b) ``from_pretrained`` of a MoE checkpoint (16 layers x 64 experts, 3,219 tensors, ~409 MB, 10 shards), warm page
    cache, each run a fresh subprocess timed around ``from_pretrained`` alone (wall, CPU, peak RSS): off vs off (the
    null), ``LOADTRACE=1`` (files), OTLP http to a local receiver, ``LOADTRACE_DETAIL=tensor``, and ``torch.profiler``
    with memory and shapes; then off / off / on on two ranks under ``torchrun --nproc_per_node 2`` (gloo). Because
    whole-load timings on a shared 2-core machine scatter far more than 2 %, two steadier views follow:
    ``acct``, per-call costs of every hook (best of many blocks) x calls per load, read from the load's own spans;
    ``ab``, warm loads in ONE process with the hooks removed / installed between them.
(c) spans per rank at default detail, on that checkpoint and on a ~20,000-tensor one.
(d) ``loadtrace report DIR --format json`` over 64 ranks' files of the 20,000-tensor load.
(e) ``torch.zeros_like`` / ``empty_like`` outside a load: bare vs wrapped by loadtrace.
(never, fit, own, state) issue 16: processes that never load (``python -c pass``, ``import torch``) with
    ``LOADTRACE=1`` vs unset; the fixed cost per load and the cost per tensor, fitted over warm loads of two sizes:
    loadtrace's own time on the loading thread, metered inside the loads (``own``, ``bench/own.py``), and whole loads
    with the hooks off / on / off in one process, a bound (``fit``); what the dying-rank state and the termination
    handlers cost per load (``bench/cost.py``).

Run it with the venv's Python (it must have torch, transformers and an installed loadtrace); ``--only a,acct`` runs
parts. Internal subcommands (``_load``, ``_ab``, ``_account``, ``_micro``, ``_checkpoint``, ``_unpatched``) are the
worker processes it starts. This file is the command line and the order of the parts; each part is a module of
``bench/`` (see ``bench/__init__.py``), the report is ``bench/render.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.ab import bench_ab, cmd_ab
from bench.account import bench_account, cmd_account
from bench.common import loadavg, log
from bench.cost import bench_fit, bench_never, bench_state, cmd_fit, cmd_state
from bench.loads import cmd_load, interleave, run_load
from bench.micro import bench_micro, cmd_micro
from bench.own import bench_own, cmd_own
from bench.render import render
from bench.report64 import bench_report, make_64_ranks, rank_files
from bench.spans import span_counts
from bench.start import bench_start, cmd_unpatched
from bench.stats import summarize_load
from bench.traces import Receiver
from bench.workloads import DDP_CONFIGS, MANY, MOE, SINGLE_CONFIGS, checkpoint, cmd_checkpoint

WORKERS = {
    "_load": cmd_load,
    "_ab": cmd_ab,
    "_account": cmd_account,
    "_micro": cmd_micro,
    "_checkpoint": cmd_checkpoint,
    "_unpatched": cmd_unpatched,
    "_fit": cmd_fit,
    "_own": cmd_own,
    "_state": cmd_state,
}
PARTS = "never,fit,own,state,a,b,ddp,acct,ab,c,d,e"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke: every part once, fewer samples (~2.5 min)")
    parser.add_argument("--work", default="/tmp/loadtrace-bench", help="checkpoints (cached), traces, logs")
    parser.add_argument("--rounds", type=int, help="interleaved rounds, 1 rank (default 5; --quick 1)")
    parser.add_argument("--ddp-rounds", type=int, help="interleaved rounds, torchrun 2 ranks (default 3; --quick 1)")
    parser.add_argument("--loads", type=int, help="loads per process (default 3; --quick 2)")
    parser.add_argument(
        "--fit-settle", action="store_true", help="fit: an untimed load of the same arm before each timed one"
    )
    parser.add_argument("--only", default=PARTS, help=f"comma-separated parts: {PARTS}")
    parser.add_argument("--json", help="also write every raw figure here")
    parser.add_argument("--markdown", help="also write the table here")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.ddp_rounds = args.ddp_rounds or (1 if args.quick else 3)
    args.loads = args.loads or (2 if args.quick else 3)
    args.parts = set(args.only.split(","))
    args.work = Path(args.work)
    return args


def commit() -> str:
    """The measured code's commit (and whether the tree differs from it)."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "loadtrace"], cwd=here.parent, capture_output=True, text=True
        ).stdout
    except OSError:
        return "?"
    return head.strip() + (" + uncommitted changes" if dirty.strip() else "")


def meta(quick: bool) -> dict[str, Any]:
    import importlib.metadata as md

    return {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "torch": md.version("torch"),
        "transformers": md.version("transformers"),
        "mode": "quick" if quick else "full",
        "commit": commit(),
        "loadavg_start": loadavg(),
    }


def fresh_process_loads(res: dict[str, Any], args: argparse.Namespace, moe_dir: Path) -> None:
    """(b) on 1 rank and on 2, every configuration a fresh process, sharing one OTLP receiver."""
    receiver = Receiver()
    try:
        if "b" in args.parts:
            rounds, loads = args.rounds, args.loads
            log(f"(b) 1 rank: {rounds} rounds x {len(SINGLE_CONFIGS)} configs, {loads} loads per process")
            raw = interleave(SINGLE_CONFIGS, rounds, moe_dir, loads, args.work, receiver, False, "single")
            res["single"] = {
                "rounds": rounds,
                "loads": loads,
                "summary": summarize_load(raw, SINGLE_CONFIGS),
                "raw": raw,
            }
        if "ddp" in args.parts:
            rounds = args.ddp_rounds
            log(f"(b) torchrun 2 ranks: {rounds} rounds x {len(DDP_CONFIGS)} configs")
            loads = min(args.loads, 2)  # two ranks on two cores: the first load and one warm one
            raw = interleave(DDP_CONFIGS, rounds, moe_dir, loads, args.work, receiver, True, "ddp")
            res["ddp"] = {"rounds": rounds, "loads": loads, "summary": summarize_load(raw, DDP_CONFIGS), "raw": raw}
    finally:
        receiver.close()


def spans_and_report(res: dict[str, Any], args: argparse.Namespace, many_dir: Path) -> None:
    """(c) spans per rank, from (b)'s runs and a two-rank load of the many-tensor checkpoint; (d) the report over
    64 ranks made from that load."""
    moe, many = res["checkpoints"]["moe"], res["checkpoints"]["many"]
    log(f"(c) spans: a two-rank LOADTRACE=1 load of the {many['tensors']}-tensor checkpoint")
    many_run = run_load("LOADTRACE=1", many_dir, 1, args.work, "many-ddp", None, True)
    span_counts(res, moe, many, many_run)
    if "d" in args.parts:
        log("(d) loadtrace report over 64 ranks")
        make_64_ranks(rank_files(Path(many_run["trace_dir"])), args.work / "report-64")
        res["report"] = bench_report(args.work / "report-64", 3 if args.quick else 7, args.work)


def run_cost(res: dict[str, Any], args: argparse.Namespace, moe_dir: Path, many_dir: Path) -> None:
    """Issue 16: processes that never load; loadtrace's own time per load and the whole-load fit; the dying-rank state
    and signal handlers."""
    if "never" in args.parts:
        rounds = 6 if args.quick else 20
        log(f"(never) processes that never load: {rounds} interleaved rounds")
        res["never"] = bench_never(rounds, args.work)
    moe, many = res["checkpoints"]["moe"], res["checkpoints"]["many"]
    sizes = [(moe_dir, moe["tensors"], len(moe["files"])), (many_dir, many["tensors"], len(many["files"]))]
    if "own" in args.parts:
        rounds = 3 if args.quick else 8
        log(f"(own) loadtrace's own time on the loading thread, metered in warm loads of two sizes: {rounds} rounds")
        res["own"] = bench_own(sizes, rounds, args.work)
    if "fit" in args.parts:
        rounds = 6 if args.quick else 18
        how = ", each after an untimed one of its arm" if args.fit_settle else ""
        log(f"(fit) warm loads of two sizes, hooks off / on / off (null) in all 6 orders{how}: {rounds} rounds")
        res["fit"] = bench_fit(sizes, rounds, args.work, args.fit_settle)
    if "state" in args.parts:
        log("(state) state file and termination handlers per load")
        res["state"] = bench_state(moe_dir, args.work)


def run_parts(res: dict[str, Any], args: argparse.Namespace, moe_dir: Path, many_dir: Path) -> None:
    run_cost(res, args, moe_dir, many_dir)
    if "a" in args.parts:
        log("(a) interpreter start")
        res["start"] = bench_start(args.work, 10 if args.quick else 40)
    fresh_process_loads(res, args, moe_dir)
    if "acct" in args.parts:
        log("(b) overhead accounting: per-call costs x calls per load")
        res["account"] = bench_account(moe_dir, args.work)
    if "ab" in args.parts:
        triples = 3 if args.quick else 10
        log(f"(b) in-process A/B: {triples} triples of warm loads, hooks removed / installed between loads")
        res["ab"] = bench_ab(moe_dir, triples, args.work)
    if "c" in args.parts or "d" in args.parts:
        spans_and_report(res, args, many_dir)
    if "e" in args.parts:
        log("(e) micro-benchmark")
        res["micro"] = bench_micro(args.work, 6 if args.quick else 20)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in WORKERS:
        return WORKERS[argv[0]](argv[1:])
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    res: dict[str, Any] = {"meta": meta(args.quick)}
    moe_dir, moe = checkpoint(MOE, args.work)
    many_dir, many = checkpoint(MANY, args.work)
    res["checkpoints"] = {"moe": moe, "many": many}
    log(
        f"{MOE['name']}: {moe['tensors']} tensors, {len(moe['files'])} shards, {moe['bytes']:,} B; "
        f"{MANY['name']}: {many['tensors']} tensors, {len(many['files'])} shards, {many['bytes']:,} B"
    )
    run_parts(res, args, moe_dir, many_dir)
    res["meta"]["loadavg_end"] = loadavg()
    res["meta"]["elapsed_s"] = time.perf_counter() - began
    text = render(res) + f"\n\n(total {res['meta']['elapsed_s']:.0f} s)"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
