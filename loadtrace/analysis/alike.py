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

import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .. import semconv as sc
from .hosts import host_ranges, natural_key
from .model import Finding, NodeReads, NodeStartup, RankLoad

T = TypeVar("T")

# A shared row (its title, then "each" or min / median / max) is at most 4 lines: from 8 ranks on it saves lines.
MIN_GROUP = 8
# Outliers of one cause are alike when each one's figure (how far behind, how slow) is within this factor of the
# smallest of their set: 20 s and 25 s behind share a sentence, 2 s and 200 s do not.
ALIKE_FACTOR = 1.5
# Findings that set no rank apart: about a node (``slow_storage``: it names the node), or about the ranks that waited
# for another (``rendezvous_wait``: the one waited for is the suspect). Their ranks keep the row they share with the
# ranks that behaved like them.
NOT_APART = frozenset({sc.FINDING_SLOW_STORAGE, sc.FINDING_RENDEZVOUS_WAIT})

Tag = tuple[str, int, bool]  # a finding's kind, which of its sets of outliers names the rank, whether a whole node's


def grouped(
    items: Sequence[T], key: Callable[[T], Hashable | None], least: Callable[[Hashable], int] = lambda _: MIN_GROUP
) -> list[list[T]]:
    """``items`` with equal keys together, each set where its first item stands; a set of fewer than ``least(key)``
    (``MIN_GROUP``) items, and an item whose key is None, is one set per item, in its own place."""
    sets: dict[Hashable, list[tuple[int, T]]] = {}
    alone: list[list[tuple[int, T]]] = []
    for position, item in enumerate(items):
        group_key = key(item)
        if group_key is None:
            alone.append([(position, item)])
        else:
            sets.setdefault(group_key, []).append((position, item))
    rows = alone
    for group_key, members in sets.items():
        rows.extend([members] if len(members) >= least(group_key) else ([member] for member in members))
    rows.sort(key=lambda members: members[0][0])
    return [[item for _, item in members] for members in rows]


def kinds_by_rank(findings: Iterable[Finding]) -> dict[int, frozenset[Tag]]:
    """Rank number → the findings that name it, each as its kind and the set of its outliers the rank is in
    (``Finding.evidence["groups"]``, as ``outlier_groups`` made them; one set when it has none). Not the findings
    about a node or waiting ranks (``NOT_APART``): they set no rank apart."""
    kinds: dict[int, set[Tag]] = {}
    for finding in findings:
        if finding.kind in NOT_APART:
            continue
        sets = finding.evidence.get("groups") or [{"ranks": finding.ranks, "whole_nodes": False}]
        for index, members in enumerate(sets):
            for rank in members["ranks"]:
                kinds.setdefault(rank, set()).add((finding.kind, index, bool(members.get("whole_nodes"))))
    return {rank: frozenset(named) for rank, named in kinds.items()}


def rank_key(rank: RankLoad, kinds: frozenset[Tag]) -> Hashable | None:
    """What alike ranks share; None for a rank without a number (no finding can name it)."""
    if rank.rank is None:
        return None
    return rank.strategy, tuple(rank.marks()), tuple(sorted(kinds)), rank.hook_errors > 0


def least(key: Hashable) -> int:
    """The fewest ranks of one ``rank_key`` that share a row: the ranks of whole nodes a finding names together share
    one from two on (the node is the outlier: ``node077: all 8 ranks``); others from ``MIN_GROUP`` on."""
    if isinstance(key, tuple) and len(key) == 4 and any(whole for _, _, whole in key[2]):
        return 2
    return MIN_GROUP


def rank_groups(ranks: Sequence[RankLoad], findings: Iterable[Finding]) -> list[list[RankLoad]]:
    """The rows of a job's rank table: alike ranks together (``MIN_GROUP`` or more, a whole node's from two on),
    every other rank alone."""
    kinds = kinds_by_rank(findings)
    return grouped(ranks, lambda rank: rank_key(rank, _kinds(rank.rank, kinds)), least)


def _kinds(rank: int | None, kinds: dict[int, frozenset[Tag]]) -> frozenset[Tag]:
    return kinds.get(rank, frozenset()) if rank is not None else frozenset()


