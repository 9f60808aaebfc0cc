"""(d) ``loadtrace report DIR --format json`` (the CLI, a fresh process each time) over 64 ranks' files, made from one
real two-rank load of the ~20,000-tensor checkpoint; ``python -c "import loadtrace.cli"`` timed alongside to split
start-up from analysis."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import PY, clean_env
from .stats import low, med
from .traces import read_spans


def _rewrite_ids(node: Any, mapping: dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("spanId", "parentSpanId") and isinstance(value, str) and value in mapping:
                node[key] = mapping[value]
            else:
                _rewrite_ids(value, mapping)
    elif isinstance(node, list):
        for item in node:
            _rewrite_ids(item, mapping)


def rank_files(trace_dir: Path) -> dict[int, Path]:
    """rank → its trace file."""
    found = {}
    for file in trace_dir.glob("*.jsonl"):
        _, resource = read_spans(file)
        found[int(resource["loadtrace.rank"])] = file
    return found


def rank_resource(job: str, rank: int, world: int, per_node: int) -> dict[str, dict[str, str]]:
    """The resource attributes that say who rank ``rank`` of a ``world``-rank job is, as OTLP JSON values."""
    return {
        "loadtrace.rank": {"intValue": str(rank)},
        "loadtrace.local_rank": {"intValue": str(rank % per_node)},
        "loadtrace.world_size": {"intValue": str(world)},
        "loadtrace.local_world_size": {"intValue": str(per_node)},
        "loadtrace.node_rank": {"intValue": str(rank // per_node)},
        "service.instance.id": {"stringValue": f"{job}/rank-{rank}"},
        "host.name": {"stringValue": f"node{rank // per_node:02d}"},
        "process.pid": {"intValue": str(10000 + rank)},
    }


def as_rank(data: dict[str, Any], rank: int, world: int, per_node: int, mapping: dict[str, str]) -> str:
    """One line of a trace file, rewritten to be rank ``rank``'s."""
    for rs in data["resourceSpans"]:
        attributes = rs["resource"]["attributes"]
        job = next((a["value"].get("stringValue") for a in attributes if a["key"] == "loadtrace.job.id"), "job")
        values = rank_resource(job, rank, world, per_node)
        for attribute in attributes:
            if attribute["key"] in values:
                attribute["value"] = values.pop(attribute["key"])
        attributes.extend({"key": k, "value": v} for k, v in values.items())
    _rewrite_ids(data, mapping)
    return json.dumps(data, separators=(",", ":"))


def own_span_ids(lines: list[dict[str, Any]]) -> set[str]:
    """The span ids of a rank file, less the job root's (every rank names it as parent)."""
    return {
        span["spanId"]
        for data in lines
        for rs in data["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
        if span["name"] != "loadtrace.job"
    }


def make_64_ranks(rank_files: dict[int, Path], dest: Path, world: int = 64, per_node: int = 8) -> None:
    """64 ranks' files from a real two-rank job: rank 0 from rank 0's file (it holds the job root span), the others
    from rank 1's, with the resource rewritten (rank, local rank, world size, node, instance id, host, pid) and every
    span id made unique per rank (the job root's id, which every rank names as parent, is kept)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for rank in range(world):
        source = rank_files[0 if rank == 0 else 1]
        lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        ids = own_span_ids(lines)
        mapping = {old: hashlib.blake2b(f"{rank}/{old}".encode(), digest_size=8).hexdigest() for old in ids}
        out = [as_rank(data, rank, world, per_node, mapping) for data in lines]
        host = f"node{rank // per_node:02d}"
        (dest / f"rank{rank:05d}-{host}-{10000 + rank}.jsonl").write_text("\n".join(out) + "\n")


def time_cli(cli: Path, rank_dir: Path, result: dict[str, Any], first: bool) -> float:
    """Seconds of one ``loadtrace report --format json``; the first run also records what the report found."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(cli), "report", str(rank_dir), "--format", "json"], capture_output=True, text=True, env=clean_env()
    )
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"loadtrace report failed ({proc.returncode}): {proc.stderr[-2000:]}")
    if first:
        report = json.loads(proc.stdout)
        result["ranks_in_report"] = len(report.get("ranks", []))
        result["findings"] = len(report.get("findings", []))
        result["traces"] = len(report.get("traces", []))
    return seconds


def time_read_files(rank_dir: Path, result: dict[str, Any]) -> float:
    """Without a working CLI: seconds of reading the files with ``loadtrace.analysis.sources.read_files``."""
    code = (
        "import time; t=time.perf_counter(); from loadtrace.analysis.sources import read_files; "
        f"s=read_files({str(rank_dir)!r}); print(time.perf_counter()-t, len(s.spans))"
    )
    t0 = time.perf_counter()
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=clean_env(), check=True)
    seconds = time.perf_counter() - t0
    result["spans_read"] = int(out.stdout.split()[-1])
    return seconds


def bench_report(rank_dir: Path, repeats: int, work: Path) -> dict[str, Any]:
    cli = Path(PY).parent / "loadtrace"
    result: dict[str, Any] = {
        "files": len(list(rank_dir.glob("*.jsonl"))),
        "bytes": sum(p.stat().st_size for p in rank_dir.glob("*.jsonl")),
    }
    have_cli = cli.exists() and subprocess.run([str(cli), "report", "--help"], capture_output=True).returncode == 0
    result["how"] = "cli" if have_cli else "read_files"
    times, imports = [], []
    for i in range(repeats):
        times.append(time_cli(cli, rank_dir, result, i == 0) if have_cli else time_read_files(rank_dir, result))
        t0 = time.perf_counter()
        subprocess.run([PY, "-c", "import loadtrace.cli"], env=clean_env(), check=True)
        imports.append(time.perf_counter() - t0)
    result.update(median_s=med(times), min_s=low(times), import_only_median_s=med(imports), repeats=repeats)
    return result
