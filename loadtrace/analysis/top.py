"""State files → ``loadtrace top``'s rows: what each rank is doing now, how fast, and what is about to go wrong.

Plain functions over decoded state files (statefile.py) and the moment they were read; the CLI (cli/top.py) reads
the files, asks whether a pid is alive on this host, and draws. docs/report.md documents every key of a row.

- status: the state file's (loading, idle, exited, signalled), or ``dead``: its pid is gone on this host and it never
  said it exited (a SIGKILL, the OOM killer). On another host a pid cannot be checked: its status is as it was written.
- expected bytes: the checkpoint's tensor bytes, known at load start, for a rank that reads all of it; unknown (None)
  under tensor parallelism (each rank reads slices) and on the non-loading ranks of a sharded strategy.
- read rate: over the last ``RATE_WINDOW_S`` of the live view's samples; in a single snapshot, since the rank's own
  sample of up to 10 s ago (its monitor thread keeps one), else since the load began.
- marks: ``slowest`` (of a job's loading ranks, the latest to finish by its ETA, else the least far; none where
  several are equally late), ``stuck`` (no progress for ``STUCK_SECONDS`` while loading), ``oom_ahead`` (the memory
  its limit applies to, rising as its RSS has since the load began, reaches the limit before its load can end:
  before its ETA, or within ``OOM_HORIZON_S`` when the ETA is unknown), ``near_limit`` (that memory at
  ``NEAR_LIMIT_SHARE`` of the limit or more, while loading), ``behind`` (loading, and it has read under
  ``BEHIND_SHARE`` of the median of its job's loading ranks, when there are three or more: of their percentages where
  every one is known, else of their bytes). Under a cgroup limit on this host that memory is the cgroup's usage (all
  its processes: the OOM killer counts them together), else the rank's own RSS.
- needs attention (``needs_attention``): a rank that is dead or signalled, raised, or carries a mark: what the screen
  shows first, one row each, however many ranks the job has.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .. import semconv as sc
from .. import statefile
from .hosts import natural_key
from .sources import StateFile

STUCK_SECONDS = 30.0
OOM_HORIZON_S = 300.0
RATE_WINDOW_S = 10.0
# A trend needs this much time between its two readings to mean anything.
MIN_TREND_S = 1.0
NEAR_LIMIT_SHARE = 0.9
BEHIND_SHARE = 0.5
DEAD = "dead"

Alive = Callable[[int, int], bool]  # (pid, the state file's creation time in ns) → whether that process still runs
Usage = Callable[[str], "int | None"]  # a memory cgroup directory on this host → its usage now (None: unreadable)


@dataclass
class TopRow:
    """One rank (one process that began a load) as ``loadtrace top`` shows it: an entry of ``ranks``."""

    rank: int | None
    local_rank: int | None
    host: str | None
    pid: int
    job_id: str | None
    attempt: int
    status: str  # loading | idle | exited | signalled | dead
    phase: str | None
    load: str | None
    files_opened: int
    read_bytes: int
    expected_bytes: int | None
    percent: float | None
    read_rate_bytes_per_s: float | None
    eta_seconds: float | None
    load_seconds: float | None
    seconds_since_progress: float | None
    rss_bytes: int | None
    peak_rss_bytes: int | None
    limit_bytes: int | None
    limit_source: str | None
    cgroup_usage_bytes: int | None  # the cgroup's usage now, all its processes (this host's ranks under a cgroup limit)
    oom_in_seconds: float | None
    exception: str | None
    marks: list[str] = field(default_factory=list)
    path: str = ""


@dataclass
class History:
    """The live view's earlier samples of each process: (time, read bytes), for a recent rate."""

    samples: dict[tuple[str | None, int], deque[tuple[int, int]]] = field(default_factory=dict)

    def add(self, key: tuple[str | None, int], now_ns: int, read_bytes: int) -> None:
        kept = self.samples.setdefault(key, deque())
        kept.append((now_ns, read_bytes))
        while len(kept) > 1 and now_ns - kept[0][0] > RATE_WINDOW_S * 1e9:
            kept.popleft()

    def rate(self, key: tuple[str | None, int]) -> float | None:
        kept = self.samples.get(key)
        if not kept or len(kept) < 2:
            return None
        (t0, b0), (t1, b1) = kept[0], kept[-1]
        return (b1 - b0) / ((t1 - t0) / 1e9) if t1 > t0 and b1 >= b0 else None


