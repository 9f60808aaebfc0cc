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
from dataclasses import dataclass
from typing import Any

from .. import semconv as sc
from .model import LastState, RankLoad, Site, UnfinishedSpans
from .sources import Progress, Span

# The device of empty weights: bytes there occupy no memory.
META = "meta"
# The rank that loads the checkpoint under a sharded strategy (docs/report.md, Findings: a simplification on several
# nodes, where accelerate loads on each node's local rank 0).
LOADING_RANK = 0


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


@dataclass
class Job:
    """One trace: every rank's spans of one job."""

    trace_id: str
    ranks: list[RankLoad]
    start_ns: int

    @property
    def job_id(self) -> str | None:
        return next((r for r in (str_attr(rank.resource, sc.JOB_ID) for rank in self.ranks) if r), None)

    @property
    def world_size(self) -> int | None:
        sizes = [rank.world_size for rank in self.ranks if rank.world_size is not None]
        return max(sizes) if sizes else None

    def rank(self, number: int) -> RankLoad | None:
        return next((rank for rank in self.ranks if rank.rank == number), None)

    @property
    def loading_rank(self) -> RankLoad | None:
        return self.rank(LOADING_RANK)

    def model_bytes(self) -> int:
        """The model's size: what the loading rank read, else the most real bytes any rank holds after loading."""
        loading = self.loading_rank
        if loading is not None and loading.read_bytes > 0:
            return loading.read_bytes
        return max((real_bytes(rank.held_bytes) for rank in self.ranks), default=0)

    def ranks_per_node(self, rank: RankLoad) -> int:
        """``loadtrace.local_world_size``, else the ranks seen on the same host, else 1."""
        if rank.local_world_size:
            return rank.local_world_size
        if rank.host:
            return max(1, sum(1 for other in self.ranks if other.host == rank.host))
        return 1


def sharded(rank: RankLoad) -> bool:
    """Whether the rank's strategy says only the loading rank should read the checkpoint."""
    return rank.strategy in sc.SHARDED_STRATEGIES


def rank_key(resource: dict[str, Any]) -> tuple[int | None, str | None]:
    rank = resource.get(sc.RANK)
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    instance = str_attr(resource, sc.SERVICE_INSTANCE_ID)
    if instance is None:
        host, pid = resource.get(sc.HOST_NAME), resource.get(sc.PROCESS_PID)
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


def merge_sites(loads: Iterable[Span]) -> list[Site]:
    """``loadtrace.materialized.sites`` / ``site_bytes`` (parallel arrays) of loads → [(site, bytes)], largest first."""
    totals: dict[str, int] = defaultdict(int)
    for load in loads:
        sites, sizes = load.attributes.get(sc.MATERIALIZED_SITES), load.attributes.get(sc.MATERIALIZED_SITE_BYTES)
        if not isinstance(sites, list) or not isinstance(sizes, list):
            continue
        for site, size in zip(sites, sizes, strict=False):  # a truncated array pairs what it can
            if isinstance(site, str) and isinstance(size, int) and not isinstance(size, bool):
                totals[site] += size
    return [Site(*item) for item in sorted(totals.items(), key=lambda item: (-item[1], item[0]))]


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


def _snapshots_by_rank(progress: Iterable[Progress]) -> dict[tuple[str, int | None], Progress]:
    """The latest snapshot of each (trace, rank) that had something open."""
    latest: dict[tuple[str, int | None], Progress] = {}
    for snapshot in progress:
        for trace_id in {entry[sc.PROGRESS_TRACE_ID] for entry in snapshot.open}:
            key = (trace_id, snapshot.rank)
            if key not in latest or latest[key].time_ns < snapshot.time_ns:
                latest[key] = snapshot
    return latest


def last_state(trace_id: str, snapshot: Progress) -> LastState:
    """What a killed rank was doing: the innermost span it had open, and the bytes its open loads had by then."""
    entries = [entry for entry in snapshot.open if entry.get(sc.PROGRESS_TRACE_ID) == trace_id]
    loads = [entry for entry in entries if entry.get(sc.PROGRESS_KIND) == sc.SCOPE_LOAD]
    innermost = max(entries, key=lambda entry: int_attr(entry, sc.PROGRESS_START))
    materialized: dict[str, int] = {}
    for load in loads:
        per_device = load.get(sc.PROGRESS_MATERIALIZED_BYTES, {})
        _add(materialized, {str(device): int_attr(per_device, device) for device in per_device})
    return LastState(
        time_unix_nano=snapshot.time_ns,
        during=innermost[sc.PROGRESS_NAME],
        open=[entry[sc.PROGRESS_NAME] for entry in entries],
        read_bytes=sum(int_attr(load, sc.PROGRESS_READ_BYTES) for load in loads),
        tensors_read=sum(int_attr(load, sc.PROGRESS_READ_TENSORS) for load in loads),
        materialized_bytes=materialized,
        peak_rss_bytes=max((int_attr(entry, sc.PROGRESS_RSS_PEAK) for entry in entries), default=0) or None,
    )


