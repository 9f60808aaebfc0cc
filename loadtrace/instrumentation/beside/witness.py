"""The launcher's witness: a worker the OOM killer takes cannot say so itself, but the process that started it can.

torchrun's elastic agent (which ``accelerate launch`` also uses) outlives its workers and sees each exit: pid, exit code
or signal. With ``LOADTRACE=1`` it is traced too, and ``hooks/torchelastic.py`` calls in here:

- before the workers start (``prepare_launch``): a launch id and an owner-only witness directory go into the workers'
  environment (``LOADTRACE_LAUNCH_ID``, ``LOADTRACE_WITNESS_DIR``); restarts keep both;
- each worker, once it has a state file (``statefile.py``), leaves a pointer ``<witness dir>/<pid>`` holding that
  file's path (``announce``);
- when workers die (``witness``): the pointer leads to the dead worker's exact last state, which becomes one
  ``loadtrace.rank_exit`` span in the job's trace, with the dead rank's own resource, how it ended (signal or exit
  code, and whether the cgroup's OOM killer did it) and what it was doing. It goes where the rank's own spans went:
  ``witness-<host>-<launcher pid>.jsonl`` beside the rank's trace file, and OTLP when an endpoint is configured;
- once all its workers are done, and where rank 0 was among them, the run's closing line (exporting/summary.py): said
  here, after every death is written, it counts what the report will, even where rank 0 was killed.

Nothing here may hang or break the launcher: reads are of small local files, export runs in a daemon thread joined for
at most ``LOADTRACE_EXIT_TIMEOUT``, and every fault is one line on stderr.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ... import semconv, statefile
from ...version import __version__
from .. import context
from .._log import warn_once
from ..counting.memory import oom_kill_count
from ..counting.memory import parse_oom_kill as parse_oom_kill  # the worker reads the same counter when its load begins
from ..settings import Settings, from_env, say_traces_not_written, trace_dir_problem

SOURCE_LAUNCHER = semconv.EXIT_SOURCE_LAUNCHER  # ``loadtrace.exit.source``
POINTER_MAX_BYTES = 4096
WITNESS_FILE_PREFIX = "witness-"


# The worker's side ---------------------------------------------------------------------------------------------------


def announce(state_path: str) -> None:
    """Tell a witnessing launcher where this process keeps its state: ``<LOADTRACE_WITNESS_DIR>/<pid>`` gets the state
    file's absolute path (written whole or not at all, owner-only). Without a witness, nothing; never raises."""
    directory = os.environ.get(semconv.ENV_WITNESS_DIR)
    if not directory:
        return
    pid = os.getpid()
    temporary = os.path.join(directory, f".{pid}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, os.path.abspath(state_path).encode())
        finally:
            os.close(fd)
        os.replace(temporary, os.path.join(directory, str(pid)))
    except Exception as error:
        warn_once(
            "witness-announce",
            f"cannot leave a pointer for the launcher in {directory} ({type(error).__name__}: {error}); "
            "if this process dies, the launcher cannot report its last state",
        )
        try:
            os.unlink(temporary)
        except OSError:
            pass


# Exit status and the OOM killer (pure) -------------------------------------------------------------------------------


def exit_signal(exitcode: int | None) -> str | None:
    """``-9`` → ``SIGKILL`` (how Popen and multiprocessing report a death by signal); None for an exit code."""
    return semconv.signal_name(-exitcode) if exitcode is not None and exitcode < 0 else None


def oom_killed(exitcode: int | None, before: int, now: int | None) -> bool | None:
    """The OOM killer's verdict: the worker died by SIGKILL and its cgroup's ``oom_kill`` counter rose since its load
    began. None when the counter was unreadable before or after (nothing can be told)."""
    if before < 0 or now is None:
        return None
    return exit_signal(exitcode) == "SIGKILL" and now > before


def exit_description(exitcode: int | None, oom: bool | None) -> str:
    """The rank_exit span's status message: ``SIGKILL``, ``SIGKILL (OOM)``, ``exit code 1``."""
    return semconv.exit_phrase(exit_signal(exitcode), exitcode, oom)


# The dead worker's span ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Death:
    """One worker exit the launcher saw: ``env`` is the environment it gave that worker (RANK, restart count, ...)."""

    pid: int
    exitcode: int | None
    env: Mapping[str, str]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def resource_attributes(
    state: statefile.State, death: Death, job_id: str, cluster: str | None = None
) -> dict[str, Any]:
    """The dead rank's own resource, as it would have put on its spans: rank and attempt as the launcher gave them
    (the state's when the launcher's are missing), the rest from the state."""
    env = death.env
    launched = context.rank_from_env(env, context.launcher())  # this process is the dead rank's launcher
    host = state.host or socket.gethostname()
    pid = state.pid if state.pid > 0 else death.pid
    rank = launched.rank if launched.rank is not None else state.rank
    attempt = _int(env.get("TORCHELASTIC_RESTART_COUNT"))
    attributes: dict[str, Any] = {
        semconv.SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or semconv.DEFAULT_SERVICE_NAME,
        semconv.SERVICE_INSTANCE_ID: f"{job_id}/rank-{rank}" if rank is not None else f"{host}/{pid}",
        semconv.HOST_NAME: host,
        semconv.PROCESS_PID: pid,
        semconv.LAUNCHER: launched.launcher,
        semconv.JOB_ID: job_id,
        semconv.ATTEMPT: attempt if attempt is not None else state.attempt,
        semconv.VERSION: __version__,
    }
    launch_id = state.launch_id or env.get(semconv.ENV_LAUNCH_ID)
    if launch_id:
        attributes[semconv.LAUNCH_ID] = launch_id
    if cluster:
        attributes[semconv.CLUSTER] = cluster
    from_state = {
        "rank": state.rank,
        "local_rank": state.local_rank,
        "world_size": state.world_size or None,
        "local_world_size": state.local_world_size or None,
        "node_rank": None,
    }
    for field, key in semconv.RANK_FIELDS.items():
        value = getattr(launched, field)
        value = value if value is not None else from_state[field]
        if value is not None:
            attributes[key] = value
    if rank is not None:  # the service name the rank's own spans carry (provider.py)
        service = attributes[semconv.SERVICE_NAME]
        attributes[semconv.SERVICE_NAME] = semconv.rank_service(service, rank)
        attributes[semconv.SERVICE_NAMESPACE] = service
    return attributes


def span_attributes(state: statefile.State, exitcode: int | None, oom: bool | None, witness_pid: int) -> dict[str, Any]:
    """How the rank ended and its exact last totals (those of its open, or last, load), under the standard keys."""
    attributes: dict[str, Any] = {}
    name = exit_signal(exitcode)
    if name is not None:
        attributes[semconv.EXIT_SIGNAL] = name
    elif exitcode is not None:
        attributes[semconv.EXIT_CODE] = exitcode
    if oom is not None:
        attributes[semconv.EXIT_OOM_KILLED] = oom
    attributes[semconv.EXIT_SOURCE] = SOURCE_LAUNCHER
    attributes[semconv.EXIT_STATUS] = state.status
    for key, text in (
        (semconv.EXIT_DURING, state.phase),
        (semconv.EXIT_LOAD, state.load),
        (semconv.STRATEGY, state.strategy),
    ):
        if text:
            attributes[key] = text
    attributes[semconv.WITNESS_PID] = witness_pid
    totals = state.totals()
    attributes[semconv.READ_TENSORS] = totals.tensors_read
    attributes[semconv.READ_BYTES] = totals.read_bytes
    attributes[semconv.FILES_OPENED] = totals.files_opened
    for device, nbytes in totals.materialized().items():
        attributes[semconv.materialized_bytes_key(device)] = nbytes
    if totals.conversions:
        attributes[semconv.CONVERT_COUNT] = totals.conversions
        attributes[semconv.CONVERT_BYTES] = totals.conversion_bytes
    attributes[semconv.HOOK_ERRORS] = totals.hook_errors
    for key, value in (
        (semconv.RSS_PEAK, state.rss_peak),
        (semconv.MEMORY_LIMIT, state.memory_limit),
        (semconv.CGROUP_MEMORY_MAX, state.cgroup_memory_max),
        (semconv.NODE_MEMORY_TOTAL, state.node_memory_total),
        (semconv.CHECKPOINT_TENSOR_BYTES, state.checkpoint_tensor_bytes),
    ):
        if value > 0:
            attributes[key] = value
    if state.memory_limit_source:
        attributes[semconv.MEMORY_LIMIT_SOURCE] = state.memory_limit_source
    if state.storage_sampled_ns > 0:  # its storage reads up to its last reading (statefile.FETCH_OFFSET)
        attributes[semconv.IO_STORAGE_READ_BYTES] = max(0, state.storage_read_now - state.storage_read_load_start)
        attributes[semconv.IO_STORAGE_READ_INTERVALS] = [at for stretch in state.storage_intervals for at in stretch]
        attributes[semconv.IO_STORAGE_READ_AS_OF] = state.storage_sampled_ns
    return attributes


def rank_exit_span(
    state: statefile.State,
    death: Death,
    oom: bool | None,
    witness_pid: int,
    cluster: str | None = None,
    end_ns: int | None = None,
) -> Any:
    """The ``loadtrace.rank_exit`` span (an OTel SDK ``ReadableSpan``) for one dead worker, in its job's trace under the
    job's root span; None when neither the state nor the launcher knows the job id."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    job_id = state.job_id or context.job_id_from_env(death.env)[0]
    if not job_id:
        return None
    trace_id, parent_id = semconv.job_trace_ids(job_id)
    flags = TraceFlags(TraceFlags.SAMPLED)
    end = time.time_ns() if end_ns is None else end_ns
    start = state.load_start_ns or state.created_ns or end
    resource = resource_attributes(state, death, job_id, cluster)
    attributes = span_attributes(state, death.exitcode, oom, witness_pid)
    rank = resource.get(semconv.RANK)
    if isinstance(rank, int):  # under the rank's group, as the rank's own spans
        parent_id = semconv.rank_group_id(job_id, rank)
        attributes = {semconv.RANK: rank, **attributes}
    return ReadableSpan(
        semconv.SPAN_RANK_EXIT,
        context=SpanContext(trace_id, random.getrandbits(64) or 1, is_remote=False, trace_flags=flags),
        parent=SpanContext(trace_id, parent_id, is_remote=True, trace_flags=flags),
        resource=Resource(resource),
        attributes=attributes,
        kind=SpanKind.INTERNAL,
        start_time=min(start, end),
        end_time=end,
        status=Status(StatusCode.ERROR, exit_description(death.exitcode, oom)),
        instrumentation_scope=InstrumentationScope(semconv.SCOPE_NAME, __version__),
    )


# The launcher's side ------------------------------------------------------------------------------------------------


class Witness:
    """One per launcher process: the launch's environment, the pointers its workers leave, the spans of the dead."""

    def __init__(self, settings: Settings | None = None):
        self._settings = settings
        self._seen: set[int] = set()
        self._lock = threading.Lock()
        self._created_dir: str | None = None
        self._file_exporters: dict[str, Any] = {}
        self._otlp: Any = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = from_env()
        return self._settings

    # Before the workers start.

    def prepare_launch(self, envs: Mapping[int, MutableMapping[str, str]]) -> None:
        """Put the launch id and the witness directory into this process's environment (once: restarts reuse them)
        and into each worker's own environment mapping."""
        if not os.environ.get(semconv.ENV_LAUNCH_ID):
            os.environ[semconv.ENV_LAUNCH_ID] = uuid.uuid4().hex
        directory = os.environ.get(semconv.ENV_WITNESS_DIR)
        if not directory or not os.path.isdir(directory):
            directory = tempfile.mkdtemp(prefix="loadtrace-witness-")  # owner-only
            os.environ[semconv.ENV_WITNESS_DIR] = directory
            if self._created_dir is None:
                atexit.register(self._remove_dir)
            self._created_dir = directory
        self._check_trace_dir()
        for env in envs.values():
            env[semconv.ENV_LAUNCH_ID] = os.environ[semconv.ENV_LAUNCH_ID]
            env[semconv.ENV_WITNESS_DIR] = directory
            if os.environ.get(semconv.ENV_SAID):
                env[semconv.ENV_SAID] = os.environ[semconv.ENV_SAID]

    def _check_trace_dir(self) -> None:
        """An explicit ``LOADTRACE_DIR`` that cannot be written is said here, once for the launch, before any rank
        meets it (each would otherwise say it in its own line)."""
        settings = self.settings
        if settings.writes_files and settings.trace_dir:
            problem = trace_dir_problem(settings.trace_dir)
            if problem is not None:
                say_traces_not_written(settings, settings.trace_dir, problem)

    def _remove_dir(self) -> None:
        if self._created_dir is not None:
            shutil.rmtree(self._created_dir, ignore_errors=True)

    # After they die.

    def witness(self, deaths: Iterable[Death]) -> None:
        """One ``loadtrace.rank_exit`` span per dead worker that left a state (each pid once), exported together."""
        witness_pid = os.getpid()
        spans: list[tuple[Any, str | None]] = []
        for death in deaths:
            with self._lock:
                if death.pid in self._seen:
                    continue
                self._seen.add(death.pid)
            try:
                found = self._state_of(death)
                if found is None:
                    continue
                state_path, state = found
                now = oom_kill_count(state.cgroup)
                oom = oom_killed(death.exitcode, state.oom_kill_before, now)
                span = rank_exit_span(state, death, oom, witness_pid, self.settings.cluster)
                if span is not None:
                    path = self._file_for(state, state_path)
                    spans += [(made, path) for made in (span, *_open_scopes_ended(span, state))]
            except Exception as error:
                warn_once("witness", f"cannot report the exit of worker {death.pid} ({type(error).__name__}: {error})")
        if spans:
            self._export(spans)

    # When they are all done.

    def rank0_state_path(self, pids: Mapping[int, int], envs: Mapping[int, Mapping[str, str]]) -> str | None:
        """The state file of rank 0 among the workers (local rank → pid, and their environments), read before their
        pointers go: its pointer, else (a wrapper script between the launcher and Python) the pointer of a process of
        rank 0. None when rank 0 is not among them or left no state."""
        directory = os.environ.get(semconv.ENV_WITNESS_DIR)
        local = next((local for local, env in envs.items() if env.get("RANK") == "0"), None)
        if not directory or local is None:
            return None
        found = _follow(directory, str(pids.get(local, -1)))
        if found is None:
            try:
                names = sorted(name for name in os.listdir(directory) if name.isdigit())
            except OSError:
                return None
            found = next((f for name in names if (f := _follow(directory, name)) is not None and f[2].rank == 0), None)
        return found[1] if found is not None else None

    def say_closing_line(self, state_path: str) -> None:
        """Rank 0's findings in the job's trace (exporting/trace_findings.py) and its closing line (summary.py), here
        once every worker is done and the deaths among them are written: what the report will say of the run, even
        where rank 0 was killed or stopped with the job."""
        from ..exporting import summary, trace_findings

        state = statefile.read(state_path)
        if state is not None and state.rank == 0 and state.trace_file:
            size = state.local_world_size
            link = trace_findings.annotate(self.settings, state.job_id, 0, size, state.trace_file)
            summary.said_by_launcher(self.settings, state, link)

    def forget(self, pids: Iterable[int]) -> None:
        """Remove the pointers of workers that are done (exited cleanly or already witnessed)."""
        directory = os.environ.get(semconv.ENV_WITNESS_DIR)
        if not directory:
            return
        for pid in pids:
            try:
                os.unlink(os.path.join(directory, str(pid)))
            except OSError:
                pass

    def _state_of(self, death: Death) -> tuple[str, statefile.State] | None:
        """The dead worker's state: through its pointer; else (a wrapper script between the launcher and Python) the
        pointer of a dead process that held this rank in this attempt. None when it never loaded anything."""
        directory = os.environ.get(semconv.ENV_WITNESS_DIR)
        if not directory:
            return None
        found = _follow(directory, str(death.pid))
        if found is None:
            found = self._by_rank(directory, death)
        if found is None:
            return None
        pointer, state_path, state = found
        self.forget([_int(pointer) or -1])
        if state.load_start_ns == 0 and state.loads_open == 0:
            return None  # it never began a load: nothing of loadtrace's to report
        return state_path, state

    def _by_rank(self, directory: str, death: Death) -> tuple[str, str, statefile.State] | None:
        rank, attempt = _int(death.env.get("RANK")), _int(death.env.get("TORCHELASTIC_RESTART_COUNT"))
        if rank is None:
            return None
        try:
            names = [name for name in os.listdir(directory) if name.isdigit() and int(name) not in self._seen]
        except OSError:
            return None
        for name in names:
            found = _follow(directory, name)
            if found is None or _alive(int(name)):
                continue
            state = found[2]
            if state.rank == rank and (attempt is None or state.attempt == attempt):
                with self._lock:
                    self._seen.add(int(name))
                return found
        return None

    # Export.

    def _file_for(self, state: statefile.State, state_path: str) -> str | None:
        """``witness-<host>-<launcher pid>.jsonl`` in the dead rank's trace directory; None when it wrote no files."""
        from ..exporting.export import safe_name

        trace_file = state.trace_file
        if not trace_file:
            return None
        directory = os.path.dirname(trace_file) if os.path.isabs(trace_file) else os.path.dirname(state_path)
        name = f"{WITNESS_FILE_PREFIX}{safe_name(socket.gethostname())}-{os.getpid()}{semconv.TRACE_FILE_SUFFIX}"
        return os.path.join(directory, name)

    def _export(self, spans: list[tuple[Any, str | None]]) -> None:
        """Files and OTLP, in a daemon thread joined for at most ``LOADTRACE_EXIT_TIMEOUT``."""
        from ..exporting import export

        settings = self.settings
        by_file: dict[str, list[Any]] = {}
        for span, path in spans:
            if path is not None:
                by_file.setdefault(path, []).append(span)
        every = [span for span, _ in spans]

        def send() -> None:
            for path, batch in by_file.items():
                exporter = self._file_exporters.get(path)
                if exporter is None:
                    exporter = self._file_exporters[path] = export.JsonLinesExporter(path)
                exporter.export(batch)  # says once itself when it cannot write
            if settings.otlp_endpoint:
                try:
                    if self._otlp is None:
                        export.route_otel_logs(settings)
                        self._otlp = export._otlp_exporter(settings)
                    self._otlp.export(every)
                except Exception as error:
                    warn_once(
                        "witness-otlp",
                        f"cannot send rank exits to {settings.otlp_endpoint} ({type(error).__name__}: {error})",
                    )

        def guarded() -> None:
            try:
                send()
            except Exception as error:
                warn_once("witness", f"cannot export rank exits ({type(error).__name__}: {error})")
            finally:
                done.set()

        done = threading.Event()
        threading.Thread(target=guarded, name="loadtrace-witness-export", daemon=True).start()
        if not done.wait(settings.exit_timeout_s):
            warn_once("witness-timeout", f"gave up exporting rank exits after {settings.exit_timeout_s:g} s")


def _open_scopes_ended(exit_span: Any, state: statefile.State) -> list[Any]:
    """The dead worker's open startup, loads and phases, ended at its death (witness_scopes.py)."""
    from .witness_scopes import ended_by_launcher, open_scope_spans

    attributes = ended_by_launcher(dict(exit_span.attributes))
    description = exit_span.status.description or "died"
    return open_scope_spans(state, dict(exit_span.resource.attributes), attributes, description, exit_span.end_time)


def _follow(directory: str, name: str) -> tuple[str, str, statefile.State] | None:
    """Pointer ``name`` → (name, state path, state), or None when it is missing or leads to no state. Pointer and
    state are this user's own, or refused: the witness ends spans and sends them in its job's name."""
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            if os.fstat(fd).st_uid not in statefile.own_user():
                return None
            state_path = os.read(fd, POINTER_MAX_BYTES).decode("utf-8", errors="replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return None
    state = statefile.read(state_path, owners=statefile.own_user()) if state_path else None
    return (name, state_path, state) if state is not None else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


_witness: Witness | None = None
_witness_lock = threading.Lock()


def launcher() -> Witness:
    """This launcher process's witness."""
    global _witness
    with _witness_lock:
        if _witness is None:
            _witness = Witness()
        return _witness
