"""The process's life around its scopes: its exit (``shutdown``: end what the job left open, flush, the job's summary
line, a termination signal held until they are done: termination.Held), a fork (``after_fork``: the child owns none of
its parent's scopes) and a termination signal while loading (``terminated``: every open span ends with what it
counted, ERROR and the signal's name, and is flushed, all within ``LOADTRACE_EXIT_TIMEOUT``; termination.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ... import semconv
from .. import context
from ..beside import termination
from ..context import Job
from ..counting.memory import process_memory
from ..counting.readings import Readings
from ..counting.scope import OpenScopes, Scope, detached_slot
from ..counting.statemirror import StateMirror
from ..exporting import summary, trace_findings
from ..settings import Settings
from .ending import Ends
from .startup import Startup

if TYPE_CHECKING:
    from .provider import ProviderSource


class Lifecycle:
    """Ends what is open through ``ends``; ``source.made``: the process's provider, None until the first span made it
    (then there is nothing to flush or say)."""

    def __init__(
        self,
        settings: Settings,
        job: Job,
        open: OpenScopes,
        startup: Startup,
        state_file: StateMirror,
        readings: Readings,
        ends: Ends,
        source: ProviderSource,
    ):
        self.settings, self.job, self.open, self.startup = settings, job, open, startup
        self.state_file, self.readings, self.ends, self.source = state_file, readings, ends, source
        self.shut_down = False
        self.forked = False  # a forked child never says the job's summary line

    def shutdown(self) -> None:
        """End the files the job left open and the startup (where it was never prepared), then flush (bounded); the
        state says the process exited (not died)."""
        said = self.shut_down
        for file in list(self.open.files):  # as the front closes a file: once, and not after the exit
            self.open.files.discard(file)
            if not said:
                self.ends.finish(file)
        try:
            self.startup.end(semconv.STARTUP_END_EXIT, self.startup.settled())
        except Exception:
            pass  # the flush goes ahead whatever happened to the startup
        self.shut_down = True
        self.state_file.exited()
        self.startup.handlers.restore()
        provider = self.source.made
        if provider is None:
            return  # no span was ever made here: nothing to flush, nothing to say
        with termination.Held():  # a launcher's SIGTERM waits for the flush and the closing line (bounded)
            self._flush_and_close(provider, said)

    def _flush_and_close(self, provider: Any, said: bool) -> None:
        state, trace_file, exported = provider.state, provider.trace_file, provider.exporting
        provider.shutdown()
        if exported and state is not None and not (said or self.forked):
            rank = None if state["rank"] < 0 else state["rank"]
            job_id = self.job.id or self.job.fallback_id()
            failure = provider.send_failure()
            if summary.launcher_says(trace_file):
                return  # the launcher annotates the trace and says the line once its workers are done (witness.py)
            started = context.process_start_ns() or 0
            size = state["local_world_size"]
            link = trace_findings.annotate(self.settings, job_id, rank, size, trace_file, failure, started)
            summary.say(self.settings, job_id, rank, size, trace_file, failure, started, link)

    def after_fork(self) -> None:
        """In a forked child: its parent's open files, loads and state are not its own. A slot of a file still open
        in the parent becomes private memory, so reads through a handle the child inherited stay out of the
        parent's state file."""
        for file in self.open.files:
            if file.slot is not None:
                file.slot.counts = detached_slot(file.slot.tensors, file.slot.bytes).counts
        self.open.reset()
        self.forked = True
        self.startup.after_fork()
        provider = self.source.made
        if provider is not None:
            provider.after_fork()

    def terminated(self, signo: int) -> None:
        """A termination signal while loading: the state says so at once; then every open span ends. The work runs
        in a thread: the signal may have interrupted this one inside a lock that work needs."""
        if self.open.loads_open == 0 and not self.startup.is_open():
            return
        self.state_file.signalled(signo)
        timeout_s = self.settings.exit_timeout_s
        deadline = time.monotonic() + timeout_s
        name = termination.name(signo)

        def work() -> None:
            self.end_open_scopes(name)
            provider = self.source.made
            if provider is not None:
                provider.write_structure()
                provider.force_flush(max(0.0, deadline - time.monotonic()))

        if not termination.bounded(work, timeout_s, "loadtrace-signal-flush"):
            provider = self.source.made
            if provider is not None:
                provider.gave_up(f"no answer within LOADTRACE_EXIT_TIMEOUT={timeout_s:g} s on {name}")

    def end_open_scopes(self, signal_name: str) -> None:
        """Files, then phases, then loads (innermost first): each with its attributes so far."""
        reading = process_memory()
        open = self.open
        monitor = self.readings.monitor()
        if monitor is not None:
            phases = [*open.loose_phases, *(phase for load in open.loads for phase in load.phases.values())]
            monitor.settle(phases, reading)
        for file in list(open.files):
            open.files.discard(file)
            self.ends.finish(file, signal_name=signal_name)
        owners = [
            *sorted(open.loads, key=newest_first, reverse=True),
            *sorted(open.stages, key=newest_first, reverse=True),
        ]
        phases = [*open.loose_phases, *(phase for owner in owners for phase in owner.phases.values())]
        for scope in sorted((*phases, *owners), key=newest_first, reverse=True):
            if not scope.ended:
                scope.memory_after = reading
                if scope.peak is not None:
                    scope.peak.raise_to(reading)
                self.ends.finish(scope, signal_name=signal_name)
        # Stopped before its startup was over (loading, preparing, or between a load and its preparation).
        self.startup.end(signal_name, signal_name=signal_name)


def newest_first(scope: Scope) -> Any:
    return getattr(scope.span, "start_time", 0) or 0
