"""Capacity forecast: one small job's measured memory per rank, scaled to a target model, against a node's memory.

For each rank of the measured job (model ``M_s`` bytes, world size ``W_s``), from its outermost load spans:

- ``fixed`` = RSS before the load (``loadtrace.rss.before``): interpreter, libraries, CUDA context. Does not scale.
- ``growth`` = peak RSS during the load (``loadtrace.rss.peak``) − ``fixed``.
- ``load bytes`` ``T_s`` = max(read + real created, real held): the bytes of model the rank brought into memory, split
  into categories by what the job's strategy expects of this rank (its *share* ``P`` is ``M / W`` under a sharded
  strategy, ``zero3`` or ``fsdp_cpu_ram_efficient``, and the whole model ``M`` otherwise, a replica):

  ``once_per_job``  the loading rank's (rank 0's) copy under a sharded strategy: ``min(T_s, M_s)``
  ``per_rank``      its own share: ``min(rest, P_s)``, where ``rest`` is ``T_s`` less ``once_per_job``
  ``duplicated``    beyond its share: ``rest − per_rank``

- Target bytes: ``once_per_job × k`` with ``k = M_t / M_s``; when nothing was duplicated, ``per_rank × P_t / P_s``;
  when something was, the rank did whole-model work, which scales with the model: ``rest_t = rest × k``, of which
  ``per_rank_t = min(rest_t, P_t)`` and ``duplicated_t = rest_t − per_rank_t`` (at the same world size this is just
  ``× k`` for both; with more ranks the share shrinks and the duplicate grows by as much).
- Growth scales with the load bytes: ``growth_t = growth × T_t / T_s`` (each category's part is ``growth × bytes_c /
  T_s``); a rank with growth but no load bytes has its growth scaled by ``k`` (the conservative choice).
- ``peak_t = fixed + growth_t`` per rank.

Per node: ``ranks_per_node`` ranks, node 0 holding rank 0's profile once and the worst other rank's profile for the
rest (other nodes, when the world is larger than a node, the worst other rank's for all). Ranks of a node share
file-backed pages (the mmap'd checkpoint, the libraries) through the page cache, so the node peak is the sum of the
ranks' anonymous parts plus the largest file-backed part once: ``Σ (peak_t − file_t) + max file_t``, with ``file_t =
RssFile before + growth_t × (RssFile growth / RSS growth by kind)``. The verdict compares it with the node's memory
limit: the lower of its MemTotal and its cgroup's limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import semconv as sc
from .model import (
    Categories,
    FixedBytes,
    FixedCategory,
    Forecast,
    ForecastBasis,
    LeftOutRank,
    MeasuredJob,
    NodeBasis,
    NodeProfile,
    RankBasis,
    RankLoad,
    ScaledBytes,
    ScaledCategory,
    TargetJob,
)
from .ranks import LOADING_RANK, Job, opt_int_attr, real_bytes, sharded, str_attr
from .units import human_bytes

DTYPE_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}
CATEGORIES = ("once_per_job", "per_rank", "duplicated")


class ForecastError(ValueError):
    """A forecast that cannot be made from these spans: one line for the user."""


@dataclass(frozen=True)
class Target:
    model_bytes: int
    ranks_per_node: int | None = None  # None: as many as the measured job ran per node
    world_size: int | None = None  # None: the measured world size, or ranks_per_node when that is larger
    node_memory_bytes: int | None = None  # None: the measured node's MemTotal, or its cgroup limit when lower
    given_as: str | None = None  # how the user gave the model size, for the basis


@dataclass
class Profile:
    """One measured rank, split into categories, and what it becomes at the target."""

    rank: RankLoad
    fixed: int
    peak: int
    file_before: int
    file_share: float  # share of the load's RSS growth that was file-backed (RssFile)
    measured: dict[str, int]  # bytes per category in the measured job
    target: dict[str, int]  # bytes per category at the target

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.fixed)

    @property
    def load_bytes(self) -> int:
        return sum(self.measured.values())

    @property
    def target_load_bytes(self) -> int:
        return sum(self.target.values())

    def growth_scale(self, scale: float) -> float:
        """growth_t / growth: load bytes at the target over measured ones; ``scale`` (k) without load bytes."""
        return self.target_load_bytes / self.load_bytes if self.load_bytes > 0 else scale

    def target_growth(self, scale: float) -> int:
        return round(self.growth * self.growth_scale(scale))

    def target_peak(self, scale: float) -> int:
        return self.fixed + self.target_growth(scale)

    def target_file_backed(self, scale: float) -> int:
        return self.file_before + round(self.file_share * self.target_growth(scale))


def split(rank: RankLoad, model: int, world: int) -> dict[str, int]:
    """The rank's load bytes by category in the measured job (see the module docstring)."""
    total = max(rank.read_bytes + real_bytes(rank.materialized_bytes), real_bytes(rank.held_bytes))
    share = model / world if sharded(rank) else model
    once = min(total, model) if sharded(rank) and rank.rank == LOADING_RANK else 0
    rest = total - once
    own = min(rest, round(share))
    return {"once_per_job": once, "per_rank": own, "duplicated": rest - own}


