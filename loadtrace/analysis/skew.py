"""The skew that kills: a rank that finished loading timed out in its first collective while another was still
loading (``collective_timeout``, docs/report.md).

transformers PR #48228 measured more than 10 minutes of skew at 16 ranks: "the fastest ranks' first collective died on
the watchdog while the slowest were still loading". The report then shows one rank that exited 1 and others stopped by
SIGTERM, and nothing connects them. This rule does, from:

- the failing rank's exception nobody caught (the ``loadtrace.exception`` span, else its state file's), or a death by
  SIGABRT (the NCCL watchdog aborts the process instead of raising);
- each rank's load window: its outermost load spans, or the last state of a load it never finished;
- who failed first: the earliest exception or death that no launcher caused (SIGTERM, SIGINT and SIGHUP are how a
  launcher stops the others once one has failed).

A timeout is a ``DistBackendError`` / ``DistNetworkError``, or an exception whose first line says it timed out (gloo's
"Timed out waiting 5000ms for recv", NCCL's "Watchdog caught collective operation timeout").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import semconv as sc
from . import alike
from .attrs import int_attr, str_attr
from .model import WARNING, Finding, LastState, RankLoad
from .ranks import Job
from .units import human_bytes, percent

COLLECTIVE_ERRORS = frozenset({"DistBackendError", "DistNetworkError"})
TIMED_OUT = re.compile(r"timed out|timeout|watchdog", re.IGNORECASE)
WAITED_MS = re.compile(r"(\d+)\s*ms", re.IGNORECASE)
STOPPED_BY_LAUNCHER = ("SIGTERM", "SIGINT", "SIGHUP")


@dataclass(frozen=True)
class Failure:
    rank: RankLoad
    at_ns: int
    how: str  # "DistBackendError: ...", "SIGABRT", "SIGKILL", "exit code 1"
    timed_out: bool


def exception_of(rank: RankLoad) -> tuple[str, int] | None:
    """("Type: first line", when) of the rank's uncaught exception: its span, else its state file's."""
    for span in rank.spans:
        if span.name == sc.SPAN_EXCEPTION:
            kind = str_attr(span.attributes, sc.EXCEPTION_TYPE) or "Exception"
            line = str_attr(span.attributes, sc.EXCEPTION_MESSAGE)
            return (f"{kind}: {line}" if line else kind), span.start_ns
    return rank.exception


def _witnessed_at(rank: RankLoad) -> int | None:
    return next((span.end_ns for span in rank.spans if span.name == sc.SPAN_RANK_EXIT), None)


def failure_of(rank: RankLoad) -> Failure | None:
    """How and when the rank failed of its own accord; None when it did not, or a launcher stopped it."""
    caught = exception_of(rank)
    if caught is not None:
        text, raised = caught
        kind = text.split(":", 1)[0]
        return Failure(rank, raised, text, kind in COLLECTIVE_ERRORS or bool(TIMED_OUT.search(text)))
    ended, at = rank.exit, _witnessed_at(rank)
    if at is None or ended.signal in STOPPED_BY_LAUNCHER:
        return None
    if ended.signal == "SIGABRT":  # the NCCL watchdog's abort after the process group's timeout
        return Failure(rank, at, "SIGABRT (the NCCL watchdog aborts a timed-out collective so)", True)
    if ended.signal is not None:
        return Failure(rank, at, ended.signal + (" (OOM)" if ended.oom_killed else ""), False)
    if ended.code:
        return Failure(rank, at, f"exit code {ended.code}", False)
    return None


@dataclass(frozen=True)
class Window:
    """A rank's loading: from its first load's start to its last load's end (None: it never ended its load)."""

    start: int
    end: int | None


def window_of(rank: RankLoad) -> Window | None:
    loads = [s for s in rank.spans if s.name in sc.LOAD_SPANS]
    last = rank.last_state if isinstance(rank.last_state, LastState) else None
    starts = [s.start_ns for s in loads] + ([last.load_start_unix_nano] if last and last.load_start_unix_nano else [])
    if not starts:
        return None
    if rank.incomplete:
        return Window(min(starts), None)
    return Window(min(starts), max(s.end_ns for s in loads) if loads else None)


def loading_at(rank: RankLoad, at: int) -> bool:
    window = window_of(rank)
    return window is not None and window.start <= at and (window.end is None or window.end >= at)


