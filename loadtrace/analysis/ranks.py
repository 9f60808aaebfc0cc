"""Spans and state files → one record per rank of each job: what it opened, read, converted, materialised and held.

A job is one attempt of a trace (every rank's spans hang from the job's root span; ``processes.py`` keeps a restart's
processes apart); a rank is a resource's ``loadtrace.rank``, else its ``service.instance.id``. Totals come from the
outermost load spans (``transformers.from_pretrained``, ``loadtrace.load``), which already count every file opened while
they were open, whichever thread read it; a file span outside every load (a bare ``safe_open`` / ``torch.load``) is
counted from its own attributes. Every number here is a sum of span attributes named in docs/reference.md's span
reference, so it can be traced back to the spans it came from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .. import semconv as sc
from .. import statefile
from ..startup_split import Interval, pairs, union
from .attrs import (
    by_device,
    first_known,
    int_attr,
    max_known,
    min_known,
    opt_int_attr,
    real_bytes,
    str_attr,
    sum_known,
)
from .model import Exit, Finding, LastState, RankLoad, Site, UnfinishedSpans
from .processes import Process, Run, Who, processes, runs
from .sources import STATUS_ERROR, DamagedFile, Span, StateFile
from .sources.files import ProcessKey, process_key

# The rank that loads the checkpoint under a sharded strategy (docs/report.md, Findings: a simplification on several
# nodes, where accelerate loads on each node's local rank 0).
LOADING_RANK = 0


@dataclass
class Job:
    """One trace: every rank's spans of one job."""

    trace_id: str
    ranks: list[RankLoad]
    start_ns: int
    attempt: int | None = None
    launch_ids: list[str] = field(default_factory=list)
    run: int = 0

    @property
    def launch_id(self) -> str | None:
        return ", ".join(self.launch_ids) or None

    @property
    def label(self) -> str:
        """The trace id, and which attempt of it when that is known."""
        attempt = f" attempt {self.attempt}" if self.attempt is not None else ""
        return self.trace_id + attempt + (f" run {self.run + 1}" if self.run else "")

    @property
    def job_id(self) -> str | None:
        return next((r for r in (str_attr(rank.resource, sc.JOB_ID) for rank in self.ranks) if r), None)

    @property
    def world_size(self) -> int | None:
        sizes = [rank.world_size for rank in self.ranks if rank.world_size is not None]
        return max(sizes) if sizes else None

    def rank(self, number: int) -> RankLoad | None:
        return next((rank for rank in self.ranks if rank.rank == number), None)

    @property
    def loading_rank(self) -> RankLoad | None:
        return self.rank(LOADING_RANK)

    def model_bytes(self) -> int:
        """The model's size: the checkpoint's tensor bytes (recorded by ``from_pretrained`` or a DCP load); else, when
        ranks read slices or each a streaming loader's share of the files, the tensor bytes of the distinct files
        they opened; else what the loading rank read, if it finished, else the most any finished rank read; else the
        most real bytes any rank holds after loading; 0 when nothing tells (shown as unknown)."""
        known = [rank.checkpoint_tensor_bytes for rank in self.ranks if rank.checkpoint_tensor_bytes]
        if known:
            return max(known)
        # Ranks that read slices, or a streaming loader's share of the files each (fastsafetensors): the files.
        streamed = any(span.name in sc.STREAM_LOAD_SPANS for rank in self.ranks for span in rank.spans)
        if (streamed or any(rank.partial_bytes for rank in self.ranks)) and (files := self.file_bytes()):
            return files
        # A rank that was killed or raised read only part of the model: its bytes are no measure of it.
        finished = [rank for rank in self.ranks if not rank.incomplete and rank.failed is None]
        loading = self.loading_rank
        if loading in finished and loading.read_bytes > 0:
            return loading.read_bytes
        if read := max((rank.read_bytes for rank in finished), default=0):
            return read
        return max((real_bytes(rank.held_bytes) for rank in self.ranks), default=0)

    def whole_model_bytes(self) -> int:
        """The model as the ranks built it in memory (``loadtrace.model.bytes``: every parameter and buffer at its
        full size in its dtype, a ZeRO-3 partition's whole parameter included), else ``model_bytes``: a bf16
        checkpoint built as fp32 is twice its file bytes, and a ZeRO-3 rank's partition is a share of that."""
        built = [
            int_attr(span.attributes, sc.MODEL_BYTES)
            for rank in self.ranks
            for span in rank.spans
            if span.name == sc.SPAN_FROM_PRETRAINED
        ]
        return max([*built, self.model_bytes()])

    def file_bytes(self) -> int:
        """The tensor bytes of the distinct files (``loadtrace.file.path``) the ranks' file spans opened (a file's
        size where its tensor bytes are unknown, a ``torch.load`` file): the checkpoint, as far as the job read it."""
        sizes: dict[str, int] = {}
        for rank in self.ranks:
            for span in rank.spans:
                path = str_attr(span.attributes, sc.FILE_PATH) if span.name in sc.FILE_SPANS | sc.BYTES_SPANS else None
                if path is not None:
                    known = opt_int_attr(span.attributes, sc.FILE_TENSOR_BYTES)
                    size = known if known is not None else int_attr(span.attributes, sc.FILE_SIZE)
                    sizes[path] = max(sizes.get(path, 0), size)
        return sum(sizes.values())

    def finding(
        self,
        kind: str,
        severity: str,
        ranks: Iterable[int | None],
        nbytes: int,
        detail: str,
        evidence: dict[str, Any],
        projected_node_bytes: int = 0,
    ) -> Finding:
        """A finding about this job (its trace, attempt and run) over these ranks, in rank order."""
        return Finding(
            trace_id=self.trace_id,
            attempt=self.attempt,
            run=self.run,
            kind=kind,
            severity=severity,
            ranks=sorted(rank for rank in ranks if rank is not None),
            bytes=nbytes,
            projected_node_bytes=projected_node_bytes,
            detail=detail,
            evidence=evidence,
        )

    def ranks_per_node(self, rank: RankLoad) -> int:
        """``loadtrace.local_world_size``, else the ranks seen on the same host, else 1."""
        if rank.local_world_size:
            return rank.local_world_size
        if rank.host:
            return max(1, sum(1 for other in self.ranks if other.host == rank.host))
        return 1


