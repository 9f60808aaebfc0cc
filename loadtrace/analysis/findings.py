"""Per-rank records of one job → findings: duplicate work the job's strategy says should not happen.

Every rule rests on bytes a rank actually read, converted, created or held, never on which function did it or which
library version ran: the same problem reaches memory through different code paths in different releases (transformers
5.12 FSDP fills a second model with ``zeros_like`` on rank 1; 5.24 reads the checkpoint there and keeps it instead).

The loading rank is rank 0 of the job. Under FSDP ``cpu_ram_efficient_loading`` that is a simplification: accelerate
loads on local rank 0 of each node and broadcasts within the node, so on a multi-node job the other nodes' local rank 0
reads are reported too. docs/report.md states every threshold below.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import semconv as sc
from . import alike
from .alike import numbers_text
from .attrs import META, by_device, int_attr, real_bytes, str_attr
from .model import INFO, WARNING, Finding, LastState, RankLoad, UnfinishedSpans, to_json
from .ranks import LOADING_RANK, STATUS_ERROR, Job, converted_bytes, outermost, sharded
from .skew import collective_timeout
from .units import human_bytes, percent

# Bytes a non-loading rank may read or convert before it counts: 1% of the loading rank's (a config, a buffer).
TOLERANCE = 0.01
# A non-loading rank that creates or holds this share of the model is carrying a copy of it.
MODEL_SHARE = 0.5
# Under a replicated strategy, a rank that read this share of the model read "everything".
REPLICATED_SHARE = 0.99

_SEVERITY_ORDER = {WARNING: 0, INFO: 1}
_SITE_NOTE = "Largest call site"


def find(jobs: list[Job]) -> list[Finding]:
    """Every finding of every job, warnings first, then the most bytes first."""
    found = [finding for job in jobs for rule in RULES if (finding := rule(job, job.model_bytes())) is not None]
    for finding in found:
        finding.cause = sc.CAUSE_OF_FINDING.get(finding.kind)
    return sorted(found, key=finding_order)


def finding_order(finding: Finding) -> tuple[int, int, str, str]:
    return (_SEVERITY_ORDER.get(finding.severity, 9), -finding.bytes, finding.kind, finding.trace_id)


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
        reads=True,
        extra=lambda r: {"read_bytes": r.read_bytes, "tensors_read": r.tensors_read, "files_opened": r.files_opened},
    )


def nonzero_rank_materialization(job: Job, model: int) -> Finding | None:
    if model <= 0:
        return None
    created: dict[RankLoad, int] = {}  # real bytes zeros_like / empty_like made during the load
    held: dict[RankLoad, int] = {}  # real bytes the model keeps when from_pretrained returns
    candidates = _non_loading(job, sharded)
    whole = job.whole_model_bytes()
    for rank in candidates:
        made, kept = real_bytes(rank.materialized_bytes), real_bytes(rank.held_bytes)
        # A ZeRO-3 rank may legitimately hold its own partition: 1/world_size of the model as built, in its own dtype
        # (a bf16 checkpoint under a ZeRO-3 config without bf16 is built as fp32: each partition is twice as big).
        partition = whole / (rank.world_size or job.world_size or len(job.ranks))
        # A DCP set_state_dict makes each rank's own shard to distribute into: that much is no copy of the model.
        own = partition + TOLERANCE * model if rank.strategy in sc.DCP_STRATEGIES else 0
        if made >= MODEL_SHARE * model and made > own:
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
        note = f"{_SITE_NOTE} on rank {worst.rank}: {sites[0][0]} ({human_bytes(sites[0][1])})."
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
    """Judged on bytes real conversion operations produced: a key that was only renamed was converted by nobody."""
    loading = job.loading_rank
    allowance = TOLERANCE * converted_bytes(loading) if loading is not None else 0
    offenders = {r: converted_bytes(r) for r in _non_loading(job, sharded) if converted_bytes(r) > allowance}
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
        extra=lambda r: {
            "conversion_bytes": r.conversion_bytes,
            "rename_bytes": r.rename_bytes,
            "conversions": r.conversions,
        },
    )


def _whole(rank: RankLoad) -> int:
    """Bytes the rank read as whole tensors."""
    return max(0, rank.read_bytes - rank.partial_bytes)


def replicated_load(job: Job, model: int) -> Finding | None:
    """Ranks that read the same bytes as the loading rank: the whole model, as whole tensors (not those that did it
    only to hand the model to ZeRO-3 afterwards: ``whole_model_before_zero3`` tells them)."""
    if model <= 0:
        return None
    told = _before_zero3(job, model)
    replicas = [r for r in _non_loading(job, _replicated) if r not in told]
    readers = {r: r.read_bytes for r in replicas if _whole(r) >= REPLICATED_SHARE * model}
    if not readers:
        return None
    return _finding(
        job,
        sc.FINDING_REPLICATED_LOAD,
        INFO,
        readers,
        model,
        what="read {bytes} ({share} of the model) as whole tensors",
        why=_replica_why(readers),
        reads=True,
        extra=lambda r: {
            "read_bytes": r.read_bytes,
            "partial_bytes": r.partial_bytes,
            "workload": r.workload,
            "serving_engine": r.serving_engine,
        },
    )


def _replica_why(readers: dict[RankLoad, int]) -> str:
    if any(rank.strategy == sc.STRATEGY_DCP_RESHARDED for rank in readers):
        return "a resharded DCP load: each rank read whole saved chunks of which it keeps only a part"
    if all(rank.workload == sc.WORKLOAD_INFERENCE for rank in readers):
        return (
            "an inference job (no optimizer, no training framework): every rank read the whole checkpoint, whether "
            "it serves all of the model or only its tensor-parallel part of it"
        )
    return "expected without a sharding strategy: every rank loads its own replica"


# Loads that built a whole model on the rank: no strategy of their own (plain, or a ``traced_load``).
_WHOLE_MODEL_STRATEGIES = (None, sc.STRATEGY_PLAIN)


def loaded_before_zero3(rank: RankLoad) -> int:
    """The real bytes the rank's loads brought into memory before its first ``deepspeed.initialize`` with ZeRO stage
    3, where those loads built a whole model (no ZeRO-3 config alive during them): the held bytes a
    ``from_pretrained`` returned with, the bytes another load read. 0 when there is no such initialize or load."""
    starts = [
        span.start_ns
        for span in rank.spans
        if span.name == sc.SPAN_DEEPSPEED_INITIALIZE and int_attr(span.attributes, sc.DEEPSPEED_ZERO_STAGE) == 3
    ]
    if not starts:
        return 0
    by_id = {span.span_id: span for span in rank.spans if span.span_id}
    loaded = 0
    for load in outermost(rank.spans, sc.LOAD_SPANS, by_id):
        if load.end_ns > min(starts) or str_attr(load.attributes, sc.STRATEGY) not in _WHOLE_MODEL_STRATEGIES:
            continue
        if load.name == sc.SPAN_FROM_PRETRAINED:
            loaded += real_bytes(by_device(load.attributes, sc.HELD_BYTES_PREFIX))
        else:
            loaded += int_attr(load.attributes, sc.READ_BYTES)
    return loaded


def _before_zero3(job: Job, model: int) -> dict[RankLoad, int]:
    """The ranks whose loads before a ZeRO-3 ``deepspeed.initialize`` built half the model as built or more (its
    share in its own dtype), and those bytes."""
    whole = job.whole_model_bytes() if model > 0 else 0
    if whole <= 0:
        return {}
    return {rank: loaded for rank in job.ranks if (loaded := loaded_before_zero3(rank)) >= MODEL_SHARE * whole}


def whole_model_before_zero3(job: Job, model: int) -> Finding | None:
    """Ranks that each built the whole model and only then handed it to ``deepspeed.initialize`` with ZeRO stage 3:
    the DeepSpeed config came after ``from_pretrained`` (Roblox/FAI-RL#66: 230 GB per rank), so no rank loaded
    under ``zero.Init`` and every rank held all of it. Every such rank counts, rank 0 too: done right, each holds only
    its partition."""
    offenders = _before_zero3(job, model)
    if not offenders:
        return None
    return _finding(
        job,
        sc.FINDING_WHOLE_MODEL_BEFORE_ZERO3,
        WARNING,
        offenders,
        job.whole_model_bytes(),
        what="held {bytes} of real weights when from_pretrained returned ({share} of the model)",
        why="deepspeed.initialize partitioned them with ZeRO stage 3 only afterwards: the ZeRO-3 config was made "
        + "after from_pretrained, so every rank built and loaded the whole model instead of its partition",
        extra=lambda r: {"held_bytes": r.held_bytes, "read_bytes": r.read_bytes},
    )


def sharded_read(job: Job, model: int) -> Finding | None:
    """Ranks that each read slices of the model's tensors (tensor parallel), together the whole model at least once,
    none of them all of it as whole tensors."""
    if model <= 0:
        return None
    ranks = [r for r in job.ranks if r.rank is not None and _replicated(r)]
    readers = {r: r.read_bytes for r in ranks if r.partial_bytes > 0}
    if len(readers) < 2 or any(_whole(r) >= REPLICATED_SHARE * model for r in ranks):
        return None
    together = sum(r.read_bytes for r in ranks)
    if together < REPLICATED_SHARE * model:
        return None
    times = f"{together / model:.2f}".rstrip("0").rstrip(".")
    return _finding(
        job,
        sc.FINDING_SHARDED_READ,
        INFO,
        readers,
        model,
        what="read {bytes} ({share} of the model), partly as tensor slices; all ranks together read "
        + f"{human_bytes(together)} ({times}x the model)",
        why="a sharded read: each rank reads only its own part of the tensors",
        reads=True,
        extra=lambda r: {
            "read_bytes": r.read_bytes,
            "partial_tensors": r.partial_tensors,
            "partial_bytes": r.partial_bytes,
        },
    )


def limit_text(limit: int | None, source: str | None) -> str:
    """``node memory 25,276,502,016 B (25.3 GB)``, or ``memory limit 3,145,728,000 B (3.1 GB) (cgroup v1)``."""
    if not limit:
        return ""
    if source in (None, "node"):
        return f"node memory {human_bytes(limit)}"
    return f"memory limit {human_bytes(limit)} ({source})"


def lowest_limit(ranks: list[RankLoad]) -> tuple[int | None, str | None]:
    """The lowest memory limit among these ranks (each its ``memory_limit_bytes``), and its source."""
    known = [(r.memory_limit_bytes, r.memory_limit_source) for r in ranks if r.memory_limit_bytes]
    return min(known, key=lambda item: item[0] or 0) if known else (None, None)


def _made(rank: RankLoad) -> str:
    return ", ".join(f"{human_bytes(n)} on {d}" for d, n in rank.materialized_bytes.items() if d != META)


def incomplete_rank(job: Job, model: int) -> Finding | None:
    """Ranks that started loading and never finished: what is known of how they ended and what they had done. Its
    figures are the rank's own (its row's: finished spans plus the last known totals), never the last state's alone,
    so a table and a finding never disagree; the evidence keeps the last state as it was. Ranks that ended alike
    (how, during what, alike bytes read) share one sentence, a whole node's as the node (``alike.outlier_groups``)."""
    stopped = [rank for rank in job.ranks if rank.incomplete]
    if not stopped:
        return None
    evidence = [
        {"rank": rank.rank, "host": rank.host, "exit": to_json(rank.exit)}
        | (to_json(rank.last_state) if rank.last_state is not None else {})
        for rank in stopped
    ]
    groups = alike.outlier_groups(
        stopped,
        _how_it_ended,
        lambda rank: rank.read_bytes + 1.0,
        host=lambda rank: rank.host,
        per_host=dict(Counter(rank.host for rank in job.ranks)),
    )
    worst = max((rank.read_bytes for rank in stopped if isinstance(rank.last_state, LastState)), default=0)
    return job.finding(
        sc.FINDING_INCOMPLETE_RANK,
        WARNING,
        (rank.rank for rank in stopped),
        worst,
        "; ".join(_stopped(group.members, group.hosts) for group in groups)
        + ". The rank's row shows its finished spans plus these last known totals.",
        {"model_bytes": model, "groups": alike.groups_evidence(groups, lambda rank: [rank.rank]), "per_rank": evidence},
    )