def progress_of(rank: RankLoad, at: int) -> dict[str, object]:
    """How far a rank still loading at ``at`` had got: its last state (where it stopped), else its load spans."""
    last = rank.last_state if isinstance(rank.last_state, LastState) else None
    window = window_of(rank)
    start = window.start if window is not None else at
    if last is not None:
        read, phase, until = last.read_bytes, last.during or last.load, last.time_unix_nano
    else:
        loads = [s for s in rank.spans if s.name in sc.LOAD_SPANS]
        read, phase = rank.read_bytes, None
        until = max((s.end_ns for s in loads), default=at)
    seconds = max(0, until - start) / 1e9
    expected = rank.checkpoint_tensor_bytes or None
    return {
        "rank": rank.rank,
        "host": rank.host,
        "phase": phase,
        "read_bytes": read,
        "expected_bytes": expected,
        "load_seconds": round(seconds, 3),
        "read_rate_bytes_per_s": round(read / seconds, 1) if seconds > 0 else None,
        # The numbers are from this moment: when it stopped (or finished), this long after the timeout.
        "seconds_after_timeout": round(max(0, until - at) / 1e9, 3),
        "ended": rank.exit.signal or (f"exit code {rank.exit.code}" if rank.exit.code is not None else None),
    }


def _per_second(rate: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.1f} {unit}/s"
    return f"{rate:.0f} B/s"


def _own_load_over(rank: RankLoad, at: int) -> float | None:
    """Seconds from the end of the rank's own load to ``at``; None when it had no finished load before then."""
    window = window_of(rank)
    if window is None or window.end is None or window.end > at:
        return None
    return round((at - window.end) / 1e9, 3)


def collective_timeout(job: Job, model: int) -> Finding | None:
    """Told as a person would (``alike.outlier_groups``): ranks that timed out alike (the same error, alike seconds
    after their own load) share one sentence, as do the ranks still loading alike (the same phase, alike bytes read,
    ended alike), a whole node's as the node; ``per_rank`` and ``waiting_for`` keep every rank's figures."""
    failures = sorted((f for rank in job.ranks if (f := failure_of(rank)) is not None), key=lambda f: f.at_ns)
    timeouts, waiting = _timed_out_waiting(job, failures)
    if not timeouts:
        return None
    first = failures[0]
    per_host = dict(Counter(rank.host for rank in job.ranks))
    timed = alike.outlier_groups(
        timeouts,
        lambda pair: (pair[0].how.split(":", 1)[0], _limit(pair[0].how), _alone(pair[0].rank.rank, pair)),
        lambda pair: pair[1] + 1.0,
        host=lambda pair: pair[0].rank.host,
        per_host=per_host,
    )
    still = alike.outlier_groups(
        list(waiting.values()),
        lambda entry: (entry["phase"], entry["ended"], entry["expected_bytes"], _alone(entry["rank"], entry)),
        lambda entry: float(entry["read_bytes"] or 0) + 1.0,  # type: ignore[arg-type]
        host=lambda entry: entry["host"],  # type: ignore[arg-type, return-value]
        per_host=per_host,
    )
    blame, stopped = _blame(job, first)
    detail = (
        "; ".join(_timed_out_text(group) for group in timed)
        + ", while "
        + "; ".join(_waiting_text(group) for group in still)
        + f". {blame}."
    )
    timed_out = sorted({f.rank.rank for f, _ in timeouts if f.rank.rank is not None})
    return Finding(
        trace_id=job.trace_id,
        attempt=job.attempt,
        run=job.run,
        kind=sc.FINDING_COLLECTIVE_TIMEOUT,
        severity=WARNING,
        ranks=timed_out,
        bytes=sum(int_attr(dict(entry), "read_bytes") for entry in waiting.values()),
        projected_node_bytes=0,
        detail=detail,
        evidence={
            "model_bytes": model,
            "groups": alike.groups_evidence(timed, lambda pair: [pair[0].rank.rank]),
            "per_rank": [
                {"rank": f.rank.rank, "host": f.rank.host, "error": f.how, "seconds_after_load": after}
                for f, after in timeouts
            ],
            "first_failure": {"rank": first.rank.rank, "error": first.how, "time_unix_nano": first.at_ns},
            "stopped_after": stopped,
        },
        waiting_for=list(waiting.values()),
    )


def _timed_out_waiting(
    job: Job, failures: list[Failure]
) -> tuple[list[tuple[Failure, float]], dict[int | None, dict[str, object]]]:
    """The failures that are the skew that kills (a rank timed out in a collective after its own load, while others
    still loaded), each with its seconds after that load; and the ranks still loading then, each with its progress at
    the first such failure it was waited on in."""
    timeouts: list[tuple[Failure, float]] = []
    waiting: dict[int | None, dict[str, object]] = {}
    for failure in failures:
        after = _own_load_over(failure.rank, failure.at_ns)
        if not failure.timed_out or after is None:
            continue
        others = [r for r in job.ranks if r is not failure.rank and loading_at(r, failure.at_ns)]
        if others:
            timeouts.append((failure, after))
            for other in others:
                waiting.setdefault(other.rank, progress_of(other, failure.at_ns))
    return timeouts, waiting


