"""What a scope's accounting becomes: its span's attributes when it ends.

The one place where ledgers (ledger.py), read slots (statefile.py) and memory readings (memory.py) are summed into
``semconv`` names. Each attribute is set once, when the span ends; a span's start attributes come from the hook that
opened it (and, on a load, the memory limit: ``limit_attributes``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ... import semconv, statefile
from ...startup_split import close_shortest_gaps, union
from ...statefile import ReadSlot
from .ledger import Ledger
from .memory import Limits, Memory, Peak, limits
from .workload import attributes as workload

if TYPE_CHECKING:
    from .scope import Scope

MAX_SITES = 10  # materialisation call sites named on a span, most bytes first


def load_end(scope: Scope, extra: dict[str, Any]) -> dict[str, Any]:
    """A load span (``transformers.from_pretrained``, ``loadtrace.load``): ``extra`` from its hook, the totals with
    its files' reads, cache and memory, what was materialised and converted under it."""
    attributes = dict(extra)
    attributes.update(reads(*(file.slot for file in scope.files if file.slot is not None)))
    attributes[semconv.FILES_OPENED] = len(scope.opened)  # each file once, however often it was opened
    opened = [start for file in scope.files if (start := getattr(file.span, "start_time", None))]
    if opened:  # the model's construction ends here (docs/report.md, Startup)
        attributes[semconv.LOAD_FIRST_FILE_OPEN] = min(opened)
    attributes.update(partial_reads(scope.files))
    attributes.update(checkpoint_residency(scope.files))
    attributes[semconv.HOOK_ERRORS] = len(scope.ledger.errors)
    before, after = scope.memory_before, scope.memory_after
    if before is not None and after is not None:
        storage_read = after.storage_read - before.storage_read
        attributes[semconv.IO_CACHED_BYTES] = max(0, attributes[semconv.READ_BYTES] - storage_read)
        attributes.update(limit_attributes(limits()))
        attributes.update(memory_attributes(before, after, scope.peak))
        if scope.fetching is not None and before.at_ns and after.at_ns:
            scope.fetching.sample(after)
            stretches = scope.fetching.between(before.at_ns, after.at_ns)
            attributes[semconv.IO_STORAGE_READ_INTERVALS] = [at for stretch in stretches for at in stretch]
    attributes.update(materialized(scope.ledger))
    if scope.ledger.conversions:
        attributes.update(conversions(scope.ledger))
    if scope.ledger.casts:
        attributes.update(casts(scope.ledger))
    if not scope.nested:
        attributes.update(workload())
    attributes.update(semconv.about_load({**(getattr(scope.span, "attributes", None) or {}), **attributes}))
    return attributes


MAX_CAST_INTERVALS = 512  # pairs on a load span; past it the shortest gaps between them are closed


def casts(ledger: Ledger) -> dict[str, Any]:
    """The read tensors cast or copied as transformers materialised them: how many, their bytes, and when (the union
    of the calls' times: the thread pool's overlapping calls once). Past ``MAX_CAST_INTERVALS`` the gaps are closed
    from the shortest up: the time counted as casting grows by those gaps, and never overlaps reading."""
    done = list(ledger.casts)  # a copy: a worker thread may still append
    intervals = close_shortest_gaps(union((start, end) for start, end, _ in done), MAX_CAST_INTERVALS)
    return {
        semconv.CAST_COUNT: len(done),
        semconv.CAST_BYTES: sum(nbytes for _, _, nbytes in done),
        semconv.CAST_INTERVALS: [at for interval in intervals for at in interval],
    }


def checkpoint_residency(files: list[Scope]) -> dict[str, int]:
    """The files a load opened by path, each once (its first open: a later one finds what the first read), and how
    many of their bytes the page cache did not hold then. Nothing when a file's residency is unknown, or none was
    opened by path: a partial sum would read as a real figure."""
    first: dict[str, tuple[int, int | None]] = {}
    for file in files:
        if file.residency is not None:
            path, size, cached = file.residency
            first.setdefault(path, (size, cached))
    if not first or any(cached is None for _, cached in first.values()):
        return {}
    return {
        semconv.IO_CHECKPOINT_FILES: len(first),
        semconv.IO_CHECKPOINT_FILE_BYTES: sum(size for size, _ in first.values()),
        semconv.IO_CHECKPOINT_COLD_BYTES: sum(max(0, size - (cached or 0)) for size, cached in first.values()),
    }


def phase_end(scope: Scope) -> dict[str, Any]:
    """A phase span: how often it was entered, memory, and what was materialised and converted in it."""
    attributes: dict[str, Any] = {semconv.CALLS: scope.calls}
    if scope.memory_before is not None and scope.memory_after is not None:
        attributes.update(memory_attributes(scope.memory_before, scope.memory_after, scope.peak))
    if scope.ledger.materialized:
        attributes.update(materialized(scope.ledger))
    if scope.ledger.conversions:
        attributes.update(conversions(scope.ledger))
    return attributes


