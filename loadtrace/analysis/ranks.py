"""Spans → one record per rank of each job: what it opened, read, converted, materialised and held.

A job is a trace (every rank's spans hang from the job's root span); a rank is a resource's ``loadtrace.rank``, else
its ``service.instance.id``. Totals come from the outermost load spans (``transformers.from_pretrained``,
``loadtrace.load``), which already count every file opened while they were open, whichever thread read it; a file
span outside every load (a bare ``safe_open`` / ``torch.load``) is counted from its own attributes. Every number here
is a sum of span attributes named in README.md's span reference, so it can be traced back to the spans it came from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..context import trace_ids
from .sources import Progress, Span

LOAD_SPANS = frozenset({"transformers.from_pretrained", "loadtrace.load"})
FILE_SPANS = frozenset({"safetensors.open", "torch.load"})
# Read bytes without a file of their own (``safetensors.torch.load(bytes)``).
BYTES_SPANS = frozenset({"safetensors.load"})
MATERIALIZED_PREFIX = "loadtrace.materialized.bytes."
HELD_PREFIX = "loadtrace.model.held_bytes."
META = "meta"


def int_attr(attributes: dict[str, Any], key: str) -> int:
    """An integer attribute, 0 when absent or not an integer (a hand-edited or foreign span must not break a report)."""
    value = attributes.get(key)
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def opt_int_attr(attributes: dict[str, Any], key: str) -> int | None:
    """An integer attribute, None when absent or not an integer: unknown is not zero."""
    value = attributes.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def _known(values: Iterable[int | None]) -> list[int]:
    return [value for value in values if value is not None]


def _sum_known(spans: list[Span], key: str) -> int | None:
    """The sum of an attribute over spans, None unless every span carries it (a partial sum would mislead)."""
    values = [opt_int_attr(span.attributes, key) for span in spans]
    return sum(values) if values and None not in values else None  # type: ignore[arg-type]


def _max_known(spans: list[Span], key: str) -> int | None:
    return max(_known(opt_int_attr(span.attributes, key) for span in spans), default=None)


def _min_known(spans: list[Span], key: str) -> int | None:
    return min(_known(opt_int_attr(span.attributes, key) for span in spans), default=None)


def _first_known(spans: list[Span], key: str) -> int | None:
    return next(iter(_known(opt_int_attr(span.attributes, key) for span in spans)), None)


def str_attr(attributes: dict[str, Any], key: str) -> str | None:
    value = attributes.get(key)
    return value if isinstance(value, str) and value else None


def by_device(attributes: dict[str, Any], prefix: str) -> dict[str, int]:
    """``<prefix><device>`` attributes → {device: bytes}."""
    return {
        key[len(prefix) :]: int_attr(attributes, key) for key in attributes if key.startswith(prefix) and key != prefix
    }


def real_bytes(per_device: dict[str, int]) -> int:
    """Bytes that occupy memory: every device but ``meta``."""
    return sum(value for device, value in per_device.items() if device != META)


@dataclass(eq=False)  # identity: one record per rank, usable as a dict key
class RankLoad:
    trace_id: str
    rank: int | None
    instance: str | None
    world_size: int | None
    local_world_size: int | None
    host: str | None
    strategy: str | None
    checkpoint: str | None
    load_seconds: float | None
    loads: int
    files_opened: int
    tensors_read: int
    read_bytes: int
    conversions: int
    conversion_bytes: int
    materialized_bytes: dict[str, int]
    materialized_sites: list[tuple[str, int]]
    held_bytes: dict[str, int]
    peak_rss_bytes: int | None
    hook_errors: int
    resource: dict[str, Any] = field(repr=False)
    spans: list[Span] = field(repr=False)
    node_memory_bytes: int | None = None
    # Memory and I/O of the loads (docs/report.md): None when the spans do not carry them (an older loadtrace).
    rss_before_bytes: int | None = None
    rss_after_bytes: int | None = None
    peak_rss_anon_bytes: int | None = None
    peak_rss_file_bytes: int | None = None
    peak_rss_shmem_bytes: int | None = None
    rss_anon_before_bytes: int | None = None
    rss_file_before_bytes: int | None = None
    storage_read_bytes: int | None = None
    cached_bytes: int | None = None
    node_available_bytes: int | None = None
    cgroup_memory_current_bytes: int | None = None
    cgroup_memory_max_bytes: int | None = None
    # Started but never finished (killed): from a progress snapshot left behind, or spans whose parent never ended.
    incomplete: bool = False
    last_state: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else (self.instance or "rank ?")


@dataclass
class Job:
    """One trace: every rank's spans of one job."""

    trace_id: str
    ranks: list[RankLoad]
    start_ns: int

    @property
    def job_id(self) -> str | None:
        return next((r for r in (str_attr(rank.resource, "loadtrace.job.id") for rank in self.ranks) if r), None)

    @property
    def world_size(self) -> int | None:
        sizes = [rank.world_size for rank in self.ranks if rank.world_size is not None]
        return max(sizes) if sizes else None

    def rank(self, number: int) -> RankLoad | None:
        return next((rank for rank in self.ranks if rank.rank == number), None)


