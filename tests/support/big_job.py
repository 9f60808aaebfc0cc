"""A large job made from a real one: the 2-rank FSDP run in ``fixtures/spans/fsdp524`` copied to N ranks on N/8 nodes.

Rank 0 is the recorded rank 0; every other rank is a copy of the recorded rank 1 with its own resource (rank, host,
pid), its own span ids and times shifted by a few milliseconds. One rank is slowed down (its times stretched 3x, or,
with ``slow_by``, its whole timeline stretched to end that many seconds later) and one is cut short the way a SIGKILL
cuts a file: its outermost load span, written last, is missing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .paths import SPANS

FIXTURE = SPANS / "fsdp524"
RANKS_PER_NODE = 8


def _set(attributes: list[dict], key: str, value: dict) -> None:
    for item in attributes:
        if item["key"] == key:
            item["value"] = value
            return
    attributes.append({"key": key, "value": value})


def _new_id(rank: int, old: str) -> str:
    return hashlib.sha256(f"{rank}:{old}".encode()).hexdigest()[:16]


def write_big_job(folder: Path, ranks: int = 512, slow: int = 7, killed: int = 300, slow_by: float = 0.0) -> Path:
    """Write the job's files under ``folder``; the folder. ``slow_by`` > 0: the slow rank's every time moves away
    from its first span's start in proportion, so that its last span ends ``slow_by`` seconds later (its spans
    still nest)."""
    recorded = {0: sorted(FIXTURE.glob("rank00000-*.jsonl"))[0], 1: sorted(FIXTURE.glob("rank00001-*.jsonl"))[0]}
    lines = {rank: path.read_text().splitlines() for rank, path in recorded.items()}
    slow_spans = [span for line in lines[0 if slow == 0 else 1] for span in _spans(json.loads(line))]
    origin = min(int(span["startTimeUnixNano"]) for span in slow_spans)
    extent = max(int(span["endTimeUnixNano"]) for span in slow_spans) - origin
    dilation = 1 + slow_by * 1e9 / extent if slow_by > 0 else 1.0
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        source = lines[0 if rank == 0 else 1]
        own_ids = {span["spanId"] for line in source for span in _spans(json.loads(line))}
        host, pid = f"node{rank // RANKS_PER_NODE:03d}", 20000 + rank
        out = []
        for line in source:
            data = json.loads(line)
            for resource_spans in data["resourceSpans"]:
                attributes = resource_spans["resource"]["attributes"]
                _set(attributes, "loadtrace.rank", {"intValue": str(rank)})
                _set(attributes, "loadtrace.local_rank", {"intValue": str(rank % RANKS_PER_NODE)})
                _set(attributes, "loadtrace.world_size", {"intValue": str(ranks)})
                _set(attributes, "loadtrace.local_world_size", {"intValue": str(RANKS_PER_NODE)})
                _set(attributes, "host.name", {"stringValue": host})
                _set(attributes, "process.pid", {"intValue": str(pid)})
                _set(attributes, "service.instance.id", {"stringValue": f"big/rank-{rank}"})
            spans = list(_spans(data))
            for span in spans:
                base = int(span["startTimeUnixNano"])
                shift = (rank % 97) * 1_000_000
                start, end = base + shift, int(span["endTimeUnixNano"]) + shift
                if rank == slow and slow_by > 0:
                    start = origin + shift + round((base - origin) * dilation)
                    end = origin + shift + round((int(span["endTimeUnixNano"]) - origin) * dilation)
                elif rank == slow:
                    end = start + 3 * (end - start)
                span["startTimeUnixNano"], span["endTimeUnixNano"] = str(start), str(end)
                if rank != 0:
                    span["spanId"] = _new_id(rank, span["spanId"])
                    if span.get("parentSpanId") in own_ids:
                        span["parentSpanId"] = _new_id(rank, span["parentSpanId"])
            if rank == killed and any(span["name"] == "transformers.from_pretrained" for span in spans):
                continue  # the load span a SIGKILL never let it write
            out.append(json.dumps(data, separators=(",", ":")))
        (folder / f"rank{rank:05d}-{host}-{pid}.jsonl").write_text("\n".join(out) + "\n")
    return folder


def _spans(data: dict):
    for resource_spans in data["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            yield from scope_spans["spans"]