def scale_split(rank: RankLoad, measured: dict[str, int], scale: float, world_s: int, world_t: int) -> dict[str, int]:
    """The same categories at the target (see the module docstring)."""
    partition_scale = scale * world_s / world_t if sharded(rank) else scale
    once = round(measured["once_per_job"] * scale)
    own = round(measured["per_rank"] * partition_scale)
    if measured["duplicated"] == 0:
        return {"once_per_job": once, "per_rank": own, "duplicated": 0}
    # Beyond its share: the rank did whole-model work, which scales with the model whatever the world size.
    rest = round((measured["per_rank"] + measured["duplicated"]) * scale)
    own = min(rest, own)
    return {"once_per_job": once, "per_rank": own, "duplicated": rest - own}


def profile(rank: RankLoad, model: int, scale: float, world_s: int, world_t: int) -> Profile | None:
    """None for a rank that did not finish or whose spans carry no memory figures."""
    if rank.incomplete or rank.failed or rank.rss_before_bytes is None or rank.peak_rss_bytes is None:
        return None
    fixed, peak = rank.rss_before_bytes, max(rank.peak_rss_bytes, rank.rss_before_bytes)
    kinds = {
        "anon": _growth(rank.peak_rss_anon_bytes, rank.rss_anon_before_bytes),
        "file": _growth(rank.peak_rss_file_bytes, rank.rss_file_before_bytes),
    }
    total_kinds = sum(kinds.values())
    measured = split(rank, model, world_s)
    return Profile(
        rank=rank,
        fixed=fixed,
        peak=peak,
        file_before=rank.rss_file_before_bytes or 0,
        file_share=kinds["file"] / total_kinds if total_kinds > 0 else 0.0,
        measured=measured,
        target=scale_split(rank, measured, scale, world_s, world_t),
    )


def _growth(peak: int | None, before: int | None) -> int:
    return max(0, peak - before) if peak is not None and before is not None else 0


def _node_peak(profiles: list[Profile], scale: float) -> tuple[int, int, int]:
    """(node peak with file-backed pages counted once, plain sum of the ranks' peaks, the file-backed part counted)."""
    peaks = [p.target_peak(scale) for p in profiles]
    files = [min(p.target_file_backed(scale), peak) for p, peak in zip(profiles, peaks, strict=True)]
    shared = max(files, default=0)
    return sum(peaks) - sum(files) + shared, sum(peaks), shared


def node_memory(job: Job, target: Target) -> tuple[int | None, str | None, str | None]:
    """The memory the node peak must fit in, the attribute it came from, and which limit it is: the flag, else the
    loading rank's memory limit (``loadtrace.memory.limit``: the lower of the node's MemTotal and its cgroup's limit),
    else the lower of ``loadtrace.node.memory_total`` and ``loadtrace.cgroup.memory_max``."""
    if target.node_memory_bytes is not None:
        return target.node_memory_bytes, "--node-memory-bytes", None
    loading = job.loading_rank
    ranks = [loading] if loading is not None else job.ranks
    stated = [
        (limit, source)
        for r in ranks
        for load in r.spans
        if load.name in sc.LOAD_SPANS and (limit := opt_int_attr(load.attributes, sc.MEMORY_LIMIT))
        for source in [str_attr(load.attributes, sc.MEMORY_LIMIT_SOURCE)]
    ]
    if stated:
        limit, source = min(stated, key=lambda item: item[0])
        return limit, sc.MEMORY_LIMIT, source
    total = max((r.node_memory_bytes or 0 for r in ranks), default=0) or None
    cgroup = min((r.cgroup_memory_max_bytes for r in ranks if r.cgroup_memory_max_bytes), default=None)
    if cgroup is not None and (total is None or cgroup < total):
        return cgroup, sc.CGROUP_MEMORY_MAX, "cgroup"
    return total, (sc.NODE_MEMORY_TOTAL if total is not None else None), ("node" if total is not None else None)


