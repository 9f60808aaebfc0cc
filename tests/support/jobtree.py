"""A folder tree of many jobs' span files, generated from a real run's files (``tests/fixtures/spans/plain524``: a
2-rank ``torchrun`` of the test worker under transformers 5.24, plain data parallel).

Job ``j`` gets its own job id (``bench-0000j``, and so its own trace id and root span id, as loadtrace derives them),
fresh span ids, ``ranks`` ranks (rank 0 from the real rank 0's file, the others from the real rank 1's), hosts of
``RANKS_PER_NODE`` ranks each, a cluster (``alpha``, ``beta`` or none, in turn), a start time ``SPACING_S`` after the
job before, and its spans' times stretched by ``stretch(j)`` from the job's first span: beta's jobs start 2.5x slower.
Timestamps that attributes carry (a load's first file open, the startup's imports) move with the spans, and a startup
span's carried split (``loadtrace.startup.phases``) is the one its moved spans have (``loadtrace.startup_split``).
Used by ``benchmarks/bench_jobs.py`` (speed) and the ``jobs`` tests (what ``loadtrace jobs`` makes of it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from loadtrace import semconv
from loadtrace.startup_split import STARTUP_PHASES, PhaseSpan, split

from .paths import SPANS

SOURCE = SPANS / "plain524"
CLUSTERS = ("alpha", "beta", None)
RANKS_PER_NODE = 4
SPACING_S = 600
BETA_STRETCH = 2.5


def job_ids(job_id: str) -> tuple[str, str]:
    """(trace id, root span id) as loadtrace derives them from a job id (``semconv.job_trace_ids``)."""
    digest = hashlib.sha256(f"loadtrace:{job_id}".encode()).digest()
    return format(int.from_bytes(digest[:16], "big") or 1, "032x"), format(
        int.from_bytes(digest[16:24], "big") or 1, "016x"
    )


def cluster_of(job: int) -> str | None:
    return CLUSTERS[job % len(CLUSTERS)]


def stretch(job: int) -> float:
    return BETA_STRETCH if cluster_of(job) == "beta" else 1.0


def _templates(source: Path) -> dict[int, list[dict[str, Any]]]:
    """The real run's lines per rank (0 and 1), parsed."""
    found = {}
    for path in sorted(source.glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rank = next(
            int(a["value"]["intValue"])
            for line in lines
            for rs in line["resourceSpans"]
            for a in rs["resource"]["attributes"]
            if a["key"] == "loadtrace.rank"
        )
        found[rank] = lines
    return found


def _first_start(templates: dict[int, list[dict[str, Any]]]) -> int:
    return min(
        int(span["startTimeUnixNano"])
        for lines in templates.values()
        for line in lines
        for rs in line["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    )


def _set(attributes: list[dict[str, Any]], key: str, value: Any) -> None:
    """Set (or, with None, remove) one OTLP JSON attribute."""
    attributes[:] = [a for a in attributes if a["key"] != key]
    if value is not None:
        typed = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}
        attributes.append({"key": key, "value": typed})


TIME_ATTRIBUTES = (semconv.LOAD_FIRST_FILE_OPEN, semconv.STARTUP_IMPORTS)


def _move_times(span: dict[str, Any], when: Any) -> None:
    """The span's times, and the timestamps its attributes carry, by ``when`` (ns → ns)."""
    for end in ("startTimeUnixNano", "endTimeUnixNano"):
        span[end] = str(when(int(span[end])))
    for attribute in span.get("attributes", []):
        if attribute["key"] not in TIME_ATTRIBUTES:
            continue
        value = attribute["value"]
        if "intValue" in value:
            value["intValue"] = str(when(int(value["intValue"])))
        for item in value.get("arrayValue", {}).get("values", []):
            item["intValue"] = str(when(int(item["intValue"])))


def _carry_split(spans: list[dict[str, Any]], cache: dict[Any, Any], key: Any) -> None:
    """Set each startup span's carried split to the one the rank's (moved) spans have, as the rank computes it (the
    same for every job of one template and stretch: a split does not change when all times shift)."""
    for startup in (s for s in spans if s["name"] == semconv.SPAN_STARTUP):
        carried = [a for a in startup.get("attributes", []) if a["key"] == semconv.STARTUP_PHASE_NS]
        if not carried:
            continue
        if key not in cache:
            phase_spans = [
                PhaseSpan(
                    s["name"],
                    int(s["startTimeUnixNano"]),
                    int(s["endTimeUnixNano"]),
                    s["spanId"],
                    s.get("parentSpanId", ""),
                    {a["key"]: _plain(a["value"]) for a in s.get("attributes", []) if a["key"] in TIME_ATTRIBUTES},
                )
                for s in spans
            ]
            found = split((int(startup["startTimeUnixNano"]), int(startup["endTimeUnixNano"])), phase_spans)
            cache[key] = {"arrayValue": {"values": [{"intValue": str(found[p])} for p in STARTUP_PHASES]}}
        carried[0]["value"] = json.loads(json.dumps(cache[key]))


def _plain(value: dict[str, Any]) -> Any:
    if "arrayValue" in value:
        return [int(item["intValue"]) for item in value["arrayValue"].get("values", [])]
    return int(value["intValue"])


def write_tree(
    root: Path,
    jobs: int,
    ranks: int = 8,
    start_ns: int = 1_780_000_000 * 10**9,
    source: Path = SOURCE,
    prefix: str = "bench",
) -> Path:
    """Write ``jobs`` jobs of ``ranks`` ranks of ``source``'s run under ``root/<job id>/``; returns ``root``."""
    templates = _templates(source)
    splits: dict[Any, Any] = {}
    origin = _first_start(templates)
    old_trace = next(
        span["traceId"]
        for line in templates[0]
        for rs in line["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    )
    old_job = next(
        a["value"]["stringValue"]
        for line in templates[0]
        for rs in line["resourceSpans"]
        for a in rs["resource"]["attributes"]
        if a["key"] == "loadtrace.job.id"
    )
    _, old_root = job_ids(old_job)
    for job in range(jobs):
        job_id = f"{prefix}-{job:05d}"
        trace_id, root_id = job_ids(job_id)
        base = start_ns + job * SPACING_S * 10**9
        factor = stretch(job)
        folder = root / job_id
        folder.mkdir(parents=True, exist_ok=True)
        for rank in range(ranks):
            host = f"{job_id}-node{rank // RANKS_PER_NODE}"

            def span_id(old: str, rank: int = rank, job: int = job, root_id: str = root_id) -> str:
                if not old:
                    return old
                if old == old_root:
                    return root_id
                return hashlib.blake2b(f"{job}/{rank}/{old}".encode(), digest_size=8).hexdigest()

            lines = []
            for line in templates[0 if rank == 0 else 1]:
                line = json.loads(json.dumps(line))  # a copy
                for rs in line["resourceSpans"]:
                    attributes = rs["resource"]["attributes"]
                    for key, value in (
                        ("loadtrace.job.id", job_id),
                        ("service.instance.id", f"{job_id}/rank-{rank}"),
                        ("host.name", host),
                        ("process.pid", 1000 + rank),
                        ("loadtrace.rank", rank),
                        ("loadtrace.local_rank", rank % RANKS_PER_NODE),
                        ("loadtrace.node_rank", rank // RANKS_PER_NODE),
                        ("loadtrace.world_size", ranks),
                        ("loadtrace.local_world_size", RANKS_PER_NODE),
                        ("loadtrace.cluster", cluster_of(job)),
                    ):
                        _set(attributes, key, value)
                    for ss in rs["scopeSpans"]:
                        for span in ss["spans"]:
                            assert span["traceId"] == old_trace
                            span["traceId"] = trace_id
                            span["spanId"] = span_id(span["spanId"])
                            span["parentSpanId"] = span_id(span.get("parentSpanId", ""))
                            _move_times(span, lambda ns, base=base, factor=factor: base + round((ns - origin) * factor))
                lines.append(line)
            _carry_split(
                [
                    span
                    for line in lines
                    for rs in line["resourceSpans"]
                    for ss in rs["scopeSpans"]
                    for span in ss["spans"]
                ],
                splits,
                (min(rank, 1), factor),
            )
            out = [json.dumps(line, separators=(",", ":")) for line in lines]
            (folder / f"rank{rank:05d}-{host}-{1000 + rank}.jsonl").write_text("\n".join(out) + "\n")
    return root
