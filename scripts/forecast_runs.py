"""Real runs for the memory forecast's calibration and validation (docs/report.md, Forecast), measured from outside.

    python scripts/forecast_runs.py run OUT --venv .venv --mode fsdp --checkpoint DIR [--nproc 2] [--name NAME]
    python scripts/forecast_runs.py all OUT --checkpoints DIR        # the matrix below, skipping runs already in OUT

Each run is a traced ``torchrun --nproc_per_node N`` of this script's ``worker`` (``from_pretrained`` of the checkpoint
under the mode's strategy, exactly as ``examples/load.py`` sets it up, then exit: no digest copies the weights after
the load). While it runs, every worker's ``/proc/PID/status`` is sampled every 10 ms from this process: its RssAnon,
RssFile and VmRSS peaks, and its VmHWM (the kernel's exact high-water mark). OUT/NAME/ then holds the job's spans
(``spans/*.jsonl``) and ``truth.json``: the checkpoint, the versions, and per rank what was sampled. Per node, low
truth = Σ RssAnon peaks (file-backed checkpoint pages are shared and reclaimable), high truth = Σ VmHWM.

``scripts/forecast_calibration.py`` turns these into the calibration the forecast reads and the docs' validation
table; tests/fixtures/forecast/ holds the runs it was made from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIELDS = {"VmRSS": "vm_rss", "VmHWM": "vm_hwm", "RssAnon": "rss_anon", "RssFile": "rss_file"}
SCRUBBED_PREFIXES = ("LOADTRACE", "OTEL_", "ACCELERATE_", "FSDP_")
SCRUBBED = {"PYTHONPATH", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
MODE_ENV = {"plain": {}, "fsdp": {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}, "zero3": {}}
# The matrix ``all`` runs: (venv, modes) x the three checkpoint sizes.
MATRIX = {".venv512": ("fsdp", "plain"), ".venv": ("fsdp", "plain", "zero3")}
SIZES = ("tiny", "eighth", "full")


def worker(checkpoint: str, mode: str, dtype: str | None = None) -> int:
    """One rank: join the process group, set the mode up as examples/load.py does, load (as ``dtype``, a torch dtype's
    name, when given: a bf16 checkpoint loaded as float32), and leave."""
    sys.path.insert(0, str(REPO / "examples"))
    import load  # examples/load.py: the same set-up a user's job has
    import torch.distributed as dist

    rank, world = load.init_distributed()
    keep_alive = load.prepare(mode)
    if dtype is None:
        model = load.from_pretrained(checkpoint)
    else:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype))
    del keep_alive
    print(f"rank {rank}/{world} mode {mode} loaded {sum(p.numel() for p in model.parameters()):,} parameters")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def status(pid: int) -> dict[str, int]:
    values = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in FIELDS:
                    values[FIELDS[key]] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return values


def mem_available() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as handle:
                    children = [int(child) for child in handle.read().split()]
                found += children
                todo += children
        except (OSError, ValueError):
            continue
    return found


def rank_of(pid: int) -> int | None:
    """The rank of a worker process; None for anything else (a compiler deepspeed started inherits RANK too)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"worker" not in handle.read().split(b"\0"):
                return None
        with open(f"/proc/{pid}/environ", "rb") as handle:
            env = dict(item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item)
        return int(env[b"RANK"]) if b"RANK" in env else None
    except (OSError, ValueError):
        return None


