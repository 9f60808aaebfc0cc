"""The report as typed records, and the one place they become JSON (``to_json``). docs/report.md documents every key.

Each record's fields are its JSON keys, in JSON order, holding exactly the JSON's values (rounded where the JSON
rounds), so the table (``loadtrace.render``) and the JSON say the same thing. A field that is working data of the
analysis rather than part of the report is marked ``NOT_IN_JSON``. Dict keys that are rank numbers become strings in
JSON, as JSON object keys must.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .. import semconv as sc
from .sources import Span

# Field metadata: left out of the JSON (a rank's spans and resource), or left out while None (an optional block).
NOT_IN_JSON = {"json": False}
OMITTED_WHEN_NONE = {"omit_none": True}


_PLAIN = (str, int, float, type(None))  # bool is an int
_LEAVES = frozenset({str, int, float, bool, type(None)})  # items taken as they are (a host list's 128 names)
# Per record class: its JSON fields, each with whether it is left out while None (``jobs`` turns 10,000 rows).
_JSON_FIELDS: dict[type, list[tuple[str, bool]]] = {}


def to_json(value: Any) -> Any:
    """A report record (or any part of one) → plain JSON data: dicts, lists, numbers, strings, null."""
    if isinstance(value, _PLAIN):
        return value
    fields = _JSON_FIELDS.get(type(value))
    if fields is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [
            (f.name, bool(f.metadata.get("omit_none")))
            for f in dataclasses.fields(value)
            if f.metadata.get("json", True)
        ]
        _JSON_FIELDS[type(value)] = fields
    if fields is not None:
        result = {}
        for name, omit_none in fields:
            content = getattr(value, name)
            if not (omit_none and content is None):
                result[name] = to_json(content)
        return result
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a NamedTuple: a small record
        return {key: to_json(content) for key, content in value._asdict().items()}
    if isinstance(value, dict):
        return {str(key): item if type(item) in _LEAVES else to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [item if type(item) in _LEAVES else to_json(item) for item in value]
    return value


# The signals a launcher or a person stops a rank with (as opposed to one that kills it).
STOPPING_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")

# Findings' severities: a warning fails ``--fail-on-findings``, info never does.
WARNING, INFO = "warning", "info"


# One rank ---------------------------------------------------------------------------------------------------------


class Site(NamedTuple):
    """A call site that created tensors while loading (``modeling_utils.py:4864 zeros_like cpu``) and its bytes."""

    site: str
    bytes: int


@dataclass
class Exit:
    """How a rank's process ended, when that is known: all None for a rank that finished (or whose end nobody saw).

    ``source`` is ``launcher`` (the launcher's witness span: it saw the process die) or ``rank`` (the rank itself
    caught a termination signal and said so on its spans or in its state file)."""

    signal: str | None = None  # SIGKILL, SIGTERM, ...
    code: int | None = None  # the exit status, when it exited rather than being killed
    oom_killed: bool | None = None  # the cgroup's OOM killer did it (None: unknown)
    source: str | None = None

    def describe(self, form: str = "status") -> str:
        """How the rank ended, in one of three forms; empty for a rank that ended cleanly (or unseen).

        ``status``: as the rank_exit span's status says it (``SIGKILL (OOM)``, ``SIGTERM``, ``exit code 1``);
        ``cell``: a table cell (``SIGKILL OOM``, ``exit 1``); ``sentence``: after a rank's name (``was OOM-killed``,
        ``was stopped by SIGTERM``, ``was killed (SIGKILL)``, ``exited with code 3``, ``died``)."""
        if form == "sentence":
            return self._sentence()
        if self.signal is None and self.code is None:
            return ""
        if form == "cell":
            return f"{self.signal} OOM" if self.signal and self.oom_killed else (self.signal or f"exit {self.code}")
        return sc.exit_phrase(self.signal, self.code, self.oom_killed)

    def _sentence(self) -> str:
        if self.oom_killed:
            return "was OOM-killed"
        if self.signal in STOPPING_SIGNALS:
            return f"was stopped by {self.signal}"
        if self.signal == "SIGKILL":
            return "was killed (SIGKILL)"
        if self.signal is not None:
            return f"died of {self.signal}"
        return f"exited with code {self.code}" if self.code is not None else "died"


@dataclass
class LastState:
    """A rank's last known state: its state file (exact at the moment it died) or, without one, the launcher's witness
    span of its death. The totals are those of its open (or last) load."""

    source: str  # "state file" | "launcher witness"
    time_unix_nano: int
    status: str | None  # loading | signalled | idle | exited
    during: str | None  # the innermost span it had open
    load: str | None  # the outermost load it had open
    load_start_unix_nano: int | None
    strategy: str | None
    files_opened: int
    tensors_read: int
    read_bytes: int
    materialized_bytes: dict[str, int]
    conversions: int
    conversion_bytes: int
    hook_errors: int
    peak_rss_bytes: int | None
    memory_limit_bytes: int | None
    memory_limit_source: str | None
    # What the load had fetched from storage by the rank's last reading (docs/report.md, Storage words), and when that
    # was and the stretches it moved in; None where not known (an older loadtrace).
    storage_read_bytes: int | None = None
    storage_read_as_of: int | None = field(default=None, repr=False, metadata=NOT_IN_JSON)
    storage_read_intervals: list[tuple[int, int]] | None = field(default=None, repr=False, metadata=NOT_IN_JSON)


@dataclass
class UnfinishedSpans:
    """An incomplete rank with neither a state file nor a witness: how many load or phase spans its finished spans
    hang from but never ended."""

    unfinished_parent_spans: int


@dataclass(eq=False)  # identity: one record per rank, usable as a dict key
class RankLoad:
    """One rank of one job: what it opened, read, converted, materialised and held (a row of ``ranks``)."""

    trace_id: str
    attempt: int | None  # the job's attempt (``loadtrace.attempt``), None when no process says
    launch_id: str | None  # this rank's ``loadtrace.launch.id``
    run: int  # 0, or the n-th time the same ranks ran again within one attempt (told apart by their pids)
    rank: int | None
    instance: str | None
    world_size: int | None
    local_world_size: int | None
    host: str | None
    strategy: str | None
    checkpoint: str | None
    load_seconds: float | None  # rounded to the microsecond
    # The import of the model's class just before its load (AutoModel's), in the startup's imports, not in load_seconds.
    class_import_seconds: float | None
    loads: int
    files_opened: int
    tensors_read: int
    read_bytes: int
    conversions: int
    conversion_bytes: int
    materialized_bytes: dict[str, int]
    materialized_sites: list[Site]
    held_bytes: dict[str, int]
    peak_rss_bytes: int | None
    hook_errors: int
    resource: dict[str, Any] = field(repr=False, metadata=NOT_IN_JSON)
    spans: list[Span] = field(repr=False, metadata=NOT_IN_JSON)
    node_memory_bytes: int | None = None
    # What kind of job the rank showed itself to be (``loadtrace.workload``): training when any of its spans saw a
    # sign of training, else inference; None when its spans do not say (an older loadtrace). The serving engine it
    # imported (vllm, sglang), if any.
    workload: str | None = None
    serving_engine: str | None = None
    # The memory limit that applies: ``loadtrace.memory.limit`` of the loads, else the lower of the node's memory and
    # the cgroup's limit; its source: "cgroup v1", "cgroup v2", "cgroup" (version unknown) or "node".
    memory_limit_bytes: int | None = None
    memory_limit_source: str | None = None
    # Memory and I/O of the loads (docs/report.md): None when the spans do not carry them (an older loadtrace).
    rss_before_bytes: int | None = None
    rss_after_bytes: int | None = None
    peak_rss_anon_bytes: int | None = None
    peak_rss_file_bytes: int | None = None
    peak_rss_shmem_bytes: int | None = None
    rss_anon_before_bytes: int | None = field(default=None, metadata=NOT_IN_JSON)  # the forecast's, not the report's
    rss_file_before_bytes: int | None = field(default=None, metadata=NOT_IN_JSON)
    storage_read_bytes: int | None = None
    cached_bytes: int | None = None
    # When those bytes moved (``loadtrace.io.storage_read_intervals`` of its loads, docs/report.md, Storage words), and
    # for a rank that died loading, when its count was last read (its figure is the bytes up to then).
    storage_read_intervals: list[tuple[int, int]] | None = field(default=None, repr=False, metadata=NOT_IN_JSON)
    storage_read_as_of: int | None = field(default=None, repr=False, metadata=NOT_IN_JSON)
    node_available_bytes: int | None = None
    cgroup_memory_current_bytes: int | None = None
    cgroup_memory_max_bytes: int | None = None
    # Started loading and never finished (killed, stopped): from its state file, the launcher's witness, spans ended by
    # a signal, or spans whose parent never ended.
    incomplete: bool = False
    # Its trace file lost spans (cut short, or lines that could not be read): what its row shows is what survived, and
    # no finding is drawn from what is missing.
    partial: bool = False
    failed: str | None = None  # the exception type its (last) load raised
    exit: Exit = field(default_factory=Exit)
    last_state: LastState | UnfinishedSpans | None = None
    evidence: bool = field(default=False, repr=False, metadata=NOT_IN_JSON)  # a state file or a witness told of it
    # Working data of the findings, shown in their evidence (docs/report.md, Findings): the checkpoint's tensor bytes
    # (``loadtrace.checkpoint.tensor_bytes``), bytes of conversions that only renamed a key (``Rename`` alone), and
    # reads that returned only part of a tensor (``loadtrace.read.partial_*``).
    checkpoint_tensor_bytes: int | None = field(default=None, repr=False, metadata=NOT_IN_JSON)
    rename_bytes: int = field(default=0, repr=False, metadata=NOT_IN_JSON)
    partial_tensors: int = field(default=0, repr=False, metadata=NOT_IN_JSON)
    partial_bytes: int = field(default=0, repr=False, metadata=NOT_IN_JSON)
    # An exception nobody caught, from its state file ("Type: first line", when): the ``loadtrace.exception`` span's
    # words where that span was lost (analysis/skew.py).
    exception: tuple[str, int] | None = field(default=None, repr=False, metadata=NOT_IN_JSON)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else (self.instance or "rank ?")

    def marks(self) -> list[str]:
        """What sets the rank apart from a load that finished, as the table says it after its number: ``incomplete``,
        ``partial`` (its trace file lost spans), ``failed``, how its process ended (``(SIGKILL OOM)``); empty for a rank
        that finished."""
        # Alike ranks share their marks (analysis/alike.py): a word added here makes its ranks outliers too.
        marks = [
            word
            for word, on in (("incomplete", self.incomplete), ("partial", self.partial), ("failed", self.failed))
            if on
        ]
        if ended := self.exit.describe("cell"):
            marks.append(f"({ended})")
        return marks


# One job ----------------------------------------------------------------------------------------------------------


@dataclass
class NodeReads:
    """One node's I/O: what its ranks asked for against what its storage delivered (docs/report.md, I/O per node)."""

    host: str | None
    ranks: list[int | None]
    readers: int
    read_bytes: int
    storage_read_bytes: int | None
    cached_bytes: int | None
    times_asked: float | None
    times_read_from_storage: float | None
    # The checkpoint files the node's ranks opened, each at its first open: their bytes, and those the page cache did
    # not hold then (cold: not bytes fetched, docs/report.md, Storage words); None where a file's residency is unknown.
    checkpoint_file_bytes: int | None = None
    checkpoint_cold_bytes: int | None = None
    outcome: str | None = None  # cold | partly_cold | warm; None without residency
    note: str | None = None


