"""Every knob loadtrace reads, read once into a frozen dataclass.

loadtrace's own knobs are ``LOADTRACE_*``; OTel's are the standard ``OTEL_*``. A bad value never raises: it is
reported on stderr once for the whole job (every process reads the same environment; ``_log.say_for_the_job``) and
the default is used. So is a ``LOADTRACE_DIR`` that cannot be written: no trace files, said once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import semconv
from ._log import say_for_the_job, warn_once

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"", "0", "false", "no", "off"})
DETAILS = ("default", "full", "tensor")
PROTOCOLS = ("http/protobuf", "grpc")
# Export soon after each span ends: a rank killed mid-load then loses at most what ended in the last fraction of a
# second, besides the spans still open.
BSP_SCHEDULE_DELAY_MS = 200
# Spans in one OTLP export message: a collector's gRPC receiver refuses messages over 4 MiB by default, and our largest
# span (a load's, with its call sites and memory) is a few kB, so 128 of them stay far under it (OTel's default: 512).
BSP_MAX_EXPORT_BATCH_SIZE = 128
# The spans the OTLP exporter's queue holds (OTel's default is 2,048): rank 0 puts the job's root and a group per rank
# in it at once (tracing/structure.py), 4,097 for a job of 4,096 ranks.
BSP_MAX_QUEUE_SIZE = 8192
# Which restart of the job a process belongs to, as launchers count them (0 on the first run).
RESTART_COUNTS = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    """``LOADTRACE``: turn tracing on in every process of the job."""
    detail: str = "default"
    """``LOADTRACE_DETAIL``: ``default`` (counters on file and phase spans; above 64 ranks most ranks' file spans are
    summed on their loads: budget.py), ``full`` (every rank keeps every file span) or ``tensor`` (``full`` plus one span
    per tensor)."""
    trace_dir: str | None = None
    """``LOADTRACE_DIR``: where OTLP JSON Lines files go; None means the default ``./loadtrace-traces/<job id>``."""
    job_id: str | None = None
    """``LOADTRACE_JOB_ID``: the job id every rank shares, when the launcher's own id is not enough."""
    otlp_endpoint: str | None = None
    """``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``: send spans over OTLP."""
    otlp_protocol: str = "http/protobuf"
    """``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL``."""
    exit_timeout_s: float = 1.0
    """``LOADTRACE_EXIT_TIMEOUT``: the most time, in seconds, spent flushing spans when the process exits."""
    sdk_disabled: bool = False
    """``OTEL_SDK_DISABLED``: wins over ``LOADTRACE``."""
    redact_paths: bool = False
    """``LOADTRACE_REDACT_PATHS``: file and checkpoint paths become a stable hash plus the basename."""
    cluster: str | None = None
    """``LOADTRACE_CLUSTER``, else ``SLURM_CLUSTER_NAME``: the cluster name put on every span."""
    bsp_schedule_delay_ms: int | None = BSP_SCHEDULE_DELAY_MS
    """How soon ended spans leave for the OTLP endpoint: ours unless ``OTEL_BSP_SCHEDULE_DELAY`` is set, in which
    case None, and OTel's batch processor reads that variable itself."""
    bsp_max_queue_size: int | None = BSP_MAX_QUEUE_SIZE
    """The most spans waiting for the OTLP endpoint: ours unless ``OTEL_BSP_MAX_QUEUE_SIZE`` is set (then None: OTel's
    batch processor reads that variable itself)."""
    bsp_max_export_batch_size: int | None = BSP_MAX_EXPORT_BATCH_SIZE
    """The most spans in one OTLP export message: ours unless ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` is set, in which case
    None, and OTel's batch processor reads that variable itself."""
    attempt: int = 0
    """``TORCHELASTIC_RESTART_COUNT``, else ``SLURM_RESTART_COUNT``: which restart of the job this process belongs to
    (set by the launcher, never by users)."""
    quiet: bool = False
    """``LOADTRACE_QUIET``: rank 0 does not print the line naming its job's trace and the command that reports it."""
    progress_interval_s: float = 10.0
    """``LOADTRACE_PROGRESS_INTERVAL``: with an OTLP endpoint, a loading rank exports its progress as metrics this
    often, in seconds (0: never)."""
    load_idle_s: float = 5.0
    """``LOADTRACE_LOAD_IDLE``: weights read outside any load make a load of their own, which ends once none of its
    files has been open for this many seconds (its span ends where the last one closed: tracing/loose.py)."""
    launch_id: str | None = None
    """``LOADTRACE_LAUNCH_ID``: the launcher invocation, set by a witnessing launcher (never by users)."""
    jaeger_url: str | None = None
    """``LOADTRACE_JAEGER_URL``: where people open Jaeger's UI; rank 0's closing line then links the job's trace."""

    @property
    def per_tensor(self) -> bool:
        return self.detail == "tensor"

    @property
    def writes_files(self) -> bool:
        """Files are the default, and also written next to OTLP when ``LOADTRACE_DIR`` is set explicitly."""
        return self.otlp_endpoint is None or self.trace_dir is not None


