"""Spans and state files → processes → the attempts of each job, never summed together.

A job id can repeat: ``torchrun --max-restarts`` starts the workers again under the same job id, a SLURM requeue reruns
the script, a reused ``LOADTRACE_JOB_ID`` lands a second run in the first one's trace. Each is its own attempt, with
its own table and findings. A *process* is one OS process: a resource's ``host.name`` and ``process.pid`` (its spans,
its state file and the launcher's ``loadtrace.rank_exit`` span of its death all carry both). Within a trace:

1. ``loadtrace.attempt`` (the launcher's restart count) splits first. A process that does not say which attempt it
   belongs to joins the only attempt its trace has (and stays apart when there are several).
2. Within an attempt, processes in start order form *runs*: a rank's process joins the latest run its rank is free in,
   preferring a run that holds its ``loadtrace.launch.id``; when its rank is taken in every run, it starts a new run
   (the same ranks again, under new pids: a rerun with a reused job id, or a launch the attempt counter did not see).
   A rank is taken in a run where a process of it loaded (a load span, a state file with a load, a witness span), or
   where a process of it belongs to another launch: another launch id, or (ids unknown) it was over before this one
   began. So a launch that ended before any load (a crash after the rendezvous) is a run of its own, not the start of
   the next launch's. Separate launcher invocations with disjoint ranks (the nodes of one multi-node job, each with its
   own launch id) share a run.
3. A process that overlaps in time a process of its rank that loaded, or that loaded nothing itself (a forked
   DataLoader worker's bare ``torch.load``) and belongs to the launch of a process of its rank (its launch id, or
   without ids its rank loaded there or was still alive), joins that rank's latest such run: it is a child, not a
   rerun. A process that joined the process group itself (``torch.init_process_group``) is a rank's own, never a
   child.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc
from .. import statefile
from .sources import Span, StateFile
from .summarized import unfold

TRACE_ID_HEX = 32
# A rank's identity within a run: its number, else (no ``loadtrace.rank``) its instance.
Who = tuple[int | None, str | None]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(eq=False)
class Process:
    """One OS process of a trace: its spans, its state file, and the launcher's span of its death."""

    trace_id: str
    host: str | None
    pid: int | None
    spans: list[Span] = field(default_factory=list)  # its own, the witness span not included
    state: statefile.State | None = None
    witness: Span | None = None

    @property
    def resource(self) -> dict[str, Any]:
        """Its spans' resource, else the witness span's, else one made from its state file."""
        if self.spans:
            return self.spans[0].resource
        if self.witness is not None:
            return self.witness.resource
        return state_resource(self.state, self.host, self.pid) if self.state is not None else {}

    def _resource_value(self, key: str) -> Any:
        for span in self.spans[:1] + ([self.witness] if self.witness is not None else []):
            if key in span.resource:
                return span.resource[key]
        return None

    @property
    def who(self) -> Who:
        rank = _int(self._resource_value(sc.RANK))
        if rank is None and self.state is not None:
            rank = self.state.rank
        if rank is not None:
            return rank, None
        instance = _text(self._resource_value(sc.SERVICE_INSTANCE_ID))
        return None, instance or f"{self.host}/{self.pid}"

    @property
    def attempt(self) -> int | None:
        attempt = _int(self._resource_value(sc.ATTEMPT))
        if attempt is None and self.state is not None:
            attempt = self.state.attempt
        return attempt

    @property
    def launch_id(self) -> str | None:
        launch = _text(self._resource_value(sc.LAUNCH_ID))
        if launch is None and self.state is not None:
            launch = self.state.launch_id or None
        return launch

    @property
    def start_ns(self) -> int:
        times = [span.start_ns for span in self.spans]
        if self.state is not None:
            times += [t for t in (self.state.created_ns, self.state.load_start_ns) if t > 0]
        if self.witness is not None:
            times.append(self.witness.start_ns)
        return min(times, default=0)

    @property
    def end_ns(self) -> int:
        """Its last sign of life: a span's end, its state's last update, the witness's word of its death."""
        times = [span.end_ns for span in self.spans]
        if self.state is not None:
            times.append(self.state.updated_ns)
        if self.witness is not None:
            times.append(self.witness.end_ns)
        return max(times, default=0)

    @property
    def rendezvoused(self) -> bool:
        """Whether it joined the process group itself: a rank's own process, never a child of one."""
        return any(span.name == sc.SPAN_INIT_PROCESS_GROUP for span in self.spans)

    @property
    def loaded(self) -> bool:
        """Whether it began a load of its own (a load span, a state file with a load, a witness of its death)."""
        return (
            self.witness is not None
            or (self.state is not None and (self.state.load_start_ns > 0 or self.state.loads_open > 0))
            or any(span.name in sc.LOAD_SPANS for span in self.spans)
        )


