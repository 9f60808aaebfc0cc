"""Every knob loadtrace reads, read once into a frozen dataclass.

loadtrace's own knobs are ``LOADTRACE_*``; OTel's are the standard ``OTEL_*``. A bad value never raises: it is
reported once on stderr and the default is used.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import semconv
from ._log import warn_once

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
    launch_id: str | None = None
    """``LOADTRACE_LAUNCH_ID``: the launcher invocation, set by a witnessing launcher (never by users)."""

    @property
    def per_tensor(self) -> bool:
        return self.detail == "tensor"

    @property
    def writes_files(self) -> bool:
        """Files are the default, and also written next to OTLP when ``LOADTRACE_DIR`` is set explicitly."""
        return self.otlp_endpoint is None or self.trace_dir is not None


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value not in FALSE:
        warn_once(
            f"setting:{name}", f"{name}={env[name]!r} is not one of 1/true/yes/on or 0/false/no/off; taken as off"
        )
    return False


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in choices:
        return value
    warn_once(f"setting:{name}", f"{name}={env[name]!r} is not one of {', '.join(choices)}; using {default}")
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
    warn_once(f"setting:{name}", f"{name}={value!r} is not a number of seconds; using {default}")
    return default


def _count(env: Mapping[str, str], names: tuple[str, ...]) -> int:
    """The first of ``names`` that is set, as a count (0 and said once when it is not one)."""
    for name in names:
        value = env.get(name, "").strip()
        if not value:
            continue
        if value.isdigit():
            return int(value)
        warn_once(f"setting:{name}", f"{name}={value!r} is not a count; taken as 0")
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
        attempt=_count(env, RESTART_COUNTS),
        quiet=_flag(env, "LOADTRACE_QUIET"),
        launch_id=(env.get(semconv.ENV_LAUNCH_ID) or "").strip() or None,
        progress_interval_s=_seconds(env, "LOADTRACE_PROGRESS_INTERVAL", 10.0),
    )


def shown_path(value: Any, redact: bool) -> str:
    """A path as spans show it: as given, or with ``LOADTRACE_REDACT_PATHS`` a stable hash plus the basename, so ranks
    that read the same file still match and no directory names leave the job."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else str(value)
    if not redact:
        return text
    digest = hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:12]
    return f"{digest}/{os.path.basename(text.rstrip('/'))}"