def sharded(rank: RankLoad) -> bool:
    """Whether the rank's strategy says only the loading rank should read the checkpoint."""
    return rank.strategy in sc.SHARDED_STRATEGIES


def converted_bytes(rank: RankLoad) -> int:
    """Bytes real conversion operations produced: ``conversion_bytes`` less those of plain renames."""
    return max(0, rank.conversion_bytes - rank.rename_bytes)


def rank_key(resource: dict[str, Any]) -> tuple[int | None, str | None]:
    rank = resource.get(sc.RANK)
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    instance = str_attr(resource, sc.SERVICE_INSTANCE_ID)
    if instance is None:
        host, pid = resource.get(sc.HOST_NAME), resource.get(sc.PROCESS_PID)
        instance = f"{host}/{pid}" if host is not None or pid is not None else None
    # With a rank, the rank alone names the process: a rank that restarted under a new pid is still the same rank.
    return (rank, None) if rank is not None else (None, instance)


def jobs_from_spans(
    spans: Iterable[Span], states: Iterable[StateFile] = (), damaged: Iterable[DamagedFile] = ()
) -> list[Job]:
    """Group spans and state files by trace, then by attempt (``processes.runs``), then by rank; jobs in order of their
    first span, ranks in rank order. Ranks that never finished are marked incomplete (see ``apply_processes``), ranks
    whose trace file is among ``damaged`` partial."""
    lost = frozenset(key for file in damaged for key in file.processes)
    jobs = []
    for trace_id, members in processes(spans, states).items():
        for run in runs(members):
            jobs.append(job_of(trace_id, run, lost))
    jobs.sort(key=lambda job: (job.start_ns, job.trace_id, job.attempt or 0, job.run))
    return jobs