@dataclass
class PartialFile:
    """A trace file of the job that lost spans: the ranks it speaks for are ``partial``."""

    path: str
    skipped_lines: int  # lines that could not be read
    cut_short: bool  # its last line ends without a newline: the file was cut (a full disk, a copy in flight)
    ranks: list[int | None]  # the job's ranks its readable lines speak for


@dataclass
class JobSummary:
    """One job (trace) of the report: an entry of ``traces``."""

    trace_id: str
    attempt: int | None
    launch_id: str | None  # several, comma-separated, when the job's nodes ran under separate launcher invocations
    run: int
    job_id: str | None
    start_time: str | None
    world_size: int | None
    ranks: list[int | None]
    model_bytes: int
    spans: int
    nodes: list[NodeReads]
    startup: Startup | None = field(default=None, metadata=OMITTED_WHEN_NONE)  # None when nothing loaded
    # Ranks below the world size that left no spans and no state file here (another node's files, a lost file).
    missing_ranks: list[int] = field(default_factory=list)
    partial_files: list[PartialFile] = field(default_factory=list)


@dataclass
class Finding:
    """Duplicate work a job's strategy says should not happen (or, as info, a replica it says should)."""

    trace_id: str
    attempt: int | None
    run: int
    kind: str
    severity: str
    ranks: list[int]
    bytes: int
    projected_node_bytes: int
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)  # kind-specific numbers behind the finding
    next_step: str | None = None  # what removes it, and the upstream report it matches (analysis/advice.py)
    # The cause it is a symptom of (semconv.CAUSE_*), shared by the job's other symptoms of it; None: its own cause.
    cause: str | None = None
    # collective_timeout only: the ranks still loading when the collective timed out (analysis/skew.py).
    waiting_for: list[dict[str, Any]] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # For the table: what the ranks did ("read 1.0 MB of checkpoint tensors (100% of the model)"), the projected host
    # memory sentence, and the share of the model the worst rank's bytes are (the detail says all of it, in words).
    symptom: str = field(default="", repr=False, metadata=NOT_IN_JSON)
    projection: str = field(default="", repr=False, metadata=NOT_IN_JSON)
    model_share: float = field(default=0.0, repr=False, metadata=NOT_IN_JSON)