def _how_it_ended(rank: RankLoad) -> tuple:
    """What ranks that ended alike share: how, during what, whether a witness saw it (a rank without a number:
    alone)."""
    state = rank.last_state
    during = (state.during or state.load) if isinstance(state, LastState) else None
    alone = id(rank) if rank.rank is None else None
    return rank.exit.describe("sentence"), during, rank.exit.source is None, isinstance(state, LastState), alone


def _stopped(members: list[RankLoad], hosts: list[str] | None) -> str:
    """One sentence for ranks that ended alike: a rank's own figures, or alike ranks' median (min and max where they
    differ)."""
    first, numbers = members[0], [rank.rank for rank in members if rank.rank is not None]
    one = len(members) == 1
    if one:
        name = first.label
    else:
        name = alike.whole_nodes(hosts, numbers) if hosts is not None else alike.who(numbers)
    how = first.exit.describe("sentence")
    how = how if one or not how.startswith("was ") else "were " + how.removeprefix("was ")
    unknown = "" if first.exit.source is not None else " (no launcher witness: how it ended is unknown)"

    def sized(values: list[int]) -> str:
        return alike.spread_figure(values, lambda value: human_bytes(int(value)))

    state = first.last_state
    if not isinstance(state, LastState):
        unfinished = [
            r.last_state.unfinished_parent_spans if isinstance(r.last_state, UnfinishedSpans) else 0 for r in members
        ]
        never = f"{alike.spread_figure(unfinished, str)} of {'its' if one else 'their'} loads or phases never ended"
        return f"{name} never finished: {never}{unknown}"
    sentence = f"{name} {how} during {state.during or state.load or 'its load'} after reading "
    sentence += sized([rank.read_bytes for rank in members])
    if one and (made := _made(first)):
        sentence += f" and materialising {made}"
    elif not one and any(created := [real_bytes(rank.materialized_bytes) for rank in members]):
        sentence += f" and materialising {sized(created)}"
    sentence += unknown
    peaks = [rank.peak_rss_bytes or _last(rank).peak_rss_bytes for rank in members]
    if all(peaks):
        sentence += f"; peak RSS {sized([peak or 0 for peak in peaks])}"
    if first.exit.oom_killed or first.exit.signal == "SIGKILL":
        limits = [_limit(rank) for rank in members]
        if all(limit for limit, _ in limits):
            source = limits[0][1] if len({source for _, source in limits}) == 1 else None
            sentence += f"; the memory limit was {sized([limit or 0 for limit, _ in limits])}"
            sentence += f" ({source or 'unknown source'})"
    return sentence