def job_of(trace_id: str, run: Run, lost: frozenset[ProcessKey] = frozenset()) -> Job:
    by_who: dict[Who, list[Process]] = defaultdict(list)
    for process in run.members:
        by_who[process.who].append(process)
    ranks = []
    for (rank, instance), members in by_who.items():
        spans = [span for process in members for span in process.spans + ([process.witness] if process.witness else [])]
        launch = next((p.launch_id for p in members if p.launch_id is not None), None)
        record = summarize_rank(trace_id, rank, instance, spans, members[0].resource, (run.attempt, launch, run.run))
        record.partial = bool(lost) and any(process_key(span.resource) in lost for span in spans)
        apply_processes(record, members)
        ranks.append(record)
    mark_unfinished(ranks)
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.instance or ""))
    # When the job started, as its spans say (the same read from files or from Jaeger, which has no state files); a
    # state file's or the witness's times only where no span tells.
    span_starts = [span.start_ns for process in run.members for span in process.spans]
    start = min(span_starts) if span_starts else min((process.start_ns for process in run.members), default=0)
    return Job(trace_id, ranks, start, attempt=run.attempt, launch_ids=run.launch_ids, run=run.run)


def outermost(spans: list[Span], names: frozenset[str], by_id: dict[str, Span]) -> list[Span]:
    """Spans named in ``names`` with no ancestor so named (a nested load is already in its parent's totals)."""
    result = []
    for span in spans:
        if span.name not in names:
            continue
        seen, parent, nested = {span.span_id}, by_id.get(span.parent_span_id), False
        while parent is not None and parent.span_id not in seen:
            if parent.name in names:
                nested = True
                break
            seen.add(parent.span_id)
            parent = by_id.get(parent.parent_span_id)
        if not nested:
            result.append(span)
    return result


def inside_any(span: Span, loads: list[Span]) -> bool:
    """Whether a load's totals already count a file span: it hangs from the load, or started while one was open on
    this rank (under its phases, or a loader's own thread's)."""
    return any(span.parent_span_id == load.span_id or load.start_ns <= span.start_ns <= load.end_ns for load in loads)


def merge_sites(loads: Iterable[Span]) -> list[Site]:
    """``loadtrace.materialized.sites`` / ``site_bytes`` (parallel arrays) of loads → [(site, bytes)], largest first."""
    totals: dict[str, int] = defaultdict(int)
    for load in loads:
        sites, sizes = load.attributes.get(sc.MATERIALIZED_SITES), load.attributes.get(sc.MATERIALIZED_SITE_BYTES)
        if not isinstance(sites, list) or not isinstance(sizes, list):
            continue
        for site, size in zip(sites, sizes, strict=False):  # a truncated array pairs what it can
            if isinstance(site, str) and isinstance(size, int) and not isinstance(size, bool):
                totals[site] += size
    return [Site(*item) for item in sorted(totals.items(), key=lambda item: (-item[1], item[0]))]


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


# A rank's death: its state file, the launcher's witness span, spans its own signal handler ended ------------------

STATUS_OPEN = ("loading", "signalled")  # a load was open when the process ended
UNKNOWN_ERROR = "unknown"  # a load span with status ERROR that does not name the exception (an older loadtrace)
STATE_FILE, WITNESS = "state file", "launcher witness"


def exit_of(process: Process) -> Exit:
    """How the process ended: the launcher's word, else the rank's own (a termination signal it caught)."""
    witness = process.witness
    if witness is not None:
        oom = witness.attributes.get(sc.EXIT_OOM_KILLED)
        return Exit(
            signal=str_attr(witness.attributes, sc.EXIT_SIGNAL),
            code=opt_int_attr(witness.attributes, sc.EXIT_CODE),
            oom_killed=oom if isinstance(oom, bool) else None,
            source=str_attr(witness.attributes, sc.EXIT_SOURCE) or "launcher",
        )
    caught = next((name for s in process.spans if (name := str_attr(s.attributes, sc.EXIT_SIGNAL))), None)
    if caught is None and process.state is not None and process.state.signal > 0:
        caught = sc.signal_name(process.state.signal)
    return Exit(signal=caught, source="rank") if caught is not None else Exit()


def status_of(process: Process) -> str | None:
    """The process's last status (loading, signalled, idle, exited); None when nothing says."""
    if process.state is not None:
        return process.state.status
    if process.witness is not None:
        return str_attr(process.witness.attributes, sc.EXIT_STATUS)
    if any(s.name in sc.LOAD_SPANS and str_attr(s.attributes, sc.EXIT_SIGNAL) for s in process.spans):
        return "signalled"  # its signal handler ended the load span
    return None