# The forecast -----------------------------------------------------------------------------------------------------


@dataclass
class MeasuredJob:
    model_bytes: int
    world_size: int
    ranks_per_node: int


@dataclass
class TargetJob:
    model_bytes: int
    given_as: str | None
    world_size: int
    world_size_given: bool
    ranks_per_node: int


@dataclass
class FixedBytes:
    """A rank's RSS before the load: the same at the target."""

    from_bytes: int
    to_bytes: int


@dataclass
class ScaledBytes:
    """A rank's bytes of one category, and the share of its RSS growth they stand for, measured and at the target."""

    from_bytes: int
    to_bytes: int
    from_growth_bytes: int
    to_growth_bytes: int


@dataclass
class FixedCategory:
    scaled_by: str
    ranks: dict[int, FixedBytes]


@dataclass
class ScaledCategory:
    scaled_by: str
    ranks: dict[int, ScaledBytes]  # only the ranks with bytes of this category, measured or at the target


@dataclass
class Categories:
    fixed: FixedCategory
    once_per_job: ScaledCategory
    per_rank: ScaledCategory
    duplicated: ScaledCategory

    @property
    def scaled(self) -> tuple[ScaledCategory, ScaledCategory, ScaledCategory]:
        return self.once_per_job, self.per_rank, self.duplicated


