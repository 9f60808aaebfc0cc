"""The one line rank 0 says at exit: which job it traced, what the report found, and the command that shows it.

    loadtrace: job 1f0c..., 2 ranks, 2 findings → loadtrace report loadtrace-traces/1f0c...
    loadtrace: job 1f0c..., 1,024 ranks, 5 findings; rank 300 incomplete, rank 700 slow → loadtrace report ...

Rank 0 knows the files it can see only (its node's, or every node's on a shared filesystem): it waits (briefly) for
the other ranks' state files beside its own to stop saying ``loading``, then runs ``loadtrace report --format line``
on them in a child process, so the analysis half stays out of the job's interpreter (and its memory) and a fault
there cannot reach the job; the report names the ranks that stand out, as its table does. Everything is bounded by
``TIMEOUT_S``; when the report does not answer in time the line goes without counts. With spans only over OTLP
there are no files to count: the line names the trace id to look up in Jaeger. Other ranks, forked children and
processes that never loaded say nothing; ``LOADTRACE_QUIET=1`` silences it.
"""

from __future__ import annotations

import glob
import os
import shlex
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

from ... import semconv, statefile
from ..settings import Settings

# Wait for peers, then the report: at most this long in all, added to the exit of rank 0 alone.
TIMEOUT_S = 5.0
PEER_WAIT_S = 2.0
POLL_S = 0.05


def say(
    settings: Settings,
    job_id: str,
    rank: int | None,
    local_world_size: int,
    trace_file: str | None,
    failure: str | None = None,
    link: str = "",
) -> None:
    """Print the line on stderr when this process is rank 0 and its spans went somewhere; never raises. A process
    without a rank (a plain ``python`` run) says nothing, as before. ``failure``: why spans meant for the OTLP
    endpoint did not all arrive; ``link``: the job in Jaeger's UI (trace_findings.py), at the line's end."""
    try:
        if settings.quiet or rank != 0:
            return
        if trace_file is None and not settings.otlp_endpoint:
            return
        text = line(job_id, trace_file, settings.otlp_endpoint, max(1, local_world_size), failure=failure)
        text += f" · {link}" if link else ""
        sys.stderr.write(semconv.redact_secrets(text) + "\n")  # the endpoint may carry user info
        sys.stderr.flush()
    except Exception:  # a closed stderr, an odd file system: the job's exit goes on
        pass


def line(
    job_id: str,
    trace_file: str | None,
    otlp_endpoint: str | None,
    local_world_size: int,
    timeout_s: float = TIMEOUT_S,
    failure: str | None = None,
) -> str:
    """The line to print (without a newline). Spans only over OTLP: "sent" only when they all arrived; else why not,
    and how to keep them next time."""
    from .export import safe_name  # the file names export gave (imported here: only rank 0, only at exit, needs it)

    trace_id = format(semconv.job_trace_ids(job_id)[0], "032x")
    if trace_file is None and failure is not None:
        keep = "set LOADTRACE_DIR to keep trace files as well"
        return f"loadtrace: job {job_id}, trace {trace_id}: sending to {otlp_endpoint} failed ({failure}); {keep}"
    if trace_file is None:
        return f"loadtrace: job {job_id}, trace {trace_id} sent to {otlp_endpoint} → {jaeger_command(otlp_endpoint)}"
    folder = os.path.dirname(os.path.abspath(trace_file))
    command = f"loadtrace report {shlex.quote(typed_path(folder))}"
    if os.path.basename(folder) != safe_name(job_id):  # LOADTRACE_DIR: a folder other jobs may share
        command += f" --job{'=' if job_id.startswith('-') else ' '}{shlex.quote(job_id)}"  # never read as a flag
    deadline = time.monotonic() + timeout_s
    node_files = os.path.join(folder, f"rank*-{safe_name(socket.gethostname())}-*{semconv.STATE_SUFFIX}")
    wait_for_peers(node_files, trace_id, local_world_size, min(deadline, time.monotonic() + PEER_WAIT_S))
    counts = report_counts(folder, job_id, deadline)
    return f"loadtrace: job {job_id}{counts} → {command}"


def typed_path(folder: str) -> str:
    """The folder as the user would type it: relative to the current directory when it is below it."""
    try:
        relative = os.path.relpath(folder)
    except ValueError:  # another drive
        return folder
    return folder if relative.startswith(os.pardir) else relative


def jaeger_command(endpoint: str | None) -> str:
    """Where the trace can be read back: the Jaeger beside the collector, as ``docker-compose.yml`` sets it up."""
    host = urlsplit(endpoint or "").hostname or "localhost"
    return f"loadtrace report --jaeger http://{host}:16686 --latest"


def wait_for_peers(node_files: str, trace_id: str, local_world_size: int, until: float) -> None:
    """Until ``until``: wait for this node's ranks of the job (their state files match ``node_files``) to have state
    files that no longer say ``loading``."""
    while time.monotonic() < until:
        states = [statefile.read(path) for path in glob.glob(node_files)]
        ours = [state for state in states if state is not None and state.trace_id == trace_id]
        ranks = {state.rank for state in ours if state.rank is not None}
        if len(ranks) >= local_world_size and all(state.status != "loading" for state in ours):
            return
        time.sleep(POLL_S)


def report_counts(folder: str, job_id: str, deadline: float) -> str:
    """``, 2 ranks, 2 findings`` (and the ranks that stand out) from ``loadtrace report --format line`` in a child
    process; empty when it fails, does not finish by ``deadline`` or answers anything but one line of counts."""
    left = deadline - time.monotonic()
    if left <= 0 or not sys.executable:
        return ""
    env = {**os.environ, "LOADTRACE": "0"}  # the child loads nothing; keep even the .pth line idle
    command = [sys.executable, "-m", "loadtrace", "report", "--format", "line", f"--job={job_id}", folder]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=left, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    said = done.stdout.strip()
    if done.returncode not in (0, 1) or "\n" in said or not said[:1].isdigit():
        return ""
    return f", {said}"