def _blame(job: Job, first: Failure) -> tuple[str, list[int | None]]:
    """``Rank 3 failed first (DistBackendError); ranks 0-2 were stopped after it``, and the ranks stopped."""
    stopped = [r.rank for r in job.ranks if r.exit.signal in STOPPED_BY_LAUNCHER and r is not first.rank]
    blame = f"Rank {first.rank.rank} failed first ({first.how.split(':', 1)[0]})"
    if stopped:
        numbers = [n for n in stopped if n is not None]
        names = ", ".join(
            [*([alike.who(numbers)] if numbers else []), *["a rank without a number"] * (None in stopped)]
        )
        blame += f"; {names} {'were' if len(stopped) > 1 else 'was'} stopped after it"
    return blame, stopped


def _alone(rank: object, item: object) -> int | None:
    """A rank without a number is told alone: no range can name it."""
    return id(item) if rank is None else None


def _limit(how: str) -> float | None:
    """The process group's timeout in seconds, where the error says it (gloo's "Timed out waiting 5000ms")."""
    waited = WAITED_MS.search(how) if "ms" in how else None
    return int(waited.group(1)) / 1000 if waited else None


def _named(ranks: list[int | None], hosts: list[str] | None) -> str:
    numbers = [rank for rank in ranks if rank is not None]
    if len(ranks) == 1:
        return f"rank {ranks[0]}" if ranks[0] is not None else "a rank without a number"
    return alike.whole_nodes(hosts, numbers) if hosts is not None else alike.who(numbers)


def _timed_out_text(group: alike.Outliers[tuple[Failure, float]]) -> str:
    """``rank 0 timed out in a collective 5 s after its own load ended (the process group's timeout: 5 s): how``;
    alike ranks the same way, their seconds' median (min and max where they differ), one error as an example when
    theirs differ (each names its own peer)."""
    members = group.members
    failure = members[0][0]
    limit = _limit(failure.how)
    limit_text = f" (the process group's timeout: {limit:g} s)" if limit is not None else ""
    name = _named([f.rank.rank for f, _ in members], group.hosts)
    if len(members) == 1:
        return (
            f"{name} timed out in a collective {members[0][1]:g} s after its own load ended{limit_text}: {failure.how}"
        )
    after = alike.spread_figure([seconds for _, seconds in members], lambda value: f"{value:g} s")
    hows = {f.how for f, _ in members}
    how = failure.how if len(hows) == 1 else f"{failure.how} (rank {failure.rank.rank}'s; theirs alike)"
    return f"{name} timed out in a collective {after} after their own load ended{limit_text}: {how}"


def _waiting_text(group: alike.Outliers[dict[str, object]]) -> str:
    """``rank 1 was still loading (in transformers.convert: 400.0 kB of 1.0 MB (40%) read in 8 s, 50.0 kB/s; SIGTERM
    1.5 s later)``; alike ranks the same way, each figure their median (min and max where they differ)."""
    members = group.members
    entry = members[0]
    one = len(members) == 1

    def figure(key: str, text: Callable[[Any], str]) -> str:
        return alike.spread_figure([item[key] for item in members], text)  # type: ignore[misc]

    reads = [int(item["read_bytes"] or 0) for item in members]  # type: ignore[call-overload]
    read = alike.spread(reads, float)[1]
    amount = alike.spread_figure(reads, lambda value: human_bytes(int(value)))
    expected = entry["expected_bytes"]
    if isinstance(expected, int) and expected > 0:
        amount += f" of {human_bytes(expected)} ({percent(read, expected)})"
    name = _named([item["rank"] for item in members], group.hosts)  # type: ignore[misc]
    phase = entry["phase"] or ("its load" if one else "their load")
    text = f"{name} {'was' if one else 'were'} still loading (in {phase}: {amount} read"
    if all(isinstance(item["read_rate_bytes_per_s"], float) for item in members):
        seconds = figure("load_seconds", lambda value: f"{value:g} s")
        text += f" in {seconds}, {figure('read_rate_bytes_per_s', _per_second)}"
    ended = entry["ended"]
    return text + (
        f"; {ended} {figure('seconds_after_timeout', lambda value: f'{value:g} s')} later)" if ended else ")"
    )