def forecast(job: Job, target: Target) -> Forecast:
    """The ``forecast`` object of ``loadtrace report --forecast-...`` (docs/report.md)."""
    if target.model_bytes <= 0:
        raise ForecastError("the target model size must be positive")
    measured_model = job.model_bytes()
    if measured_model <= 0:
        raise ForecastError(
            f"trace {job.trace_id}: cannot tell the measured model's size"
            " (rank 0 read nothing and no rank holds real bytes)"
        )
    loading = job.loading_rank
    if loading is None:
        raise ForecastError(f"trace {job.trace_id}: no spans of rank 0, the loading rank")
    world_s = job.world_size or len(job.ranks)
    per_node = target.ranks_per_node or job.ranks_per_node(loading)
    world_t = target.world_size or max(world_s, per_node)
    if world_t < per_node:
        raise ForecastError(f"a world size of {world_t} cannot have {per_node} ranks per node")
    scale = target.model_bytes / measured_model
    profiles: list[Profile] = []
    left_out: list[LeftOutRank] = []
    for rank in job.ranks:
        if rank.rank is None:
            continue  # which rank of the job it was is unknown
        found = profile(rank, measured_model, scale, world_s, world_t)
        if found is None:
            why = (
                "did not finish"
                if rank.incomplete
                else f"its load raised {rank.failed}"
                if rank.failed
                else "no loadtrace.rss.* memory figures"
            )
            left_out.append(LeftOutRank(rank.rank, why))
        else:
            profiles.append(found)
    first = next((p for p in profiles if p.rank.rank == LOADING_RANK), None)
    if first is None:
        why = (
            "did not finish"
            if loading.incomplete
            else f"raised {loading.failed}"
            if loading.failed
            else "carry no loadtrace.rss.* memory figures (an older loadtrace?)"
        )
        raise ForecastError(f"trace {job.trace_id}: rank 0's load spans {why}; nothing to scale")
    others = [p for p in profiles if p is not first]
    worst = max(others, key=lambda p: (p.target_peak(scale), -(p.rank.rank or 0)), default=None)
    stand_in = worst or first
    node0_peak, node0_sum, node0_shared = _node_peak([first] + [stand_in] * (per_node - 1), scale)
    other = _node_peak([stand_in] * per_node, scale) if world_t > per_node else None
    # The node the verdict is about: node 0, or another node when the world spans several and theirs is worse.
    node_peak, node_sum, node_shared = (
        other if other is not None and other[0] > node0_peak else (node0_peak, node0_sum, node0_shared)
    )
    memory, memory_source, limit_source = node_memory(job, target)
    verdict = None if memory is None else ("oom" if node_peak > memory else "ok")

    if stand_in is first or per_node == 1:
        counts = [NodeProfile(LOADING_RANK, per_node)]
    else:
        counts = [NodeProfile(LOADING_RANK, 1), NodeProfile(stand_in.rank.rank, per_node - 1)]
    other_peak = other[0] if other is not None else None
    text = _text(job, target, measured_model, world_s, world_t, per_node, scale, first, worst, other_peak)
    return Forecast(
        model_bytes=target.model_bytes,
        ranks_per_node=per_node,
        per_rank_peak_bytes={_rank_number(p): p.target_peak(scale) for p in profiles},
        per_node_peak_bytes=node_peak,
        node_memory_bytes=memory,
        verdict=verdict,
        basis=ForecastBasis(
            text=text,
            trace_id=job.trace_id,
            job_id=job.job_id,
            measured=MeasuredJob(measured_model, world_s, job.ranks_per_node(loading)),
            target=TargetJob(
                model_bytes=target.model_bytes,
                given_as=target.given_as,
                world_size=world_t,
                world_size_given=target.world_size is not None,
                ranks_per_node=per_node,
            ),
            model_scale=round(scale, 6),
            categories=_categories(profiles, scale, world_s, world_t),
            ranks={_rank_number(p): _rank_basis(p, scale) for p in profiles},
            left_out_ranks=left_out,
            node=NodeBasis(
                profiles=counts,
                sum_of_rank_peaks_bytes=node_sum,
                file_backed_bytes_counted_once=node_shared,
                node_0_peak_bytes=node0_peak,
                other_nodes_peak_bytes=other_peak,
                node_memory_source=memory_source,
                memory_limit_source=limit_source,
                headroom_bytes=None if memory is None else memory - node_peak,
            ),
        ),
    )