def rank_key(resource: dict[str, Any]) -> tuple[int | None, str | None]:
    rank = resource.get("loadtrace.rank")
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    instance = str_attr(resource, "service.instance.id")
    if instance is None:
        host, pid = resource.get("host.name"), resource.get("process.pid")
        instance = f"{host}/{pid}" if host is not None or pid is not None else None
    # With a rank, the rank alone names the process: a rank that restarted under a new pid is still the same rank.
    return (rank, None) if rank is not None else (None, instance)


def jobs_from_spans(spans: Iterable[Span], progress: Iterable[Progress] = ()) -> list[Job]:
    """Group spans by trace, then by rank; jobs in order of their first span, ranks in rank order. Ranks that never
    finished are marked incomplete (see ``mark_incomplete``)."""
    grouped: dict[str, dict[tuple[int | None, str | None], list[Span]]] = defaultdict(lambda: defaultdict(list))
    seen: set[tuple[str, str]] = set()
    for span in spans:
        # The same span read twice (a copied file, a file and a collector's copy of it) must not count twice.
        if span.span_id:
            if (span.trace_id, span.span_id) in seen:
                continue
            seen.add((span.trace_id, span.span_id))
        grouped[span.trace_id][rank_key(span.resource)].append(span)
    snapshots = _snapshots_by_rank(progress)
    for trace_id, rank in snapshots:
        grouped[trace_id].setdefault((rank, None), [])  # a rank killed before it finished any span
    jobs = []
    for trace_id, by_rank in grouped.items():
        ranks = [
            summarize_rank(trace_id, rank, instance, rank_spans) for (rank, instance), rank_spans in by_rank.items()
        ]
        mark_incomplete(trace_id, ranks, snapshots)
        ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.instance or ""))
        start = min((span.start_ns for rank_spans in by_rank.values() for span in rank_spans), default=0)
        jobs.append(Job(trace_id=trace_id, ranks=ranks, start_ns=start))
    jobs.sort(key=lambda job: (job.start_ns, job.trace_id))
    return jobs


def outermost(spans: list[Span], names: frozenset[str], by_id: dict[str, Span]) -> list[Span]:
    """Spans named in ``names`` with no ancestor so named (a nested load is already in its parent's totals)."""
    result = []
    for span in spans:
        if span.name not in names:
            continue
        seen, parent, nested = {span.span_id}, by_id.get(span.parent_span_id), False
        while parent is not None and parent.span_id not in seen:
            if parent.name in names:
                nested = True
                break
            seen.add(parent.span_id)
            parent = by_id.get(parent.parent_span_id)
        if not nested:
            result.append(span)
    return result


def inside_any(span: Span, loads: list[Span]) -> bool:
    """Whether a file span started while a load was open on this rank: the load's totals already count it."""
    return any(load.start_ns <= span.start_ns <= load.end_ns for load in loads)


