"""(b) ``from_pretrained`` in fresh processes: the ``_load`` worker (N loads, each timed around ``from_pretrained``
alone) and the orchestration that runs the configurations in interleaved, rotating rounds, on 1 rank or 2."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .common import PY, clean_env, free_port, is_wrapped, loadavg, log, proc_status, reset_peak, run_checked, worker
from .render import fmt
from .stats import metric
from .traces import Receiver, read_spans, spans_per_load

# The worker ---------------------------------------------------------------------------------------------------------


def parse_load_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="_load")
    parser.add_argument("ckpt")
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--profiler", action="store_true")
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--out", required=True, help="result JSON; {rank} is replaced")
    return parser.parse_args(argv)


def timed_load(load: Any, ckpt: str, profiler: bool) -> tuple[Any, dict[str, Any]]:
    """(model, figures) of one ``from_pretrained``: wall and CPU seconds, RSS before, after and at the peak."""
    reset_peak()
    before = proc_status()
    record: dict[str, Any] = {}
    if profiler:
        from torch.profiler import ProfilerActivity, profile

        c1 = time.process_time()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True):
            t1 = time.perf_counter()
            model = load(ckpt)
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        c2 = time.process_time()
        # What a user pays: entering the profiler, the load, and stopping it (its post-processing included).
        record["inner_s"] = t2 - t1
        t1, t2 = t0, t3
    else:
        c1 = time.process_time()
        t1 = time.perf_counter()
        model = load(ckpt)
        t2 = time.perf_counter()
        c2 = time.process_time()
    after = proc_status()
    # cpu_s: CPU seconds of every thread of this process during the load. Other jobs on the machine stretch wall
    # time more than CPU time, and what loadtrace adds is CPU work: steadier than wall time, if not steady.
    record.update(
        wall_s=t2 - t1,
        cpu_s=c2 - c1,
        rss_before=before["VmRSS"],
        rss_after=after["VmRSS"],
        hwm=after["VmHWM"],
        peak_delta=after["VmHWM"] - before["VmRSS"],
    )
    return model, record


def cmd_load(argv: list[str]) -> int:
    """Worker: one fresh process, ``--loads`` loads (on every rank of a gloo group with ``--ddp``)."""
    args = parse_load_args(argv)
    started = time.perf_counter()
    import gc

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    import_s = time.perf_counter() - started
    rank = 0
    dist = None
    if args.ddp:
        import torch.distributed as dist

        dist.init_process_group(backend="gloo")
        rank = dist.get_rank()
    hwm_start = proc_status()["VmHWM"]
    loads = []
    for _ in range(args.loads):
        gc.collect()
        if dist is not None:
            dist.barrier()
        model, record = timed_load(AutoModelForCausalLM.from_pretrained, args.ckpt, args.profiler)
        loads.append(record)
        del model
    result = load_result(rank, import_s, loads, hwm_start)
    Path(args.out.replace("{rank}", str(rank))).write_text(json.dumps(result))
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def load_result(rank: int, import_s: float, loads: list[dict[str, Any]], hwm_start: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "import_s": import_s,
        "loads": loads,
        "process_peak": max([hwm_start] + [load["hwm"] for load in loads]),
        "hwm_after_import": hwm_start,
        # Outside a load zeros_like is the builtin either way; safe_open shows whether tracing was on.
        "zeros_like_wrapped": is_wrapped(sys.modules["safetensors"].safe_open),
        "loadtrace_imported": "loadtrace" in sys.modules,
    }


# Orchestration ------------------------------------------------------------------------------------------------------


def config_env(label: str, trace_dir: Path, receiver: Receiver | None) -> tuple[dict[str, str], list[str]]:
    """(environment, extra worker arguments) of a configuration."""
    if label.startswith("off") or label == "torch.profiler":
        return clean_env(), (["--profiler"] if label == "torch.profiler" else [])
    if label == "LOADTRACE=1":
        return clean_env(LOADTRACE="1", LOADTRACE_DIR=str(trace_dir)), []
    if label == "DETAIL=tensor":
        return clean_env(LOADTRACE="1", LOADTRACE_DETAIL="tensor", LOADTRACE_DIR=str(trace_dir)), []
    if label == "OTLP http":
        assert receiver is not None
        return clean_env(
            LOADTRACE="1", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf"
        ), []
    raise ValueError(label)


def load_command(ckpt: Path, loads: int, out_dir: Path, extra: list[str], ddp: bool) -> list[str]:
    command = worker("_load", ckpt, "--loads", loads, "--out", out_dir / "rank{rank}.json", *extra)
    if not ddp:
        return command
    launcher = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    return [*launcher, "--master_port", str(free_port()), *command[1:], "--ddp"]


def span_files(trace_dir: Path) -> list[dict[str, Any]]:
    """Per trace file of a run: its rank, its span count and the spans of each load in it."""
    files = sorted(trace_dir.glob("*.jsonl")) if trace_dir.exists() else []
    counts = []
    for file in files:
        spans, resource = read_spans(file)
        counts.append(
            {
                "file": file.name,
                "rank": resource.get("loadtrace.rank"),
                "total": len(spans),
                "loads": spans_per_load(spans),
            }
        )
    return counts


def run_load(
    label: str, ckpt: Path, loads: int, work: Path, run_id: str, receiver: Receiver | None, ddp: bool
) -> dict[str, Any]:
    """One run of configuration ``label``: its worker process(es), their results and trace files."""
    trace_dir = work / "traces" / run_id
    out_dir = work / "results" / run_id
    shutil.rmtree(trace_dir, ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    env, extra = config_env(label, trace_dir, receiver)
    if ddp:
        env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets for nproc > 1 anyway; said here to keep it quiet
    cmd = load_command(ckpt, loads, out_dir, extra, ddp)
    before = receiver.snapshot() if receiver else (0, 0, 0)
    process_s = run_checked(cmd, env, 900, work / "results" / f"{run_id}.log", cwd=work)
    after = receiver.snapshot() if receiver else (0, 0, 0)
    ranks = [json.loads(p.read_text()) for p in sorted(out_dir.glob("rank*.json"))]
    if len(ranks) != (2 if ddp else 1):
        raise RuntimeError(f"{run_id}: expected {2 if ddp else 1} results, got {len(ranks)}")
    return {
        "label": label,
        "ranks": ranks,
        "process_s": process_s,
        "span_files": span_files(trace_dir),
        "otlp": {"requests": after[0] - before[0], "spans": after[1] - before[1], "bytes": after[2] - before[2]},
        "trace_dir": str(trace_dir),
    }


def run_id_of(tag: str, r: int, label: str) -> str:
    for char in " =().":
        label = label.replace(char, "_" if char == " " else "")
    return f"{tag}-r{r}-{label}"


def rotation(configs: list[str], r: int) -> list[str]:
    """Round ``r``'s order: rotated, and reversed every other round, so no config always goes first."""
    order = configs[r % len(configs) :] + configs[: r % len(configs)]
    if r % 2:
        order.reverse()
    return order


