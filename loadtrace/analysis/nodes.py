"""Per node: the tensor bytes its ranks asked for, and whether the checkpoint was in the node's page cache.

Ranks of one node share the node's page cache; ranks on different nodes never do (a shared file system serves each
node). Whether the page cache held the checkpoint is read from the checkpoint files themselves: every file span
carries ``loadtrace.file.cached_bytes_at_open``, the bytes of that file the page cache held just before the library
opened it (``cachestat`` / ``mincore``, memory.py). Per node, each file counts once, as the node's ranks found it
coldest (while a checkpoint loads, its files only enter the cache: a later open finds what an earlier one read, so
the coldest open is the first; the earliest span is not always, as a rank can start its span and lose the CPU before
it looks): its bytes not held then are *cold*, the rest was warm. Cold bytes are not bytes fetched: a rank fetches
only what it touches (and the kernel's readahead), and another process may fetch them first.

What the ranks fetched is ``loadtrace.io.storage_read_bytes`` (the load's delta of ``/proc/self/io`` ``read_bytes``),
summed here: every storage read of the process during the load, libraries imported on the way included
(docs/report.md, Storage words; the ``Storage:`` line, startup.py, gives it with the time it moved in).

Above 64 ranks most ranks export no file spans (the span budget); their loads carry their files' residency instead
(summarized.py). A node with such ranks counts, besides the files its ranks' spans show, each such load's own figures
(each of its files at its own first open) and keeps the most of each: the node's files as its coldest rank found them.
Exact where the node's ranks open their files before reading them (transformers opens every shard first); a lower
bound of the cold bytes where one rank read a file before another opened it.
"""

from __future__ import annotations

from .. import semconv as sc
from . import summarized
from .hosts import natural_key
from .model import NodeReads, RankLoad
from .ranks import Job
from .units import human_bytes

COLD = "cold"  # none of the checkpoint's bytes were in the page cache when first opened
PARTLY_COLD = "partly_cold"
WARM = "warm"  # the page cache held all of it


def checkpoint_residency(ranks: list[RankLoad]) -> tuple[int, int, int] | None:
    """The node's checkpoint files, each as the coldest open by any of ``ranks`` found it: (files, their bytes, bytes
    not in the page cache then). None when any file span opened by path lacks its residency (an older loadtrace, not
    Linux, the calls refused) or no file was opened by path; with loads that left their file spans out, the most of
    theirs and the spans' (module docstring)."""
    coldest: dict[str, tuple[int, int | None]] = {}  # path → (size, the least cached at any open; None: one unmeasured)
    for rank in ranks:
        for span in rank.spans:
            if span.name not in sc.FILE_SPANS and span.name not in sc.BYTES_SPANS:  # bytes loaded from a known file
                continue
            path, size = span.attributes.get(sc.FILE_PATH), span.attributes.get(sc.FILE_SIZE)
            if not isinstance(path, str) or not isinstance(size, int):
                continue
            found = span.attributes.get(sc.FILE_CACHED_BYTES_AT_OPEN)
            cached = found if isinstance(found, int) else None
            if path in coldest:
                known = coldest[path][1]
                cached = None if known is None or cached is None else min(known, cached)
            coldest[path] = (size, cached)
    if any(cached is None for _, cached in coldest.values()):
        return None
    found = [
        (
            len(coldest),
            sum(size for size, _ in coldest.values()),
            sum(max(0, size - (cached or 0)) for size, cached in coldest.values()),
        )
    ]
    loads = summarized.residency(ranks)
    if loads is None:
        return None
    found += loads
    if not found[0][0] and not loads:
        return None
    files, total, cold = (max(column) for column in zip(*found, strict=True))
    return files, total, cold


def node_reads(host: str | None, ranks: list[RankLoad], model: int) -> NodeReads:
    """One node's I/O: asked, read from storage (raw), the checkpoint's residency, and one sentence.

    ``storage_read_bytes`` and ``cached_bytes`` are null unless every rank of the node carries them;
    ``checkpoint_file_bytes`` and ``checkpoint_cold_bytes`` unless every checkpoint file span does. ``outcome`` is
    null without residency, and with ``note`` when no rank read anything.
    """
    asked = sum(rank.read_bytes for rank in ranks)
    known = all(rank.storage_read_bytes is not None for rank in ranks)
    storage = sum(rank.storage_read_bytes or 0 for rank in ranks) if known else None
    cached = sum(rank.cached_bytes or 0 for rank in ranks) if known else None
    readers = [rank for rank in ranks if rank.read_bytes > 0]
    residency = checkpoint_residency(ranks)
    node = NodeReads(
        host=host,
        ranks=[rank.rank for rank in ranks],
        readers=len(readers),
        read_bytes=asked,
        storage_read_bytes=storage,
        cached_bytes=cached,
        times_asked=round(asked / model, 2) if model > 0 else None,
        times_read_from_storage=round(storage / model, 2) if model > 0 and storage is not None else None,
        checkpoint_file_bytes=residency[1] if residency is not None else None,
        checkpoint_cold_bytes=residency[2] if residency is not None else None,
    )
    if residency is not None:
        _, total, cold = residency
        node.outcome = WARM if cold == 0 else COLD if cold >= total else PARTLY_COLD
    if readers:
        node.note = _sentence(node, residency)
    return node


def _sentence(node: NodeReads, residency: tuple[int, int, int] | None) -> str:
    readers, host = node.readers, node.host or "an unnamed host"
    asked = human_bytes(node.read_bytes)
    if node.times_asked is not None:
        asked = f"{node.times_asked:g}x the checkpoint, {asked}"
    who = f"{readers} rank{'s' if readers > 1 else ''} on {host} asked for {asked}"
    if residency is None:
        return f"{who}; whether the page cache held the checkpoint was not measured"
    files, total, cold = residency
    of_files = f"{files} checkpoint file{'s' if files > 1 else ''}"
    if node.outcome == WARM:
        return (
            f"{who}; the checkpoint was warm on {host}: the page cache held all of its {of_files}, {human_bytes(total)}"
        )
    if node.outcome == COLD:
        return (
            f"{who}; the checkpoint was cold on {host}: none of its {of_files}, {human_bytes(total)}, was in the page"
            " cache when first opened"
        )
    return (
        f"{who}; the checkpoint was partly cold on {host}: {human_bytes(cold)} of its {of_files}, {human_bytes(total)},"
        " was not in the page cache when first opened"
    )


def job_nodes(job: Job, model: int) -> list[NodeReads]:
    """One entry per host of the job (ranks without a host together), in natural host order (node2 before node10)."""
    hosts: dict[str | None, list[RankLoad]] = {}
    for rank in job.ranks:
        hosts.setdefault(rank.host, []).append(rank)
    return [
        node_reads(host, ranks, model) for host, ranks in sorted(hosts.items(), key=lambda item: natural_key(item[0]))
    ]