def last_state(process: Process) -> LastState | None:
    """The totals of the process's open (or last) load: its state file, else the witness span (the same numbers)."""
    state, witness = process.state, process.witness
    if state is not None:
        totals = state.totals()
        return LastState(
            source=STATE_FILE,
            time_unix_nano=state.updated_ns,
            status=state.status,
            during=state.phase or None,
            load=state.load or None,
            load_start_unix_nano=state.load_start_ns or None,
            strategy=state.strategy or None,
            files_opened=totals.files_opened,
            tensors_read=totals.tensors_read,
            read_bytes=totals.read_bytes,
            materialized_bytes=dict(sorted(totals.materialized().items())),
            conversions=totals.conversions,
            conversion_bytes=totals.conversion_bytes,
            hook_errors=totals.hook_errors,
            peak_rss_bytes=state.rss_peak or None,
            memory_limit_bytes=state.memory_limit or None,
            memory_limit_source=state.memory_limit_source,
            **_fetched_by(state),
        )
    if witness is not None:
        attributes = witness.attributes
        return LastState(
            source=WITNESS,
            time_unix_nano=witness.end_ns,
            status=str_attr(attributes, sc.EXIT_STATUS),
            during=str_attr(attributes, sc.EXIT_DURING),
            load=str_attr(attributes, sc.EXIT_LOAD),
            load_start_unix_nano=witness.start_ns or None,
            strategy=str_attr(attributes, sc.STRATEGY),
            files_opened=int_attr(attributes, sc.FILES_OPENED),
            tensors_read=int_attr(attributes, sc.READ_TENSORS),
            read_bytes=int_attr(attributes, sc.READ_BYTES),
            materialized_bytes=dict(sorted(by_device(attributes, sc.MATERIALIZED_BYTES_PREFIX).items())),
            conversions=int_attr(attributes, sc.CONVERT_COUNT),
            conversion_bytes=int_attr(attributes, sc.CONVERT_BYTES),
            hook_errors=int_attr(attributes, sc.HOOK_ERRORS),
            peak_rss_bytes=opt_int_attr(attributes, sc.RSS_PEAK),
            memory_limit_bytes=opt_int_attr(attributes, sc.MEMORY_LIMIT),
            memory_limit_source=str_attr(attributes, sc.MEMORY_LIMIT_SOURCE),
            storage_read_bytes=opt_int_attr(attributes, sc.IO_STORAGE_READ_BYTES),
            storage_read_as_of=opt_int_attr(attributes, sc.IO_STORAGE_READ_AS_OF),
            storage_read_intervals=pairs(attributes.get(sc.IO_STORAGE_READ_INTERVALS)),
        )
    return None


def _fetched_by(state: statefile.State) -> dict[str, Any]:
    """A state file's storage reads of its open (or last) load, up to its last reading; nothing when not known."""
    if state.storage_sampled_ns <= 0:
        return {}
    return {
        "storage_read_bytes": max(0, state.storage_read_now - state.storage_read_load_start),
        "storage_read_as_of": state.storage_sampled_ns,
        "storage_read_intervals": list(state.storage_intervals),
    }


def _covered(process: Process, load_start_ns: int | None) -> bool:
    """Whether a load span of the process ended after its last load began: the spans already count that load."""
    by_id = {span.span_id: span for span in process.spans if span.span_id}
    loads = outermost(process.spans, sc.LOAD_SPANS, by_id)
    return any(load.end_ns >= (load_start_ns or 0) for load in loads)


def _add_totals(rank: RankLoad, totals: LastState | statefile.Totals, materialized: dict[str, int]) -> None:
    rank.files_opened += totals.files_opened
    rank.tensors_read += totals.tensors_read
    rank.read_bytes += totals.read_bytes
    rank.conversions += totals.conversions
    rank.conversion_bytes += totals.conversion_bytes
    rank.hook_errors += totals.hook_errors
    merged = dict(rank.materialized_bytes)
    _add(merged, materialized)
    rank.materialized_bytes = dict(sorted(merged.items()))