def _rank_number(p: Profile) -> int:
    """The rank number of a profile: only ranks with a number are profiled."""
    assert p.rank.rank is not None
    return p.rank.rank


def _categories(profiles: list[Profile], scale: float, world_s: int, world_t: int) -> Categories:
    """Each category: how it scales, and per rank the bytes and the RSS growth it was scaled from and to."""
    partition = f"model size / world size ({round(scale * world_s / world_t, 6)}) when sharded,"
    partition += f" model size ({round(scale, 6)}) for a replica"
    how = {
        "fixed": "does not scale (RSS before the load)",
        "once_per_job": f"model size ({round(scale, 6)})",
        "per_rank": partition,
        "duplicated": f"model size ({round(scale, 6)}): whole-model work, less the rank's own share at the target",
    }
    fixed = FixedCategory(how["fixed"], {_rank_number(p): FixedBytes(p.fixed, p.fixed) for p in profiles})
    scaled = {}
    for category in CATEGORIES:
        ranks = {}
        for p in profiles:
            if not p.measured[category] and not p.target[category]:
                continue
            per_byte = p.growth / p.load_bytes if p.load_bytes else 0.0
            ranks[_rank_number(p)] = ScaledBytes(
                from_bytes=p.measured[category],
                to_bytes=p.target[category],
                from_growth_bytes=round(per_byte * p.measured[category]),
                to_growth_bytes=round(per_byte * p.target[category]),
            )
        scaled[category] = ScaledCategory(how[category], ranks)
    return Categories(fixed, scaled["once_per_job"], scaled["per_rank"], scaled["duplicated"])


def _rank_basis(p: Profile, scale: float) -> RankBasis:
    return RankBasis(
        strategy=p.rank.strategy,
        rss_before_bytes=p.fixed,
        peak_rss_bytes=p.peak,
        growth_bytes=p.growth,
        load_bytes=p.load_bytes,
        growth_per_load_byte=round(p.growth / p.load_bytes, 4) if p.load_bytes else None,
        target_load_bytes=p.target_load_bytes,
        target_growth_bytes=p.target_growth(scale),
        file_backed_share=round(p.file_share, 4),
        target_file_backed_bytes=p.target_file_backed(scale),
        target_peak_bytes=p.target_peak(scale),
    )


def _text(
    job: Job,
    target: Target,
    measured: int,
    world_s: int,
    world_t: int,
    per_node: int,
    scale: float,
    first: Profile,
    worst: Profile | None,
    other_peak: int | None,
) -> str:
    given = f" ({target.given_as})" if target.given_as else ""
    world = "given" if target.world_size is not None else "the measured one, or the ranks per node when more"
    if per_node == 1:
        node = "rank 0's profile"
    elif worst is None:
        node = f"rank 0's profile {per_node} times (the job had no other rank)"
    else:
        node = f"rank 0's profile once and rank {worst.rank.rank}'s (the worst other rank) {per_node - 1} times"
    lines = [
        f"Scaled from job {job.job_id or job.trace_id} ({human_bytes(measured)} model, world size {world_s})"
        f" to {human_bytes(target.model_bytes)}{given}: x{scale:.4g}; world size {world_t} ({world}), {per_node} rank"
        f"{'s' if per_node > 1 else ''} per node.",
        "Per rank: peak = RSS before the load (fixed: interpreter, libraries, CUDA context; not scaled) + the load's"
        " RSS growth, split in proportion to the rank's load bytes: rank 0's copy (once per job) and bytes beyond a"
        " rank's share (duplicated) scale with the model; its own share with the model / world size under a sharded"
        " strategy, with the model for a replica.",
        f"Node 0 holds {node}; file-backed pages (mmap'd checkpoint, libraries) are shared by a node's ranks and"
        " counted once."
        + (" Other nodes: the worst other rank's profile on every rank." if other_peak is not None else ""),
    ]
    if first.load_bytes == 0 or (worst is not None and worst.load_bytes == 0):
        lines.append("A rank with RSS growth but no load bytes has its growth scaled with the model (conservative).")
    return " ".join(lines)