def _seconds(later: int, earlier: int) -> float | None:
    return round(max(0, later - earlier) / 1e9, 3) if earlier > 0 and later > 0 else None


def expected_bytes(state: statefile.State) -> int | None:
    """The bytes this rank's load will read, when that is known (see the module docstring)."""
    checkpoint = state.checkpoint_tensor_bytes
    strategy = state.strategy
    partial = sc.STRATEGY_TP in strategy.split("+")
    not_loading = strategy in sc.SHARDED_STRATEGIES and state.rank not in (0, None)
    return checkpoint if checkpoint > 0 and not (partial or not_loading) else None


def status_of(state: statefile.State, this_host: str, alive: Alive) -> str:
    status = state.status
    if status in ("loading", "idle") and state.host == this_host and state.pid > 0:
        if not alive(state.pid, state.created_ns):
            return DEAD
    return status


def oom_in(state: statefile.State, cgroup_usage: int | None) -> float | None:
    """Seconds until the memory the limit applies to (the cgroup's usage when known, else this RSS) reaches the limit,
    rising as this rank's RSS has since its load began; None without a rising trend or a limit."""
    limit, rss, at = state.memory_limit, state.rss_now, state.rss_sampled_ns
    start, since = state.rss_load_start, state.rss_load_start_ns
    if limit <= 0 or rss <= 0 or since <= 0 or (at - since) < MIN_TREND_S * 1e9 or rss <= start:
        return None
    slope = (rss - start) / ((at - since) / 1e9)
    used = max(rss, cgroup_usage or 0)
    return round(max(0.0, (limit - used) / slope), 1)


def recent_rate(state: statefile.State, read: int, now_ns: int) -> float | None:
    """Bytes per second since the rank's own sample of up to 10 s ago (progress.py), else since its load began."""
    base_ns, base = state.rate_base_ns, state.rate_base_bytes
    load_start = state.load_start_ns
    if base_ns >= load_start > 0 and now_ns - base_ns >= MIN_TREND_S * 1e9 and read >= base:
        return (read - base) / ((now_ns - base_ns) / 1e9)
    return read / ((now_ns - load_start) / 1e9) if now_ns > load_start > 0 else None


def row(
    path: str, state: statefile.State, now_ns: int, status: str, rate: float | None, cgroup_usage: int | None = None
) -> TopRow:
    """One state file → its row (marks come later, across rows)."""
    totals = state.totals()
    read = totals.read_bytes
    loading = status == "loading"
    expected = expected_bytes(state)
    load_start = state.load_start_ns
    if rate is None and loading:
        rate = recent_rate(state, read, now_ns)
    eta = None
    if loading and expected is not None and rate:
        eta = round(max(0, expected - read) / rate, 1)
    progress = max(state.progress_ns, state.updated_ns, load_start)
    limit = state.memory_limit or None
    return TopRow(
        rank=state.rank,
        local_rank=state.local_rank,
        host=state.host or None,
        pid=state.pid,
        job_id=state.job_id or None,
        attempt=state.attempt,
        status=status,
        phase=state.phase or None,
        load=state.load or None,
        files_opened=totals.files_opened,
        read_bytes=read,
        expected_bytes=expected,
        percent=round(100 * read / expected, 1) if expected else None,
        read_rate_bytes_per_s=round(rate, 1) if loading and rate is not None else None,
        eta_seconds=eta,
        load_seconds=_seconds(now_ns if loading else state.updated_ns, load_start),
        seconds_since_progress=_seconds(now_ns, progress),
        rss_bytes=(state.rss_now or None) if status not in ("exited", DEAD) else None,
        peak_rss_bytes=state.rss_peak or None,
        limit_bytes=limit,
        limit_source=state.memory_limit_source,
        cgroup_usage_bytes=cgroup_usage,
        oom_in_seconds=oom_in(state, cgroup_usage) if loading else None,
        exception=state.exception or None,
        path=path,
    )


