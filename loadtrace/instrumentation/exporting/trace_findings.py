"""The findings in the job's trace, when its run is over: ``loadtrace annotate`` over the trace files rank 0 can see
(its node's, or every node's on a shared filesystem), in a child process, as the closing line's report runs
(summary.py), by whoever says that line: the witnessing launcher once its workers are done, else rank 0 at its exit:
the analysis half stays out of the job's interpreter, and a fault there cannot reach the job. The child writes the
findings beside the files and sends them where the spans went (the same ``OTEL_EXPORTER_OTLP_*``); with
``LOADTRACE_JAEGER_URL`` set it answers the Jaeger link that the closing line then shows. Bounded by ``TIMEOUT_S``: a
child that does not answer in time is stopped, and the job's trace keeps its spans without the findings (``loadtrace
annotate`` adds them later); it waits for the OTLP endpoint no longer than rank 0's own flush does, and sends nothing
where that flush failed. With spans only over OTLP there are no files to read: the link is the trace's alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from ... import semconv
from ..settings import Settings
from .summary import PEER_WAIT_S, wait_for_peers

TIMEOUT_S = 5.0


def annotate(
    settings: Settings,
    job_id: str,
    rank: int | None,
    local_world_size: int,
    trace_file: str | None,
    failure: str | None = None,
    since_ns: int | None = None,
) -> str:
    """The link for the closing line (empty without ``LOADTRACE_JAEGER_URL``); never raises. ``failure``: why rank 0's
    own spans did not all reach the OTLP endpoint (then the child writes the file alone, sending nothing).
    ``since_ns``: rank 0's start: wait (briefly) for its node's other ranks of this run to end first; None: they have
    (the launcher annotates)."""
    try:
        if rank != 0:
            return ""
        trace_id = format(semconv.job_trace_ids(job_id)[0], "032x")
        plain = f"{settings.jaeger_url}/trace/{trace_id}" if settings.jaeger_url else ""
        if trace_file is None:
            return plain
        from .export import safe_name  # the file names export gave (imported here: only rank 0, only at exit)

        folder = os.path.dirname(os.path.abspath(trace_file))
        node_files = os.path.join(folder, f"rank*-{safe_name(socket.gethostname())}-*{semconv.STATE_SUFFIX}")
        if since_ns is not None:
            wait_for_peers(node_files, trace_id, max(1, local_world_size), since_ns, time.monotonic() + PEER_WAIT_S)
        return _child(folder, job_id, settings.exit_timeout_s, send=failure is None) or plain
    except Exception:  # an odd file system, a closed pipe: the job's exit goes on
        return ""


def _child(folder: str, job_id: str, send_timeout_s: float, send: bool) -> str:
    """``loadtrace annotate --format link`` in a child process: the link it printed, else empty. It waits for the
    endpoint no longer than rank 0's own flush does (``LOADTRACE_EXIT_TIMEOUT``), and sends nothing where that flush
    failed."""
    env = {**os.environ, "LOADTRACE": "0"}  # the child loads nothing; keep even the .pth line idle
    if not send:
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            env.pop(name, None)
    command = [sys.executable, "-m", "loadtrace", "annotate", "--format", "link", f"--job={job_id}"]
    command += [f"--send-timeout={send_timeout_s:g}", folder]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    said = done.stdout.strip()
    return said if done.returncode == 0 and said.startswith("http") and "\n" not in said else ""