def standouts(ranks: Sequence[RankLoad], findings: Iterable[Finding]) -> list[tuple[RankLoad, list[str]]]:
    """The ranks that stand out whatever their numbers, and why: their marks, and ``slow`` for a ``slow_rank``."""
    slow = {rank for finding in findings if finding.kind == sc.FINDING_SLOW_RANK for rank in finding.ranks}
    found = [(rank, [*rank.marks(), *(["slow"] if rank.rank in slow else [])]) for rank in ranks]
    return [(rank, words) for rank, words in found if words]


def _slow_storage(findings: Iterable[Finding]) -> Callable[[Iterable[int | None]], int | None]:
    """Which set of alike slow nodes of ``slow_storage`` (``Finding.evidence["groups"]``) names any of a node's ranks;
    None when none does: slow nodes share a line only with nodes as slow."""
    named = {
        rank: index
        for finding in findings
        if finding.kind == sc.FINDING_SLOW_STORAGE
        for index, members in enumerate(finding.evidence.get("groups") or [{"ranks": finding.ranks}])
        for rank in members["ranks"]
    }
    return lambda ranks: next((named[rank] for rank in ranks if rank in named), None)


# Outliers told as a person would: one sentence per set of alike ones, a node where all its ranks stand out ----------


@dataclass
class Outliers(Generic[T]):
    """A set of alike outliers of one cause: ``members`` (ranks, or nodes), and ``hosts`` when they are whole nodes
    (every rank of each of those nodes stands out the same way), else None."""

    members: list[T]
    hosts: list[str] | None = None


def outlier_groups(
    items: Sequence[T],
    cause: Callable[[T], Hashable],
    figure: Callable[[T], float],
    host: Callable[[T], str | None] | None = None,
    per_host: dict[str | None, int] | None = None,
) -> list[Outliers[T]]:
    """``items`` (outliers, in rank order) in sets of the same ``cause`` and alike ``figure`` (``ALIKE_FACTOR``). With
    ``host`` and ``per_host`` (each host's rank count in the job), the ranks of a node of two or more ranks that all
    stand out for the same cause form sets of their own (whole nodes, alike by their median figure), apart from
    single ranks on otherwise healthy nodes. Sets in the order of their first member."""
    by_cause: dict[Hashable, list[T]] = {}
    for item in items:
        by_cause.setdefault(cause(item), []).append(item)
    found: list[Outliers[T]] = []
    for members in by_cause.values():
        nodes: dict[str | None, list[T]] = {}
        if host is not None and per_host is not None:
            for item in members:
                nodes.setdefault(host(item), []).append(item)
        whole = {
            name: ranks
            for name, ranks in nodes.items()
            if name is not None and len(ranks) >= 2 and len(ranks) == per_host.get(name)  # type: ignore[union-attr]
        }
        medians = {name: statistics.median(figure(item) for item in ranks) for name, ranks in whole.items()}
        for hosts in _alike(list(whole), medians.__getitem__):
            ordered = sorted(hosts, key=natural_key)
            found.append(Outliers([item for name in ordered for item in whole[name]], ordered))
        single = [item for item in members if host is None or host(item) not in whole]
        found += [Outliers(alike) for alike in _alike(single, figure)]
    order = {id(item): position for position, item in enumerate(items)}
    return sorted(found, key=lambda outliers: min(order[id(item)] for item in outliers.members))


def _alike(items: list[T], figure: Callable[[T], float]) -> list[list[T]]:
    """``items`` in sets whose figures are each within ``ALIKE_FACTOR`` of the set's smallest, each set in the
    items' own order."""
    ranked = sorted(range(len(items)), key=lambda index: figure(items[index]))
    sets: list[list[int]] = []
    for index in ranked:
        if sets and figure(items[index]) <= ALIKE_FACTOR * max(figure(items[sets[-1][0]]), 0.0):
            sets[-1].append(index)
        else:
            sets.append([index])
    return [[items[index] for index in sorted(members)] for members in sets]


def range_parts(numbers: Sequence[int]) -> list[str]:
    """``["0", "2-5", "9"]``: runs of consecutive numbers."""
    runs: list[list[int]] = []
    for number in sorted(numbers):
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return [str(low) if low == high else f"{low}-{high}" for low, high in runs]


MOST_RANGES = 8  # past this many runs, a list of ranks shows its first and last few (the JSON lists them all)


