"""Capacity forecast: one small job's measured memory per rank, scaled to a target model, against a node's memory.

What scales is told apart from what does not (docs/report.md, Forecast, has the method in a page):

- ``fixed`` = RSS before the load (``loadtrace.rss.before``): interpreter, libraries, CUDA context. Does not scale.
- ``load bytes`` ``T`` = max(read + real created, real held): the model bytes the rank brought into memory, split into
  categories by what the job's strategy expects of this rank (its *share* ``P`` is ``M / W`` under a sharded strategy,
  ``zero3`` or ``fsdp_cpu_ram_efficient``, and the whole model ``M`` otherwise, a replica):

  (``M`` being the model as the ranks hold it: the largest of the checkpoint's bytes, a rank's real held bytes and
  the model as built (``loadtrace.model.bytes``: a ZeRO-3 rank holds only its partition), so a bf16 checkpoint loaded
  as fp32 is no duplicate)

  ``once_per_job``  the loading rank's (rank 0's) copy under a sharded strategy: ``min(T_s, M_s)``
  ``per_rank``      its own share: ``min(rest, P_s)``, where ``rest`` is ``T_s`` less ``once_per_job``
  ``duplicated``    beyond its share: ``rest − per_rank``

  At the target: ``once_per_job × k`` with ``k = M_t / M_s``; when nothing was duplicated, ``per_rank × P_t / P_s``;
  when something was, the rank did whole-model work, which scales with the model: ``rest_t = rest × k``, of which
  ``per_rank_t = min(rest_t, P_t)`` and ``duplicated_t = rest_t − per_rank_t``.
- What those bytes cost in RSS is *calibrated*, not taken from the small run: RSS (and anonymous RSS) per load byte,
  measured on real runs at three sizes per transformers release, strategy and role (loading rank or not), kept in
  ``forecast_calibration.json`` (made by ``scripts/forecast_calibration.py``) as a low, mid and high value.
- A rank that grew by less than its load bytes (``MAPPED_RATE``) cannot have copied them: its load kept the
  checkpoint memory-mapped, and its growth is kept as it is at the low and mid ends, scaled with the model only at
  the high end (``mapped_behaviour``); the confidence is then ``medium``.
- ``not model`` = the measured growth those bytes do not explain (allocator pools, lazily imported code, threads,
  the conversion machinery): ``growth − per_byte × T_s``, kept as it is at the target (the high end allows for the
  calibration runs' largest such remainder: it grows with the tensor count, which the target's size does not tell).
- Per window (the load span and each phase span of the rank, a phase counting the load bytes brought in by its end):
  ``fixed + not_model_w + per_byte × T_t,w``; the rank's peak is its worst window, not a sum.

Per node: ``ranks_per_node`` ranks, node 0 holding rank 0's profile once and the worst other rank's profile for the
rest (other nodes, when the world is larger than a node, the worst other rank's for all). Ranks of a node share
file-backed pages (the mmap'd checkpoint, the libraries) through the page cache, so the node peak is the sum of the
ranks' anonymous parts plus the largest file-backed part once. Low and high ends come from the calibration's low and
high per-byte values, widened when the measured run is too small for its growth to be mostly model bytes or when
the calibration does not cover its release or strategy. Verdict: ``oom`` when even the low end exceeds the node's
memory limit (the lower of its MemTotal and its cgroup's limit), ``ok`` when the high end fits, else ``uncertain``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .. import semconv as sc
from . import summarized
from .attrs import by_device, opt_int_attr, real_bytes, str_attr
from .model import (
    Categories,
    Confidence,
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
from .ranks import LOADING_RANK, Job, sharded
from .units import human_bytes

DTYPE_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}
CATEGORIES = ("once_per_job", "per_rank", "duplicated")
ENDS = ("low", "mid", "high")
CALIBRATION_FILE = "forecast_calibration.json"
DUPLICATE_FLOOR = 0.01  # bytes beyond a rank's share count as whole-model work from 1% of the model up
MEASURABLE = 2  # a rank's own rate is used from this many times its calibration's most not-model growth up
MAPPED_RATE = 1.0  # a rank that grew by less than this many RSS bytes per load byte cannot have copied its load bytes


class ForecastError(ValueError):
    """A forecast that cannot be made from these spans: one line for the user."""


@dataclass(frozen=True)
class Target:
    model_bytes: int
    ranks_per_node: int | None = None  # None: as many as the measured job ran per node
    world_size: int | None = None  # None: the measured world size, or ranks_per_node when that is larger
    node_memory_bytes: int | None = None  # None: the measured node's MemTotal, or its cgroup limit when lower
    given_as: str | None = None  # how the user gave the model size, for the basis
    calibration: Mapping[str, Any] | None = field(default=None, compare=False)  # None: the packaged one


def packaged_calibration() -> dict[str, Any]:
    """``forecast_calibration.json``, beside this module (scripts/forecast_calibration.py writes it)."""
    data: dict[str, Any] = json.loads(resources.files(__package__).joinpath(CALIBRATION_FILE).read_text())
    return data


# The calibration: RSS per load byte, by release, strategy and role ----------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """What one byte of load costs a rank: the calibration's word for its release, strategy and role, or the rank's
    own measure (``measured``)."""

    key: str  # "5.12.0 fsdp_cpu_ram_efficient/other"
    rss: tuple[float, float, float]  # RSS per load byte: low, mid, high
    anon: tuple[float, float, float]  # anonymous RSS per load byte
    not_model_rss: int  # the largest growth the load bytes did not explain in the calibration's largest runs
    not_model_anon: int
    exact: bool  # the calibration has this release, strategy and role
    note: str | None  # why not, when not
    most_not_model_rss: int = 0  # the most growth any of its calibration runs showed beyond its load bytes (mid rate)
    measured: bool = False  # the rates are the rank's own growth over its load bytes
    mapped: bool = False  # the load kept its bytes memory-mapped: they cost no RSS at the low and mid ends


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _rates(values: list[float]) -> tuple[float, float, float]:
    low, mid, high = (float(value) for value in values)
    return low, mid, high


def behaviour(calibration: Mapping[str, Any], release: str | None, strategy: str | None, loading: bool) -> Behaviour:
    """The calibration entry for a rank: its release's (else the newest calibrated one not newer than it, else the
    oldest), its strategy's and role's (else the costliest of its role in that release)."""
    releases: Mapping[str, Any] = calibration["releases"]
    names = sorted(releases, key=_version)
    notes = []
    if release is not None and release in releases:
        chosen = release
    else:
        older = [name for name in names if release and _version(name) <= _version(release)]
        chosen = older[-1] if older else names[0]
        notes.append(f"transformers {release or 'unknown'} is not calibrated (used {chosen}'s)")
    role = "loading" if loading else "other"
    entries: Mapping[str, Any] = releases[chosen]
    key = f"{strategy or sc.STRATEGY_PLAIN}/{role}"
    if key not in entries:
        same_role = [name for name in entries if name.endswith("/" + role)] or list(entries)
        fallback = max(same_role, key=lambda name: entries[name]["rss_per_load_byte"][2])
        notes.append(f"strategy {strategy or 'unknown'} is not calibrated (used the costliest, {fallback})")
        key = fallback
    entry = entries[key]
    rss = _rates(entry["rss_per_load_byte"])
    runs: Mapping[str, Any] = entry.get("runs", {})
    return Behaviour(
        key=f"{chosen} {key}",
        rss=rss,
        anon=_rates(entry["anon_per_load_byte"]),
        not_model_rss=int(entry["not_model_bytes"]["rss"]),
        not_model_anon=int(entry["not_model_bytes"]["anon"]),
        exact=not notes,
        note="; ".join(notes) or None,
        most_not_model_rss=max(
            (round(r["rss"] - rss[1] * r["load_bytes"]) for r in runs.values()),
            default=int(entry["not_model_bytes"]["rss"]),
        ),
    )


def own_behaviour(calibrated: Behaviour, growth: int, anon_growth: int | None, load_bytes: int) -> Behaviour | None:
    """The rank's own RSS per load byte (its load's growth over its load bytes), when it read enough to measure it:
    at least ``MEASURABLE`` × the most growth the calibration runs of its release, strategy and role showed beyond
    their load bytes (``most_not_model_rss``), so that growth, were this job's as large, overstates the rate by at most
    1 / ``MEASURABLE`` RSS byte per load byte. Mid and high: the rate measured (it counts that growth as model bytes,
    so it errs high); low: the rate with that much growth left out. None when the rank read too little."""
    if load_bytes <= 0 or load_bytes < MEASURABLE * calibrated.most_not_model_rss:
        return None
    rss = growth / load_bytes
    low = max(0, growth - calibrated.most_not_model_rss) / load_bytes
    anon = min(rss, anon_growth / load_bytes) if anon_growth is not None else min(rss, calibrated.anon[1])
    return Behaviour(
        key=f"measured; {calibrated.key} for the low end",
        rss=(low, rss, rss),
        anon=(min(low, anon), anon, anon),
        not_model_rss=0,  # the rate already counts the job's own remainder
        not_model_anon=0,
        exact=True,
        note=None,
        most_not_model_rss=calibrated.most_not_model_rss,
        measured=True,
    )


def mapped_behaviour(calibrated: Behaviour, growth: int, anon_growth: int | None, load_bytes: int) -> Behaviour | None:
    """A load that kept the checkpoint memory-mapped (transformers 5 on CPU, in the checkpoint's own dtype: each
    tensor a view of the file's pages, which the load never touches): the rank grew by less than its load bytes
    (``MAPPED_RATE``), so it cannot have copied them, where the copying loads the calibration measured (conversions,
    casts) grew by 1.5 to 4 times theirs. Its growth is then the load's machinery (allocator pools, threads, the
    tensors' Python objects), which one run cannot tell from model bytes: low and mid take none of it as scaling with
    the model (a Mistral grew 17.6 MB at 37.6 MB and 20.0 MB at 35 times that, plain and FSDP alike:
    tests/fixtures/forecast-mistral), high all of it (the rank's own growth over its load bytes). None for a rank that
    grew by its load bytes or more."""
    if load_bytes <= 0 or growth >= MAPPED_RATE * load_bytes:
        return None
    rate = max(0, growth) / load_bytes
    anon = min(rate, anon_growth / load_bytes) if anon_growth is not None else rate
    return Behaviour(
        key="mapped (its own growth, not scaled; all of it scaled for the high end)",
        rss=(0.0, 0.0, rate),
        anon=(0.0, 0.0, anon),
        not_model_rss=0,  # the low and mid ends keep the whole growth as it is; the high end scales it all
        not_model_anon=0,
        exact=True,
        note=None,
        most_not_model_rss=calibrated.most_not_model_rss,
        measured=True,
        mapped=True,
    )


# One rank -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A span of the rank's load with its own peak: the load itself, or one of its phases."""

    name: str
    rss_growth: int  # its peak RSS less the RSS before the load
    anon_growth: int
    share: float  # the part of the rank's load bytes brought in by its end


@dataclass
class Profile:
    """One measured rank, split into categories, and what it becomes at the target."""

    rank: RankLoad
    fixed: int
    fixed_anon: int
    peak: int
    measured: dict[str, int]  # bytes per category in the measured job
    target: dict[str, int]  # bytes per category at the target
    windows: list[Window]
    behaviour: Behaviour
    widen: float = 0.0  # set once the confidence is known

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.fixed)

    @property
    def load_bytes(self) -> int:
        return sum(self.measured.values())

    @property
    def target_load_bytes(self) -> int:
        return sum(self.target.values())

    def per_byte(self, end: str) -> tuple[float, float]:
        """(RSS, anonymous RSS) per load byte at one end of the range, widened by the confidence."""
        index, stretch = ENDS.index(end), {"low": 1 - self.widen, "mid": 1.0, "high": 1 + self.widen}[end]
        return self.behaviour.rss[index] * stretch, self.behaviour.anon[index] * stretch

    @property
    def explained(self) -> float:
        """The share of the measured load growth that its load bytes explain at the calibrated rate (at most 1)."""
        if self.growth <= 0:
            return 1.0
        return min(1.0, self.behaviour.rss[1] * self.load_bytes / self.growth)

    def not_model(self, window: Window, end: str = "mid") -> tuple[int, int]:
        """(RSS, anonymous RSS) of the window's growth that its load bytes do not explain: kept at the target."""
        rss_rate, anon_rate = self.per_byte(end)
        rss = max(0, round(window.rss_growth - rss_rate * self.load_bytes * window.share))
        anon = max(0, round(window.anon_growth - anon_rate * self.load_bytes * window.share))
        if end == "high":  # allow for the largest remainder the calibration runs saw
            rss, anon = max(rss, self.behaviour.not_model_rss), max(anon, self.behaviour.not_model_anon)
        return rss, min(anon, rss)

    def at_target(self, end: str) -> tuple[int, int]:
        """(peak RSS, its anonymous part) at the target: the worst window."""
        rss_rate, anon_rate = self.per_byte(end)
        best = (self.fixed, self.fixed_anon)
        for window in self.windows:
            not_rss, not_anon = self.not_model(window, end)
            scaled = self.target_load_bytes * window.share
            rss = self.fixed + not_rss + round(rss_rate * scaled)
            anon = self.fixed_anon + not_anon + round(min(anon_rate, rss_rate) * scaled)
            best = max(best, (rss, min(anon, rss)))
        return best

    def worst_window(self) -> str:
        rss_rate, _ = self.per_byte("mid")
        return max(
            self.windows,
            key=lambda w: self.not_model(w)[0] + rss_rate * self.target_load_bytes * w.share,
        ).name


def split(rank: RankLoad, model: int, world: int) -> dict[str, int]:
    """The rank's load bytes by category in the measured job (see the module docstring)."""
    total = max(rank.read_bytes + real_bytes(rank.materialized_bytes), real_bytes(rank.held_bytes))
    share = model / world if sharded(rank) else model
    once = min(total, model) if sharded(rank) and rank.rank == LOADING_RANK else 0
    rest = total - once
    own = min(rest, round(share))
    return {"once_per_job": once, "per_rank": own, "duplicated": rest - own}


def scale_split(
    rank: RankLoad, measured: dict[str, int], scale: float, world_s: int, world_t: int, model: int
) -> dict[str, int]:
    """The same categories at the target (see the module docstring)."""
    partition_scale = scale * world_s / world_t if sharded(rank) else scale
    once = round(measured["once_per_job"] * scale)
    if measured["duplicated"] < DUPLICATE_FLOOR * model:
        # A few bytes over the share (a rank's non-persistent buffers, rounding) are not whole-model work.
        own = round((measured["per_rank"] + measured["duplicated"]) * partition_scale)
        return {"once_per_job": once, "per_rank": own, "duplicated": 0}
    own = round(measured["per_rank"] * partition_scale)
    # Beyond its share: the rank did whole-model work, which scales with the model whatever the world size.
    rest = round((measured["per_rank"] + measured["duplicated"]) * scale)
    own = min(rest, own)
    return {"once_per_job": once, "per_rank": own, "duplicated": rest - own}


def windows(rank: RankLoad, total: int) -> list[Window]:
    """The rank's load spans and phase spans that carry a peak: each with its growth over the RSS before the load and
    the part of the load bytes brought in by its end (bytes of the files opened and of the tensors created by then)."""
    fixed, fixed_anon = rank.rss_before_bytes or 0, rank.rss_anon_before_bytes or 0
    files = [s for s in rank.spans if s.name in sc.FILE_SPANS | sc.BYTES_SPANS]
    unseen = summarized.unseen_reads(rank)
    phases = [s for s in rank.spans if s.name in sc.PHASE_SPANS]
    found = []
    for span in rank.spans:
        peak = opt_int_attr(span.attributes, sc.RSS_PEAK)
        if span.name not in sc.LOAD_SPANS | sc.PHASE_SPANS or peak is None:
            continue
        anon = opt_int_attr(span.attributes, sc.rss_key("anon", "peak"))
        anon_growth = max(0, anon - fixed_anon) if anon is not None and rank.rss_anon_before_bytes is not None else 0
        if span.name in sc.LOAD_SPANS or total <= 0:
            share = 1.0
        else:
            read = sum(opt_int_attr(f.attributes, sc.READ_BYTES) or 0 for f in files if f.start_ns < span.end_ns)
            read += sum(nbytes for opened, nbytes in unseen if opened < span.end_ns)  # files not exported
            created = sum(
                real_bytes(by_device(p.attributes, sc.MATERIALIZED_BYTES_PREFIX))
                for p in phases
                if p.start_ns <= span.start_ns or p is span
            )
            share = min(1.0, (read + created) / total)
        found.append(Window(span.name, max(0, peak - fixed), anon_growth, share))
    return found


def profile(
    rank: RankLoad, model: int, scale: float, world_s: int, world_t: int, calibration: Mapping[str, Any]
) -> Profile | None:
    """None for a rank that did not finish, whose trace file lost spans, or whose spans carry no memory figures."""
    if rank.incomplete or rank.failed or rank.partial or rank.rss_before_bytes is None or rank.peak_rss_bytes is None:
        return None
    fixed, peak = rank.rss_before_bytes, max(rank.peak_rss_bytes, rank.rss_before_bytes)
    measured = split(rank, model, world_s)
    release = str_attr(rank.resource, sc.lib_key("transformers"))
    found = windows(rank, sum(measured.values()))
    if not found:
        found = [Window("load", max(0, peak - fixed), 0, 1.0)]
    calibrated = behaviour(calibration, release, rank.strategy, rank.rank == LOADING_RANK)
    anon_peak, anon_before = rank.peak_rss_anon_bytes, rank.rss_anon_before_bytes
    anon_growth = max(0, anon_peak - anon_before) if anon_peak is not None and anon_before is not None else None
    load_bytes = sum(measured.values())
    own = mapped_behaviour(calibrated, peak - fixed, anon_growth, load_bytes) or own_behaviour(
        calibrated, peak - fixed, anon_growth, load_bytes
    )
    return Profile(
        rank=rank,
        fixed=fixed,
        fixed_anon=rank.rss_anon_before_bytes or 0,
        peak=peak,
        measured=measured,
        target=scale_split(rank, measured, scale, world_s, world_t, model),
        windows=found,
        behaviour=own or calibrated,
    )


# The node -------------------------------------------------------------------------------------------------------


def _node_peak(profiles: list[Profile], end: str) -> tuple[int, int, int]:
    """(node peak with file-backed pages counted once, plain sum of the ranks' peaks, the file-backed part counted)."""
    peaks = [p.at_target(end) for p in profiles]
    files = [rss - anon for rss, anon in peaks]
    shared = max(files, default=0)
    total = sum(rss for rss, _ in peaks)
    return total - sum(files) + shared, total, shared


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


def confidence(node: list[Profile], calibration: Mapping[str, Any]) -> tuple[Confidence, float]:
    """How far to trust the range, in one line, and how much to widen it: where the rates come from (the ranks' own
    growth, or the calibration); for calibrated ranks, ``small`` when the load bytes explain less than the
    calibration's threshold of a rank's growth, and when the calibration does not cover the job."""
    threshold, step = float(calibration["explained_threshold"]), float(calibration["widen"])
    distinct = list({id(p): p for p in node}.values())
    mapped = [p for p in distinct if p.behaviour.mapped]
    own = [p for p in distinct if p.behaviour.measured and not p.behaviour.mapped]
    calibrated = [p for p in distinct if not p.behaviour.measured]
    small = [p for p in calibrated if p.explained < threshold]
    inexact = [p for p in calibrated if not p.behaviour.exact]
    source = _rate_source(own, calibrated, mapped)
    reasons = []
    if small:
        worst = min(small, key=lambda p: p.explained)
        not_model = worst.growth - round(worst.behaviour.rss[1] * worst.load_bytes)
        reasons.append(
            f"the measured run is too small for its growth to be mostly model bytes: they explain"
            f" {100 * worst.explained:.0f}% of {worst.rank.label}'s load growth of {human_bytes(worst.growth)}"
            f" (the rest, {human_bytes(max(0, not_model))}, is taken as not scaling); range widened by"
            f" {100 * step:.0f}%"
        )
    if inexact:
        notes = sorted({p.behaviour.note or "" for p in inexact})
        reasons.append("; ".join(notes) + f"; range widened by {100 * step:.0f}%")
    widen = step * len(reasons)
    if not reasons and mapped:  # the point is shown right on one family's mapped loads; the range holds either way
        return Confidence("medium", source), widen
    if not reasons:
        reason = source
        if calibrated:
            least = min(p.explained for p in calibrated)
            whose = "every calibrated rank's" if own else "every rank's"
            reason += f"; model bytes explain {100 * least:.0f}% or more of {whose} load growth"
        return Confidence("high", reason), widen
    level = "medium" if not small else "low"
    return Confidence(level, "; ".join([source, *reasons])), widen


def _rate_source(own: list[Profile], calibrated: list[Profile], mapped: list[Profile] | None = None) -> str:
    """Where the RSS per load byte comes from, in words: the ranks' own growth, the calibration, or both; and which
    ranks kept the checkpoint memory-mapped."""
    parts = []
    if mapped:
        grew = ", ".join(f"{p.rank.label} {human_bytes(p.growth)} for {human_bytes(p.load_bytes)}" for p in mapped)
        parts.append(
            f"the load kept the checkpoint memory-mapped ({grew} of load bytes: less growth than load bytes, so they"
            " were not copied); its growth is taken as not scaling with the model (right at 35 times the size for"
            " a Mistral, plain and FSDP), all of it scaled for the high end"
        )
    if own:
        rates = ", ".join(f"{p.rank.label} {p.behaviour.rss[1]:.2f}" for p in own)
        parts.append(
            f"RSS per load byte measured on this job ({rates}: the load's growth over its load bytes, enough to"
            " measure it)"
        )
    if calibrated:
        keys = ", ".join(sorted({p.behaviour.key for p in calibrated}))
        who = "" if not own else " for " + ", ".join(p.rank.label for p in calibrated) + " (too little read to measure)"
        parts.append(f"calibrated ({keys}){who}")
    return "; ".join(parts)


def _shapes(job: Job, target: Target) -> tuple[int, RankLoad, int, int, int]:
    """The measured model's bytes, the loading rank, and the measured and target world: (model, rank 0, world size
    measured, ranks per node, world size at the target); a forecast that cannot be made raises ``ForecastError``."""
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
    return measured_model, loading, world_s, per_node, world_t


def _profiles(
    job: Job,
    loading: RankLoad,
    measured_model: int,
    scale: float,
    worlds: tuple[int, int],
    calibration: Mapping[str, Any],
) -> tuple[list[Profile], list[LeftOutRank], Profile]:
    """Every numbered rank's profile, the ranks left out and why, and rank 0's (without which nothing scales)."""
    profiles: list[Profile] = []
    left_out: list[LeftOutRank] = []
    for rank in job.ranks:
        if rank.rank is None:
            continue  # which rank of the job it was is unknown
        found = profile(rank, measured_model, scale, *worlds, calibration)
        if found is None:
            why = (
                "did not finish"
                if rank.incomplete
                else f"its load raised {rank.failed}"
                if rank.failed
                else "its trace file lost spans (partial)"
                if rank.partial
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
            else "are partial (its trace file lost spans)"
            if loading.partial
            else "carry no loadtrace.rss.* memory figures (an older loadtrace?)"
        )
        raise ForecastError(f"trace {job.trace_id}: rank 0's load spans {why}; nothing to scale")
    return profiles, left_out, first


def forecast(job: Job, target: Target) -> Forecast:
    """The ``forecast`` object of ``loadtrace report --forecast-...`` (docs/report.md)."""
    measured_model, loading, world_s, per_node, world_t = _shapes(job, target)
    calibration = target.calibration if target.calibration is not None else packaged_calibration()
    scale = target.model_bytes / measured_model
    # The model as the ranks hold it, for their shares: a bf16 checkpoint loaded as fp32 is twice its file bytes in
    # memory, all of it a replica's own share (not "duplicated"); under ZeRO-3 a rank holds only its partition, so
    # the model as built (``whole_model_bytes``) tells it.
    held = max((real_bytes(r.held_bytes) for r in job.ranks), default=0)
    profiles, left_out, first = _profiles(
        job, loading, max(measured_model, held, job.whole_model_bytes()), scale, (world_s, world_t), calibration
    )
    others = [p for p in profiles if p is not first]
    worst = max(others, key=lambda p: (p.at_target("mid")[0], -(p.rank.rank or 0)), default=None)
    stand_in = worst or first
    trust, ends, others_ends = _node_ends(profiles, first, stand_in, per_node, world_t > per_node, calibration)
    # The node the verdict is about: node 0, or another node when the world spans several and theirs is worse.
    chosen = others_ends if others_ends is not None and others_ends["mid"][0] > ends["mid"][0] else ends
    node_peak, node_sum, node_shared = chosen["mid"]
    low, high = min(chosen["low"][0], node_peak), max(chosen["high"][0], node_peak)
    memory, memory_source, limit_source = node_memory(job, target)
    verdict = None if memory is None else ("oom" if low > memory else "ok" if high <= memory else "uncertain")
    other_peak = others_ends["mid"][0] if others_ends is not None else None
    text = _text(job, target, measured_model, world_s, world_t, per_node, scale, worst, other_peak)
    return Forecast(
        model_bytes=target.model_bytes,
        ranks_per_node=per_node,
        per_rank_peak_bytes={_rank_number(p): p.at_target("mid")[0] for p in profiles},
        per_rank_peak_range_bytes={_rank_number(p): _range(p) for p in profiles},
        per_node_peak_bytes=node_peak,
        per_node_peak_range_bytes=[low, high],
        node_memory_bytes=memory,
        verdict=verdict,
        confidence=trust,
        basis=ForecastBasis(
            text=text,
            trace_id=job.trace_id,
            job_id=job.job_id,
            measured=MeasuredJob(measured_model, world_s, job.ranks_per_node(loading)),
            target=TargetJob(target.model_bytes, target.given_as, world_t, target.world_size is not None, per_node),
            model_scale=round(scale, 6),
            categories=_categories(profiles, scale, world_s, world_t),
            ranks={_rank_number(p): _rank_basis(p) for p in profiles},
            left_out_ranks=left_out,
            node=NodeBasis(
                profiles=_node_profiles(first, stand_in, per_node),
                sum_of_rank_peaks_bytes=node_sum,
                file_backed_bytes_counted_once=node_shared,
                node_0_peak_bytes=ends["mid"][0],
                other_nodes_peak_bytes=other_peak,
                node_memory_source=memory_source,
                memory_limit_source=limit_source,
                headroom_bytes=None if memory is None else memory - node_peak,
            ),
            calibration=str(calibration.get("about", "")),
        ),
    )


NodeEnds = dict[str, tuple[int, int, int]]  # per end (low, mid, high): ``_node_peak``'s figures


def _node_ends(
    profiles: list[Profile],
    first: Profile,
    stand_in: Profile,
    per_node: int,
    several_nodes: bool,
    calibration: Mapping[str, Any],
) -> tuple[Confidence, NodeEnds, NodeEnds | None]:
    """Node 0 (rank 0's profile once, the ``stand_in``'s for its other ranks): how far to trust it, which widens every
    rank's range, and its peak at each end; the other nodes' (the stand-in's on every rank) where there are any."""
    node0 = [first] + [stand_in] * (per_node - 1)
    trust, widen = confidence(node0, calibration)
    for profile in profiles:
        profile.widen = widen  # every rank's range, as wide as node 0's confidence says
    ends = {end: _node_peak(node0, end) for end in ENDS}
    others = {end: _node_peak([stand_in] * per_node, end) for end in ENDS} if several_nodes else None
    return trust, ends, others


def _node_profiles(first: Profile, stand_in: Profile, per_node: int) -> list[NodeProfile]:
    """A node's ranks by profile: rank 0, and the worst other rank standing in for the rest."""
    if stand_in is first or per_node == 1:
        return [NodeProfile(LOADING_RANK, per_node)]
    assert stand_in.rank.rank is not None  # only numbered ranks are profiled
    return [NodeProfile(LOADING_RANK, 1), NodeProfile(stand_in.rank.rank, per_node - 1)]


def _range(p: Profile) -> list[int]:
    mid = p.at_target("mid")[0]
    return [min(p.at_target("low")[0], mid), max(p.at_target("high")[0], mid)]


def _rank_number(p: Profile) -> int:
    """The rank number of a profile: only ranks with a number are profiled."""
    assert p.rank.rank is not None
    return p.rank.rank


def _categories(profiles: list[Profile], scale: float, world_s: int, world_t: int) -> Categories:
    """Each category: how it scales, and per rank the bytes and the RSS they cost at the calibrated rate."""
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
            rate = p.per_byte("mid")[0]
            ranks[_rank_number(p)] = ScaledBytes(
                from_bytes=p.measured[category],
                to_bytes=p.target[category],
                from_growth_bytes=round(rate * p.measured[category]),
                to_growth_bytes=round(rate * p.target[category]),
            )
        scaled[category] = ScaledCategory(how[category], ranks)
    return Categories(fixed, scaled["once_per_job"], scaled["per_rank"], scaled["duplicated"])


def _rank_basis(p: Profile) -> RankBasis:
    rss, anon = p.at_target("mid")
    worst = next(w for w in p.windows if w.name == p.worst_window())
    return RankBasis(
        strategy=p.rank.strategy,
        calibration=p.behaviour.key,
        rss_per_load_byte=[round(p.per_byte(end)[0], 4) for end in ENDS],
        rss_before_bytes=p.fixed,
        peak_rss_bytes=p.peak,
        growth_bytes=p.growth,
        load_bytes=p.load_bytes,
        load_bytes_explain=round(p.explained, 4),
        not_model_bytes=p.not_model(worst)[0],
        worst_window=worst.name,
        target_load_bytes=p.target_load_bytes,
        target_file_backed_bytes=rss - anon,
        target_peak_bytes=rss,
        target_peak_range_bytes=_range(p),
    )


def _text(
    job: Job,
    target: Target,
    measured: int,
    world_s: int,
    world_t: int,
    per_node: int,
    scale: float,
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
        "Per rank: peak = RSS before the load (not scaled) + the growth its load bytes do not explain (not scaled)"
        " + its load bytes at the target x its RSS per load byte (its own growth over its load bytes where it read"
        " enough to measure it, else the calibration's); rank 0's copy (once per job) and bytes"
        " beyond a rank's share (duplicated) scale with the model, its own share with the model / world size under a"
        " sharded strategy, with the model for a replica; the worst of the load and its phases.",
        f"Node 0 holds {node}; file-backed pages (mmap'd checkpoint, libraries) are shared by a node's ranks and"
        " counted once."
        + (" Other nodes: the worst other rank's profile on every rank." if other_peak is not None else ""),
    ]
    return " ".join(lines)