def state_resource(state: statefile.State, host: str | None, pid: int | None) -> dict[str, Any]:
    """The resource a process's state file tells of (its spans' own, where it has any, say more)."""
    resource: dict[str, Any] = {sc.HOST_NAME: host, sc.PROCESS_PID: pid, sc.ATTEMPT: state.attempt}
    if state.rank is not None:
        resource[sc.RANK] = state.rank
    for key, size in ((sc.WORLD_SIZE, state.world_size), (sc.LOCAL_WORLD_SIZE, state.local_world_size)):
        if size > 0:
            resource[key] = size
    for key, text in ((sc.JOB_ID, state.job_id), (sc.LAUNCH_ID, state.launch_id)):
        if text:
            resource[key] = text
    return resource


def state_trace_id(state: statefile.State, known: Iterable[str] = ()) -> str:
    """The trace a state file belongs to: the one it names; a name cut short (a full id does not fit the field) is
    the one trace of the source it begins, else its job id's (every rank derives the same)."""
    trace_id = state.trace_id.strip().lower()
    if len(trace_id) >= TRACE_ID_HEX:
        return trace_id
    job_id = state.job_id
    derived = format(sc.job_trace_ids(job_id)[0], "032x") if job_id else None
    if trace_id:
        matches = {known_id for known_id in known if known_id.startswith(trace_id)}
        if derived is not None and derived.startswith(trace_id):
            matches.add(derived)
        if len(matches) == 1:
            return matches.pop()
    return derived or trace_id


def processes(spans: Iterable[Span], states: Iterable[StateFile] = ()) -> dict[str, list[Process]]:
    """Every process of every trace, in start order: spans by (host, pid), state files and witness spans joined to
    the process they describe. Spans without a pid (a foreign producer) group by rank, as one process per rank."""
    index = _Processes()
    witnesses = index.add_spans(spans)
    traces = {key[0] for key in index.found} | {span.trace_id for span in witnesses}
    for span in witnesses:
        host, pid = _text(span.resource.get(sc.HOST_NAME)), _int(span.resource.get(sc.PROCESS_PID))
        owner = index.owner_of(span.trace_id, host, pid, span.resource)
        # One witness per death; two launchers seeing the same death say the same.
        if owner.witness is None or owner.witness.end_ns < span.end_ns:
            owner.witness = span
    for state_file in states:
        state = state_file.state
        pid = state.pid if state.pid > 0 else None
        owner = index.owner_of(state_trace_id(state, traces), state.host or None, pid, {sc.RANK: state.rank})
        # A state file copied twice is the same process: the later word wins.
        if owner.state is None or owner.state.updated_ns < state.updated_ns:
            owner.state = state
    return index.by_trace()


class _Processes:
    """The processes found so far: by (trace, host, pid), or by (trace, rank) where spans carry no pid."""

    def __init__(self) -> None:
        self.found: dict[tuple[Any, ...], Process] = {}

    def process(self, trace_id: str, host: str | None, pid: int | None, resource: dict[str, Any]) -> Process:
        if pid is not None:
            key: tuple[Any, ...] = (trace_id, host, pid)
        else:
            rank = _int(resource.get(sc.RANK))
            key = (trace_id, "rank", rank, None if rank is not None else _text(resource.get(sc.SERVICE_INSTANCE_ID)))
        if key not in self.found:
            self.found[key] = Process(trace_id, host, pid)
        return self.found[key]

    def add_spans(self, spans: Iterable[Span]) -> list[Span]:
        """Each span to its process, each once; the witness spans (of processes that died) are handed back."""
        seen: set[tuple[str, str]] = set()
        witnesses: list[Span] = []
        for span in unfold(spans):  # a folding rank's spans as they were (the span budget)
            # The same span read twice (a copied file, a file and a collector's copy of it) must not count twice.
            if span.span_id:
                if (span.trace_id, span.span_id) in seen:
                    continue
                seen.add((span.trace_id, span.span_id))
            if span.name == sc.SPAN_RANK_EXIT:
                witnesses.append(span)
                continue
            if span.attributes.get(sc.EXIT_SOURCE) == sc.EXIT_SOURCE_LAUNCHER and span.name != sc.SPAN_STARTUP:
                continue  # a dead rank's open span, ended by the witness so that its children have a parent: no numbers
            # A dead rank's startup, ended at its death: its length is the rank's startup (startup.py), never less.
            host, pid = _text(span.resource.get(sc.HOST_NAME)), _int(span.resource.get(sc.PROCESS_PID))
            self.process(span.trace_id, host, pid, span.resource).spans.append(span)
        return witnesses

    def owner_of(self, trace_id: str, host: str | None, pid: int | None, resource: dict[str, Any]) -> Process:
        """The process with this pid: on this host, else the only one of the trace with that pid (a host named
        differently by the state file and by OTEL_RESOURCE_ATTRIBUTES is still the same process)."""
        if pid is not None and (trace_id, host, pid) not in self.found:
            same_pid = [key for key in self.found if key[0] == trace_id and len(key) == 3 and key[2] == pid]
            if len(same_pid) == 1:
                return self.found[same_pid[0]]
        return self.process(trace_id, host, pid, resource)

    def by_trace(self) -> dict[str, list[Process]]:
        """The processes that loaded (or died), by trace, each trace's in start order and each process's spans too."""
        by_trace: dict[str, list[Process]] = defaultdict(list)
        for owner in self.found.values():
            if not owner.spans and owner.witness is None and not owner.loaded:
                continue  # a state file of a process that never began a load: nothing to report
            owner.spans.sort(key=lambda s: (s.start_ns, s.span_id))
            by_trace[owner.trace_id].append(owner)
        for members in by_trace.values():
            members.sort(key=lambda p: (p.start_ns, p.host or "", p.pid or 0))
        return dict(by_trace)