def check_and_log(run: dict[str, Any], run_id: str, label: str, tag: str, r: int, rounds: int) -> None:
    traced = label.startswith(("LOADTRACE", "OTLP", "DETAIL"))
    if any(rank["zeros_like_wrapped"] != traced for rank in run["ranks"]):
        log(f"WARNING: {run_id}: torch.zeros_like {'not ' if traced else ''}wrapped, unlike what {label} means")
    log(
        f"{tag} round {r + 1}/{rounds} {label:15s} first {metric(run, 'first'):.3f} s  warm "
        f"{fmt(metric(run, 'warm'))} s  peak {metric(run, 'peak_mb'):.0f} MB  (load avg {loadavg()})"
    )


def interleave(
    configs: list[str], rounds: int, ckpt: Path, loads: int, work: Path, receiver: Receiver | None, ddp: bool, tag: str
) -> list[dict[str, dict[str, Any]]]:
    """``rounds`` rounds, each running every configuration once: [{label: run}]."""
    results = []
    for r in range(rounds):
        round_results = {}
        for label in rotation(configs, r):
            run_id = run_id_of(tag, r, label)
            run = run_load(label, ckpt, loads, work, run_id, receiver, ddp)
            round_results[label] = run
            check_and_log(run, run_id, label, tag, r, rounds)
        results.append(round_results)
    return results
