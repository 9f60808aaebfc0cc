"""Per-rank records of one job → findings: duplicate work the job's strategy says should not happen.

Every rule rests on bytes a rank actually read, converted, created or held, never on which function did it or which
library version ran: the same problem reaches memory through different code paths in different releases (transformers
5.12 FSDP fills a second model with ``zeros_like`` on rank 1; 5.24 reads the checkpoint there and keeps it instead).

The loading rank is rank 0 of the job. Under FSDP ``cpu_ram_efficient_loading`` that is a simplification: accelerate
loads on local rank 0 of each node and broadcasts within the node, so on a multi-node job the other nodes' local rank 0
reads are reported too. docs/report.md states every threshold below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import semconv as sc
from .model import INFO, WARNING, Finding, LastState, RankLoad, to_json
from .ranks import LOADING_RANK, META, Job, real_bytes, sharded
from .units import human_bytes, percent

# Bytes a non-loading rank may read or convert before it counts: 1% of the loading rank's (a config, a buffer).
TOLERANCE = 0.01
# A non-loading rank that creates or holds this share of the model is carrying a copy of it.
MODEL_SHARE = 0.5
# Under a replicated strategy, a rank that read this share of the model read "everything".
REPLICATED_SHARE = 0.99

_SEVERITY_ORDER = {WARNING: 0, INFO: 1}


def find(jobs: list[Job]) -> list[Finding]:
    """Every finding of every job, warnings first, then the most bytes first."""
    found = [finding for job in jobs for rule in RULES if (finding := rule(job, job.model_bytes())) is not None]
    return sorted(found, key=lambda f: (_SEVERITY_ORDER.get(f.severity, 9), -f.bytes, f.kind, f.trace_id))


def _non_loading(job: Job, strategies: Callable[[RankLoad], bool]) -> list[RankLoad]:
    return [r for r in job.ranks if r.rank is not None and r.rank != LOADING_RANK and strategies(r)]


def _replicated(rank: RankLoad) -> bool:
    return not sharded(rank)


def duplicate_checkpoint_read(job: Job, model: int) -> Finding | None:
    loading = job.loading_rank
    allowance = TOLERANCE * (loading.read_bytes if loading is not None else model)
    offenders = {r: r.read_bytes for r in _non_loading(job, sharded) if r.read_bytes > allowance}
    if not offenders:
        return None
    return _finding(
        job,
        sc.FINDING_DUPLICATE_CHECKPOINT_READ,
        WARNING,
        offenders,
        model,
        what="read {bytes} of checkpoint tensors ({share} of the model)",
        why="only the loading rank (rank 0) should read the checkpoint",
        extra=lambda r: {"read_bytes": r.read_bytes, "tensors_read": r.tensors_read, "files_opened": r.files_opened},
    )


def nonzero_rank_materialization(job: Job, model: int) -> Finding | None:
    if model <= 0:
        return None
    created: dict[RankLoad, int] = {}  # real bytes zeros_like / empty_like made during the load
    held: dict[RankLoad, int] = {}  # real bytes the model keeps when from_pretrained returns
    candidates = _non_loading(job, sharded)
    for rank in candidates:
        made, kept = real_bytes(rank.materialized_bytes), real_bytes(rank.held_bytes)
        # A ZeRO-3 rank may legitimately hold its own partition: 1/world_size of the model.
        partition = model / (rank.world_size or job.world_size or len(job.ranks))
        if made >= MODEL_SHARE * model:
            created[rank] = made
        if kept >= MODEL_SHARE * model and kept > partition + TOLERANCE * model:
            held[rank] = kept
    offenders = {r: max(created.get(r, 0), held.get(r, 0)) for r in candidates if r in created or r in held}
    if not offenders:
        return None
    if not held:
        what = "created {bytes} of real (non-meta) tensors with zeros_like/empty_like ({share} of the model)"
    elif not created:
        what = "still holds {bytes} of real (non-meta) weights when from_pretrained returns ({share} of the model)"
    else:
        what = "created or still holds {bytes} of real (non-meta) tensors ({share} of the model)"
    worst = max(offenders, key=offenders.__getitem__)
    sites = [(site, size) for site, size in worst.materialized_sites if not _meta_site(site)]
    if worst in created and sites:
        note = f"Largest call site on rank {worst.rank}: {sites[0][0]} ({human_bytes(sites[0][1])})."
    elif devices := ", ".join(f"{d} {human_bytes(size)}" for d, size in worst.held_bytes.items() if d != META):
        note = f"Rank {worst.rank} holds {devices} when from_pretrained returns."
    else:
        note = ""
    return _finding(
        job,
        sc.FINDING_NONZERO_RANK_MATERIALIZATION,
        WARNING,
        offenders,
        model,
        what=what,
        why="a non-loading rank should hold empty (meta) weights until the strategy distributes them",
        note=note,
        extra=lambda r: {
            "created": r in created,
            "held": r in held,
            "materialized_bytes": r.materialized_bytes,
            "held_bytes": r.held_bytes,
            "sites": [{"site": site, "bytes": size} for site, size in r.materialized_sites if not _meta_site(site)],
        },
    )


def duplicate_conversion(job: Job, model: int) -> Finding | None:
    loading = job.loading_rank
    allowance = TOLERANCE * loading.conversion_bytes if loading is not None else 0
    offenders = {r: r.conversion_bytes for r in _non_loading(job, sharded) if r.conversion_bytes > allowance}
    if not offenders:
        return None
    return _finding(
        job,
        sc.FINDING_DUPLICATE_CONVERSION,
        WARNING,
        offenders,
        model,
        what="converted {bytes} of weights ({share} of the model)",
        why="the loading rank's conversion is the only one the strategy needs",
        extra=lambda r: {"conversion_bytes": r.conversion_bytes, "conversions": r.conversions},
    )


def replicated_load(job: Job, model: int) -> Finding | None:
    if model <= 0:
        return None
    readers = {r: r.read_bytes for r in _non_loading(job, _replicated) if r.read_bytes >= REPLICATED_SHARE * model}
    if not readers:
        return None
    return _finding(
        job,
        sc.FINDING_REPLICATED_LOAD,
        INFO,
        readers,
        model,
        what="read {bytes} ({share} of the model)",
        why="expected without a sharding strategy: every rank loads its own replica",
        extra=lambda r: {"read_bytes": r.read_bytes},
    )


def incomplete_rank(job: Job, model: int) -> Finding | None:
    """Ranks that started loading and never finished: the OOM killer's SIGKILL leaves exactly this behind."""
    stopped = [rank for rank in job.ranks if rank.incomplete]
    if not stopped:
        return None
    sentences, evidence = [], []
    for rank in stopped:
        state = rank.last_state
        name = f"rank {rank.rank}" if rank.rank is not None else rank.label
        if isinstance(state, LastState):
            made = ", ".join(f"{human_bytes(n)} on {d}" for d, n in state.materialized_bytes.items() if d != META)
            sentences.append(
                f"{name} was killed or crashed during {state.during} after reading {human_bytes(state.read_bytes)}"
                + (f" and materialising {made}" if made else "")
                + (f" (peak RSS {human_bytes(state.peak_rss_bytes)})" if state.peak_rss_bytes else "")
            )
        else:
            unfinished = state.unfinished_parent_spans if state is not None else 0
            sentences.append(f"{name} never finished: {unfinished} of its loads or phases never ended")
        evidence.append({"rank": rank.rank, "host": rank.host, **(to_json(state) if state is not None else {})})
    worst = max((state.read_bytes for rank in stopped if isinstance(state := rank.last_state, LastState)), default=0)
    return Finding(
        trace_id=job.trace_id,
        kind=sc.FINDING_INCOMPLETE_RANK,
        severity=WARNING,
        ranks=[rank.rank for rank in stopped if rank.rank is not None],
        bytes=worst,
        projected_node_bytes=0,
        detail="; ".join(sentences)
        + ". Its last known state is kept; an OOM kill shows as a peak RSS near the node's memory.",
        evidence={"model_bytes": model, "per_rank": evidence},
    )