def _add_fetched(rank: RankLoad, last: LastState) -> None:
    """A load the rank's spans do not count: its storage reads up to its last reading, where those of its finished
    loads are known (or it finished none); unknown otherwise."""
    known = rank.loads == 0 or (rank.storage_read_bytes is not None and rank.storage_read_intervals is not None)
    if not known or last.storage_read_bytes is None or last.storage_read_intervals is None:
        rank.storage_read_bytes = rank.storage_read_intervals = None
        return
    rank.storage_read_bytes = (rank.storage_read_bytes or 0) + last.storage_read_bytes
    rank.storage_read_intervals = union([*(rank.storage_read_intervals or []), *last.storage_read_intervals])
    rank.storage_read_as_of = last.storage_read_as_of


def apply_processes(rank: RankLoad, members: list[Process]) -> None:
    """What the rank's state files and the launcher's witness add to its spans: how it ended, whether a load was open
    then (``incomplete``), the last known totals of that load where no span counts them, whether its load raised.

    A process with spans adds only its open load, and only when it died with it open and no load span counts it (a
    SIGKILL leaves no span; a SIGTERM's handler ends and flushes them). A process without spans (they went over OTLP,
    or it died before any ended) adds everything its state file counted since it started. A state whose status is
    idle or exited (it finished) never makes the rank look dead."""
    for process in members:
        status, last = status_of(process), last_state(process)
        if not rank.checkpoint_tensor_bytes:  # a rank that died mid-load: what its load knew of the checkpoint
            if process.state is not None:
                rank.checkpoint_tensor_bytes = process.state.checkpoint_tensor_bytes or None
            elif process.witness is not None:
                rank.checkpoint_tensor_bytes = opt_int_attr(process.witness.attributes, sc.CHECKPOINT_TENSOR_BYTES)
        ended = exit_of(process)
        died_loading = status in STATUS_OPEN
        if ended != Exit() and rank.exit == Exit():
            rank.exit = ended
        if process.state is not None or process.witness is not None:
            rank.evidence = True
        if died_loading and not rank.incomplete:
            rank.incomplete, rank.last_state = True, last
        elif process.witness is not None and rank.last_state is None:
            rank.last_state = last  # it died after its load: how, and what that load had done
        _add_what_no_span_counts(rank, process, last, died_loading)
        if last is not None:
            rank.memory_limit_bytes = rank.memory_limit_bytes or last.memory_limit_bytes
            rank.memory_limit_source = rank.memory_limit_source or last.memory_limit_source
        if process.state is not None:
            rank.node_memory_bytes = rank.node_memory_bytes or process.state.node_memory_total or None
            rank.cgroup_memory_max_bytes = rank.cgroup_memory_max_bytes or process.state.cgroup_memory_max or None
            if not process.spans and not rank.failed and process.state.failure:
                rank.failed = process.state.failure
            if rank.exception is None and process.state.exception_ns > 0:
                rank.exception = (process.state.exception, process.state.exception_ns)
        elif process.witness is not None:
            attributes = process.witness.attributes
            rank.node_memory_bytes = rank.node_memory_bytes or opt_int_attr(attributes, sc.NODE_MEMORY_TOTAL)
            rank.cgroup_memory_max_bytes = rank.cgroup_memory_max_bytes or opt_int_attr(
                attributes, sc.CGROUP_MEMORY_MAX
            )
        rank.host = rank.host or process.host
    if rank.memory_limit_bytes is None:
        rank.memory_limit_bytes, rank.memory_limit_source = lower_limit(
            rank.node_memory_bytes, rank.cgroup_memory_max_bytes
        )


def _add_what_no_span_counts(rank: RankLoad, process: Process, last: LastState | None, died_loading: bool) -> None:
    """The process's state-file totals where no span counts them: everything it counted when it has no spans, else
    its open load's last totals when it died with that load open."""
    added = False
    if not process.spans and process.state is not None:
        whole = process.state.totals(since_load=False)
        _add_totals(rank, whole, whole.materialized())
        added = True
    elif last is not None and (
        not process.spans or (died_loading and not _covered(process, last.load_start_unix_nano))
    ):
        _add_totals(rank, last, last.materialized_bytes)
        added = True
    if added and last is not None:
        if last.peak_rss_bytes and (rank.peak_rss_bytes or 0) < last.peak_rss_bytes:
            rank.peak_rss_bytes = last.peak_rss_bytes
        rank.strategy = rank.strategy or last.strategy
        # A state file keeps its last load's storage reads: the whole process's only if that was its first load.
        whole_known = process.spans or process.state is None or process.state.load_first_slot == 0
        _add_fetched(rank, last if whole_known else replace(last, storage_read_bytes=None))


