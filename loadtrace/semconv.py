"""The vocabulary both halves share: span names, attribute keys and prefixes, strategies, finding kinds.

The instrumentation half writes these names and the analysis half reads them back; spelling each once, here, makes a
rename an import error instead of a report that silently reads zero. Standard library only: the role the
``opentelemetry-semantic-conventions`` package plays for OTel's own names, and ddtrace's ``constants.py`` for its
integrations. docs/reference.md's "Span and attribute reference" documents
every name below, and a test holds the two equal.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import urllib.parse
from collections.abc import Mapping
from typing import Any, NamedTuple

# The instrumentation scope every loadtrace span is emitted under.
SCOPE_NAME = "loadtrace"


def job_trace_ids(job_id: str) -> tuple[int, int]:
    """The trace id and the job root span's id, derived from the job id: every rank computes the same pair without
    talking to the others, and the report finds the root by the same rule."""
    digest = hashlib.sha256(f"loadtrace:{job_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def rank_group_id(job_id: str, rank: int) -> int:
    """The span id of rank ``rank``'s group in the job's trace (``SPAN_RANK_GROUP``): the rank's parentless spans
    name it as their parent, rank 0 (or ``loadtrace annotate``) writes it, each by the same rule."""
    digest = hashlib.sha256(f"loadtrace:{job_id}:rank:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def loads_trace_id(job_id: str) -> int:
    """The trace id of the job's loads view (``SCOPE_LOADS_VIEW``): the loads alone, beside the job's own trace."""
    digest = hashlib.sha256(f"loadtrace-loads:{job_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


# Where the structure sits in time. Jaeger's UI orders a span's children by start time, to the microsecond, and the
# query service flags a child that starts before its parent, or ends after it without lasting longer (its clock-skew
# check): the root lasts one step from the job's start, the findings and each rank's group two steps, the findings
# first, then the ranks in rank order; every real span then starts after its group and lasts longer than it.
STRUCTURE_STEP_NS = 1_000


def structure_lead_ns(world_size: int) -> int:
    """How long before the job's earliest span its root starts: room for the findings and every rank's group."""
    return (max(world_size, 1) + 4) * STRUCTURE_STEP_NS


def rank_group_start(job_start_ns: int, rank: int) -> int:
    return job_start_ns + (rank + 3) * STRUCTURE_STEP_NS


def rank_service(service: str, rank: int) -> str:
    """The service name of rank ``rank``'s spans: Jaeger labels and colours a row by it (docs/jaeger.md says why)."""
    return f"{service} rank {rank}"


def model_name(checkpoint: Any, model_class: Any) -> str | None:
    """What a person calls the model a job loaded: its checkpoint's last path component, else its class."""
    name = str(checkpoint or "").rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return name or (str(model_class) if model_class else None)


def job_operation(model: str | None, world_size: int | None) -> str:
    """The root span's name, which Jaeger's search list shows as the trace's: ``Llama-3.1-8B on 1,024 ranks``."""
    ranks = f"{world_size:,} rank{'' if world_size == 1 else 's'}" if world_size else "an unknown number of ranks"
    return f"{model or 'no model loaded'} on {ranks}"