def _last(rank: RankLoad) -> LastState:
    assert isinstance(rank.last_state, LastState)  # a rank of a set whose first has one: by _how_it_ended
    return rank.last_state


def _limit(rank: RankLoad) -> tuple[int | None, str | None]:
    """The memory limit the rank's last state knew, else the rank's."""
    state = _last(rank)
    if state.memory_limit_bytes:
        return state.memory_limit_bytes, state.memory_limit_source
    return rank.memory_limit_bytes, rank.memory_limit_source


def failed_load(job: Job, model: int) -> Finding | None:
    """Ranks whose load raised: not an ordinary finished load, whatever its numbers say. Ranks whose same load raised
    the same error and ended alike, having read alike bytes, share one sentence, a whole node's as the node
    (``alike.outlier_groups``); the evidence keeps every rank's figures."""
    failed = [rank for rank in job.ranks if rank.failed is not None and not rank.incomplete]
    if not failed:
        return None
    raised = [_raised(rank) for rank in failed]
    groups = alike.outlier_groups(
        raised,
        lambda item: (item.load, item.rank.failed, item.rank.exit.describe("sentence"), item.alone),
        lambda item: item.read + 1.0,
        host=lambda item: item.rank.host,
        per_host=dict(Counter(rank.host for rank in job.ranks)),
    )
    evidence = [
        {"rank": item.rank.rank, "host": item.rank.host, "load": item.load, "error_type": item.rank.failed}
        | {"read_bytes": item.read, "exit": to_json(item.rank.exit)}
        for item in raised
    ]
    one = len(failed) == 1
    return job.finding(
        sc.FINDING_FAILED_LOAD,
        WARNING,
        (rank.rank for rank in failed),
        sum(item.read for item in raised),
        "; ".join(_raised_sentence(group) for group in groups)
        + f". {'Its' if one else 'Their'} numbers are those of a load that did not complete.",
        {
            "model_bytes": model,
            "groups": alike.groups_evidence(groups, lambda item: [item.rank.rank]),
            "per_rank": evidence,
        },
    )


