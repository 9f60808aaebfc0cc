"""The process's state file follows its scopes (statefile.py): status, the load and phase open, every count, exact
even at a SIGKILL. A state write that fails is a fault like any other: said once, counted on the load, never raised
into the job."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ... import semconv, statefile
from .._log import warn_once
from .memory import oom_kill_count
from .scope import OpenScopes, Scope, active_scopes, detached_slot


class StateMirror:
    """Writes what the scopes do into the state file, once the first span made it (``state()``: None before, or in a
    forked child); ``on_fault(where, scope)`` counts a failed write on its load."""

    def __init__(
        self,
        state: Callable[[], statefile.Writer | None],
        open: OpenScopes,
        on_fault: Callable[[str, Scope | None], None],
    ):
        self.state = state
        self.open = open
        self.on_fault = on_fault

    def update(self, update: Any, scope: Scope | None = None) -> None:
        """Apply ``update(state)``."""
        state = self.state()
        if state is None:
            return
        try:
            update(state)
        except Exception as error:
            self.failed(error, scope)

    def failed(self, error: Exception, scope: Scope | None = None) -> None:
        warn_once(
            "state",
            f"cannot update the state file ({type(error).__name__}: {error}); "
            f"counted in {semconv.HOOK_ERRORS} on its load span",
        )
        self.on_fault("state", scope)

    def keep(self, scope: Scope) -> None:
        """An open load, phase or stage in the state file (statefile.py), for the witness to end if the process dies
        with it open: spans that finished under it keep their parent (issue 26)."""
        state = self.state()
        if state is None or not scope.recording:
            return
        span, context = scope.span, scope.span.get_span_context()
        parent = getattr(span, "parent", None)
        try:
            index = state.open_scope(
                scope.name,
                context.trace_id,
                parent.span_id if parent is not None else 0,
                getattr(span, "start_time", None) or time.time_ns(),
                context.span_id,
            )
        except Exception as error:
            self.failed(error, scope)
            return
        if index is not None:
            scope.record = (state, index)

    def release(self, scope: Scope) -> None:
        """The scope's span ended: its record is free again."""
        record, scope.record = scope.record, None
        if record is not None and record[0] is self.state():  # not a forked child's: the parent's record is its own
            try:
                record[0].close_scope(record[1])
            except Exception as error:
                self.failed(error, scope)

    def new_slot(self, scope: Scope, counted: bool = True) -> statefile.ReadSlot:
        """The file's read slot in the state file; private memory when there is no state (or no room in it).
        ``counted``: a file the load has not opened before (one opened again is not a second file opened)."""
        state = self.state()
        if state is not None:
            try:
                slot = state.new_slot()
                if counted:
                    state.add("files_opened", 1)
                return slot
            except Exception as error:
                warn_once("state", f"cannot grow the state file ({type(error).__name__}: {error}); reads are counted")
                self.on_fault("state", scope)
        return detached_slot()

    def load_started(self, scope: Scope, start: dict[str, Any], found: Any) -> None:
        self.update(lambda state: load_started(state, scope, start, found), scope)

    def load_nested(self, scope: Scope, start: dict[str, Any]) -> None:
        loads_open = self.open.loads_open

        def update(state: statefile.Writer) -> None:
            state["loads_open"] = loads_open
            state.set_text("phase", scope.name)
            if start.get(semconv.STRATEGY):
                state.set_text("strategy", str(start[semconv.STRATEGY]))
            state.touch()

        self.update(update, scope)

    def load_learned(self, scope: Scope, learned: dict[str, Any]) -> None:
        """What a load's hook learnt after it began (its strategy, the checkpoint's tensor bytes): a rank that dies
        next tells it."""

        def update(state: statefile.Writer) -> None:
            if learned.get(semconv.STRATEGY):
                state.set_text("strategy", str(learned[semconv.STRATEGY]))
            if learned.get(semconv.CHECKPOINT_TENSOR_BYTES):
                state["checkpoint_tensor_bytes"] = int(learned[semconv.CHECKPOINT_TENSOR_BYTES])
            state.touch()

        self.update(update, scope)

    def load_closed(self, scope: Scope, error: BaseException | None, last: bool, others: list[str]) -> None:
        def update(state: statefile.Writer) -> None:
            state["loads_open"] = 0 if last else len(others)
            if error is not None:
                state.set_text("failure", type(error).__name__)
            if last:
                # A load unwound by the signal that stopped it stays "signalled"; one that finished after the job's
                # own handler let it go on is idle again.
                if state["status"] == statefile.STATUS_LOADING or error is None:
                    state["status"] = statefile.STATUS_IDLE
                state.set_text("phase", "")
            else:
                set_phase(state, others[0])
            state.touch()

        self.update(update, scope)

    def job(self, job_id: str | None) -> None:
        """The job id was adopted from the process group's store: the state names the job and trace spans go to."""

        def update(state: statefile.Writer) -> None:
            if job_id:
                state.set_text("job_id", job_id)
                state.set_text("trace_id", format(semconv.job_trace_ids(job_id)[0], "032x"))

        self.update(update)

    def exited(self) -> None:
        """The process exited (not died), unless a signal stopped it."""
        self.update(exited)

    def signalled(self, signo: int) -> None:
        """Said at once, before the spans end: the state tells of loads, so a rank stopped after its load is idle."""
        state = self.state()
        if state is not None and self.open.loads_open:
            state["status"] = statefile.STATUS_SIGNALLED
            state["signal"] = signo
            state.touch()

    def hook_error(self) -> None:
        state = self.state()
        if state is not None:
            try:
                state.add("hook_errors", 1)
            except Exception:
                pass  # the state is what failed: the span still counts it


def set_phase(state: statefile.Writer, fallback: str = "") -> None:
    """The state's ``phase``: the innermost load or phase this thread has open."""
    stack = active_scopes.get()
    state.set_text("phase", stack[-1].name if stack else fallback)
    state.touch()


def load_started(state: statefile.Writer, scope: Scope, start: dict[str, Any], found: Any) -> None:
    state.load_started()
    state["loads_open"] = 1
    state["status"] = statefile.STATUS_LOADING
    state["signal"] = 0
    state.set_text("load", scope.name)
    state.set_text("phase", scope.name)
    state.set_text("strategy", str(start.get(semconv.STRATEGY, "")))
    state["checkpoint_tensor_bytes"] = int(start.get(semconv.CHECKPOINT_TENSOR_BYTES) or 0)
    state.set_text("failure", "")
    state["memory_limit"], state["memory_limit_source"] = found.limit
    state["rss_peak"] = 0  # this load's: raised from its first reading on
    state["node_memory_total"] = found.node_total
    state["cgroup_memory_max"] = found.cgroup_max or 0
    state.set_text("cgroup", found.cgroup_dir or "")
    before = oom_kill_count(found.cgroup_dir)
    state["oom_kill_before"] = -1 if before is None else before
    state.touch()


def exited(state: statefile.Writer) -> None:
    if state["status"] != statefile.STATUS_SIGNALLED:
        state["status"] = statefile.STATUS_EXITED
    state.touch()