RULES: list[Callable[[Job, int], Finding | None]] = [
    incomplete_rank,
    duplicate_checkpoint_read,
    nonzero_rank_materialization,
    duplicate_conversion,
    replicated_load,
]


def _meta_site(site: str) -> bool:
    return site.rsplit(" ", 1)[-1] == META


def _finding(
    job: Job,
    kind: str,
    severity: str,
    offenders: dict[RankLoad, int],
    model: int,
    what: str,
    why: str,
    extra: Callable[[RankLoad], dict[str, Any]],
    note: str = "",
) -> Finding:
    """One finding over the offending ranks, with the host-memory projection: worst rank's bytes × ranks per node."""
    ranks = sorted(offenders, key=lambda r: r.rank or 0)
    worst = max(offenders.values())
    per_node = max(job.ranks_per_node(r) for r in ranks)
    strategies = sorted({r.strategy or "none" for r in ranks})
    names = ", ".join(str(r.rank) for r in ranks)
    each = " each" if len(ranks) > 1 and min(offenders.values()) == worst else ""
    amount = human_bytes(worst) if each or len(ranks) == 1 else f"up to {human_bytes(worst)}"
    detail = (
        f"rank{'s' if len(ranks) > 1 else ''} {names} "
        + what.format(bytes=amount + each, share=percent(worst, model))
        + f" under strategy {'/'.join(strategies)}; {why}. "
        + f"Projected host memory: {human_bytes(worst)} x {per_node} rank{'s' if per_node > 1 else ''} per node"
        + f" = {human_bytes(worst * per_node)} per node"
        + (
            f" (node memory {human_bytes(node)})."
            if (node := max((r.node_memory_bytes or 0 for r in ranks), default=0))
            else "."
        )
        + (f" {note}" if note else "")
    )
    return Finding(
        trace_id=job.trace_id,
        kind=kind,
        severity=severity,
        ranks=[r.rank for r in ranks if r.rank is not None],
        bytes=sum(offenders.values()),
        projected_node_bytes=worst * per_node,
        detail=detail,
        evidence={
            "model_bytes": model,
            "ranks_per_node": per_node,
            "per_rank": [
                {"rank": r.rank, "host": r.host, "strategy": r.strategy, "bytes": offenders[r], **extra(r)}
                for r in ranks
            ],
        },
    )