def mark_incomplete(trace_id: str, ranks: list[RankLoad], snapshots: dict[tuple[str, int | None], Progress]) -> None:
    every_span = {span.span_id for rank in ranks for span in rank.spans}
    job_id = next((str_attr(rank.resource, sc.JOB_ID) for rank in ranks if rank.resource), None)
    root = format(sc.job_trace_ids(job_id)[1], "016x") if job_id else None
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
            rank.last_state = UnfinishedSpans(unfinished_parent_spans=len(unfinished))


def summarize_rank(trace_id: str, rank: int | None, instance: str | None, spans: list[Span]) -> RankLoad:
    spans = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    by_id = {span.span_id: span for span in spans if span.span_id}
    resource = spans[0].resource if spans else ({sc.RANK: rank} if rank is not None else {})
    loads = outermost(spans, sc.LOAD_SPANS, by_id)
    pretrained = outermost(spans, frozenset({sc.SPAN_FROM_PRETRAINED}), by_id)
    # Read bytes outside every load: a bare file span, or ``safetensors.torch.load(bytes)`` without a file of its own.
    stray_files = [s for s in spans if s.name in sc.FILE_SPANS | sc.BYTES_SPANS and not inside_any(s, loads)]

    files_opened = sum(int_attr(s.attributes, sc.FILES_OPENED) for s in loads)
    files_opened += sum(1 for s in stray_files if s.name in sc.FILE_SPANS)
    tensors_read = sum(int_attr(s.attributes, sc.READ_TENSORS) for s in loads + stray_files)
    read_bytes = sum(int_attr(s.attributes, sc.READ_BYTES) for s in loads + stray_files)

    converts = [s for s in spans if s.name == sc.SPAN_CONVERT]
    materialized: dict[str, int] = {}
    held: dict[str, int] = {}
    for load in loads:
        _add(materialized, by_device(load.attributes, sc.MATERIALIZED_BYTES_PREFIX))
    for load in pretrained:
        _add(held, by_device(load.attributes, sc.HELD_BYTES_PREFIX))
    # Every load span, nested ones too: a custom ``loadtrace.load`` around ``from_pretrained`` has the same peak.
    peaks = [int_attr(s.attributes, sc.RSS_PEAK) for s in spans if s.name in sc.LOAD_SPANS]
    strategies = [str_attr(s.attributes, sc.STRATEGY) for s in pretrained]
    checkpoints = [str_attr(s.attributes, sc.CHECKPOINT) for s in pretrained]

    return RankLoad(
        trace_id=trace_id,
        rank=rank,
        instance=str_attr(resource, sc.SERVICE_INSTANCE_ID) or instance,
        world_size=_positive(resource.get(sc.WORLD_SIZE)),
        local_world_size=_positive(resource.get(sc.LOCAL_WORLD_SIZE)),
        host=str_attr(resource, sc.HOST_NAME),
        # A rank that loaded several models is judged by its first: the strategy a job runs under does not change.
        strategy=next((s for s in strategies if s), None),
        checkpoint=next((c for c in checkpoints if c), None) or str_attr(resource, sc.CHECKPOINT),
        load_seconds=round(sum(s.seconds for s in loads), 6) if loads else None,
        loads=len(loads),
        files_opened=files_opened,
        tensors_read=tensors_read,
        read_bytes=read_bytes,
        conversions=sum(int_attr(s.attributes, sc.CONVERT_COUNT) for s in converts),
        conversion_bytes=sum(int_attr(s.attributes, sc.CONVERT_BYTES) for s in converts),
        materialized_bytes=dict(sorted(materialized.items())),
        materialized_sites=merge_sites(loads),
        held_bytes=dict(sorted(held.items())),
        peak_rss_bytes=max((p for p in peaks if p > 0), default=None),
        hook_errors=sum(int_attr(s.attributes, sc.HOOK_ERRORS) for s in loads),
        resource=resource,
        spans=spans,
        node_memory_bytes=max((int_attr(s.attributes, sc.NODE_MEMORY_TOTAL) for s in loads), default=0) or None,
        # Before: the first load's (the process before any loading); after: the last one's.
        rss_before_bytes=_first_known(loads, sc.RSS_BEFORE),
        rss_after_bytes=_first_known(loads[::-1], sc.RSS_AFTER),
        peak_rss_anon_bytes=_max_known(loads, sc.rss_key("anon", "peak")),
        peak_rss_file_bytes=_max_known(loads, sc.rss_key("file", "peak")),
        peak_rss_shmem_bytes=_max_known(loads, sc.rss_key("shmem", "peak")),
        rss_anon_before_bytes=_first_known(loads, sc.rss_key("anon", "before")),
        rss_file_before_bytes=_first_known(loads, sc.rss_key("file", "before")),
        storage_read_bytes=_sum_known(loads, sc.IO_STORAGE_READ_BYTES),
        cached_bytes=_sum_known(loads, sc.IO_CACHED_BYTES),
        node_available_bytes=_min_known(loads, sc.NODE_MEMORY_AVAILABLE),
        cgroup_memory_current_bytes=_max_known(loads, sc.CGROUP_MEMORY_CURRENT),
        cgroup_memory_max_bytes=_min_known(loads, sc.CGROUP_MEMORY_MAX),
    )


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
