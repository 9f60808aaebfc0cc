"""Who this process is: rank, host, job, and the one trace id all ranks of a job share.

Independent of the hooked libraries: torch.distributed is consulted only if the job already imported it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import semconv
from . import HOOKED_PACKAGES as HOOKED_LIBRARIES  # their versions go on the resource
from ._log import warn_once

# Where each launcher puts rank, local rank, world size, local world size, node rank; first match wins.
LAUNCHERS: tuple[tuple[str, tuple[str, str, str, str | None, str | None]], ...] = (
    ("torchrun", ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")),
    ("slurm", ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID")),
    (
        "mpi",
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "OMPI_COMM_WORLD_NODE_RANK",
        ),
    ),
    ("mpi", ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS", None)),
)

# Job ids, most specific first. Each is shared by every rank of one launch and differs between launches.
JOB_ID_VARIABLES = (
    "LOADTRACE_JOB_ID",
    "TORCHELASTIC_RUN_ID",  # torchrun: --rdzv-id, or a uuid on single-node runs without --master-port; else "none"
    "SLURM_JOB_ID",  # combined with SLURM_STEP_ID: each srun step is its own launch
    "PMIX_NAMESPACE",  # Open MPI 5 / PMIx
    "OMPI_MCA_ess_base_jobid",  # Open MPI 4
    "LSB_JOBID",
    "PBS_JOBID",
)

# Values launchers put in a job id variable when they have no real id. torchrun's static rendezvous sets
# TORCHELASTIC_RUN_ID=none on every node of every job: trusting it would merge unrelated jobs into one trace.
PLACEHOLDER_JOB_IDS = frozenset({"", "none", "null", "default", "unknown", "0"})

STORE_KEY = "loadtrace/job_id"
# Where a job id came from (``loadtrace.job.id_source``) besides the variable's own name.
SOURCE_EXPLICIT = "LOADTRACE_JOB_ID"
SOURCE_STORE = "process group store (rank 0)"
SOURCE_PROCESS = "process"  # no job id: a trace of this process's own
# A single-node torchelastic launch (torchrun, accelerate launch) without a real run id: what its workers share.
SOURCE_LAUNCH = "launcher (LOADTRACE_LAUNCH_ID)"  # our witnessing launcher's id for the launch
SOURCE_LAUNCH_DIR = "launcher (TORCHELASTIC_ERROR_FILE)"  # an untraced launcher: its run's log directory


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Rank:
    launcher: str = "none"
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None

    @property
    def distributed(self) -> bool:
        return (self.world_size or 1) > 1


# The launchers that set torchrun's variables (RANK, ...), by what they run: a program's name, or a Python module.
PROGRAMS = {
    "torchrun": "torchrun",
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate": "accelerate",  # ``accelerate launch`` runs torchelastic's agent in its own process
    "accelerate.commands.launch": "accelerate",
    "accelerate.commands.accelerate_cli": "accelerate",
    "deepspeed": "deepspeed",  # its runner starts ``deepspeed.launcher.launch`` on each node, which starts the ranks
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
}
ANCESTORS = 3  # how far up a rank's launcher is looked for: a shell wrapper, a forked DataLoader worker's rank


def rank_from_env(env: Mapping[str, str], launched_by: str | None = None) -> Rank:
    """The rank as the launcher's variables give it. ``launched_by``: the launcher the process tree names
    (``launcher``), which names a torchrun-style launch; without it, the launcher's own variables do: torchelastic's
    (torchrun, ``accelerate launch``) or deepspeed's launcher's, never a setting any job may put in its environment
    (``ACCELERATE_USE_FSDP=true`` under a plain torchrun is the job's)."""
    for launcher, names in LAUNCHERS:
        if names[0] in env:
            rank, local, world, local_world, node = (_int(env.get(n)) if n else None for n in names)
            if launcher == "torchrun":
                launcher = launched_by or ("deepspeed" if _deepspeed_launched(env) else launcher)
            return Rank(launcher, rank, local, world, local_world, node)
    return Rank(launched_by or "none")


def _deepspeed_launched(env: Mapping[str, str]) -> bool:
    """What ``deepspeed.launcher.launch`` gives every rank it starts, and torchelastic never does."""
    return "TORCHELASTIC_RUN_ID" not in env and all(name in env for name in ("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE"))


def program(argv: list[str]) -> str | None:
    """What a command line runs: its executable's name or, for a Python interpreter, its script's name or ``-m``
    module (``python -u -m deepspeed.launcher.launch``, ``python /venv/bin/torchrun``)."""
    if not argv:
        return None
    name = os.path.basename(argv[0])
    if not name.startswith("python"):
        return name
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg.startswith("-m"):
            return arg[2:]
        if arg == "-c":
            return None
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            next(args, None)  # the option's value
        elif not arg.startswith("-"):
            return os.path.basename(arg)
    return None


def launcher(pid: int | str = "self") -> str | None:
    """The launcher ``pid`` is (``self``: this process), from its command line (Linux); None for any other program."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            argv = [arg.decode(errors="replace") for arg in file.read().split(b"\0") if arg]
    except OSError:
        return None
    name = program(argv)
    return PROGRAMS.get(name) if name is not None else None


_launched: dict[int, str | None] = {}  # this process's pid → its launcher (a forked child looks again)


def launched_by() -> str | None:
    """The launcher that started this process: the nearest of its ancestors (up to ``ANCESTORS``) that is one; None
    where none is, or where the tree cannot be read (not Linux)."""
    pid = os.getpid()
    if pid not in _launched:
        _launched.clear()
        _launched[pid] = _nearest_launcher()
    return _launched[pid]


def _nearest_launcher() -> str | None:
    pid = os.getppid()
    for _ in range(ANCESTORS):
        if pid <= 1:
            return None
        found = launcher(pid)
        if found is not None:
            return found
        pid = _parent(pid)
    return None


def launcher_start_ns() -> int | None:
    """When the launcher that started this process started (``process_start_ns``); None without one."""
    pid = os.getppid()
    for _ in range(ANCESTORS):
        if pid <= 1:
            return None
        if launcher(pid) is not None:
            return process_start_ns(pid)
        pid = _parent(pid)
    return None


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])  # after the command's name, which may hold spaces
    except (OSError, ValueError, IndexError):
        return 0


def current_rank(env: Mapping[str, str] | None = None) -> Rank:
    """Rank from torch.distributed when the job initialised it, else from the launcher's variables; the launcher from
    the process tree."""
    found = rank_from_env(os.environ if env is None else env, launched_by())
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return Rank(
                found.launcher,
                dist.get_rank(),
                found.local_rank,
                dist.get_world_size(),
                found.local_world_size,
                found.node_rank,
            )
    except Exception:  # an odd backend state must not stop tracing
        pass
    return found


def process_start_ns(pid: int | str = "self") -> int | None:
    """When this process (or ``pid``) started, in ``time.time_ns()`` terms (Linux): its start in clock ticks since
    boot (``/proc/<pid>/stat``, field 22) against the boot-time clock now, so to a tick (10 ms); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22; fields[0] is field 3 (state), after the command name
        ticks = os.sysconf("SC_CLK_TCK")
        age_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - started_ticks * 1_000_000_000 // ticks
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time_ns() - age_ns if age_ns >= 0 else None


def job_id_from_env(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The job id and where it came from; (None, None) when only placeholders are set and the launch is not a
    single-node torchelastic one (``launch_id_from_env``)."""
    for name in JOB_ID_VARIABLES:
        value = env.get(name, "").strip()
        if value.lower() in PLACEHOLDER_JOB_IDS:
            continue
        if name == "SLURM_JOB_ID" and env.get("SLURM_STEP_ID"):
            value = f"{value}.{env['SLURM_STEP_ID']}"
        return value, name
    return launch_id_from_env(env)


def launch_id_from_env(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """For a torchelastic worker (torchrun, ``accelerate launch``) whose launcher gave no usable run id
    (``TORCHELASTIC_RUN_ID=none``: static rendezvous, any ``--master-port``, every ``accelerate launch``): when every
    rank of the job is on this node, one launcher started them all, and what it gave all of them is the job id.

    That is ``LOADTRACE_LAUNCH_ID`` when the launcher is traced (it gives each of its workers the same one), else the
    directory torchelastic made for this launch's logs (``TORCHELASTIC_ERROR_FILE`` minus ``attempt_<n>/<local
    rank>/error.json``: a fresh ``mkdtemp`` per launch, the same for every worker and every restart, wrapper scripts
    between launcher and Python included). Never on several nodes: their launchers differ, and one trace per node
    would split the job; the process group's store joins those (``Job.adopt_from_store``)."""
    if "TORCHELASTIC_RUN_ID" not in env:
        return None, None
    world, local_world = _int(env.get("WORLD_SIZE")), _int(env.get("LOCAL_WORLD_SIZE"))
    nodes = _int(env.get("GROUP_WORLD_SIZE"))
    if world is None or world < 1 or world != local_world or (nodes is not None and nodes != 1):
        return None, None
    launch = env.get("LOADTRACE_LAUNCH_ID", "").strip()
    if launch and launch.lower() not in PLACEHOLDER_JOB_IDS:
        return launch, SOURCE_LAUNCH
    run_dir = _launch_log_dir(env.get("TORCHELASTIC_ERROR_FILE", ""))
    if run_dir is not None:
        key = f"{socket.gethostname()}\0{run_dir}".encode()
        return hashlib.sha256(key).hexdigest()[:32], SOURCE_LAUNCH_DIR
    return None, None


def _launch_log_dir(error_file: str) -> str | None:
    """``<log dir>/<run id>_<random>/attempt_<n>/<local rank>/error.json`` → ``<log dir>/<run id>_<random>``."""
    parts = error_file.strip().split(os.sep)
    if len(parts) < 4 or parts[-1] != "error.json" or not parts[-2].isdigit():
        return None
    attempt = parts[-3]
    if not (attempt.startswith("attempt_") and attempt[len("attempt_") :].isdigit()):
        return None
    return os.sep.join(parts[:-3])


def library_versions() -> dict[str, str]:
    """The versions of the hooked libraries: ``__version__`` of those the process imported (where it loaded them
    from), else the version of the installed distribution's ``.dist-info`` directory on ``sys.path``. Not
    ``importlib.metadata``: its lookups cost 8-13 ms here, at a process's first span."""
    versions = {}
    missing = []
    for name in HOOKED_LIBRARIES:
        version = getattr(sys.modules.get(name), "__version__", None)
        if version:
            versions[name] = str(version)
        else:
            missing.append(name)
    if missing:
        versions.update(installed_versions(missing))
    return versions


def installed_versions(names: list[str]) -> dict[str, str]:
    """From ``<name>-<version>.dist-info`` (or ``.egg-info``) directories on ``sys.path``; the first match wins, as
    for imports."""
    wanted = {name.replace("-", "_").lower(): name for name in names}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for item in listing:
            stem, dot, suffix = item.rpartition(".")
            if suffix not in ("dist-info", "egg-info") or not dot:
                continue
            project, _, version = stem.partition("-")
            name = wanted.get(project.replace("-", "_").replace(".", "_").lower())
            if name is not None and version and name not in found:
                found[name] = version.split("-")[0]
        if len(found) == len(wanted):
            break
    return found


class Job:
    """The job this process belongs to. Resolved lazily; may be adopted later from the process group's store."""

    def __init__(self, explicit_id: str | None = None, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self._lock = threading.Lock()
        self.id: str | None
        self.source: str | None
        if explicit_id:
            self.id, self.source = explicit_id, SOURCE_EXPLICIT
        else:
            self.id, self.source = job_id_from_env(env)
        self.placeholder = {n: env[n] for n in JOB_ID_VARIABLES if n in env and self.id is None}

    @property
    def known(self) -> bool:
        return self.id is not None

    def adopt_from_store(self, store: Any, rank: int, timeout_s: float = 10.0) -> None:
        """Without a usable job id, rank 0 makes one and publishes it through the process group's store.

        Called right after ``init_process_group`` on every rank, so every rank of the job joins one trace even
        where the launcher gave them nothing better than ``TORCHELASTIC_RUN_ID=none``.
        """
        if self.known:
            return
        import uuid
        from datetime import timedelta

        if rank == 0:
            job_id = uuid.uuid4().hex
            store.set(STORE_KEY, job_id)
        else:
            store.wait([STORE_KEY], timedelta(seconds=timeout_s))
            job_id = store.get(STORE_KEY).decode()
        with self._lock:
            if not self.known:
                self.id, self.source = job_id, SOURCE_STORE

    def fallback_id(self) -> str:
        """A per-process id, for a process that has no job id (said once when it is part of a larger job)."""
        with self._lock:
            if self.id is None:
                rank = current_rank()
                if rank.distributed:
                    given = ", ".join(f"{k}={v!r}" for k, v in self.placeholder.items()) or "no launcher job id"
                    warn_once(
                        "job-id",
                        f"rank {rank.rank} found no job id ({given}), so its spans go to a trace of their own; "
                        "set LOADTRACE_JOB_ID to one value on every rank (or torchrun --rdzv-id) to join them",
                    )
                self.id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"
                self.source = SOURCE_PROCESS
            return self.id


def cluster_attributes(cluster: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """Where the job ran, to correlate startups across jobs and clusters: the cluster name (``Settings.cluster``); on
    Kubernetes also the pod and namespace (OTel's ``k8s.*`` names)."""
    attributes = {}
    if cluster:
        attributes[semconv.CLUSTER] = cluster
    if "KUBERNETES_SERVICE_HOST" in env:
        if env.get("HOSTNAME"):
            attributes[semconv.K8S_POD_NAME] = env["HOSTNAME"]
        if env.get("POD_NAMESPACE"):
            attributes[semconv.K8S_NAMESPACE_NAME] = env["POD_NAMESPACE"]
    return attributes


def resource_attributes(
    job: Job, cluster: str | None, version: str, attempt: int = 0, launch_id: str | None = None
) -> dict[str, Any]:
    """What every span of this process carries: its rank, host, pid, job (which attempt of which launch) and library
    versions."""
    rank = current_rank()
    job_id = job.id or job.fallback_id()
    host = socket.gethostname()
    attributes: dict[str, Any] = {
        semconv.SERVICE_INSTANCE_ID: f"{job_id}/rank-{rank.rank}" if rank.rank is not None else f"{host}/{os.getpid()}",
        semconv.HOST_NAME: host,
        semconv.PROCESS_PID: os.getpid(),
        semconv.LAUNCHER: rank.launcher,
        semconv.JOB_ID: job_id,
        semconv.JOB_ID_SOURCE: job.source or SOURCE_PROCESS,
        semconv.ATTEMPT: attempt,
        semconv.VERSION: version,
        semconv.SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME,
    }
    if launch_id:
        attributes[semconv.LAUNCH_ID] = launch_id
    attributes.update(cluster_attributes(cluster, os.environ))
    for field, key in semconv.RANK_FIELDS.items():
        value = getattr(rank, field)
        if value is not None:
            attributes[key] = value
    for name, lib_version in library_versions().items():
        attributes[semconv.lib_key(name)] = lib_version
    return attributes