def lower_limit(node: int | None, cgroup: int | None) -> tuple[int | None, str | None]:
    """The lower of the node's memory and the cgroup's limit, and which it is."""
    if cgroup and (not node or cgroup < node):
        return cgroup, "cgroup"
    return (node, "node") if node else (None, None)


def mark_unfinished(ranks: list[RankLoad]) -> None:
    """Without a state file or witness (spans over OTLP only, or an older loadtrace): a finished span whose parent
    never ended was inside a load or phase that was still open when the rank's spans stop. Not for a partial rank:
    the parents may be among the spans its file lost."""
    every_span = {span.span_id for rank in ranks for span in rank.spans}
    job_id = next((str_attr(rank.resource, sc.JOB_ID) for rank in ranks if rank.resource), None)
    root = format(sc.job_trace_ids(job_id)[1], "016x") if job_id else None
    for rank in ranks:
        if rank.incomplete or rank.evidence or rank.partial:
            continue
        unfinished = {s.parent_span_id for s in rank.spans if s.parent_span_id and s.parent_span_id not in every_span}
        unfinished.discard(root)
        if job_id and rank.rank is not None:  # its group in the job's trace: structure, never measured
            unfinished.discard(format(sc.rank_group_id(job_id, rank.rank), "016x"))
        if root is not None and unfinished:
            rank.incomplete = True
            rank.last_state = UnfinishedSpans(unfinished_parent_spans=len(unfinished))


def model_loads(spans: list[Span], by_id: dict[str, Span]) -> list[Span]:
    """The loads that say how the model was loaded: a DCP ``set_state_dict`` first (its options decide who needed
    the checkpoint, whatever read it before), then ``from_pretrained`` and DCP loads in order."""
    models = outermost(spans, sc.MODEL_LOAD_SPANS, by_id)
    first = [span for span in models if span.name == sc.SPAN_DCP_SET_STATE_DICT]
    return first + [span for span in models if span.name != sc.SPAN_DCP_SET_STATE_DICT]


def summarize_rank(
    trace_id: str,
    rank: int | None,
    instance: str | None,
    spans: list[Span],
    resource: dict[str, Any] | None = None,
    attempt: tuple[int | None, str | None, int] = (None, None, 0),
) -> RankLoad:
    """The rank's record from its spans alone (``apply_processes`` adds what its state files and witness say): who it
    is, then what its loads read, how much memory they took, and whether the last one raised."""
    spans = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    by_id = {span.span_id: span for span in spans if span.span_id}
    if resource is None:
        resource = spans[0].resource if spans else ({sc.RANK: rank} if rank is not None else {})
    loads = outermost(spans, sc.LOAD_SPANS, by_id)
    pretrained = outermost(spans, frozenset({sc.SPAN_FROM_PRETRAINED}), by_id)
    models = model_loads(spans, by_id)
    strategies = [str_attr(s.attributes, sc.STRATEGY) for s in models]
    checkpoints = [str_attr(s.attributes, sc.CHECKPOINT) for s in models]
    return RankLoad(
        trace_id=trace_id,
        attempt=attempt[0],
        launch_id=attempt[1],
        run=attempt[2],
        rank=rank,
        instance=str_attr(resource, sc.SERVICE_INSTANCE_ID) or instance,
        world_size=_positive(resource.get(sc.WORLD_SIZE)),
        local_world_size=_positive(resource.get(sc.LOCAL_WORLD_SIZE)),
        host=str_attr(resource, sc.HOST_NAME),
        # A rank that loaded several models is judged by its first: the strategy a job runs under does not change.
        strategy=next((s for s in strategies if s), None),
        checkpoint=next((c for c in checkpoints if c), None) or str_attr(resource, sc.CHECKPOINT),
        load_seconds=round(sum(s.seconds for s in loads), 6) if loads else None,
        class_import_seconds=class_import_seconds(spans, loads),
        loads=len(loads),
        resource=resource,
        spans=spans,
        failed=_failure(loads),
        checkpoint_tensor_bytes=max_known(models, sc.CHECKPOINT_TENSOR_BYTES),
        **_workload(spans),
        **_reads(spans, loads, pretrained),
        **_memory(spans, loads),
    )


