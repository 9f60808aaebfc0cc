"""Jobs whose ranks died, as their files are: spans, state files and the launcher's witness lines, built by hand for
the dead-rank analysis, its CLI and the ClickHouse source's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtrace import semconv as sc
from loadtrace import statefile
from loadtrace.analysis.forecast import Target
from loadtrace.analysis.report import report
from loadtrace.analysis.sources import read_files
from support.otlp_lines import MODEL_BYTES, T0, job_lines, line, rank_load, resource, span, write_lines

JOB = "job-1"


TRACE = format(sc.job_trace_ids(JOB)[0], "032x")  # every rank of job-1 derives this trace id


ROOT = format(sc.job_trace_ids(JOB)[1], "016x")


FSDP = sc.STRATEGY_FSDP_CPU_RAM_EFFICIENT


SECOND = 1_000_000_000


CGROUP_LIMIT = 1_258_291_200


NODE_MEMORY = 25_000_000_000


def state_file(
    folder: Path,
    rank: int,
    *,
    status: int,
    pid: int | None = None,
    host: str = "node-0",
    attempt: int = 0,
    launch_id: str = "",
    phase: str = "",
    load: str = "",
    strategy: str = "",
    reads: tuple[int, int] = (0, 0),
    files: int = 0,
    materialized: dict[str, int] | None = None,
    conversions: tuple[int, int] = (0, 0),
    rss_peak: int = 0,
    memory_limit: tuple[int, int] = (0, statefile.LIMIT_UNKNOWN),
    node_memory: int = 0,
    cgroup_max: int = 0,
    load_start: int = T0,
    updated: int = T0 + SECOND,
    signal: int = 0,
    failure: str = "",
    name: str | None = None,
) -> Path:
    """One process's state file, as the instrumentation leaves it: its open (or last) load's counts since it began."""
    pid = 1000 + rank if pid is None else pid
    path = folder / (name or f"rank{rank:05d}-{host}-{pid}.state")
    identity = {"pid": pid, "rank": rank, "local_rank": rank, "world_size": 2, "local_world_size": 2}
    texts = {"job_id": JOB, "host": host, "trace_id": TRACE, "launch_id": launch_id, "phase": phase, "load": load}
    texts |= {"strategy": strategy, "failure": failure}
    state = statefile.Writer(str(path), {**identity, "attempt": attempt}, texts)
    state["load_first_slot"] = 0
    if reads != (0, 0):
        slot = state.new_slot()
        slot.counts[0] += reads[0]
        slot.counts[1] += reads[1]
    values = {
        "status": status,
        "signal": signal,
        "files_opened": files,
        "conversions": conversions[0],
        "conversion_bytes": conversions[1],
        "rss_peak": rss_peak,
        "memory_limit": memory_limit[0],
        "memory_limit_source": memory_limit[1],
        "node_memory_total": node_memory,
        "cgroup_memory_max": cgroup_max,
        "created_ns": load_start - SECOND,
        "load_start_ns": load_start,
        "updated_ns": updated,
        "loads_open": 1 if status in (statefile.STATUS_LOADING, statefile.STATUS_SIGNALLED) else 0,
    }
    for device, size in (materialized or {}).items():
        values[statefile.device_column(device)] = size
    for key, value in values.items():
        state[key] = value
    state.close()
    return path


def witness_line(rank: int, attributes: dict[str, Any], *, pid: int | None = None, start: int = T0, **extra) -> str:
    """The launcher's ``loadtrace.rank_exit`` span of a dead worker, with that worker's resource."""
    exit_span = span(sc.SPAN_RANK_EXIT, TRACE, start, start + 5 * SECOND, parent=ROOT, **_dotted(attributes))
    exit_span["status"] = {"code": 2, "message": "SIGKILL"}
    res = resource(rank, **{sc.PROCESS_PID: 1000 + rank if pid is None else pid, **extra})
    return line(res, [exit_span])


def _dotted(attributes: dict[str, Any]) -> dict[str, Any]:
    """``span``'s keyword form of attribute keys (dots as double underscores)."""
    return {key.replace(".", "__"): value for key, value in attributes.items()}


def killed_totals(read_bytes: int, materialized: int = 0) -> dict[str, Any]:
    totals: dict[str, Any] = {
        sc.READ_TENSORS: 33,
        sc.READ_BYTES: read_bytes,
        sc.FILES_OPENED: 5,
        sc.HOOK_ERRORS: 0,
        sc.RSS_PEAK: 1_200_000_000,
    }
    if materialized:
        totals[sc.materialized_bytes_key("cpu")] = materialized
    return totals


def full_job(trace: str = TRACE, strategy: str = "plain", ranks=(0, 1), start: int = T0, **res: Any) -> list[str]:
    loads = {rank: rank_load(trace, rank, strategy, MODEL_BYTES, start=start) for rank in ranks}
    return job_lines(trace, loads, **res)


def report_of(folder: Path, target: Target | None = None):
    return report(read_files(folder), target)


def oom_killed_job(tmp_path: Path, with_state: bool = True, with_witness: bool = True) -> Path:
    """5.12-style FSDP job: rank 0 finishes; rank 1 is OOM-killed in transformers.convert after reading 210 MB."""
    lines = job_lines(TRACE, {0: rank_load(TRACE, 0, FSDP, MODEL_BYTES)})
    if with_witness:
        attributes = {
            sc.EXIT_SIGNAL: "SIGKILL",
            sc.EXIT_OOM_KILLED: True,
            sc.EXIT_SOURCE: "launcher",
            sc.EXIT_STATUS: "loading",
            sc.EXIT_DURING: sc.SPAN_CONVERT,
            sc.EXIT_LOAD: sc.SPAN_FROM_PRETRAINED,
            sc.STRATEGY: FSDP,
            sc.MEMORY_LIMIT: CGROUP_LIMIT,
            sc.MEMORY_LIMIT_SOURCE: "cgroup v1",
            sc.CGROUP_MEMORY_MAX: CGROUP_LIMIT,
            sc.NODE_MEMORY_TOTAL: NODE_MEMORY,
            **killed_totals(210_323_968, materialized=1_009_216),
        }
        lines.append(witness_line(1, attributes))
    write_lines(tmp_path / "rank00000-node-0-1000.jsonl", lines[:1])
    write_lines(tmp_path / "witness-node-0-999.jsonl", lines[1:])
    if with_state:
        state_file(
            tmp_path, 1, status=statefile.STATUS_LOADING, phase=sc.SPAN_CONVERT, load=sc.SPAN_FROM_PRETRAINED,
            reads=(33, 210_323_968), files=5, materialized={"cpu": 1_009_216}, rss_peak=1_200_000_000,
            memory_limit=(CGROUP_LIMIT, statefile.LIMIT_CGROUP_V1), node_memory=NODE_MEMORY, cgroup_max=CGROUP_LIMIT,
            strategy=FSDP,
        )  # fmt: skip
    return tmp_path