def merge_sites(loads: Iterable[Span]) -> list[tuple[str, int]]:
    """``loadtrace.materialized.sites`` / ``site_bytes`` (parallel arrays) of loads → [(site, bytes)], largest first."""
    totals: dict[str, int] = defaultdict(int)
    for load in loads:
        sites, sizes = (
            load.attributes.get("loadtrace.materialized.sites"),
            load.attributes.get("loadtrace.materialized.site_bytes"),
        )
        if not isinstance(sites, list) or not isinstance(sizes, list):
            continue
        for site, size in zip(sites, sizes, strict=False):  # a truncated array pairs what it can
            if isinstance(site, str) and isinstance(size, int) and not isinstance(size, bool):
                totals[site] += size
    return sorted(totals.items(), key=lambda item: (-item[1], item[0]))


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


def _snapshots_by_rank(progress: Iterable[Progress]) -> dict[tuple[str, int | None], Progress]:
    """The latest snapshot of each (trace, rank) that had something open."""
    latest: dict[tuple[str, int | None], Progress] = {}
    for snapshot in progress:
        for trace_id in {entry["trace_id"] for entry in snapshot.open}:
            key = (trace_id, snapshot.rank)
            if key not in latest or latest[key].time_ns < snapshot.time_ns:
                latest[key] = snapshot
    return latest


def last_state(trace_id: str, snapshot: Progress) -> dict[str, Any]:
    """What a killed rank was doing: the innermost span it had open, and the bytes its open loads had by then."""
    entries = [entry for entry in snapshot.open if entry.get("trace_id") == trace_id]
    loads = [entry for entry in entries if entry.get("kind") == "load"]
    innermost = max(entries, key=lambda entry: int_attr(entry, "start_time_unix_nano"))
    materialized: dict[str, int] = {}
    for load in loads:
        _add(
            materialized,
            {str(k): int_attr(load.get("materialized_bytes", {}), k) for k in load.get("materialized_bytes", {})},
        )
    return {
        "time_unix_nano": snapshot.time_ns,
        "during": innermost["name"],
        "open": [entry["name"] for entry in entries],
        "read_bytes": sum(int_attr(load, "read_bytes") for load in loads),
        "tensors_read": sum(int_attr(load, "read_tensors") for load in loads),
        "materialized_bytes": materialized,
        "peak_rss_bytes": max((int_attr(entry, "rss_peak") for entry in entries), default=0) or None,
    }


def mark_incomplete(trace_id: str, ranks: list[RankLoad], snapshots: dict[tuple[str, int | None], Progress]) -> None:
    every_span = {span.span_id for rank in ranks for span in rank.spans}
    job_id = next((str_attr(rank.resource, "loadtrace.job.id") for rank in ranks if rank.resource), None)
    root = format(trace_ids(job_id)[1], "016x") if job_id else None
    for rank in ranks:
        snapshot = snapshots.get((trace_id, rank.rank))
        if snapshot is not None:
            rank.incomplete, rank.last_state = True, last_state(trace_id, snapshot)
            continue
        # Without a snapshot (OTLP only, or no disk): a finished span whose parent never ended was inside a load or
        # phase that was still open when the rank's spans stop.
        unfinished = {s.parent_span_id for s in rank.spans if s.parent_span_id and s.parent_span_id not in every_span}
        unfinished.discard(root)
        if root is not None and unfinished:
            rank.incomplete = True
            rank.last_state = {"unfinished_parent_spans": len(unfinished)}