def _workload(spans: list[Span]) -> dict[str, Any]:
    """What kind of job the rank was (RankLoad's ``workload`` and ``serving_engine``): training when any span saw a
    sign of it (a ``deepspeed.initialize`` is one, whatever loadtrace wrote it), else what its spans say."""
    said = {str_attr(span.attributes, sc.WORKLOAD) for span in spans}
    if sc.WORKLOAD_TRAINING in said or any(span.name == sc.SPAN_DEEPSPEED_INITIALIZE for span in spans):
        workload: str | None = sc.WORKLOAD_TRAINING
    else:
        workload = sc.WORKLOAD_INFERENCE if sc.WORKLOAD_INFERENCE in said else None
    engines = (str_attr(span.attributes, sc.SERVING_ENGINE) for span in spans)
    return {"workload": workload, "serving_engine": next((engine for engine in engines if engine), None)}


# An import that ended this close before a load began is the one the load's caller made for it: the model's class,
# which ``AutoModel*.from_pretrained`` imports before it calls the class's own ``from_pretrained`` (0.5-1 ms here).
IMPORT_BEFORE_LOAD_NS = 50_000_000


def class_import_seconds(spans: list[Span], loads: list[Span]) -> float | None:
    """Seconds of the hooked libraries' imports (the startup span's ``loadtrace.startup.imports``) that ended at most
    ``IMPORT_BEFORE_LOAD_NS`` before one of the loads began: the model's class, imported before its ``from_pretrained``
    where ``load_seconds`` starts, so counted in the startup's imports and not in ``load_seconds``. None: none."""
    found = []
    for span in spans:
        times = span.attributes.get(sc.STARTUP_IMPORTS) if span.name == sc.SPAN_STARTUP else None
        if not isinstance(times, list) or not all(type(t) is int for t in times):
            continue
        for start, end in zip(times[::2], times[1::2], strict=False):
            if any(0 <= load.start_ns - end <= IMPORT_BEFORE_LOAD_NS for load in loads):
                found.append(end - start)
    return round(sum(found) / 1e9, 6) if found else None


def _reads(spans: list[Span], loads: list[Span], pretrained: list[Span]) -> dict[str, Any]:
    """What the rank's loads read, converted, materialised and held (RankLoad's fields of that name)."""
    # Read bytes outside every load: a bare file span, or ``safetensors.torch.load(bytes)`` without a file of its own.
    stray_files = [s for s in spans if s.name in sc.FILE_SPANS | sc.BYTES_SPANS and not inside_any(s, loads)]
    readers = loads + stray_files
    renamed = sc.convert_op_key(sc.RENAME_OP, "bytes")
    materialized: dict[str, int] = {}
    held: dict[str, int] = {}
    for load in loads:
        _add(materialized, by_device(load.attributes, sc.MATERIALIZED_BYTES_PREFIX))
    for load in pretrained:
        _add(held, by_device(load.attributes, sc.HELD_BYTES_PREFIX))
    files_opened = sum(int_attr(s.attributes, sc.FILES_OPENED) for s in loads)
    return {
        "files_opened": files_opened + _distinct_files(s for s in stray_files if s.name in sc.FILE_SPANS),
        "tensors_read": sum(int_attr(s.attributes, sc.READ_TENSORS) for s in readers),
        "read_bytes": sum(int_attr(s.attributes, sc.READ_BYTES) for s in readers),
        # A load counts each conversion made under it once, in whichever phase: ZeRO-3 converts outside
        # ``transformers.convert``.
        "conversions": sum(int_attr(s.attributes, sc.CONVERT_COUNT) for s in loads),
        "conversion_bytes": sum(int_attr(s.attributes, sc.CONVERT_BYTES) for s in loads),
        "materialized_bytes": dict(sorted(materialized.items())),
        "materialized_sites": merge_sites(loads),
        "held_bytes": dict(sorted(held.items())),
        "hook_errors": sum(int_attr(s.attributes, sc.HOOK_ERRORS) for s in loads),
        "rename_bytes": sum(int_attr(s.attributes, renamed) for s in loads),
        "partial_tensors": sum(int_attr(s.attributes, sc.READ_PARTIAL_TENSORS) for s in readers),
        "partial_bytes": sum(int_attr(s.attributes, sc.READ_PARTIAL_BYTES) for s in readers),
        "storage_read_bytes": sum_known(loads, sc.IO_STORAGE_READ_BYTES),
        "storage_read_intervals": _fetching(loads),
        "cached_bytes": sum_known(loads, sc.IO_CACHED_BYTES),
    }