@dataclass
class RankBasis:
    """One measured rank's numbers and what they become at the target."""

    strategy: str | None
    calibration: str  # the calibration entry used: "5.12.0 fsdp_cpu_ram_efficient/other"
    rss_per_load_byte: list[float]  # low, mid, high, as widened by the confidence
    rss_before_bytes: int
    peak_rss_bytes: int
    growth_bytes: int
    load_bytes: int
    load_bytes_explain: float  # the share of the growth its load bytes explain at the calibrated rate
    not_model_bytes: int  # growth they do not explain (in its worst window): not scaled
    worst_window: str  # the span (load or phase) whose peak is the rank's at the target
    target_load_bytes: int
    target_file_backed_bytes: int
    target_peak_bytes: int
    target_peak_range_bytes: list[int]


class LeftOutRank(NamedTuple):
    rank: int
    why: str


@dataclass
class NodeProfile:
    """``count`` ranks of a node with rank ``rank``'s profile."""

    rank: int | None
    count: int


@dataclass
class NodeBasis:
    profiles: list[NodeProfile]
    sum_of_rank_peaks_bytes: int
    file_backed_bytes_counted_once: int
    node_0_peak_bytes: int
    other_nodes_peak_bytes: int | None
    node_memory_source: str | None
    memory_limit_source: str | None  # cgroup v1 | cgroup v2 | cgroup | node, None when given or unknown
    headroom_bytes: int | None


@dataclass
class ForecastBasis:
    text: str
    trace_id: str
    job_id: str | None
    measured: MeasuredJob
    target: TargetJob
    model_scale: float  # rounded to 6 decimals
    categories: Categories
    ranks: dict[int, RankBasis]
    left_out_ranks: list[LeftOutRank]
    node: NodeBasis
    calibration: str  # what the calibration file says it was made from


@dataclass
class Confidence:
    level: str  # high | medium | low
    reason: str  # one line