def summarize_rank(trace_id: str, rank: int | None, instance: str | None, spans: list[Span]) -> RankLoad:
    spans = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    by_id = {span.span_id: span for span in spans if span.span_id}
    resource = spans[0].resource if spans else ({"loadtrace.rank": rank} if rank is not None else {})
    loads = outermost(spans, LOAD_SPANS, by_id)
    pretrained = outermost(spans, frozenset({"transformers.from_pretrained"}), by_id)
    stray_files = [s for s in spans if s.name in FILE_SPANS | BYTES_SPANS and not inside_any(s, loads)]

    files_opened = sum(int_attr(s.attributes, "loadtrace.files.opened") for s in loads)
    files_opened += sum(1 for s in stray_files if s.name in FILE_SPANS)
    tensors_read = sum(int_attr(s.attributes, "loadtrace.read.tensors") for s in loads + stray_files)
    read_bytes = sum(int_attr(s.attributes, "loadtrace.read.bytes") for s in loads + stray_files)

    converts = [s for s in spans if s.name == "transformers.convert"]
    materialized: dict[str, int] = {}
    held: dict[str, int] = {}
    for load in loads:
        _add(materialized, by_device(load.attributes, MATERIALIZED_PREFIX))
    for load in pretrained:
        _add(held, by_device(load.attributes, HELD_PREFIX))
    # Every load span, nested ones too: a custom ``loadtrace.load`` around ``from_pretrained`` has the same peak.
    peaks = [int_attr(s.attributes, "loadtrace.rss.peak") for s in spans if s.name in LOAD_SPANS]
    strategies = [str_attr(s.attributes, "loadtrace.strategy") for s in pretrained]
    checkpoints = [str_attr(s.attributes, "loadtrace.checkpoint") for s in pretrained]

    return RankLoad(
        trace_id=trace_id,
        rank=rank,
        instance=str_attr(resource, "service.instance.id") or instance,
        world_size=_positive(resource.get("loadtrace.world_size")),
        local_world_size=_positive(resource.get("loadtrace.local_world_size")),
        host=str_attr(resource, "host.name"),
        # A rank that loaded several models is judged by its first: the strategy a job runs under does not change.
        strategy=next((s for s in strategies if s), None),
        checkpoint=next((c for c in checkpoints if c), None) or str_attr(resource, "loadtrace.checkpoint"),
        load_seconds=sum(s.seconds for s in loads) if loads else None,
        loads=len(loads),
        files_opened=files_opened,
        tensors_read=tensors_read,
        read_bytes=read_bytes,
        conversions=sum(int_attr(s.attributes, "loadtrace.convert.count") for s in converts),
        conversion_bytes=sum(int_attr(s.attributes, "loadtrace.convert.bytes") for s in converts),
        materialized_bytes=dict(sorted(materialized.items())),
        materialized_sites=merge_sites(loads),
        held_bytes=dict(sorted(held.items())),
        peak_rss_bytes=max((p for p in peaks if p > 0), default=None),
        hook_errors=sum(int_attr(s.attributes, "loadtrace.hook_errors") for s in loads),
        resource=resource,
        spans=spans,
        node_memory_bytes=max((int_attr(s.attributes, "loadtrace.node.memory_total") for s in loads), default=0)
        or None,
        # Before: the first load's (the process before any loading); after: the last one's.
        rss_before_bytes=_first_known(loads, "loadtrace.rss.before"),
        rss_after_bytes=_first_known(loads[::-1], "loadtrace.rss.after"),
        peak_rss_anon_bytes=_max_known(loads, "loadtrace.rss_anon.peak"),
        peak_rss_file_bytes=_max_known(loads, "loadtrace.rss_file.peak"),
        peak_rss_shmem_bytes=_max_known(loads, "loadtrace.rss_shmem.peak"),
        rss_anon_before_bytes=_first_known(loads, "loadtrace.rss_anon.before"),
        rss_file_before_bytes=_first_known(loads, "loadtrace.rss_file.before"),
        storage_read_bytes=_sum_known(loads, "loadtrace.io.storage_read_bytes"),
        cached_bytes=_sum_known(loads, "loadtrace.io.cached_bytes"),
        node_available_bytes=_min_known(loads, "loadtrace.node.memory_available"),
        cgroup_memory_current_bytes=_max_known(loads, "loadtrace.cgroup.memory_current"),
        cgroup_memory_max_bytes=_min_known(loads, "loadtrace.cgroup.memory_max"),
    )


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