@dataclass(frozen=True)
class Raised:
    """A failed rank: the load that raised (its span's name), the bytes that load had read."""

    rank: RankLoad
    load: str
    read: int

    @property
    def alone(self) -> int | None:
        """A rank without a number is told alone (no range can name it)."""
        return id(self) if self.rank.rank is None else None


def _raised(rank: RankLoad) -> Raised:
    loads = [s for s in rank.spans if s.name in sc.LOAD_SPANS and s.status_code == STATUS_ERROR]
    load = loads[-1] if loads else None
    if load is None:
        return Raised(rank, "load", rank.read_bytes)
    return Raised(rank, load.name, int_attr(load.attributes, sc.READ_BYTES))


def _raised_sentence(group: alike.Outliers[Raised]) -> str:
    """``rank 1's transformers.from_pretrained raised FileNotFoundError after reading 300.0 kB; the process exited
    with code 1``; alike ranks the same way, bytes read their median (min and max where they differ)."""
    members, first = group.members, group.members[0]
    ended = first.rank.exit
    if len(members) == 1 and group.hosts is None:
        name = f"rank {first.rank.rank}" if first.rank.rank is not None else first.rank.label
        sentence = f"{name}'s {first.load} raised {first.rank.failed} after reading {human_bytes(first.read)}"
        process = "the process"
    else:
        numbers = [item.rank.rank for item in members if item.rank.rank is not None]
        name = alike.whole_nodes(group.hosts, numbers) if group.hosts is not None else alike.who(numbers)
        read = alike.spread_figure([item.read for item in members], lambda value: human_bytes(int(value)))
        sentence = f"{name} each raised {first.rank.failed} in {first.load} after reading {read}"
        process = "each process"
    if ended.code is not None:
        sentence += f"; {process} exited with code {ended.code}"
    elif ended.signal is not None:
        sentence += f"; {process} then {ended.describe('sentence').removeprefix('was ')}"
    return sentence