@dataclass
class Forecast:
    model_bytes: int
    ranks_per_node: int
    per_rank_peak_bytes: dict[int, int]
    per_rank_peak_range_bytes: dict[int, list[int]]  # [low, high]
    per_node_peak_bytes: int
    per_node_peak_range_bytes: list[int]  # [low, high]
    node_memory_bytes: int | None
    verdict: str | None  # ok | oom | uncertain (the node's memory inside the range) | None (node memory unknown)
    confidence: Confidence
    basis: ForecastBasis


# The report and the comparison ------------------------------------------------------------------------------------


@dataclass
class Report:
    """``loadtrace report``: lists in the order the table shows them."""

    traces: list[JobSummary]
    ranks: list[RankLoad]
    findings: list[Finding]
    skipped_lines: int
    skipped_state_files: int = 0
    forecast: Forecast | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @property
    def has_warnings(self) -> bool:
        return any(finding.severity == WARNING for finding in self.findings)


@dataclass
class ComparedJob:
    """One side of a comparison: the job picked from its source (``--a-job`` / ``--b-job``, or its only one)."""

    source: str
    trace_id: str
    job_id: str | None
    attempt: int | None
    run: int
    start_time: str | None
    skipped_lines: int


@dataclass
class PhaseRow:
    """One (phase, rank, metric): A's value, B's, B − A and B / A (None where either is unknown, or A is 0)."""

    phase: str
    rank: int
    metric: str
    a: float | int | None
    b: float | int | None
    difference: float | int | None
    ratio: float | None


@dataclass
class ResourceRow:
    """A property of the two jobs (world size, a load parameter, a library version): each side's value, ``a, b`` where
    its ranks disagree."""

    name: str
    a: str | None
    b: str | None
    differs: bool


@dataclass
class Comparison:
    """``loadtrace compare``."""

    a: ComparedJob
    b: ComparedJob
    phases: list[PhaseRow]
    resources: list[ResourceRow]
    # The table's rows of ranks, in order: alike ranks (in A and in B) together, every other rank alone
    # (analysis/alike.py); empty: a row per rank.
    rank_rows: list[list[int]] = field(default_factory=list, metadata=NOT_IN_JSON)
    # Rank number → the hosts of the whole nodes a finding of A or B tells it among (``alike.node_outliers``): a shared
    # row of such ranks is titled as the node.
    whole_nodes: dict[int, list[str]] = field(default_factory=dict, metadata=NOT_IN_JSON)


# A job's startup (issue 14; docs/report.md, Startup) ------------------------------------------------------------------


@dataclass
class RankStartup:
    """One rank's startup: its length and how it splits into phases (seconds, rounded to the microsecond)."""

    rank: int | None
    host: str | None
    seconds: float
    measured_from: str  # "startup span" (loadtrace.startup) | "spans" (first span to the end of the last load)
    phases: dict[str, float]  # every phase of STARTUP_PHASES, in that order; they add up to ``seconds``
    partial: bool = False  # the rank's trace file lost spans: shown, never judged (not the slowest, not in the median)


@dataclass
class NodeStartup:
    """One node's storage (docs/report.md, Storage words): what its ranks fetched from storage while they loaded, over
    the time it moved in."""

    host: str | None
    ranks: list[int | None]
    checkpoint: str | None  # cold | partly_cold | warm (the checkpoint's residency at first open); None unknown
    storage_bytes: int | None  # fetched from storage by the node's ranks during their loads; None unless all known
    fetch_seconds: float | None  # the time it moved in: the union of their fetching stretches; None unless all known
    storage_bytes_per_second: float | None  # storage_bytes / fetch_seconds from MIN_RATE_SECONDS on; None below
    # Ranks that died loading: their storage figures end at their last reading (its time, ns), not at their death.
    counted_to_last_reading: list[int | None] = field(default_factory=list)


@dataclass
class Startup:
    """A job's startup: it starts when its slowest rank is ready."""

    seconds: float | None  # the slowest rank's
    slowest_rank: int | None
    # The phase that put the slowest rank furthest behind the others, when it explains a real difference
    # (``startup.explaining_phase``); None otherwise.
    slowest_phase: str | None
    median_rank_seconds: float | None
    storage_bytes_per_second: float | None  # the median of the nodes that read from storage
    ranks: list[RankStartup]
    nodes: list[NodeStartup]