def mark(rows: list[TopRow]) -> None:
    """``stuck`` and ``oom_ahead`` per row; ``slowest`` per job among its loading ranks (none in a one-rank job)."""
    for item in rows:
        if item.status != "loading":
            continue
        if item.seconds_since_progress is not None and item.seconds_since_progress >= STUCK_SECONDS:
            item.marks.append(sc.MARK_STUCK)
        if item.oom_in_seconds is not None:
            horizon = item.eta_seconds if item.eta_seconds is not None else OOM_HORIZON_S
            if item.oom_in_seconds < horizon:
                item.marks.append(sc.MARK_OOM_AHEAD)
        used = max(item.rss_bytes or 0, item.cgroup_usage_bytes or 0)
        if item.limit_bytes and used >= NEAR_LIMIT_SHARE * item.limit_bytes:
            item.marks.append(sc.MARK_NEAR_LIMIT)
    jobs: dict[tuple[str | None, int], list[TopRow]] = {}
    for item in rows:
        jobs.setdefault((item.job_id, item.attempt), []).append(item)
    for members in jobs.values():
        loading = [item for item in members if item.status == "loading"]
        if len(members) < 2 or not loading:
            continue
        slowest = max(loading, key=_lateness)
        if sum(_lateness(item) == _lateness(slowest) for item in loading) == 1:  # a tie has no slowest
            slowest.marks.insert(0, sc.MARK_SLOWEST)
        _mark_behind(loading)


def _mark_behind(loading: list[TopRow]) -> None:
    """``behind``: under ``BEHIND_SHARE`` of the median progress of the job's loading ranks (one median per job; of
    two ranks, ``slowest`` already says which is behind)."""
    if len(loading) < 3:
        return
    shares = [item.percent for item in loading]
    progress = shares if all(share is not None for share in shares) else [float(item.read_bytes) for item in loading]
    median = statistics.median(p or 0.0 for p in progress)
    for item, done in zip(loading, progress, strict=True):
        if median > 0 and (done or 0.0) < BEHIND_SHARE * median:
            item.marks.append(sc.MARK_BEHIND)


def needs_attention(item: TopRow) -> bool:
    """Dead, signalled, raised or marked: shown first, one row each (see the module docstring)."""
    return item.status in (DEAD, "signalled") or bool(item.marks) or bool(item.exception)


def _lateness(item: TopRow) -> tuple[float, float]:
    """Later to finish first: the ETA, then how little of its expected bytes (or bytes at all) it has read."""
    eta = item.eta_seconds if item.eta_seconds is not None else -1.0
    done = item.percent if item.percent is not None else float(item.read_bytes)
    return eta, -done


def _cgroup_usage(state: statefile.State, status: str, this_host: str, usage: Usage | None) -> int | None:
    """The usage of the cgroup whose limit applies, for a loading rank of this host."""
    cgroup = state.cgroup
    if usage is None or status != "loading" or not cgroup or state.host != this_host:
        return None
    return usage(cgroup) if state.memory_limit_source in ("cgroup v1", "cgroup v2") else None


def rows(
    states: Iterable[StateFile],
    now_ns: int,
    this_host: str,
    alive: Alive,
    history: History | None = None,
    usage: Usage | None = None,
) -> list[TopRow]:
    """Every process that began a load, grouped by node (hosts in natural order: node2 before node10), then by job and
    rank; marked. ``usage`` reads a
    cgroup's memory usage on this host: a limit applies to all the cgroup's processes together."""
    found = []
    for source in states:
        state = source.state
        if state.load_start_ns <= 0 and state.loads_open <= 0:
            continue  # never began a load: a launcher, a helper
        status = status_of(state, this_host, alive)
        key = (state.host or None, state.pid)
        rate = None
        if history is not None and status == "loading":
            history.add(key, now_ns, state.totals().read_bytes)
            rate = history.rate(key)
        found.append(row(source.path, state, now_ns, status, rate, _cgroup_usage(state, status, this_host, usage)))
    found.sort(
        key=lambda r: (natural_key(r.host), r.job_id or "", r.attempt, r.rank if r.rank is not None else 1 << 30)
    )
    mark(found)
    return found