def stage_end(scope: Scope, extra: dict[str, Any]) -> dict[str, Any]:
    """A startup phase (preparation, ``deepspeed.initialize``): what its hook learnt (broadcast bytes), memory."""
    attributes = dict(extra)
    if scope.memory_before is not None and scope.memory_after is not None:
        attributes.update(memory_attributes(scope.memory_before, scope.memory_after, scope.peak))
    return attributes


def startup_end(now: Memory) -> dict[str, Any]:
    """The rank's startup, from the process's start: resident memory at its end, the process's high-water mark
    (its peak since it started: exact), the bytes it made the kernel fetch from storage since it started, and what
    kind of job it showed itself to be by then (workload.py)."""
    ended = {semconv.RSS_AFTER: now.rss, semconv.RSS_PEAK: now.hwm, semconv.IO_STORAGE_READ_BYTES: now.storage_read}
    return ended | workload()


def file_end(scope: Scope) -> dict[str, Any]:
    """A file span: the tensors and bytes read through it (and the partial reads among them, when any)."""
    attributes = reads(scope.slot) if scope.slot is not None else reads()
    attributes.update(partial_reads([scope]))
    return attributes


def partial_reads(files: list[Scope]) -> dict[str, int]:
    """Reads through these files that returned only part of a tensor (a slice), when there were any."""
    sizes = [nbytes for file in files for nbytes in file.ledger.partial_reads]
    if not sizes:
        return {}
    return {semconv.READ_PARTIAL_TENSORS: len(sizes), semconv.READ_PARTIAL_BYTES: sum(sizes)}


def reads(*slots: ReadSlot) -> dict[str, Any]:
    """Tensors and bytes read through these files' slots."""
    return {
        semconv.READ_TENSORS: sum(slot.tensors for slot in slots),
        semconv.READ_BYTES: sum(slot.bytes for slot in slots),
    }


def materialized(ledger: Ledger) -> dict[str, Any]:
    attributes: dict[str, Any] = {semconv.MATERIALIZED_CALLS: len(ledger.materialized)}
    by_device: Counter[str] = Counter()
    by_site: Counter[str] = Counter()
    for site, device, nbytes in ledger.materialized:
        by_device[device] += nbytes
        by_site[f"{site} {device}"] += nbytes
    for device, nbytes in by_device.items():
        attributes[semconv.materialized_bytes_key(device)] = nbytes
    if by_site:
        top = by_site.most_common(MAX_SITES)
        attributes[semconv.MATERIALIZED_SITES] = [site for site, _ in top]
        attributes[semconv.MATERIALIZED_SITE_BYTES] = [nbytes for _, nbytes in top]
    return attributes


def conversions(ledger: Ledger) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        semconv.CONVERT_COUNT: len(ledger.conversions),
        semconv.CONVERT_BYTES: sum(nbytes for _, nbytes in ledger.conversions),
    }
    counts: Counter[str] = Counter()
    op_bytes: Counter[str] = Counter()
    for operations, nbytes in ledger.conversions:
        for operation in operations:
            counts[operation] += 1
            op_bytes[operation] += nbytes
    for operation, count in counts.items():
        attributes[semconv.convert_op_key(operation, "count")] = count
        attributes[semconv.convert_op_key(operation, "bytes")] = op_bytes[operation]
    return attributes


def memory_attributes(before: Memory, after: Memory, peak: Peak | None) -> dict[str, int]:
    """Resident memory by kind before, after and at its peak (the monitor's samples and the kernel's high-water
    mark), and storage reads."""
    sampled = peak if peak is not None else Peak(0, 0, 0, 0)
    attributes = {
        semconv.RSS_BEFORE: before.rss,
        semconv.RSS_AFTER: after.rss,
        semconv.RSS_PEAK: max(sampled.rss, after.peak_since(before)),
        semconv.IO_STORAGE_READ_BYTES: max(0, after.storage_read - before.storage_read),
    }
    for kind in semconv.RSS_KINDS:
        attributes[semconv.rss_key(kind, "before")] = getattr(before, kind)
        attributes[semconv.rss_key(kind, "after")] = getattr(after, kind)
        attributes[semconv.rss_key(kind, "peak")] = max(getattr(sampled, kind), getattr(after, kind))
    return attributes


def limit_attributes(found: Limits) -> dict[str, int]:
    """A load's end: the node's memory and the cgroup's usage and limit then."""
    attributes = {
        semconv.NODE_MEMORY_TOTAL: found.node_total,
        semconv.NODE_MEMORY_AVAILABLE: found.node_available,
    }
    if found.cgroup_current is not None:
        attributes[semconv.CGROUP_MEMORY_CURRENT] = found.cgroup_current
    if found.cgroup_max is not None:
        attributes[semconv.CGROUP_MEMORY_MAX] = found.cgroup_max
    return attributes


def memory_limit(found: Limits) -> dict[str, Any]:
    """A load's start: the memory limit that applies and where it comes from (absent when nothing is known)."""
    limit, source = found.limit
    name = statefile.LIMIT_SOURCES.get(source)
    return {semconv.MEMORY_LIMIT: limit, semconv.MEMORY_LIMIT_SOURCE: name} if limit and name else {}