RULES: list[Callable[[Job, int], Finding | None]] = [
    incomplete_rank,
    failed_load,
    duplicate_checkpoint_read,
    nonzero_rank_materialization,
    duplicate_conversion,
    whole_model_before_zero3,
    replicated_load,
    sharded_read,
    collective_timeout,
]


def _last_known(ranks: list[RankLoad]) -> str:
    names = numbers_text([r.rank for r in ranks if r.rank is not None])
    return f"Rank{'s' if len(ranks) > 1 else ''} {names} did not finish: these are the last known numbers."


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
    reads: bool = False,
) -> Finding:
    """One finding over the offending ranks, with the host-memory projection: worst rank's bytes × ranks per node.
    ``reads``: its bytes are bytes read, not memory made or kept (``projected``)."""
    ranks = sorted(offenders, key=lambda r: r.rank or 0)
    worst = max(offenders.values())
    per_node = max(job.ranks_per_node(r) for r in ranks)
    strategies = sorted({r.strategy or "none" for r in ranks})
    names = numbers_text([r.rank for r in ranks if r.rank is not None])  # a few lines at any world size
    each = " each" if len(ranks) > 1 and min(offenders.values()) == worst else ""
    amount = human_bytes(worst) if each or len(ranks) == 1 else f"up to {human_bytes(worst)}"
    symptom = what.format(bytes=amount + each, share=percent(worst, model))
    held = max(r.held_bytes.get("cpu", 0) for r in ranks) if reads else 0
    held = held if held > (1 + TOLERANCE) * worst else 0  # the buffers a replica adds are no other figure
    projection, host = projected(worst, held, per_node, limit_text(*lowest_limit(ranks)), reads)
    detail = (
        f"rank{'s' if len(ranks) > 1 else ''} {names} "
        + symptom
        + f" under strategy {'/'.join(strategies)}; {why}. "
        + projection
        + (f" {note}" if note else "")
        + (f" {_last_known(unfinished)}" if (unfinished := [r for r in ranks if r.incomplete]) else "")
    )
    per_rank = [
        {"rank": r.rank, "host": r.host, "strategy": r.strategy, "bytes": offenders[r], **extra(r)} for r in ranks
    ]
    found = job.finding(
        kind,
        severity,
        (r.rank for r in ranks),
        sum(offenders.values()),
        detail,
        {"model_bytes": model, "ranks_per_node": per_node, "per_rank": per_rank},
        projected_node_bytes=max(worst, held) * per_node,
    )
    # For the table's one finding per cause (cli/render.py): what the ranks did, the projection, the model's share.
    found.symptom = symptom + (f"; {note[0].lower()}{note[1:].rstrip('.')}" if note.startswith(_SITE_NOTE) else "")
    found.projection = host
    found.model_share = worst / model if model > 0 else 0.0
    return found


def projected(worst: int, held: int, per_node: int, limit: str, reads: bool) -> tuple[str, str]:
    """(the detail's per-node sentence, its host-memory part: ``X x N ranks per node = Y per node (limit).``). The
    bytes of most findings are memory the ranks made or kept: host memory. A read finding's are bytes read: its figure
    says so, and adds what each rank held in host memory at return where that is more (a replica cast to a wider
    dtype: 439.7 MB read, 879.3 MB held; 0: not more); a tensor read was in the rank's memory, so the host memory is
    the larger."""
    ranks = f"{per_node} rank{'s' if per_node > 1 else ''} per node"
    against = f" ({limit})." if limit else "."
    memory = max(worst, held)
    host = f"{human_bytes(memory)} x {ranks} = {human_bytes(memory * per_node)} per node" + against
    if not reads:
        return f"Projected host memory: {host}", host
    read = f"Projected per node: {human_bytes(worst)} read x {ranks} = {human_bytes(worst * per_node)} read per node"
    if held <= worst:
        return read + against, host
    kept = f"{human_bytes(held)} x {ranks} = {human_bytes(held * per_node)} of host memory per node"
    return f"{read}; held at return: {kept}{against}", host