def _distinct_files(files: Iterable[Span]) -> int:
    """Files opened outside every load, each once however often it was opened (as a load counts its own: a path, or
    a file span without one on its own)."""
    return len({str_attr(span.attributes, sc.FILE_PATH) or span.span_id for span in files})


def _fetching(loads: list[Span]) -> list[Interval] | None:
    """When the loads fetched from storage (``loadtrace.io.storage_read_intervals``, merged); None unless every load
    carries it (a partial union would read as a real figure)."""
    found: list[Interval] = []
    for load in loads:
        stretches = pairs(load.attributes.get(sc.IO_STORAGE_READ_INTERVALS))
        if stretches is None:
            return None
        found += stretches
    return union(found) if loads else None


def _memory(spans: list[Span], loads: list[Span]) -> dict[str, Any]:
    """The loads' memory readings and the limit that applied (RankLoad's fields of that name)."""
    # Every load span, nested ones too: a custom ``loadtrace.load`` around ``from_pretrained`` has the same peak.
    peaks = [int_attr(s.attributes, sc.RSS_PEAK) for s in spans if s.name in sc.LOAD_SPANS]
    limit = min_known(loads, sc.MEMORY_LIMIT)
    limit_source = next(
        (
            str_attr(s.attributes, sc.MEMORY_LIMIT_SOURCE)
            for s in loads
            if opt_int_attr(s.attributes, sc.MEMORY_LIMIT) == limit
        ),
        None,
    )
    return {
        "peak_rss_bytes": max((p for p in peaks if p > 0), default=None),
        "node_memory_bytes": max((int_attr(s.attributes, sc.NODE_MEMORY_TOTAL) for s in loads), default=0) or None,
        "memory_limit_bytes": limit,
        "memory_limit_source": limit_source if limit is not None else None,
        # Before: the first load's (the process before any loading); after: the last one's.
        "rss_before_bytes": first_known(loads, sc.RSS_BEFORE),
        "rss_after_bytes": first_known(loads[::-1], sc.RSS_AFTER),
        "peak_rss_anon_bytes": max_known(loads, sc.rss_key("anon", "peak")),
        "peak_rss_file_bytes": max_known(loads, sc.rss_key("file", "peak")),
        "peak_rss_shmem_bytes": max_known(loads, sc.rss_key("shmem", "peak")),
        "rss_anon_before_bytes": first_known(loads, sc.rss_key("anon", "before")),
        "rss_file_before_bytes": first_known(loads, sc.rss_key("file", "before")),
        "node_available_bytes": min_known(loads, sc.NODE_MEMORY_AVAILABLE),
        "cgroup_memory_current_bytes": max_known(loads, sc.CGROUP_MEMORY_CURRENT),
        "cgroup_memory_max_bytes": min_known(loads, sc.CGROUP_MEMORY_MAX),
    }


def _failure(loads: list[Span]) -> str | None:
    """The exception type the last load raised; None when it finished, or was stopped by a signal (incomplete, not
    failed)."""
    last_load = loads[-1] if loads else None
    if last_load is None or last_load.status_code != STATUS_ERROR or str_attr(last_load.attributes, sc.EXIT_SIGNAL):
        return None
    return str_attr(last_load.attributes, sc.ERROR_TYPE) or UNKNOWN_ERROR


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
