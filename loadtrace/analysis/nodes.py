"""Per node: the tensor bytes its ranks asked for against the bytes its storage delivered.

Ranks of one node share the node's page cache. Eight ranks reading the same checkpoint ask for 8x its bytes, but
storage is read once when the page cache keeps it, and every time when it does not (too little memory, ``O_DIRECT``,
a different file per rank). Ranks on different nodes never share: a shared file system serves each node.

Every number is a sum of span attributes (README.md's span reference): ``loadtrace.read.bytes`` (asked for, via
``RankLoad``), ``loadtrace.io.storage_read_bytes`` (the load's delta of ``/proc/self/io`` ``read_bytes``: fetched from
storage by the process) and ``loadtrace.io.cached_bytes`` (asked for but not fetched: served from the page cache or an
mmap).
"""

from __future__ import annotations

from .model import NodeReads, RankLoad
from .ranks import Job
from .units import human_bytes

# Storage read by a node, compared with what its ranks asked for. At most this share of the model (or of the largest
# request) came from storage: the page cache already held the checkpoint.
WARM_CACHE_SHARE = 0.05
# At most this multiple of the largest single rank's request: storage was read once (slack for readahead, config
# files and Python modules imported during the load).
READ_ONCE_SLACK = 1.5
# At least this share of everything the ranks asked for: storage served every rank's copy again.
REPEATED_SHARE = 0.9


def node_reads(host: str | None, ranks: list[RankLoad], model: int) -> NodeReads:
    """One node's I/O: asked, read from storage, served from cache, how many checkpoints each is, and one sentence.

    ``storage_read_bytes`` and ``cached_bytes`` are null unless every rank of the node carries them (spans of an
    older loadtrace do not); ``outcome`` and ``note`` are then null too, as they are when no rank read anything.
    """
    asked = sum(rank.read_bytes for rank in ranks)
    known = all(rank.storage_read_bytes is not None for rank in ranks)
    storage = sum(rank.storage_read_bytes or 0 for rank in ranks) if known else None
    cached = sum(rank.cached_bytes or 0 for rank in ranks) if known else None
    readers = [rank for rank in ranks if rank.read_bytes > 0]
    node = NodeReads(
        host=host,
        ranks=[rank.rank for rank in ranks],
        readers=len(readers),
        read_bytes=asked,
        storage_read_bytes=storage,
        cached_bytes=cached,
        times_asked=round(asked / model, 2) if model > 0 else None,
        times_read_from_storage=round(storage / model, 2) if model > 0 and storage is not None else None,
    )
    if storage is None or not readers:
        return node
    largest = max(rank.read_bytes for rank in readers)
    if storage <= WARM_CACHE_SHARE * max(model, largest):
        node.outcome = "page_cache"
    elif storage <= READ_ONCE_SLACK * largest:
        node.outcome = "read_once"
    elif storage >= REPEATED_SHARE * asked:
        node.outcome = "repeated"
    else:
        node.outcome = "partly_repeated"
    node.note = _sentence(node, storage)
    return node


def _sentence(node: NodeReads, storage_bytes: int) -> str:
    readers, host = node.readers, node.host or "an unnamed host"
    asked = human_bytes(node.read_bytes)
    if node.times_asked is not None:
        asked = f"{node.times_asked:g}x the checkpoint, {asked}"
    who = f"{readers} rank{'s' if readers > 1 else ''} on {host} asked for {asked}"
    storage = human_bytes(storage_bytes)
    if node.outcome == "page_cache":
        return (
            f"{who}; storage delivered only {storage}: the page cache already held it"
            " (a cold node reads it at least once)"
        )
    if node.outcome == "read_once":
        if readers == 1:
            return f"{who}; storage was read once ({storage})"
        return f"{who}, but storage was read once ({storage}): the page cache served the other {readers - 1}"
    if node.outcome == "repeated":
        if readers == 1:
            return f"{who}; storage delivered all of it ({storage})"
        return (
            f"{who}, and storage was read for every one of them ({storage}): the page cache did not keep the checkpoint"
        )
    times_read = node.times_read_from_storage
    read = f"{times_read:g}x the checkpoint, " if times_read is not None else ""
    return f"{who}; storage delivered {read}{storage}: some of it was read again"


def job_nodes(job: Job, model: int) -> list[NodeReads]:
    """One entry per host of the job (ranks without a host together), in host order."""
    hosts: dict[str | None, list[RankLoad]] = {}
    for rank in job.ranks:
        hosts.setdefault(rank.host, []).append(rank)
    return [node_reads(host, ranks, model) for host, ranks in sorted(hosts.items(), key=lambda item: item[0] or "")]
