"""A large job made from a real one: a recorded 2-rank FSDP run copied to N ranks on N/8 nodes, for the tests and
the benchmarks (``benchmarks/bench_scale.py``) alike.

Rank 0 is the recorded rank 0 (it holds the job's root span); every other rank is a copy of the recorded rank 1 with
its own resource (rank, local rank, node rank, host ``nodeNNN``, pid, instance), its own span ids and its times shifted
by ``rank % jitter_ms`` milliseconds (timestamps its attributes carry move too, and a startup span's carried split is
the one its moved spans have). Outliers, each one rank (a rank number outside the job: none):

- ``slow`` (one rank, or several: a whole node's, a mix): its times stretched 3x; with ``slow_by`` > 0 instead, its
  whole timeline stretched from its first span's start so that its last span ends ``slow_by`` seconds later (its
  spans still nest).
- ``slow_read`` (with ``slow_by`` > 0): its checkpoint files read ``slow_by`` seconds longer, everything after them
  that much later (its read phase is the difference, as a slow storage makes it).
- ``cold``: every node's checkpoint cold (none of it in the page cache at open), its first rank fetching it from
  storage while its files are open, so each node has a storage speed and a slow node's reading shows as
  ``slow_storage``.
- ``failed``: its load raised ``FileNotFoundError`` (its span's status an error, with its ``error.type``).
- ``killed``: cut short the way a SIGKILL cuts a file when nothing else is left: its outermost load span, written
  last, is missing.
- ``dead``: SIGKILLed halfway through its reading, as a real one is found: only the spans that had ended by then,
  and its state file (``loadtrace.statefile``) with the load open and the totals of the files it had opened by then.
- ``partial``: its file's last line cut in the middle (a write the kill interrupted).

``write_live_job`` writes the state files of a job in the middle of its load instead, for ``loadtrace top``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from loadtrace import semconv as sc
from loadtrace import statefile

from . import structure
from .jobtree import _carry_split, _move_times  # the same moves as a tree of many jobs
from .paths import FIXTURES, SPANS

FIXTURE = SPANS / "fsdp524"
# The same job recorded by a later loadtrace: startup spans, launch ids and attempts (docs/samples/fsdp524 as it was
# recorded on 2026-12-01, kept in tests/fixtures/recorded: tests name its figures, which a new recording would change).
RECORDED = FIXTURES / "recorded" / "fsdp524"
RANKS_PER_NODE = 8
JITTER_MS = 97
FIRST_PID = 20000


def _set(attributes: list[dict], key: str, value: dict) -> None:
    for item in attributes:
        if item["key"] == key:
            item["value"] = value
            return
    attributes.append({"key": key, "value": value})


def _new_id(rank: int, old: str) -> str:
    return hashlib.sha256(f"{rank}:{old}".encode()).hexdigest()[:16]


def _spans(data: dict):
    for resource_spans in data["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            yield from scope_spans["spans"]


def _attribute(span: dict, key: str) -> Any:
    value = next((a["value"] for a in span.get("attributes", []) if a["key"] == key), {})
    text = value.get("intValue", value.get("stringValue"))
    return int(text) if "intValue" in value else text


def host_of(rank: int, ranks_per_node: int = RANKS_PER_NODE) -> str:
    return f"node{rank // ranks_per_node:03d}"


def write_big_job(
    folder: Path,
    ranks: int = 512,
    slow: int | Collection[int] = 7,
    killed: int = 300,
    slow_by: float = 0.0,
    *,
    dead: int | None = None,
    partial: int | None = None,
    slow_read: Collection[int] = (),
    cold: bool = False,
    failed: Collection[int] = (),
    source: Path = FIXTURE,
    ranks_per_node: int = RANKS_PER_NODE,
    jitter_ms: int = JITTER_MS,
    job_id: str | None = None,
) -> Path:
    """Write the job's files under ``folder`` (the module docstring says what each outlier is); the folder.
    ``job_id``: the copy's own job id, and so its own trace (default: the recording's, so copies share its trace)."""
    recorded = {n: sorted(source.glob(f"rank0000{n}-*.jsonl"))[0] for n in (0, 1)}
    raw = {
        n: [json.loads(line) for line in path.read_text().splitlines() if line.strip()] for n, path in recorded.items()
    }
    roots = {span["spanId"] for n in raw for line in raw[n] for span in _spans(line) if span["name"] == sc.SPAN_JOB}
    lines = {n: _template(found) for n, found in raw.items()}
    resource0 = lines[0][0]["resourceSpans"][0]["resource"]["attributes"]
    recorded_job = next(a["value"]["stringValue"] for a in resource0 if a["key"] == sc.JOB_ID)
    # What the recording's ranks hung from: its root (as an older loadtrace derived it too), its 2 groups.
    hung = structure.structure_ids(recorded_job, 2) | roots
    job_id = job_id or recorded_job
    trace_id = f"{sc.job_trace_ids(job_id)[0]:032x}" if job_id != recorded_job else None
    first = min(int(span["startTimeUnixNano"]) for n in (0, 1) for line in lines[n] for span in _spans(line))
    slows = {slow} if isinstance(slow, int) else set(slow)
    slow_spans = [span for line in lines[0 if slows == {0} else 1] for span in _spans(line)]
    origin = min(int(span["startTimeUnixNano"]) for span in slow_spans)
    extent = max(int(span["endTimeUnixNano"]) for span in slow_spans) - origin
    dilation = 1 + slow_by * 1e9 / extent if slow_by > 0 else 1.0
    # A slow read: a file span that opens by then ends slow_by later, every time after it moves with it.
    reads = [span for line in lines[1] for span in _spans(line) if span["name"] in sc.FILE_SPANS]
    last_open = max((int(span["startTimeUnixNano"]) for span in reads), default=0)  # a recording may read no file
    splits: dict[Any, Any] = {}
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        template = lines[0 if rank == 0 else 1]
        own_ids = {span["spanId"] for line in template for span in _spans(line)}
        host, pid = host_of(rank, ranks_per_node), FIRST_PID + rank
        shift = (rank % jitter_ms) * 1_000_000

        def moved(ns: int, rank: int = rank, shift: int = shift) -> int:
            if rank in slows and slow_by > 0:
                return origin + shift + round((ns - origin) * dilation)
            if rank in slow_read and rank != 0 and ns > last_open:
                return ns + shift + round(slow_by * 1e9)
            return ns + shift

        data_lines = []
        for line in template:
            data = json.loads(json.dumps(line))  # a copy
            for resource_spans in data["resourceSpans"]:
                attributes = resource_spans["resource"]["attributes"]
                for key, number in (
                    (sc.RANK, rank),
                    (sc.LOCAL_RANK, rank % ranks_per_node),
                    (sc.NODE_RANK, rank // ranks_per_node),
                    (sc.WORLD_SIZE, ranks),
                    (sc.LOCAL_WORLD_SIZE, ranks_per_node),
                    (sc.PROCESS_PID, pid),
                ):
                    _set(attributes, key, {"intValue": str(number)})
                _set(attributes, sc.HOST_NAME, {"stringValue": host})
                _set(attributes, sc.SERVICE_INSTANCE_ID, {"stringValue": f"big/rank-{rank}"})
                _set(attributes, sc.JOB_ID, {"stringValue": job_id})
                structure.as_rank(attributes, rank)
            for span in _spans(data):
                structure.under_group(span, job_id, rank, hung)
                span["traceId"] = trace_id or span["traceId"]
                start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
                _move_times(span, moved)
                if rank in slows and slow_by <= 0:
                    span["endTimeUnixNano"] = str(start + shift + 3 * (end - start))
                if cold:
                    _cold(span)
                if rank in failed and span["name"] in sc.LOAD_SPANS:
                    span["status"] = {"code": 2, "message": "FileNotFoundError: checkpoint/model-00003-of-00005"}
                    _set(span["attributes"], sc.ERROR_TYPE, {"stringValue": "FileNotFoundError"})
                if rank != 0:
                    span["spanId"] = _new_id(rank, span["spanId"])
                    if span.get("parentSpanId") in own_ids:
                        span["parentSpanId"] = _new_id(rank, span["parentSpanId"])
            data_lines.append(data)
        spans = [span for data in data_lines for span in _spans(data)]
        if cold:
            _fetched(spans, rank % ranks_per_node == 0)
        _carry_split(spans, splits, (min(rank, 1), rank in slows, rank in slow_read))
        if rank == killed:  # the load span a SIGKILL never let it write
            data_lines = [d for d in data_lines if all(s["name"] != sc.SPAN_FROM_PRETRAINED for s in _spans(d))]
        stem = f"rank{rank:05d}-{host}-{pid}"
        if rank == dead:
            data_lines = _until_death(data_lines, folder / (stem + sc.STATE_SUFFIX), ranks, ranks_per_node)
        for span in (span for data in data_lines for span in _spans(data)):
            structure.moved(span)  # its values for machines on their event, as a rank writes them
        if rank == 0:  # rank 0's root and every rank's group, written at its exit
            spans0 = [span for data in data_lines for span in _spans(data)]
            data_lines.append(structure.job_lines(job_id, ranks, first, _model(spans0), "loadtrace"))
        text = "".join(json.dumps(data, separators=(",", ":")) + "\n" for data in data_lines)
        if rank == partial:
            last = text.rstrip("\n").rfind("\n") + 1
            text = text[: last + (len(text) - last) // 2]
        (folder / (stem + sc.TRACE_FILE_SUFFIX)).write_text(text)
    return folder


def _template(data_lines: list[dict]) -> list[dict]:
    """A recorded rank's lines as the copies start from: its values for machines among its attributes (the moves
    below read them there), the job's structure left out (the copies' is made for their world size)."""
    kept = []
    for data in data_lines:
        for resource_spans in data["resourceSpans"]:
            resource_spans["scopeSpans"] = [ss for ss in resource_spans["scopeSpans"] if not structure.is_structure(ss)]
            for scope_spans in resource_spans["scopeSpans"]:
                scope_spans["spans"] = [structure.flatten(s) for s in scope_spans["spans"] if s["name"] != sc.SPAN_JOB]
        if any(True for _ in _spans(data)):
            kept.append(data)
    return kept


def _model(spans: list[dict]) -> str | None:
    load = next((span for span in spans if span["name"] == sc.SPAN_FROM_PRETRAINED), None)
    return sc.model_name(_attribute(load, sc.CHECKPOINT), _attribute(load, sc.MODEL_CLASS)) if load else None


def _cold(span: dict) -> None:
    """The span as a cold page cache makes it: a file found none of its bytes cached, a load all of its files cold."""
    if span["name"] in sc.FILE_SPANS:
        _set(span["attributes"], sc.FILE_CACHED_BYTES_AT_OPEN, {"intValue": "0"})
    files = _attribute(span, sc.IO_CHECKPOINT_FILE_BYTES)
    if span["name"] in sc.LOAD_SPANS and files is not None:
        _set(span["attributes"], sc.IO_CHECKPOINT_COLD_BYTES, {"intValue": str(files)})
        _set(span["attributes"], sc.IO_CACHED_BYTES, {"intValue": "0"})


def _fetched(spans: list[dict], fetches: bool) -> None:
    """A cold node's storage reads: its first rank fetches the checkpoint's files while its file spans are open, the
    others find them in the page cache (``loadtrace.io.storage_read_bytes`` and ``_intervals`` on their loads)."""
    files = sorted(
        (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])) for s in spans if s["name"] in sc.FILE_SPANS
    )
    merged: list[list[int]] = []
    for start, end in files:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    for load in (s for s in spans if s["name"] == sc.SPAN_FROM_PRETRAINED):
        nbytes = _attribute(load, sc.IO_CHECKPOINT_FILE_BYTES) if fetches else 0
        _set(load["attributes"], sc.IO_STORAGE_READ_BYTES, {"intValue": str(nbytes or 0)})
        times = [{"intValue": str(t)} for stretch in merged for t in stretch] if fetches else []
        _set(load["attributes"], sc.IO_STORAGE_READ_INTERVALS, {"arrayValue": {"values": times}})


def _until_death(data_lines: list[dict], state_path: Path, ranks: int, ranks_per_node: int) -> list[dict]:
    """A rank SIGKILLed halfway through its load: the lines of the spans that had ended by then, and its state file."""
    spans = [span for data in data_lines for span in _spans(data)]
    load = next(span for span in spans if span["name"] == sc.SPAN_FROM_PRETRAINED)
    load_start, load_end = int(load["startTimeUnixNano"]), int(load["endTimeUnixNano"])
    files = [s for s in spans if s["name"] in sc.FILE_SPANS and load_start <= int(s["startTimeUnixNano"]) <= load_end]
    # Halfway through its reading (the files' spans), else through its load.
    first = min((int(s["startTimeUnixNano"]) for s in files), default=load_start)
    death = (first + max((int(s["endTimeUnixNano"]) for s in files), default=load_end)) // 2
    kept = []
    for data in data_lines:
        for scope_spans in (ss for rs in data["resourceSpans"] for ss in rs["scopeSpans"]):
            scope_spans["spans"] = [s for s in scope_spans["spans"] if int(s["endTimeUnixNano"]) <= death]
        if any(True for _ in _spans(data)):
            kept.append(data)
    resource = {a["key"]: a["value"] for a in data_lines[0]["resourceSpans"][0]["resource"]["attributes"]}
    rank = int(resource[sc.RANK]["intValue"])
    # A file span lasts until its load ends; its tensors are read (and counted in the state) soon after it opens.
    opened = [s for s in files if int(s["startTimeUnixNano"]) <= death]
    writer = statefile.Writer(
        str(state_path),
        {
            "pid": int(resource[sc.PROCESS_PID]["intValue"]),
            "rank": rank,
            "local_rank": rank % ranks_per_node,
            "world_size": ranks,
            "local_world_size": ranks_per_node,
        },
        {
            "job_id": resource.get(sc.JOB_ID, {}).get("stringValue", ""),
            "launch_id": resource.get(sc.LAUNCH_ID, {}).get("stringValue", ""),
            "host": resource[sc.HOST_NAME]["stringValue"],
            "trace_id": load["traceId"],
            "phase": sc.SPAN_FROM_PRETRAINED,
            "load": sc.SPAN_FROM_PRETRAINED,
            "strategy": _attribute(load, sc.STRATEGY) or "",
            "trace_file": str(state_path.with_name(state_path.name.removesuffix(sc.STATE_SUFFIX) + ".jsonl")),
        },
    )
    writer["created_ns"] = min(int(s["startTimeUnixNano"]) for s in spans)
    writer.load_started()
    for span in opened:
        slot = writer.new_slot()
        slot.counts[0] += _attribute(span, sc.READ_TENSORS) or 0
        slot.counts[1] += _attribute(span, sc.READ_BYTES) or 0
        writer.add("files_opened", 1)
    for key, value in (
        ("load_start_ns", load_start),
        ("updated_ns", death),
        ("status", statefile.STATUS_LOADING),
        ("loads_open", 1),
        ("checkpoint_tensor_bytes", _attribute(load, sc.CHECKPOINT_TENSOR_BYTES) or 0),
        ("memory_limit", _attribute(load, sc.MEMORY_LIMIT) or 0),
        ("memory_limit_source", statefile.LIMIT_NODE),
        ("node_memory_total", _attribute(load, sc.NODE_MEMORY_TOTAL) or 0),
        ("rss_peak", _attribute(load, sc.RSS_BEFORE) or 0),
    ):
        writer[key] = value
    fetched = _attribute(load, sc.IO_STORAGE_READ_BYTES)
    stretches = next((a["value"] for a in load["attributes"] if a["key"] == sc.IO_STORAGE_READ_INTERVALS), None)
    if fetched is not None and stretches is not None:  # its storage reads by its death, as fast as its load's were
        times = [int(v["intValue"]) for v in stretches["arrayValue"]["values"]]
        whole = [(s, e) for s, e in zip(times[::2], times[1::2], strict=True)]
        until = [(s, min(e, death)) for s, e in whole if min(e, death) > s]
        share = sum(e - s for s, e in until) / max(1, sum(e - s for s, e in whole))
        writer.fetched(0, round(fetched * share), death, until)
    writer.close()
    return kept


# A job in the middle of its load, as ``loadtrace top`` finds it --------------------------------------------------

GB = 10**9
LIVE_CHECKPOINT = 140 * GB
LIVE_LIMIT = 2000 * GB  # each node's memory
NOT_A_PID = 4_194_305  # above Linux's highest pid_max: never a running process


def write_live_job(
    folder: Path,
    ranks: int,
    now_ns: int,
    *,
    behind: tuple[int, ...] = (),
    stuck: tuple[int, ...] = (),
    dead: tuple[int, ...] = (),
    near_limit: tuple[int, ...] = (),
    finished: tuple[int, ...] = (),
    this_host: str = "",
    ranks_per_node: int = RANKS_PER_NODE,
    job_id: str = "big-live",
) -> Path:
    """State files of ``ranks`` ranks two minutes into a plain load of a 140 GB checkpoint at ``now_ns``: each has read
    about 60 % (a little more or less by rank), progressed half a second ago, its RSS rising as it reads. ``behind``:
    at 10 %; ``stuck``: no progress for a minute; ``dead``: on ``this_host`` under a pid that cannot exist (a SIGKILL:
    never said it exited); ``near_limit``: its RSS at 95 % of its node's memory and rising fast enough to reach it
    before its load ends; ``finished``: its load done (idle)."""
    folder.mkdir(parents=True, exist_ok=True)
    start = now_ns - 120 * 10**9
    for rank in range(ranks):
        host = this_host if rank in dead else host_of(rank, ranks_per_node)
        pid = NOT_A_PID if rank in dead else FIRST_PID + rank
        share = 0.1 if rank in behind else 1.0 if rank in finished else 0.55 + (rank % 11) / 100
        path = folder / f"rank{rank:05d}-{host}-{pid}{sc.STATE_SUFFIX}"
        writer = statefile.Writer(
            str(path),
            {"pid": pid, "rank": rank, "local_rank": rank % ranks_per_node, "world_size": ranks},
            {"job_id": job_id, "host": host, "strategy": sc.STRATEGY_PLAIN, "load": sc.SPAN_FROM_PRETRAINED},
        )
        writer["local_world_size"] = ranks_per_node
        writer["created_ns"] = start - 30 * 10**9
        writer.load_started()
        writer["load_start_ns"] = start
        writer["checkpoint_tensor_bytes"] = LIVE_CHECKPOINT
        writer["memory_limit"], writer["memory_limit_source"] = LIVE_LIMIT, statefile.LIMIT_NODE
        writer["node_memory_total"] = LIVE_LIMIT
        read = round(LIVE_CHECKPOINT * share)
        files = 30 * read // LIVE_CHECKPOINT
        for _ in range(files):
            writer.new_slot().counts[1] += read // max(files, 1)
        writer.add("files_opened", files)
        loading = rank not in finished
        writer["status"] = statefile.STATUS_LOADING if loading else statefile.STATUS_IDLE
        writer["loads_open"] = int(loading)
        writer["updated_ns"] = now_ns - (60 if rank in stuck else 1) * 10**9
        writer.set_text("phase", sc.SPAN_CONVERT if loading else "")
        rss = 1900 * GB if rank in near_limit else round((100 + 100 * share / 0.6) * GB)  # rising as it reads
        for key, value in (
            ("progress_ns", now_ns - (60 if rank in stuck else 0.5) * 10**9),
            ("rate_base_ns", now_ns - 10 * 10**9),
            ("rate_base_bytes", round(read * 0.5)),
            ("rss_load_start", 100 * GB),
            ("rss_load_start_ns", start),
            ("rss_now", rss),
            ("rss_sampled_ns", now_ns - 10**9),
        ):
            writer.set_live(key, int(value))
        writer["rss_peak"] = rss
        writer.close()
    return folder