class Sampler(threading.Thread):
    """Every worker of the launcher ``pid``: the peak of each /proc/PID/status field seen while it ran."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.ranks: dict[int, int] = {}  # pid -> rank
        self.peaks: dict[int, dict[str, int]] = {}  # rank -> field -> peak
        self.available_start = mem_available()
        self.available_min = self.available_start
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for pid in descendants(self.pid):
                if pid not in self.ranks:
                    rank = rank_of(pid)
                    if rank is None:
                        continue
                    self.ranks[pid] = rank
                rank = self.ranks[pid]
                peaks = self.peaks.setdefault(rank, {})
                for field, value in status(pid).items():
                    peaks[field] = max(peaks.get(field, 0), value)
            self.available_min = min(self.available_min, mem_available())
            self.samples += 1
            time.sleep(self.interval)


def clean_env(venv: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def versions(venv: Path) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in ('torch', 'transformers')}))"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def checkpoint_summary(checkpoint: Path) -> dict[str, int]:
    sys.path.insert(0, str(REPO / "examples"))
    from make_checkpoint import summarize

    summary = summarize(checkpoint)
    return {"bytes": summary["bytes"], "tensors": summary["tensors"], "files": len(summary["files"])}


def run(out: Path, venv: Path, mode: str, checkpoint: Path, nproc: int, name: str, dtype: str | None = None) -> Path:
    target = out / name
    work = Path(f"/tmp/loadtrace-forecast-runs/{name}-{uuid.uuid4().hex[:8]}")
    work.mkdir(parents=True)
    job_id = f"forecast-{name}-{uuid.uuid4().hex[:8]}"
    env = clean_env(venv, {**MODE_ENV[mode], "LOADTRACE": "1", "LOADTRACE_JOB_ID": job_id, "PYTHONUNBUFFERED": "1"})
    cmd = [
        str(venv / "bin" / "torchrun"),
        "--nproc_per_node",
        str(nproc),
        "--master_port",
        str(29500 + os.getpid() % 1000),
    ]
    cmd += [str(Path(__file__).resolve()), "worker", str(checkpoint.resolve()), "--mode", mode]
    cmd += ["--dtype", dtype] if dtype else []
    start = time.monotonic()
    with open(work / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        sampler = Sampler(proc.pid)
        sampler.start()
        code = proc.wait(timeout=1800)
        sampler.done.set()
        sampler.join()
    seconds = time.monotonic() - start
    if code != 0:
        raise SystemExit(f"{name}: torchrun exited {code}; see {work / 'torchrun.log'}")
    if sorted(sampler.peaks) != list(range(nproc)):
        raise SystemExit(f"{name}: sampled ranks {sorted(sampler.peaks)}, expected {nproc}")
    shutil.rmtree(target, ignore_errors=True)
    (target / "spans").mkdir(parents=True)
    for jsonl in sorted((work / "loadtrace-traces" / job_id).glob("*.jsonl")):
        shutil.copy(jsonl, target / "spans" / jsonl.name)
    truth = {
        "name": name,
        "mode": mode,
        **({"dtype": dtype} if dtype else {}),
        "nproc": nproc,
        "versions": versions(venv),
        "checkpoint": checkpoint_summary(checkpoint),
        "seconds": round(seconds, 1),
        "samples": sampler.samples,
        "ranks": {str(rank): sampler.peaks[rank] for rank in sorted(sampler.peaks)},
        "node": {
            "sum_rss_anon_peaks": sum(p["rss_anon"] for p in sampler.peaks.values()),
            "sum_vm_hwm": sum(p["vm_hwm"] for p in sampler.peaks.values()),
            "mem_available_drop": sampler.available_start - sampler.available_min,
        },
    }
    (target / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    shutil.rmtree(work)
    print(f"{name}: {seconds:.0f}s, {sampler.samples} samples, {json.dumps(truth['node'])}", flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run")
    one.add_argument("out", type=Path)
    one.add_argument("--venv", type=Path, default=REPO / ".venv")
    one.add_argument("--mode", choices=tuple(MODE_ENV), default="fsdp")
    one.add_argument("--checkpoint", type=Path, required=True)
    one.add_argument("--nproc", type=int, default=2)
    one.add_argument("--name")
    one.add_argument("--dtype", help="load as this torch dtype (float32: a bf16 checkpoint loaded as fp32)")
    every = commands.add_parser("all")
    every.add_argument("out", type=Path)
    every.add_argument("--checkpoints", type=Path, required=True, help="holds tiny/, eighth/ and full/")
    every.add_argument("--only", nargs="*", help="run only these names")
    rank = commands.add_parser("worker")
    rank.add_argument("checkpoint")
    rank.add_argument("--mode", choices=tuple(MODE_ENV))
    rank.add_argument("--dtype")
    args = parser.parse_args(argv)
    if args.command == "worker":
        return worker(args.checkpoint, args.mode, args.dtype)
    if args.command == "run":
        name = args.name or f"{args.venv.name.lstrip('.')}-{args.mode}-{args.checkpoint.name}"
        run(args.out, args.venv.resolve(), args.mode, args.checkpoint, args.nproc, name, args.dtype)
        return 0
    for size in SIZES:  # small first: a failure shows early
        for venv, modes in MATRIX.items():
            for mode in modes:
                name = f"{'524' if venv == '.venv' else '512'}-{mode}-{size}"
                if (args.out / name / "truth.json").exists() or (args.only and name not in args.only):
                    continue
                run(args.out, (REPO / venv).resolve(), mode, args.checkpoints / size, 2, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
