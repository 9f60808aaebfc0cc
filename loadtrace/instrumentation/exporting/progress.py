"""The monitor's samples → the state file's live fields, and (with an OTLP endpoint) progress metrics.

While a load is open the monitor thread (monitor.py) samples the process's memory every 0.1 s; each sample comes here,
off the loading thread. It writes what ``loadtrace top`` needs and the loading thread never writes: the current RSS,
the RSS when the load began (so a reader sees its trend), and the last time the load moved (read bytes, files
opened, phase or status changed), and a sample of its read bytes up to ``RATE_WINDOW_S`` old (a reader's recent
read rate starts there). With an OTLP endpoint and ``LOADTRACE_PROGRESS_INTERVAL`` > 0, the first sample of
a load also starts the progress metrics (progress_metrics.py): the metrics SDK is imported then, in this thread, so a
process that never loads imports none of it.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ... import statefile
from .. import importing
from .._log import warn_once
from ..counting.memory import Memory
from ..settings import Settings

if TYPE_CHECKING:
    from .progress_metrics import ProgressMetrics

RATE_WINDOW_S = 10.0


class Progress:
    def __init__(self, settings: Settings, resource: Any):
        self._settings = settings
        self._resource = resource  # a callable giving the OTel Resource the traces use (made only when needed)
        self._moved: tuple[int, ...] | None = None
        self._reads: deque[tuple[int, int]] = deque()  # (time, the load's read bytes) of recent samples
        self._metrics: ProgressMetrics | None = None
        self._metrics_failed = False

    def sample(self, state: statefile.Writer, reading: Memory) -> None:
        """One monitor sample (the monitor thread): the live fields of a loading process."""
        if state["status"] != statefile.STATUS_LOADING:
            return
        now = time.time_ns()
        load_start = state["load_start_ns"]
        if state.live("rss_load_start_ns") < load_start:
            state.set_live("rss_load_start", reading.rss)
            state.set_live("rss_load_start_ns", now)
        state.set_live("rss_now", reading.rss)
        state.set_live("rss_sampled_ns", now)
        read = state.open_load_reads()[1]
        moved = (load_start, read, state["files_opened"], state["updated_ns"])
        if moved != self._moved:
            if self._moved is None or self._moved[0] != load_start:
                self._reads.clear()  # a new load: its rate starts with it
            self._moved = moved
            state.set_live("progress_ns", now)
        self._rate_base(state, now, read)
        if self._metrics is None and not self._metrics_failed and self._wants_metrics():
            self._start_metrics(state)

    def _rate_base(self, state: statefile.Writer, now: int, read: int) -> None:
        reads = self._reads
        reads.append((now, read))
        while len(reads) > 1 and now - reads[1][0] >= RATE_WINDOW_S * 1e9:
            reads.popleft()
        state.set_live("rate_base_ns", reads[0][0])
        state.set_live("rate_base_bytes", reads[0][1])

    def _wants_metrics(self) -> bool:
        return bool(self._settings.otlp_endpoint) and self._settings.progress_interval_s > 0

    def _start_metrics(self, state: statefile.Writer) -> None:
        try:
            with importing():
                from .progress_metrics import ProgressMetrics

                self._metrics = ProgressMetrics(self._settings, self._resource(), state)
        except Exception as error:
            self._metrics_failed = True
            warn_once("progress-metrics", f"cannot export progress metrics ({type(error).__name__}: {error})")

    def shutdown(self, timeout_s: float) -> None:
        """Flush and stop the metrics (the caller bounds the wait)."""
        metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.shutdown(timeout_s)

    def after_fork(self) -> None:
        """A forked child's state is its own: it starts its own metrics when it loads."""
        self._metrics, self._moved = None, None
        self._reads.clear()