def readable_bytes(value: int) -> str:
    """``1.0 MB``, ``393.2 kB``, ``64 B``: decimal units, as the report's table writes them (cli/render.py)."""
    for unit, scale in (("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


# Span names ---------------------------------------------------------------------------------------------------------

SPAN_JOB = "loadtrace.job"  # the job's root, written once by rank 0
SPAN_LOAD = "loadtrace.load"  # ``with loadtrace.traced_load(name):``
SPAN_FROM_PRETRAINED = "transformers.from_pretrained"
SPAN_LOAD_STATE_DICT = "transformers.load_state_dict"
SPAN_CONVERT = "transformers.convert"
SPAN_ZERO3_LOAD = "transformers.zero3_load"
SPAN_MATERIALIZE_MISSING = "transformers.materialize_missing"
SPAN_SAFETENSORS_OPEN = "safetensors.open"
SPAN_SAFETENSORS_LOAD = "safetensors.load"  # ``safetensors.torch.load(bytes)``: reads without a file of their own
SPAN_SAFETENSORS_READ = "safetensors.read"  # LOADTRACE_DETAIL=tensor only
SPAN_TORCH_LOAD = "torch.load"
SPAN_TORCH_MATERIALIZE = "torch.materialize"  # LOADTRACE_DETAIL=tensor only
# Streaming loaders (issue 49): each rank's own reads, outside Python, counted from the headers' byte ranges.
SPAN_FASTSAFETENSORS_LOAD = "fastsafetensors.load"  # copy_files_to_device until its buffer is closed
SPAN_FASTSAFETENSORS_READ = "fastsafetensors.read_file"  # one file this rank read (its own reads, O_DIRECT or GDS)
SPAN_RUNAI_LOAD = "runai_streamer.load"  # SafetensorsStreamer.stream_files until get_tensors is exhausted
SPAN_RUNAI_READ = "runai_streamer.read_file"  # one file the streamer's C++ threads read for this rank
# torch.distributed.checkpoint (issue 24): ``dcp.load`` / ``load_state_dict``, ``set_model_state_dict`` /
# ``set_state_dict``, and one span per checkpoint file its ``FileSystemReader`` reads.
SPAN_DCP_LOAD = "dcp.load"
SPAN_DCP_SET_STATE_DICT = "dcp.set_state_dict"
SPAN_DCP_FILE = "dcp.read_file"
SPAN_DCP_READ_METADATA = "dcp.read_metadata"  # phase: the storage reader reads the checkpoint's metadata
SPAN_DCP_READ_DATA = "dcp.read_data"  # phase: the storage reader reads this rank's plan
# accelerate's ``load_checkpoint_in_model`` (``load_checkpoint_and_dispatch`` calls it): the DCP loads it makes per
# file are inside it.
SPAN_ACCELERATE_LOAD_CHECKPOINT = "accelerate.load_checkpoint_in_model"

# Streaming loaders' loads: each knows the tensor bytes of the files it was given, not always the whole checkpoint's.
STREAM_LOAD_SPANS = frozenset({SPAN_FASTSAFETENSORS_LOAD, SPAN_RUNAI_LOAD})
LOAD_SPANS = frozenset(
    {
        SPAN_FROM_PRETRAINED,
        SPAN_LOAD,
        SPAN_DCP_LOAD,
        SPAN_DCP_SET_STATE_DICT,
        SPAN_ACCELERATE_LOAD_CHECKPOINT,
        *STREAM_LOAD_SPANS,
    }
)
# Loads that say how the model was loaded (strategy, checkpoint, its tensor bytes); a ``set_state_dict`` first.
MODEL_LOAD_SPANS = frozenset({SPAN_FROM_PRETRAINED, SPAN_DCP_LOAD, SPAN_DCP_SET_STATE_DICT})
FILE_SPANS = frozenset(
    {SPAN_SAFETENSORS_OPEN, SPAN_TORCH_LOAD, SPAN_DCP_FILE, SPAN_FASTSAFETENSORS_READ, SPAN_RUNAI_READ}
)
BYTES_SPANS = frozenset({SPAN_SAFETENSORS_LOAD})
PHASE_SPANS = frozenset(
    {
        SPAN_LOAD_STATE_DICT,
        SPAN_CONVERT,
        SPAN_ZERO3_LOAD,
        SPAN_MATERIALIZE_MISSING,
        SPAN_DCP_READ_METADATA,
        SPAN_DCP_READ_DATA,
    }
)
POINT_SPANS = frozenset({SPAN_SAFETENSORS_READ, SPAN_TORCH_MATERIALIZE})
SPAN_RANK_EXIT = "loadtrace.rank_exit"  # the launcher's witness: one per worker that died (loadtrace/witness.py)

# The whole startup: rendezvous, the checkpoint load, then the strategy's distribution of the weights.
SPAN_STARTUP = "loadtrace.startup"  # one per rank: process start (or init_process_group) to the end of preparation
SPAN_INIT_PROCESS_GROUP = "torch.init_process_group"  # rendezvous: its duration is the wait for the other ranks
SPAN_ACCELERATE_PREPARE = "accelerate.prepare_model"  # accelerate's model preparation (FSDP/FSDP2 sharding)
SPAN_FSDP2_LOAD_FULL_STATE_DICT = "accelerate.fsdp2_load_full_state_dict"  # rank 0 broadcasts the full state dict
SPAN_DEEPSPEED_INITIALIZE = "deepspeed.initialize"
SPAN_ZERO_INIT = "deepspeed.zero_init"  # inside ``deepspeed.zero.Init``: parameters partitioned as they are created
SPAN_GATHERED_PARAMETERS = "deepspeed.gathered_parameters"  # ``GatheredParameters`` while loading (gather, scatter)
STARTUP_PHASE_SPANS = frozenset(
    {
        SPAN_INIT_PROCESS_GROUP,
        SPAN_ACCELERATE_PREPARE,
        SPAN_FSDP2_LOAD_FULL_STATE_DICT,
        SPAN_DEEPSPEED_INITIALIZE,
        SPAN_ZERO_INIT,
        SPAN_GATHERED_PARAMETERS,
    }
)

# An exception nobody caught, recorded by the process's excepthooks (instrumentation/beside/excepthooks.py) as it
# dies of it: a point span.
SPAN_EXCEPTION = "loadtrace.exception"

# The first sign of training (an optimizer, ``deepspeed.initialize``) when it came after the rank's startup span
# ended: a point span, once per process, with the workload attributes below.
SPAN_TRAINING_SIGN = "loadtrace.training_sign"

# A state file carried into ClickHouse by ``loadtrace ingest`` (analysis/ingest.py): one row per state file, its bytes
# compressed, read back as the state file it was (the table holds spans only otherwise).
SPAN_STATE_FILE = "loadtrace.state_file"
STATE_FILE_PATH = "loadtrace.state_file.path"  # its path under the folder ingested
STATE_FILE_DATA = "loadtrace.state_file.data"  # its bytes, zlib-compressed, in base64

# The job's trace, laid out for Jaeger's UI (docs/jaeger.md): spans that measure nothing, written by rank 0
# (instrumentation/tracing/structure.py) and by ``loadtrace annotate`` (analysis/annotate.py) under a scope of their
# own, which the analysis leaves out. The root (``SPAN_JOB``, named ``job_operation``), the findings under it first,
# then one ``SPAN_RANK_GROUP`` per rank, in rank order, that the rank's own spans hang from.
SCOPE_STRUCTURE = "loadtrace.structure"
SPAN_RANK_GROUP = "loadtrace.rank_group"
SPAN_FINDINGS = "loadtrace.findings"  # its children are named by their finding's kind (``FINDING_KINDS``)
# The same job's loads alone, a trace of their own (``loads_trace_id``): each rank's loads at a readable width, the
# imports before them left out; copies, under this scope, that the analysis leaves out too.
SCOPE_LOADS_VIEW = "loadtrace.loads_view"
NOT_MEASURED_SCOPES = frozenset({SCOPE_STRUCTURE, SCOPE_LOADS_VIEW})

ALL_SPANS = (
    frozenset(
        {
            SPAN_JOB,
            SPAN_RANK_EXIT,
            SPAN_STARTUP,
            SPAN_EXCEPTION,
            SPAN_STATE_FILE,
            SPAN_TRAINING_SIGN,
            SPAN_RANK_GROUP,
            SPAN_FINDINGS,
        }
    )
    | STARTUP_PHASE_SPANS
    | LOAD_SPANS
    | FILE_SPANS
    | BYTES_SPANS
    | PHASE_SPANS
    | POINT_SPANS
)

# Resource attributes (one set per process, on every span) -----------------------------------------------------------

# OpenTelemetry's own semantic conventions (written here so the analysis half needs no OTel package).
SERVICE_NAME = "service.name"
SERVICE_INSTANCE_ID = "service.instance.id"
HOST_NAME = "host.name"
PROCESS_PID = "process.pid"
K8S_POD_NAME = "k8s.pod.name"
K8S_NAMESPACE_NAME = "k8s.namespace.name"
DEFAULT_SERVICE_NAME = "loadtrace"  # ``service.name`` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES set one
# A rank's spans carry ``rank_service(<that name>, rank)`` as ``service.name``, and the name itself here.
SERVICE_NAMESPACE = "service.namespace"

RANK = "loadtrace.rank"
LOCAL_RANK = "loadtrace.local_rank"
WORLD_SIZE = "loadtrace.world_size"
LOCAL_WORLD_SIZE = "loadtrace.local_world_size"
NODE_RANK = "loadtrace.node_rank"
LAUNCHER = "loadtrace.launcher"
JOB_ID = "loadtrace.job.id"  # also on the job's root span
JOB_ID_SOURCE = "loadtrace.job.id_source"
VERSION = "loadtrace.version"
CLUSTER = "loadtrace.cluster"
LIB_PREFIX = "loadtrace.lib."  # + library name: its installed version

# ``Rank`` field → resource attribute.
RANK_FIELDS = {
    "rank": RANK,
    "local_rank": LOCAL_RANK,
    "world_size": WORLD_SIZE,
    "local_world_size": LOCAL_WORLD_SIZE,
    "node_rank": NODE_RANK,
}


def lib_key(library: str) -> str:
    return LIB_PREFIX + library


# Load spans (``transformers.from_pretrained``, ``loadtrace.load``) --------------------------------------------------

MODEL_CLASS = "loadtrace.model.class"
CHECKPOINT = "loadtrace.checkpoint"
CHECKPOINT_BYTES = "loadtrace.checkpoint.bytes"
CHECKPOINT_TENSOR_BYTES = "loadtrace.checkpoint.tensor_bytes"  # the tensors' bytes, from the safetensors headers
DTYPE = "loadtrace.dtype"
STRATEGY = "loadtrace.strategy"
DEVICE_MAP = "loadtrace.device_map"  # ``str()`` of from_pretrained's ``device_map``, absent when not given
TP_PLAN = "loadtrace.tp_plan"  # ``str()`` of its ``tp_plan``, absent when not given
HELD_BYTES_PREFIX = "loadtrace.model.held_bytes."  # + device type
# The whole model as built, every parameter and buffer at its full size in its dtype (a ZeRO-3 partitioned one by
# its ``ds_numel``, a DTensor by its global size): what a rank's share is judged against.
MODEL_BYTES = "loadtrace.model.bytes"
LOAD_NAME = "loadtrace.load.name"
FASTSAFETENSORS_FILES = "loadtrace.fastsafetensors.files"  # the files of a copy_files_to_device, every rank's
RUNAI_DISTRIBUTED = "loadtrace.runai.distributed"  # the streamer split the files' reads between the ranks
# The load name of weights read with no load around them (a bare ``safe_open``, ``load_file``, ``torch.load``, a
# serving engine's weight iterator): their load runs from the first read to the last (tracing/loose.py).
LOAD_NAME_READS = "reads outside any load"
FILES_OPENED = "loadtrace.files.opened"
HOOK_ERRORS = "loadtrace.hook_errors"


def held_bytes_key(device: str) -> str:
    return HELD_BYTES_PREFIX + device


# What kind of job the process is, as far as it showed by then (instrumentation/counting/workload.py): on load spans
# and the startup span at their end; a first sign of training after the startup ended is a span of its own
# (SPAN_TRAINING_SIGN).
WORKLOAD = "loadtrace.workload"  # WORKLOAD_TRAINING or WORKLOAD_INFERENCE
WORKLOAD_TRAINING = "training"  # an optimizer constructed, deepspeed.initialize called, or TRL or Lightning imported
WORKLOAD_INFERENCE = "inference"  # none of those: a replica that reads its weights to serve them
WORKLOAD_EVIDENCE = "loadtrace.workload.evidence"  # what showed it: ``optimizer AdamW``, ``vllm imported``, ...
SERVING_ENGINE = "loadtrace.serving_engine"  # the serving engine imported: vllm or sglang

# Startup --------------------------------------------------------------------------------------------------------------

RENDEZVOUS_BACKEND = "loadtrace.rendezvous.backend"  # init_process_group's backend: gloo, nccl, ...
BROADCAST_BYTES_SENT = "loadtrace.broadcast.bytes_sent"  # weight bytes this rank sent to others (rank 0's broadcast)
BROADCAST_BYTES_RECEIVED = "loadtrace.broadcast.bytes_received"  # weight bytes this rank received from others
BROADCAST_TENSORS = "loadtrace.broadcast.tensors"  # the ``dist.broadcast`` calls those bytes went through
ACCELERATE_DISTRIBUTED_TYPE = "loadtrace.accelerate.distributed_type"  # FSDP, DEEPSPEED, MULTI_GPU, ...
ACCELERATE_FSDP_VERSION = "loadtrace.accelerate.fsdp_version"  # 1 or 2, under FSDP
DEEPSPEED_ZERO_STAGE = "loadtrace.deepspeed.zero_stage"  # the ZeRO stage of the engine deepspeed.initialize made
STARTUP_START = "loadtrace.startup.start"  # where the span's start time comes from: STARTUP_START_*
STARTUP_START_PROCESS = "process"  # the kernel's start time of this process (Linux /proc/self/stat)
STARTUP_START_INSTRUMENT = "instrument"  # where that is unknown: when loadtrace was instrumented
STARTUP_END = "loadtrace.startup.end"  # what ended it: STARTUP_END_*, or a termination signal's name
STARTUP_END_PREPARATION = "preparation"  # the end of accelerate's prepare of a model or deepspeed.initialize
STARTUP_END_LOAD = "load"  # no preparation follows its strategy (plain, tp, a traced_load): its outermost load's end
STARTUP_END_EXIT = "exit"  # none came (a preparation awaited, or a rank that only joined): its last load or phase's end
STARTUP_END_JOB = "job_changed"  # the job id was learnt at init_process_group: a new startup span goes on in its trace
# The hooked libraries' imports during the startup (issue 26): [start, end, start, end, ...] in ns since the epoch, one
# pair per outermost import of a module of torch, transformers, safetensors, accelerate or deepspeed (at most 64 pairs);
# the first pair's end is the end of the first hooked library's import. Only under LOADTRACE=1 (activation.watch).
STARTUP_IMPORTS = "loadtrace.startup.imports"
# The rank's startup split (loadtrace.startup_split, the report's definition): ns per phase, in the order open, read,
# convert, materialize, broadcast, wait, prepare, imports, construct, other; they add up to the span's duration.
STARTUP_PHASE_NS = "loadtrace.startup.phases"
# On a load span: when it opened its first file (ns since the epoch); the time before it is the model's construction.
LOAD_FIRST_FILE_OPEN = "loadtrace.load.first_file_open"
# Above the span budget's world size (instrumentation/exporting/budget.py), on a load whose file spans were not all
# exported: how many were not, and when its last file closed (ns since the epoch): its reading ends there.
FILES_SUMMARIZED = "loadtrace.files.summarized"
LOAD_LAST_FILE_CLOSE = "loadtrace.load.last_file_close"
# Above that world size, on the startup or load span of a rank that exports only those: each of its other spans that
# hung from this one (the nearest exported span above it), whole, one JSON text each (``fold_span``): name, ids, times,
# status and every attribute, so the analysis rebuilds each as the span it was.
FOLDED = "loadtrace.folded"


# Values for machines, not people (timestamps in ns, arrays of them, JSON): on one span event of this name at the
# span's end, not among its attributes, so that Jaeger's UI lists a span's readable figures first; the analysis reads
# the event's attributes as the span's own (files written before it carry them as attributes, read the same way).
DATA_EVENT = "loadtrace.data"  # its keys: DATA_KEYS (below, with the last of them)
# A span's figures in words, for a person reading it in Jaeger (its key sorts before the others): on a load, what it
# read, and the same for what it converted, created, held and its memory (``ABOUT_PREFIX``); on the structure's
# spans, what each is.
ABOUT = "loadtrace.about"
ABOUT_PREFIX = "loadtrace.about."  # + converted, created, held, memory


def about_key(what: str) -> str:
    return ABOUT_PREFIX + what


# The job's root span, besides ``JOB_ID``, ``WORLD_SIZE`` and ``CLUSTER``: the model's name (``model_name``), so that
# a tag search finds the job by it.
MODEL = "loadtrace.model"
# A finding's span (named by its kind) under ``SPAN_FINDINGS``, with ``ABOUT``: the report's words for it.
FOUND_KIND = "loadtrace.finding.kind"
FOUND_SEVERITY = "loadtrace.finding.severity"
FOUND_RANKS = "loadtrace.finding.ranks"  # the ranks as the report says them: ``rank 1``, ``ranks 1-1023``
FOUND_BYTES = "loadtrace.finding.bytes"
FOUND_NEXT = "loadtrace.finding.next"
# ``SPAN_FINDINGS``: what the findings were made from (``files`` of the hosts named, or ``jaeger``), and how many ranks.
FINDINGS_SOURCE = "loadtrace.findings.source"
FINDINGS_RANKS_SEEN = "loadtrace.findings.ranks_seen"


class Folded(NamedTuple):
    """A span folded into ``FOLDED`` of the span it hung from, as the analysis rebuilds it (analysis/summarized.py
    ``unfold``); ids as 16 hex digits, as OTLP JSON writes them."""

    name: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    error: bool
    attributes: dict[str, Any]


def fold_span(
    name: str,
    span_id: int,
    parent_span_id: int | None,
    times: tuple[int, int],
    error: bool,
    attributes: Mapping[str, Any],
) -> str:
    """The folded span's text: compact JSON, sequences as lists."""
    record: dict[str, Any] = {
        "name": name,
        "span_id": f"{span_id:016x}",
        "parent_span_id": f"{parent_span_id:016x}" if parent_span_id else "",
        "start": times[0],
        "end": times[1],
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()},
    }
    if error:
        record["error"] = True
    return json.dumps(record, separators=(",", ":"))


def unfold_span(text: Any) -> Folded | None:
    """The folded span ``fold_span`` wrote; None for anything else (a value a store cut short, another producer's)."""
    try:
        record = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    name, span_id, parent, start, end = (record.get(k) for k in ("name", "span_id", "parent_span_id", "start", "end"))
    attributes = record.get("attributes")
    if not (isinstance(name, str) and isinstance(span_id, str) and span_id and isinstance(parent, str)):
        return None
    if type(start) is not int or type(end) is not int or not isinstance(attributes, dict):
        return None
    return Folded(name, span_id, parent, start, end, record.get("error") is True, attributes)


# Files and reads ----------------------------------------------------------------------------------------------------

FILE_PATH = "loadtrace.file.path"
FILE_SIZE = "loadtrace.file.size"
FILE_TENSORS = "loadtrace.file.tensors"
FILE_TENSOR_BYTES = "loadtrace.file.tensor_bytes"  # a safetensors file's data: its size less header and length
# Bytes of the file in the node's page cache when it was opened (memory.cached_bytes); absent where unknown.
FILE_CACHED_BYTES_AT_OPEN = "loadtrace.file.cached_bytes_at_open"
MAP_LOCATION = "loadtrace.map_location"
# DCP loads: what the checkpoint's metadata and the load's own plan say (hooks/dcp.py).
DCP_STORAGE_READER = "loadtrace.dcp.storage_reader"  # the StorageReader's class name
DCP_SAVED_FILES = "loadtrace.dcp.saved_files"  # the checkpoint's data files, as its metadata lists them
DCP_READ_ITEMS = "loadtrace.dcp.read_items"  # this rank's read items (saved chunks or slices of them)
DCP_RESHARDED_ITEMS = "loadtrace.dcp.resharded_items"  # of them, those whose saved chunk is not this rank's shard
DCP_FULL_STATE_DICT = "loadtrace.dcp.full_state_dict"  # set_*_state_dict: StateDictOptions.full_state_dict
DCP_BROADCAST_FROM_RANK0 = "loadtrace.dcp.broadcast_from_rank0"  # StateDictOptions.broadcast_from_rank0
READ_TENSORS = "loadtrace.read.tensors"
READ_BYTES = "loadtrace.read.bytes"
READ_PARTIAL_TENSORS = "loadtrace.read.partial_tensors"  # slice reads that returned less than the whole tensor
READ_PARTIAL_BYTES = "loadtrace.read.partial_bytes"
TENSOR_NAME = "loadtrace.tensor.name"
TENSOR_DTYPE = "loadtrace.tensor.dtype"
TENSOR_SHAPE = "loadtrace.tensor.shape"

# Phases -------------------------------------------------------------------------------------------------------------

CALLS = "loadtrace.calls"

# Materialisation (``zeros_like`` / ``empty_like`` while loading) ----------------------------------------------------

MATERIALIZED_CALLS = "loadtrace.materialized.calls"
MATERIALIZED_BYTES_PREFIX = "loadtrace.materialized.bytes."  # + device type
MATERIALIZED_SITES = "loadtrace.materialized.sites"
MATERIALIZED_SITE_BYTES = "loadtrace.materialized.site_bytes"
MATERIALIZE_FUNCTION = "loadtrace.materialize.function"  # the per-tensor span's own
MATERIALIZE_DEVICE = "loadtrace.materialize.device"
MATERIALIZE_BYTES = "loadtrace.materialize.bytes"
MATERIALIZE_SITE = "loadtrace.materialize.site"


def materialized_bytes_key(device: str) -> str:
    return MATERIALIZED_BYTES_PREFIX + device


# Conversion ---------------------------------------------------------------------------------------------------------

CONVERT_COUNT = "loadtrace.convert.count"
CONVERT_BYTES = "loadtrace.convert.bytes"
CONVERT_OP_PREFIX = "loadtrace.convert.op."  # + operation + ".count" / ".bytes"
# On a load span: the read tensors transformers cast to the model's dtype or copied to another device as it
# materialised them (``_materialize_copy``), their bytes after it, and when (ns since the epoch, start and end pairs,
# overlapping calls of its thread pool merged): that time is ``convert`` in the startup split, never ``read``.
CAST_COUNT = "loadtrace.cast.count"
CAST_BYTES = "loadtrace.cast.bytes"
CAST_INTERVALS = "loadtrace.cast.intervals"
RENAME_OP = "Rename"  # the operation name of a plain rename


def convert_op_key(operation: str, measure: str) -> str:
    """``measure`` is ``count`` or ``bytes``."""
    return f"{CONVERT_OP_PREFIX}{operation}.{measure}"


# Memory and I/O (load and phase spans) ------------------------------------------------------------------------------

RSS_BEFORE = "loadtrace.rss.before"
RSS_AFTER = "loadtrace.rss.after"
RSS_PEAK = "loadtrace.rss.peak"
RSS_KINDS = ("anon", "file", "shmem")  # as /proc/self/status splits VmRSS
MOMENTS = ("before", "after", "peak")


def rss_key(kind: str | None, moment: str) -> str:
    """``loadtrace.rss.<moment>`` for all of VmRSS (``kind`` None), else ``loadtrace.rss_<kind>.<moment>``."""
    return f"loadtrace.rss.{moment}" if kind is None else f"loadtrace.rss_{kind}.{moment}"


IO_STORAGE_READ_BYTES = "loadtrace.io.storage_read_bytes"
# Load spans: when those bytes moved: the stretches between the process's memory readings (its start and end, the
# monitor's samples every 0.1 s) in which read_bytes rose, start and end ns pairs (counting/fetching.py).
IO_STORAGE_READ_INTERVALS = "loadtrace.io.storage_read_intervals"
# What ``DATA_EVENT`` carries (arrays of timestamps, JSON): every key above that a person does not read.
DATA_KEYS = frozenset(
    {
        STARTUP_IMPORTS,
        STARTUP_PHASE_NS,
        LOAD_FIRST_FILE_OPEN,
        LOAD_LAST_FILE_CLOSE,
        FOLDED,
        CAST_INTERVALS,
        IO_STORAGE_READ_INTERVALS,
    }
)
# ``loadtrace.rank_exit``: when the dead rank last read its count (its storage reads are those up to then).
IO_STORAGE_READ_AS_OF = "loadtrace.io.storage_read_as_of"
IO_CACHED_BYTES = "loadtrace.io.cached_bytes"
# Load spans: the checkpoint files it opened (each once, at its first open: how many, their bytes), by page-cache
# residency then. Cold bytes are what storage delivers if they are read; absent unless every file opened by path was
# measured.
IO_CHECKPOINT_FILES = "loadtrace.io.checkpoint_files"
IO_CHECKPOINT_FILE_BYTES = "loadtrace.io.checkpoint_file_bytes"
IO_CHECKPOINT_COLD_BYTES = "loadtrace.io.checkpoint_cold_bytes"
NODE_MEMORY_TOTAL = "loadtrace.node.memory_total"
NODE_MEMORY_AVAILABLE = "loadtrace.node.memory_available"
CGROUP_MEMORY_CURRENT = "loadtrace.cgroup.memory_current"
CGROUP_MEMORY_MAX = "loadtrace.cgroup.memory_max"

# Load strategies (``loadtrace.strategy``) ---------------------------------------------------------------------------

STRATEGY_PLAIN = "plain"
STRATEGY_FSDP = "fsdp"
STRATEGY_FSDP_CPU_RAM_EFFICIENT = "fsdp_cpu_ram_efficient"
STRATEGY_ZERO3 = "zero3"
# transformers' own tensor parallelism (``tp_plan``), alone or under FSDP: each rank reads its own slices.
STRATEGY_TP = "tp"
STRATEGY_FSDP_TP = "fsdp+tp"
STRATEGY_FSDP_CPU_RAM_EFFICIENT_TP = "fsdp_cpu_ram_efficient+tp"
# torch.distributed.checkpoint: each rank reads the saved shards that match its own; reads saved shards that do not
# (saved at another world size or sharding); reads whole tensors; every rank takes the full state dict
# (``set_model_state_dict(full_state_dict=True)``); rank 0 takes it and broadcasts (``broadcast_from_rank0``).
STRATEGY_DCP_SHARDED = "dcp_sharded"
STRATEGY_DCP_RESHARDED = "dcp_resharded"
STRATEGY_DCP_FULL = "dcp_full"
STRATEGY_DCP_FULL_STATE = "dcp_full_state"
STRATEGY_DCP_BROADCAST = "dcp_broadcast_from_rank0"
DCP_STRATEGIES = (
    STRATEGY_DCP_SHARDED,
    STRATEGY_DCP_RESHARDED,
    STRATEGY_DCP_FULL,
    STRATEGY_DCP_FULL_STATE,
    STRATEGY_DCP_BROADCAST,
)
STRATEGIES = (
    STRATEGY_PLAIN,
    STRATEGY_FSDP,
    STRATEGY_FSDP_CPU_RAM_EFFICIENT,
    STRATEGY_ZERO3,
    STRATEGY_TP,
    STRATEGY_FSDP_TP,
    STRATEGY_FSDP_CPU_RAM_EFFICIENT_TP,
    *DCP_STRATEGIES,
)
# Under these only the loading rank should read the checkpoint; the other ranks hold empty weights (or receive them).
SHARDED_STRATEGIES = frozenset(
    {STRATEGY_ZERO3, STRATEGY_FSDP_CPU_RAM_EFFICIENT, STRATEGY_DCP_FULL_STATE, STRATEGY_DCP_BROADCAST}
)
# After a load under these, the strategy's preparation (accelerate's FSDP, deepspeed.initialize) distributes the
# weights: the rank's startup goes on until it ends. A DCP load goes into a model already prepared (sharded).
PREPARED_STRATEGIES = frozenset(set(STRATEGIES) - {STRATEGY_PLAIN, STRATEGY_TP, *DCP_STRATEGIES})

# Finding kinds (``loadtrace report``) -------------------------------------------------------------------------------

FINDING_INCOMPLETE_RANK = "incomplete_rank"
FINDING_DUPLICATE_CHECKPOINT_READ = "duplicate_checkpoint_read"
FINDING_NONZERO_RANK_MATERIALIZATION = "nonzero_rank_materialization"
FINDING_DUPLICATE_CONVERSION = "duplicate_conversion"
FINDING_REPLICATED_LOAD = "replicated_load"
FINDING_SHARDED_READ = "sharded_read"  # ranks read slices that together make up the model (tensor parallel)
FINDING_FAILED_LOAD = "failed_load"  # a load that raised
FINDING_SLOW_RANK = "slow_rank"  # a rank's startup far behind the other ranks'
FINDING_SLOW_STORAGE = "slow_storage"  # a node reading its checkpoint from storage far slower than the job's others
FINDING_RENDEZVOUS_WAIT = "rendezvous_wait"  # ranks that waited in init_process_group for the others
FINDING_COLLECTIVE_TIMEOUT = "collective_timeout"  # a rank timed out in a collective while another was still loading
# ranks that built the whole model and only then gave it to deepspeed.initialize with ZeRO stage 3 (config too late)
FINDING_WHOLE_MODEL_BEFORE_ZERO3 = "whole_model_before_zero3"
FINDING_KINDS = (
    FINDING_INCOMPLETE_RANK,
    FINDING_DUPLICATE_CHECKPOINT_READ,
    FINDING_NONZERO_RANK_MATERIALIZATION,
    FINDING_DUPLICATE_CONVERSION,
    FINDING_REPLICATED_LOAD,
    FINDING_SHARDED_READ,
    FINDING_FAILED_LOAD,
    FINDING_SLOW_RANK,
    FINDING_SLOW_STORAGE,
    FINDING_RENDEZVOUS_WAIT,
    FINDING_COLLECTIVE_TIMEOUT,
    FINDING_WHOLE_MODEL_BEFORE_ZERO3,
)
# Causes: findings that are symptoms of one cause carry its name (``cause``), and the table shows them as one.
CAUSE_WHOLE_MODEL_ON_OTHER_RANKS = "whole_model_on_other_ranks"  # non-loading ranks read, converted or held the model
CAUSE_OF_FINDING = {
    FINDING_DUPLICATE_CHECKPOINT_READ: CAUSE_WHOLE_MODEL_ON_OTHER_RANKS,
    FINDING_DUPLICATE_CONVERSION: CAUSE_WHOLE_MODEL_ON_OTHER_RANKS,
    FINDING_NONZERO_RANK_MATERIALIZATION: CAUSE_WHOLE_MODEL_ON_OTHER_RANKS,
}

# Files a process writes ----------------------------------------------------------------------------------------------

TRACE_FILE_SUFFIX = ".jsonl"  # one OTLP JSON Lines file per process

# Scope kinds (spans.ScopeKind).
SCOPE_LOAD = "load"
SCOPE_PHASE = "phase"
SCOPE_FILE = "file"
SCOPE_STAGE = "stage"  # a startup phase (accelerate, deepspeed) or the startup itself

# A rank that dies, fails or restarts ----------------------------------------------------------------------------------

# Resource: which launch and which restart of it this process belongs to. A job id can repeat (torchrun
# --max-restarts, a SLURM requeue, a reused LOADTRACE_JOB_ID); the report never sums two attempts.
ATTEMPT = "loadtrace.attempt"  # TORCHELASTIC_RESTART_COUNT (or SLURM_RESTART_COUNT), 0 on the first
LAUNCH_ID = "loadtrace.launch.id"  # one per launcher invocation: LOADTRACE_LAUNCH_ID, set by the witnessing launcher

# Load spans, from their start: the memory limit that applies (the lower of the cgroup's and the node's).
MEMORY_LIMIT = "loadtrace.memory.limit"
MEMORY_LIMIT_SOURCE = "loadtrace.memory.limit_source"  # "cgroup v1", "cgroup v2" or "node"

# A load that raised: OTel's own attribute, the exception's type name.
ERROR_TYPE = "error.type"

# Open spans ended by a termination signal (SIGTERM, SIGINT, SIGHUP) carry its name.
EXIT_SIGNAL = "loadtrace.exit.signal"

# The launcher's witness: one span per worker that died, with that worker's resource and its exact last state.
EXIT_CODE = "loadtrace.exit.code"  # the exit status, when it exited rather than being killed
EXIT_OOM_KILLED = "loadtrace.exit.oom_killed"  # the cgroup's oom_kill counter rose (absent when unreadable)
EXIT_SOURCE = "loadtrace.exit.source"  # EXIT_SOURCE_LAUNCHER
# The launcher's witness: on its rank_exit span, and on the spans of a dead rank it ended in its place (the report
# leaves those out of every number).
EXIT_SOURCE_LAUNCHER = "launcher"
EXIT_STATUS = "loadtrace.exit.status"  # the rank's own last status: loading, idle, exited, signalled
EXIT_DURING = "loadtrace.exit.during"  # the innermost span it had open
EXIT_LOAD = "loadtrace.exit.load"  # the outermost load it had open
WITNESS_PID = "loadtrace.witness.pid"  # the launcher process that saw it


def signal_name(number: int) -> str:
    """A signal's name as ``loadtrace.exit.signal`` spells it: 9 → ``SIGKILL``; ``signal N`` where Python has none."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_phrase(signal_: str | None, code: int | None, oom_killed: bool | None) -> str:
    """How a rank ended, in the words of the rank_exit span's status: ``SIGKILL (OOM)``, ``SIGTERM``, ``exit code 1``,
    or ``exited`` when nothing says how."""
    if signal_ is not None:
        return f"{signal_} (OOM)" if oom_killed else signal_
    return "exited" if code is None else f"exit code {code}"


# Environment the witnessing launcher gives its workers (internal; users set neither).
ENV_LAUNCH_ID = "LOADTRACE_LAUNCH_ID"
ENV_WITNESS_DIR = "LOADTRACE_WITNESS_DIR"  # where each worker leaves a pointer <pid> → its state file
# What a process of the job has already said for the whole job (space-separated keys), inherited by the processes it
# starts: a bad setting is said once per job, not once per rank (instrumentation/_log.py, ``say_for_the_job``).
ENV_SAID = "LOADTRACE_SAID"
# Where people open Jaeger's UI (http://HOST:16686): rank 0's closing line and ``loadtrace report`` link the job there.
ENV_JAEGER_URL = "LOADTRACE_JAEGER_URL"

# Secrets: what no line of ours shows, in the job (its one-line warnings, rank 0's closing line) or in the CLI (its
# one-line errors): a URL's user info, an ``Authorization`` value, the values of OTel's header variables.
SECRET_HEADER_VARIABLES = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
)
REDACTED = "***"
_URL_USER_INFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # to the last @ before the host
_AUTHORIZATION = re.compile(r"(?i)\b((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)[^,;'\"\n]+")
_SHORTEST_SECRET = 3  # a shorter header value ("1") would blank out ordinary words; none is a credential


def redact_secrets(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with every secret replaced by ``***``: user info in URLs (``http://***@host``), ``Authorization``
    values, and each value of ``SECRET_HEADER_VARIABLES`` in ``env`` (the process's environment by default) as written
    there or URL-decoded."""
    env = os.environ if env is None else env
    for name in SECRET_HEADER_VARIABLES:
        for item in env.get(name, "").split(","):
            key, equals, value = item.partition("=")
            value = (value if equals else key).strip()  # a malformed item, whole: OTel's warning quotes it
            for secret in {value, urllib.parse.unquote(value)}:
                if len(secret) >= _SHORTEST_SECRET:
                    text = text.replace(secret, REDACTED)
    text = _URL_USER_INFO.sub(lambda match: f"{match.group(1)}{REDACTED}@", text)
    return _AUTHORIZATION.sub(lambda match: f"{match.group(1)}{REDACTED}", text)


# ``loadtrace.exception``: OpenTelemetry's exception attributes (the message's first line; left out with
# LOADTRACE_REDACT_PATHS, as it can name files).
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"

# Progress metrics (issue 25): a loading rank's progress every LOADTRACE_PROGRESS_INTERVAL seconds over OTLP, with the
# traces' Resource (job and rank there). docs/reference.md's "Metrics" table documents each; the METRIC_ prefix keeps
# them out of the span reference.
METRIC_READ_BYTES = "loadtrace.progress.read_bytes"  # gauge, By: the open load's tensor bytes read so far
METRIC_EXPECTED_BYTES = "loadtrace.progress.expected_bytes"  # gauge, By: the checkpoint's tensor bytes (when known)
METRIC_FILES_OPENED = "loadtrace.progress.files_opened"  # gauge: files the open load opened
METRIC_PHASE = "loadtrace.progress.phase"  # gauge, 1 for the phase open now (METRIC_PHASE_ATTRIBUTE)
METRIC_PHASE_ATTRIBUTE = "loadtrace.phase"  # the phase's span name: a few dozen values at most
METRIC_MEMORY_USAGE = "process.memory.usage"  # OTel semconv: up-down counter, By (VmRSS)
METRIC_MEMORY_LIMIT = MEMORY_LIMIT  # gauge, By: the limit load spans carry (the cgroup's, else the node's memory)
# Startup metrics (issue 35): one measurement per rank's startup and per load, in seconds, for the fleet's p50/p95 in
# Prometheus. Attributes of a few values each (CLUSTER, STRATEGY, STARTUP_END, ERROR_TYPE), never the job, trace, rank
# or process; their Resource names the service alone, so a fleet makes one series per attribute combination.
METRIC_STARTUP_DURATION = "loadtrace.startup.duration"  # histogram, s: the rank's startup span, when it ends
METRIC_LOAD_DURATION = "loadtrace.load.duration"  # histogram, s: each outermost load span, when it ends
METRICS = (
    METRIC_READ_BYTES,
    METRIC_EXPECTED_BYTES,
    METRIC_FILES_OPENED,
    METRIC_PHASE,
    METRIC_MEMORY_USAGE,
    METRIC_MEMORY_LIMIT,
    METRIC_STARTUP_DURATION,
    METRIC_LOAD_DURATION,
)

# ``loadtrace top`` marks (analysis/top.py).
MARK_SLOWEST = "slowest"
MARK_STUCK = "stuck"
MARK_OOM_AHEAD = "oom_ahead"
MARK_BEHIND = "behind"
MARK_NEAR_LIMIT = "near_limit"
MARKS = (MARK_SLOWEST, MARK_STUCK, MARK_OOM_AHEAD, MARK_BEHIND, MARK_NEAR_LIMIT)

STATE_SUFFIX = ".state"  # next to the trace file, in place of TRACE_FILE_SUFFIX: see statefile.py


def about_load(figures: Mapping[str, Any]) -> dict[str, str]:
    """The load's key figures in words (``ABOUT``), for a person reading its span in Jaeger: what it read,
    converted, created with ``zeros_like``/``empty_like`` and held at its return, each as a share of the model where
    its size is known, and its memory; the exact figures stay in their own attributes."""
    words = readable_bytes
    model = figures.get(CHECKPOINT_TENSOR_BYTES)

    def share(nbytes: int) -> str:
        return f", {100 * nbytes / model:.0f} % of the model" if isinstance(model, int) and model > 0 else ""

    def by_device(prefix: str) -> dict[str, int]:
        return {k.removeprefix(prefix): v for k, v in figures.items() if k.startswith(prefix) and isinstance(v, int)}

    read, files = figures.get(READ_BYTES, 0), figures.get(FILES_OPENED, 0)
    tensors = figures.get(READ_TENSORS, 0)
    about = {ABOUT: f"read {words(read)}{share(read)}: {tensors:,} tensors from {files:,} files"}
    if figures.get(CONVERT_COUNT):
        converted = figures.get(CONVERT_BYTES, 0)
        count = figures[CONVERT_COUNT]
        about[about_key("converted")] = f"{words(converted)}{share(converted)}, in {count:,} conversions"
    for what, prefix in (("created", MATERIALIZED_BYTES_PREFIX), ("held", HELD_BYTES_PREFIX)):
        devices = by_device(prefix)
        real = sum(nbytes for device, nbytes in devices.items() if device != "meta")
        if devices:
            each = ", ".join(f"{device} {words(nbytes)}" for device, nbytes in devices.items())
            about[about_key(what)] = f"{each}{share(real)}"
    before, peak = figures.get(RSS_BEFORE), figures.get(RSS_PEAK)
    if isinstance(before, int) and isinstance(peak, int):
        about[about_key("memory")] = f"peak RSS {words(peak)}, {words(peak - before)} above its start"
    return about