def who(numbers: Sequence[int]) -> str:
    """``rank 3``, ``ranks 1-3, 5``; from ``MIN_GROUP`` ranks on with their count (``ranks 1-299, 301-1023
    (1,022 ranks)``), and past ``MOST_RANGES`` runs only the first and last few of them."""
    text = ("ranks " if len(numbers) > 1 else "rank ") + numbers_text(numbers)
    return text + (f" ({len(numbers):,} ranks)" if len(numbers) >= MIN_GROUP else "")


def numbers_text(numbers: Sequence[int]) -> str:
    """``1-3, 5``: runs of rank numbers; past ``MOST_RANGES`` runs only the first and last few of them."""
    parts = range_parts(numbers)
    if len(parts) > MOST_RANGES:
        parts = [*parts[: MOST_RANGES - 3], "...", *parts[-2:]]
    return ", ".join(parts)


def where(hosts: Sequence[str]) -> str:
    """``node077``; ``nodes node013-node019, node077 (8 nodes)``: whole nodes, their names as ranges."""
    if len(hosts) == 1:
        return hosts[0]
    return f"nodes {host_ranges(hosts, MOST_RANGES)} ({len(hosts):,} nodes)"


def whole_nodes(hosts: Sequence[str], numbers: Sequence[int]) -> str:
    """``node077: all 8 ranks (616-623)``: whole nodes that stand out, as the findings and the table's rows say it."""
    return f"{where(hosts)}: all {len(numbers):,} ranks ({numbers_text(numbers)})"


def node_outliers(findings: Iterable[Finding]) -> dict[int, list[str]]:
    """Rank number → the hosts of the whole nodes a finding tells it among (``Outliers.hosts``)."""
    return {
        rank: members["hosts"]
        for finding in findings
        if finding.kind not in NOT_APART
        for members in finding.evidence.get("groups") or []
        if members.get("whole_nodes")
        for rank in members["ranks"]
    }


def spread_figure(values: Sequence[float], text: Callable[[Any], str]) -> str:
    """One figure of a set of alike outliers: as ``text`` says it when all say it alike, else their median and
    where they differ, their min and max (``20.00 s (min 19.80 s, max 20.40 s)``)."""
    low, middle, high = (text(value) for value in spread(values, float))
    return middle if low == high else f"{middle} (min {low}, max {high})"


def groups_evidence(groups: Sequence[Outliers[Any]], ranks: Callable[[Any], Iterable[int | None]]) -> list[dict]:
    """``Finding.evidence["groups"]``: each set's ranks (all of them) and hosts when whole nodes, as the table groups
    its rows (``kinds_by_rank``)."""
    return [
        {
            "ranks": sorted(r for item in group.members for r in ranks(item) if r is not None),
            "whole_nodes": group.hosts is not None,
            "hosts": group.hosts,
        }
        for group in groups
    ]


def node_groups(nodes: Sequence[NodeReads], findings: Iterable[Finding]) -> list[list[NodeReads]]:
    """The ``I/O:`` lines: nodes whose ranks read alike (as many readers and ranks, the same page-cache outcome, the
    same set of slow nodes of ``slow_storage``, if any) together."""
    slow = _slow_storage(findings)
    return grouped(nodes, lambda node: (node.readers, len(node.ranks), node.outcome, slow(node.ranks)), _nodes_least)


def storage_groups(nodes: Sequence[NodeStartup], findings: Iterable[Finding]) -> list[list[NodeStartup]]:
    """The ``Storage:`` lines: nodes with the same checkpoint outcome, the same figures known, the same set of slow
    nodes of ``slow_storage``, if any."""
    slow = _slow_storage(findings)
    return grouped(
        nodes,
        lambda node: (
            node.checkpoint,
            node.storage_bytes is None,
            not node.storage_bytes,
            node.fetch_seconds is None,
            node.storage_bytes_per_second is None,
            bool(node.counted_to_last_reading),
            slow(node.ranks),
        ),
        _nodes_least,
    )


def _nodes_least(key: Hashable) -> int:
    """The fewest nodes that share a line: a set of alike slow nodes a finding tells together from two on (the
    finding's sentence names them so), others from ``MIN_GROUP`` on."""
    return 2 if isinstance(key, tuple) and key[-1] is not None else MIN_GROUP


def spread(values: Sequence[T], order: Callable[[T], float]) -> tuple[T, T, T]:
    """The min, median and max of ``values`` by ``order``: each an actual value (the median of an even count is the
    lower of the middle two)."""
    ranked = sorted(values, key=order)
    return ranked[0], ranked[(len(ranked) - 1) // 2], ranked[-1]
