"""The one line said when a job's run ends: which job it traced, what the report found, and the command that shows it.

    loadtrace: job 1f0c..., 2 ranks, 2 findings → loadtrace report loadtrace-traces/1f0c...
    loadtrace: job 1f0c..., run 2, 1,024 ranks, 5 findings; rank 300 incomplete, rank 700 slow → loadtrace report ...

The counts are ``loadtrace report --format line --job ID --latest`` over the folder (the report's own line of the run
that started last: this one, not the earlier launches of a job id used again), run in a child process so the analysis
half stays out of the job's interpreter (and its memory) and a fault there cannot reach it; bounded by ``TIMEOUT_S``,
after which the line goes without counts. They are counted once the run is over on this node, so that they are what
the report will say of it:

- under a launcher that witnesses its workers (torchrun, ``accelerate launch``: beside/witness.py) the launcher says
  the line once all its workers are done and the deaths among them are written (``said_by_launcher``): a rank 0 killed,
  or stopped with the job, still gets its line, and no rank's end is counted before it came;
- else rank 0 says it at its exit, once every other rank of this run on its node has ended (their state files; at most
  ``PEER_WAIT_S``); while one still runs, the line says so and goes without counts.

Rank 0 knows the files it can see only (its node's, or every node's on a shared filesystem). With spans only over OTLP
there are no files to count: rank 0 names the trace id to look up in Jaeger. Other ranks, forked children and processes
that never traced anything say nothing; ``LOADTRACE_QUIET=1`` silences it.
"""

from __future__ import annotations

import glob
import os
import re
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
    started_ns: int | None = None,
    link: str = "",
) -> None:
    """Rank 0's line on stderr at its exit, when its spans went somewhere and no witnessing launcher will say it;
    never raises. A process without a rank (a plain ``python`` run) says nothing, as before. ``failure``: why spans
    meant for the OTLP endpoint did not all arrive. ``started_ns``: when this process started (its node's other ranks
    of this run have state files updated since). ``link``: the job in Jaeger's UI (trace_findings.py), at the line's
    end."""
    try:
        if settings.quiet or rank != 0:
            return
        if trace_file is None and not settings.otlp_endpoint:
            return
        if launcher_says(trace_file):
            return  # the launcher says it once its workers are done (said_by_launcher)
        text = line(
            job_id, trace_file, settings.otlp_endpoint, max(1, local_world_size), failure=failure, since_ns=started_ns
        )
        _write(text + (f" · {link}" if link else ""))
    except Exception:  # a closed stderr, an odd file system: the job's exit goes on
        pass


def launcher_says(trace_file: str | None) -> bool:
    """Whether a witnessing launcher (beside/witness.py) annotates the trace and says the line once its workers are
    done: where it runs the workers and rank 0 writes trace files (with spans only over OTLP rank 0 says its own)."""
    return trace_file is not None and bool(os.environ.get(semconv.ENV_WITNESS_DIR))


def said_by_launcher(settings: Settings, state: statefile.State, link: str = "") -> None:
    """The line for the rank 0 whose ``state`` this is, said by the launcher that ran it once every worker it ran is
    done (beside/witness.py): only where rank 0 wrote trace files (with spans only over OTLP rank 0 says its own line,
    which counts nothing). Never raises."""
    try:
        if settings.quiet or state.rank != 0 or not state.trace_file:
            return
        trace_id = state.trace_id.strip().lower()
        job_id = state.job_id if format(semconv.job_trace_ids(state.job_id)[0], "032x") == trace_id else trace_id
        text = line(job_id, state.trace_file, None, max(1, state.local_world_size), trace_id=trace_id)
        _write(text + (f" · {link}" if link else ""))
    except Exception:
        pass


def _write(text: str) -> None:
    sys.stderr.write(semconv.redact_secrets(text) + "\n")  # the endpoint may carry user info
    sys.stderr.flush()