@dataclass
class Run:
    """The processes of one attempt of a job: each rank at most once (with its forked children)."""

    attempt: int | None
    run: int
    members: list[Process] = field(default_factory=list)
    loaders: dict[Who, list[Process]] = field(default_factory=lambda: defaultdict(list))
    by_rank: dict[Who, list[Process]] = field(default_factory=lambda: defaultdict(list))  # every member, loaded or not
    # Its members' launch ids in order, kept as they join: asked for each process that joins, a scan of the members
    # made grouping a 4,096-rank job quadratic.
    launches: dict[str, None] = field(default_factory=dict)

    @property
    def launch_ids(self) -> list[str]:
        return list(self.launches)

    def add(self, process: Process) -> None:
        self.members.append(process)
        if (launch := process.launch_id) is not None:
            self.launches[launch] = None
        if process.loaded:
            self.loaders[process.who].append(process)
        self.by_rank[process.who].append(process)

    def taken(self, process: Process) -> bool:
        """Whether the process's rank is taken here for it: loaded, or held by a process of another launch."""
        who = process.who
        return who in self.loaders or any(other_launch(other, process) for other in self.by_rank.get(who, ()))

    def parent_of(self, process: Process) -> bool:
        """Whether a process of its rank here can have started this one (which loaded nothing): of its launch, or
        without launch ids one that loaded (a child may outlive its parent's last span) or was still alive."""
        launch = process.launch_id
        for other in self.by_rank.get(process.who, ()):
            if launch is not None and other.launch_id is not None:
                if launch == other.launch_id:
                    return True
            elif other.loaded or other.end_ns >= process.start_ns:
                return True
        return False


def other_launch(earlier: Process, later: Process) -> bool:
    """Whether two processes of one rank belong to different launches: their launch ids differ, or (either unknown)
    the earlier was over before the later began."""
    if earlier.launch_id is not None and later.launch_id is not None:
        return earlier.launch_id != later.launch_id
    return earlier.end_ns < later.start_ns


def _resolve(values: Iterable[Any]) -> Any:
    """The only known value, else None (unknown or ambiguous)."""
    known = {value for value in values if value is not None}
    return next(iter(known)) if len(known) == 1 else None


def runs(members: list[Process]) -> list[Run]:
    """One trace's processes (in start order) → its attempts and runs, in start order (see the module docstring)."""
    only_attempt = _resolve(p.attempt for p in members)
    by_attempt: dict[int | None, list[Process]] = defaultdict(list)
    for process in members:
        by_attempt[process.attempt if process.attempt is not None else only_attempt].append(process)
    result: list[Run] = []
    for attempt, group in by_attempt.items():
        result += _split(attempt, group)
    return result


def _split(attempt: int | None, members: list[Process]) -> list[Run]:
    found: list[Run] = []
    for process in members:
        target = _parent_run(found, process)
        if target is None:
            free = [run for run in reversed(found) if not run.taken(process)]
            launch = process.launch_id
            same_launch = [run for run in free if launch is not None and launch in run.launches]
            target = (same_launch or free)[0] if same_launch or free else None
        if target is None:
            target = Run(attempt, len(found))
            found.append(target)
        target.add(process)
    return found


def _parent_run(found: list[Run], process: Process) -> Run | None:
    """The run of the process's parent when it is a child (the module docstring, 3), else None."""
    who = process.who
    for run in reversed(found):
        if any(other.start_ns <= process.start_ns <= other.end_ns for other in run.loaders.get(who, ())):
            return run
    if process.loaded or process.rendezvoused:
        return None
    return next((run for run in reversed(found) if run.parent_of(process)), None)
