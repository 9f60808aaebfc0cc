"""Which ranks (and nodes) behaved alike: how a report stays readable at any world size (docs/report.md, Alike ranks).

Ranks are *alike* when they have the same strategy, the same marks (how they ended: ``incomplete``, ``failed``,
``(SIGKILL OOM)``), the same kinds of finding naming them (``slow_rank`` among them) and hook errors or none. Their
numbers may differ: a shared row shows each column's min, median and max. Everything else is an outlier and keeps a
row of its own: the dead, the failed, the flagged, the slow. Alike ranks share a row only when there are at least
``MIN_GROUP`` of them, where a shared row saves lines; fewer are listed one by one, so a small job reads as before.

Nodes are alike when as many of their ranks read, with the same page-cache outcome and the same storage findings.
Everything here is linear in the rank count (plus one sort).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from .. import semconv as sc
from .model import Finding, NodeReads, NodeStartup, RankLoad

T = TypeVar("T")

# A shared row (its title, then "each" or min / median / max) is at most 4 lines: from 8 ranks on it saves lines.
MIN_GROUP = 8


def grouped(items: Sequence[T], key: Callable[[T], Hashable | None]) -> list[list[T]]:
    """``items`` with equal keys together, each set where its first item stands; a set of fewer than ``MIN_GROUP``
    items, and an item whose key is None, is one set per item, in its own place."""
    sets: dict[Hashable, list[tuple[int, T]]] = {}
    alone: list[list[tuple[int, T]]] = []
    for position, item in enumerate(items):
        group_key = key(item)
        if group_key is None:
            alone.append([(position, item)])
        else:
            sets.setdefault(group_key, []).append((position, item))
    rows = alone
    for members in sets.values():
        rows.extend([members] if len(members) >= MIN_GROUP else ([member] for member in members))
    rows.sort(key=lambda members: members[0][0])
    return [[item for _, item in members] for members in rows]


def kinds_by_rank(findings: Iterable[Finding]) -> dict[int, frozenset[str]]:
    """Rank number → the kinds of finding that name it."""
    kinds: dict[int, set[str]] = {}
    for finding in findings:
        for rank in finding.ranks:
            kinds.setdefault(rank, set()).add(finding.kind)
    return {rank: frozenset(named) for rank, named in kinds.items()}


def rank_key(rank: RankLoad, kinds: frozenset[str]) -> Hashable | None:
    """What alike ranks share; None for a rank without a number (no finding can name it)."""
    if rank.rank is None:
        return None
    return rank.strategy, tuple(rank.marks()), tuple(sorted(kinds)), rank.hook_errors > 0


def rank_groups(ranks: Sequence[RankLoad], findings: Iterable[Finding]) -> list[list[RankLoad]]:
    """The rows of a job's rank table: alike ranks together (``MIN_GROUP`` or more), every other rank alone."""
    kinds = kinds_by_rank(findings)
    return grouped(ranks, lambda rank: rank_key(rank, _kinds(rank.rank, kinds)))


def _kinds(rank: int | None, kinds: dict[int, frozenset[str]]) -> frozenset[str]:
    return kinds.get(rank, frozenset()) if rank is not None else frozenset()


def standouts(ranks: Sequence[RankLoad], findings: Iterable[Finding]) -> list[tuple[RankLoad, list[str]]]:
    """The ranks that stand out whatever their numbers, and why: their marks, and ``slow`` for a ``slow_rank``."""
    slow = {rank for finding in findings if finding.kind == sc.FINDING_SLOW_RANK for rank in finding.ranks}
    found = [(rank, [*rank.marks(), *(["slow"] if rank.rank in slow else [])]) for rank in ranks]
    return [(rank, words) for rank, words in found if words]


def _slow_storage(ranks: Iterable[int | None], kinds: dict[int, frozenset[str]]) -> bool:
    return any(sc.FINDING_SLOW_STORAGE in _kinds(rank, kinds) for rank in ranks)


def node_groups(nodes: Sequence[NodeReads], findings: Iterable[Finding]) -> list[list[NodeReads]]:
    """The ``I/O:`` lines: nodes whose ranks read alike (as many readers and ranks, the same page-cache outcome, the
    same storage finding) together."""
    kinds = kinds_by_rank(findings)
    return grouped(nodes, lambda node: (node.readers, len(node.ranks), node.outcome, _slow_storage(node.ranks, kinds)))


def storage_groups(nodes: Sequence[NodeStartup], findings: Iterable[Finding]) -> list[list[NodeStartup]]:
    """The ``Storage:`` lines: nodes with the same checkpoint outcome, the same figures known, the same finding."""
    kinds = kinds_by_rank(findings)
    return grouped(
        nodes,
        lambda node: (
            node.checkpoint,
            node.storage_bytes is None,
            node.storage_bytes_per_second is None,
            _slow_storage(node.ranks, kinds),
        ),
    )


def spread(values: Sequence[T], order: Callable[[T], float]) -> tuple[T, T, T]:
    """The min, median and max of ``values`` by ``order``: each an actual value (the median of an even count is the
    lower of the middle two)."""
    ranked = sorted(values, key=order)
    return ranked[0], ranked[(len(ranked) - 1) // 2], ranked[-1]