def _bad(env: Mapping[str, str], name: str, message: str) -> None:
    """A bad value: said once for the job (the launcher, else rank 0); from an environment given in the process
    (``from_env(env)``), once by this process."""
    key = f"setting:{name}:{hashlib.sha256(env[name].encode(errors='surrogateescape')).hexdigest()[:12]}"
    if env is os.environ:
        say_for_the_job(key, message, speaks=_rank(env, local=False) in (None, 0))
    else:
        warn_once(key, message)


def _rank(env: Mapping[str, str], local: bool) -> int | None:
    """This process's rank (or its rank on its node) as the launcher's variables give it; None outside a job's ranks
    (the launcher itself, a plain ``python``)."""
    from .context import rank_from_env  # only when there is something to say

    found = rank_from_env(env)
    return found.local_rank if local and found.local_rank is not None else found.rank


def trace_dir_problem(folder: str) -> str | None:
    """Why trace files cannot be written into ``folder`` (made here when missing), or None when they can."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(f"{folder} is not writable by this user")
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return None


def say_traces_not_written(settings: Settings, folder: str, problem: str) -> None:
    """The job's one line when its trace folder cannot be written: said by the launcher, else by each node's first
    rank (a folder is a node's: another node's may be fine)."""
    where = f"LOADTRACE_DIR={settings.trace_dir}" if settings.trace_dir else folder
    sent = f"; spans still go to {settings.otlp_endpoint}" if settings.otlp_endpoint else ""
    message = f"cannot write traces to {where} ({problem}): this job's trace files are not being written{sent}"
    key = f"trace-dir:{hashlib.sha256(os.path.abspath(folder).encode(errors='surrogateescape')).hexdigest()[:12]}"
    say_for_the_job(key, message, speaks=speaks_for_the_node())


def speaks_for_the_node() -> bool:
    """Whether this process says what every process of its node meets alike: the launcher, a plain process, or the
    node's first rank (local rank 0)."""
    return _rank(os.environ, local=True) in (None, 0)


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value not in FALSE:
        _bad(env, name, f"{name}={env[name]!r} is not one of 1/true/yes/on or 0/false/no/off; taken as off")
    return False


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in choices:
        return value
    _bad(env, name, f"{name}={env[name]!r} is not one of {', '.join(choices)}; using {default}")
    return default


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
        if seconds >= 0:
            return seconds
    except ValueError:
        pass
    _bad(env, name, f"{name}={value!r} is not a number of seconds; using {default}")
    return default


def _count(env: Mapping[str, str], names: tuple[str, ...]) -> int:
    """The first of ``names`` that is set, as a count (0 and said once when it is not one)."""
    for name in names:
        value = env.get(name, "").strip()
        if not value:
            continue
        if value.isdigit():
            return int(value)
        _bad(env, name, f"{name}={value!r} is not a count; taken as 0")
        return 0
    return 0


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    protocol_var = (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        if env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        else "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    return Settings(
        enabled=_flag(env, "LOADTRACE"),
        detail=_choice(env, "LOADTRACE_DETAIL", DETAILS, "default"),
        trace_dir=env.get("LOADTRACE_DIR") or None,
        job_id=(env.get("LOADTRACE_JOB_ID") or "").strip() or None,
        otlp_endpoint=endpoint or None,
        otlp_protocol=_choice(env, protocol_var, PROTOCOLS, "http/protobuf"),
        exit_timeout_s=_seconds(env, "LOADTRACE_EXIT_TIMEOUT", 1.0),
        sdk_disabled=env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true",
        redact_paths=_flag(env, "LOADTRACE_REDACT_PATHS"),
        cluster=env.get("LOADTRACE_CLUSTER") or env.get("SLURM_CLUSTER_NAME") or None,
        bsp_schedule_delay_ms=None if env.get("OTEL_BSP_SCHEDULE_DELAY") else BSP_SCHEDULE_DELAY_MS,
        bsp_max_export_batch_size=None if env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") else BSP_MAX_EXPORT_BATCH_SIZE,
        bsp_max_queue_size=None if env.get("OTEL_BSP_MAX_QUEUE_SIZE") else BSP_MAX_QUEUE_SIZE,
        attempt=_count(env, RESTART_COUNTS),
        quiet=_flag(env, "LOADTRACE_QUIET"),
        launch_id=(env.get(semconv.ENV_LAUNCH_ID) or "").strip() or None,
        progress_interval_s=_seconds(env, "LOADTRACE_PROGRESS_INTERVAL", 10.0),
        load_idle_s=_seconds(env, "LOADTRACE_LOAD_IDLE", 5.0),
        jaeger_url=(env.get(semconv.ENV_JAEGER_URL) or "").strip().rstrip("/") or None,
    )


def shown_path(value: Any, redact: bool) -> str:
    """A path as spans show it: as given, or with ``LOADTRACE_REDACT_PATHS`` a stable hash plus the basename, so ranks
    that read the same file still match and no directory names leave the job."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else str(value)
    if not redact:
        return text
    digest = hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:12]
    return f"{digest}/{os.path.basename(text.rstrip('/'))}"
