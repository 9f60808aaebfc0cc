#!/usr/bin/env python
"""``loadtrace jobs`` over many jobs (issue 14): 500 jobs x 8 ranks of span files generated from a real run's files
(``tests/support/jobtree.py``: fresh job, trace and span ids, hosts, clusters alpha / beta / none, start times), timed
end to end as a user runs it: a fresh ``loadtrace jobs DIR --group-by cluster --format json`` process each time.

    .venv/bin/python benchmarks/bench_jobs.py                 # 500 jobs x 8 ranks, 5 runs
    .venv/bin/python benchmarks/bench_jobs.py --jobs 50 --runs 3

Prints the tree's size, then per run the wall time and the CPU time (user + system, the command and the processes it
forked), then the median and the best. The machine's load average is printed with them: on a shared machine wall
time is what the others leave.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.jobtree import write_tree  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", type=Path, help="write (or reuse) the tree here instead of a temporary folder")
    args = parser.parse_args()
    loadtrace = Path(sys.executable).with_name("loadtrace")
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as scratch:
        tree = args.tree or Path(scratch) / "tree"
        if not tree.exists():
            start = time.monotonic()
            write_tree(tree, args.jobs, args.ranks)
            print(f"generated {args.jobs} jobs x {args.ranks} ranks in {time.monotonic() - start:.1f} s")
        files = list(tree.rglob("*.jsonl"))
        size = sum(f.stat().st_size for f in files)
        print(f"tree: {len(files)} files, {size / 1e6:.1f} MB, under {tree}")
        walls, cpus = [], []
        for run in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            done = subprocess.run(
                [str(loadtrace), "jobs", str(tree), "--group-by", "cluster", "--format", "json"],
                capture_output=True,
                check=True,
            )
            wall = time.monotonic() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            report = json.loads(done.stdout)
            assert len(report["jobs"]) == args.jobs, len(report["jobs"])
            walls.append(wall)
            cpus.append(cpu)
            load = os.getloadavg()[0]
            print(f"run {run + 1}: wall {wall:.2f} s, cpu {cpu:.2f} s, load average {load:.1f}")
        print(
            f"loadtrace jobs over {args.jobs} jobs x {args.ranks} ranks: wall median {statistics.median(walls):.2f} s, "
            f"best {min(walls):.2f} s; cpu median {statistics.median(cpus):.2f} s ({os.cpu_count()} CPUs)"
        )
        print("groups:", json.dumps(report["groups"]))
        print("differences:", report["differences"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