def line(
    job_id: str,
    trace_file: str | None,
    otlp_endpoint: str | None,
    local_world_size: int,
    timeout_s: float = TIMEOUT_S,
    failure: str | None = None,
    since_ns: int | None = None,
    trace_id: str | None = None,
) -> str:
    """The line to print (without a newline). Spans only over OTLP: "sent" only when they all arrived; else why not,
    and how to keep them next time. ``since_ns``: wait for this node's other ranks of the run (state files updated
    since then) to end first; None: they have (the launcher says it). ``trace_id``: the job's, where ``job_id`` is not
    the id it derives from (a job id cut short in the state file: then it is the trace id)."""
    from .export import safe_name  # the file names export gave (imported here: only rank 0, only at exit, needs it)

    trace_id = trace_id or format(semconv.job_trace_ids(job_id)[0], "032x")
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
    if since_ns is not None:
        node_files = os.path.join(folder, f"rank*-{safe_name(socket.gethostname())}-*{semconv.STATE_SUFFIX}")
        until = min(deadline, time.monotonic() + PEER_WAIT_S)
        running = wait_for_peers(node_files, trace_id, local_world_size, since_ns, until)
        if running:
            return (
                f"loadtrace: job {job_id} ({who(running)} still running: no counts before the run is over) → {command}"
            )
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


def wait_for_peers(node_files: str, trace_id: str, local_world_size: int, since_ns: int, until: float) -> list[int]:
    """Until ``until``: wait for this node's ranks of this run (state files matching ``node_files``, of the trace,
    updated since ``since_ns``: an earlier launch of a job id used again ended before) to have ended: exited, ended by
    a signal, or gone. The ranks still running at the end (empty: all ended, or the others never wrote a state file)."""
    while True:
        states = [statefile.read(path) for path in glob.glob(node_files)]
        ours = [s for s in states if s is not None and s.trace_id == trace_id and s.updated_ns >= since_ns]
        running = sorted({s.rank for s in ours if s.rank is not None and not _ended(s)})
        seen = {s.rank for s in ours if s.rank is not None}
        if (not running and len(seen) >= local_world_size) or time.monotonic() >= until:
            return running
        time.sleep(POLL_S)


def _ended(state: statefile.State) -> bool:
    if state.status in ("exited", "signalled") or state.pid <= 0 or state.pid == os.getpid():
        return True  # a state without a pid cannot be asked after
    try:
        os.kill(state.pid, 0)
    except ProcessLookupError:
        return True  # gone without a word: killed
    except OSError:
        pass
    return False


def who(ranks: list[int]) -> str:
    listed = ", ".join(str(rank) for rank in ranks[:3]) + (f" and {len(ranks) - 3:,} more" if len(ranks) > 3 else "")
    return f"rank{'s' * (len(ranks) > 1)} {listed}"


def report_counts(folder: str, job_id: str, deadline: float) -> str:
    """``, 2 ranks, 2 findings`` (and the ranks that stand out) from ``loadtrace report --format line`` in a child
    process; empty when it fails, does not finish by ``deadline`` or answers anything but one line of counts."""
    left = deadline - time.monotonic()
    if left <= 0 or not sys.executable:
        return ""
    env = {**os.environ, "LOADTRACE": "0"}  # the child loads nothing; keep even the .pth line idle
    command = [sys.executable, "-m", "loadtrace", "report", "--format", "line", f"--job={job_id}", "--latest", folder]
    # A session of its own: a launcher stopping the job signals each rank's process group (torchrun's killpg), and
    # these counts are what rank 0 still finishes then, its own signal held meanwhile (termination.Held); bounded all
    # the same, by ``deadline``.
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=left,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    said = done.stdout.strip()
    if done.returncode not in (0, 1) or "\n" in said or not COUNTS.match(said):
        return ""
    return f", {said}"


# What ``report --format line`` says of one job: ``[attempt N, ][run N, ]2 ranks, 1 finding...``.
COUNTS = re.compile(r"(attempt \d+, )?(run \d+, )?[\d,]+ (ranks?,|of )")
