"""Run a script under ``torchrun --nproc_per_node N`` in a given venv, the way a user's job runs.

The environment is the caller's minus anything that would change what is measured: ``LOADTRACE*`` and ``OTEL_*``
variables, ``PYTHONPATH`` (the workers must import the *installed* loadtrace, never the source tree: it holds only
``exit_gc/``, whose ``sitecustomize`` freezes the collector at exit), and the accelerate/FSDP switches; then exactly
the variables the caller passes. The job runs in its own working
directory, so loadtrace's default ``./loadtrace-traces/<job id>/`` lands there and nowhere else.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .venvs import Venv

EXIT_GC = Path(__file__).resolve().parent / "exit_gc"
DEFAULT_TIMEOUT_S = float(os.environ.get("LOADTRACE_TEST_TORCHRUN_TIMEOUT", "420"))
SCRUBBED_PREFIXES = ("LOADTRACE", "OTEL_", "ACCELERATE_", "FSDP_")
SCRUBBED = {
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONSAFEPATH",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "VIRTUAL_ENV",
}


@dataclass
class TorchrunResult:
    cmd: list[str]
    cwd: Path
    env_added: dict[str, str]
    returncode: int
    seconds: float
    log: Path

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def check(self) -> TorchrunResult:
        if self.returncode != 0:
            raise AssertionError(
                f"torchrun exited {self.returncode} after {self.seconds:.1f}s: {' '.join(self.cmd)}\n"
                f"cwd {self.cwd}, env {self.env_added}\n--- last lines of {self.log} ---\n{self.tail()}"
            )
        return self


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def extensions_dir(venv: Venv) -> Path:
    """The venv's own cache of torch's JIT-built extensions, where scripts/setup.sh built DeepSpeed's op."""
    return venv.root / "torch_extensions"


def clean_env(venv: Venv, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)}
    env["PYTHONPATH"] = str(EXIT_GC)  # only the exit's frozen collector (exit_gc/sitecustomize.py), not the tree
    # The venv's tools first: deepspeed builds its CPU communication op with the venv's ninja on first use.
    env["PATH"] = f"{venv.bin}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    # DeepSpeed JIT-builds its CPU shared-memory communication op at init_distributed. In torch's one default cache
    # directory two venvs (different include paths in build.ninja) rebuild it on every alternation (~25-45 s each
    # here): one cache per venv, built once by scripts/setup.sh.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir(venv)))
    # Rank 0's closing line (which job, the command that reports it) is not a complaint: tests that count loadtrace's
    # lines on stderr leave it out; tests of that line (test_job_summary_line.py) pass LOADTRACE_QUIET=0.
    env["LOADTRACE_QUIET"] = "1"
    env.update(extra)
    return env


def command(
    venv: Venv,
    script: Path,
    args: list[str],
    nproc: int = 2,
    launcher_args: tuple[str, ...] = (),
    static_port: bool = True,
) -> list[str]:
    """``torchrun --nproc_per_node nproc [launcher_args] [--master_port FREE] script args`` with ``venv``'s torchrun."""
    cmd = [str(venv.torchrun), "--nproc_per_node", str(nproc), *launcher_args]
    if static_port:
        cmd += ["--master_port", str(free_port())]
    return [*cmd, str(script), *args]


def launch(venv: Venv, cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    """Start ``cmd`` in ``cwd`` in a session of its own (its whole process group can be killed), with ``venv``'s clean
    environment plus ``env``, its output into ``cwd/torchrun.log``: (the process, the log)."""
    cwd.mkdir(parents=True, exist_ok=True)
    log = cwd / "torchrun.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=clean_env(venv, dict(env or {})),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc, log


# A rank that has done its work can still die in C++ at exit with this line (SIGABRT, a torch/gloo thread destroyed
# while joinable): about 1 run in 20 here, traced or not, more under load. Not what any test is about.
ABORT_AT_EXIT = "terminate called without an active exception"


def aborted_at_exit(log: Path) -> bool:
    """A rank died of ``ABORT_AT_EXIT``'s SIGABRT and every other rank torchrun reports ended by that signal or by
    the SIGTERM torchrun then sent it: nothing else failed (a rank that raised, or was killed, is never this)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    codes = set(re.findall(r"exitcode\s*:\s*(-?\d+)", text))
    return ABORT_AT_EXIT in text and "-6" in codes and codes <= {"-6", "-15"}


def set_aside(cwd: Path, before: set[Path]) -> Path:
    """Move what appeared under ``cwd`` since ``before`` (a run's log, traces, outputs) into a sibling folder, so a run
    again starts from what its caller prepared: that folder."""
    aside = cwd.with_name(f"{cwd.name}.aborted-at-exit")
    shutil.rmtree(aside, ignore_errors=True)
    for path in sorted(set(cwd.rglob("*")) - before):
        if path.parent == cwd or path.parent in before:  # the topmost new entry: what lies below goes with it
            target = aside / path.relative_to(cwd)
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
    return aside


def torchrun(
    venv: Venv,
    script: Path,
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    nproc: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    launcher_args: tuple[str, ...] = (),
    static_port: bool = True,
) -> TorchrunResult:
    """Run ``torchrun --nproc_per_node nproc [launcher_args] script args`` with ``venv``'s torchrun; never raises on
    failure (see ``TorchrunResult.check``). On timeout the whole process group is killed and the result has returncode
    -9. ``static_port=False`` leaves out ``--master_port``: torchrun then uses its single-node c10d rendezvous with a
    fresh run id, kept across restarts, as a user's plain ``torchrun --nproc_per_node 2 train.py`` does. A job that
    only ``aborted_at_exit`` runs once more, what it wrote into ``cwd`` set aside first (``set_aside``)."""
    cwd.mkdir(parents=True, exist_ok=True)
    before = set(cwd.rglob("*"))
    for attempt in (1, 2):
        start = time.monotonic()
        cmd = command(venv, script, args, nproc, launcher_args, static_port)
        proc, log = launch(venv, cmd, cwd, env)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = -9
            with open(log, "ab") as tail:
                tail.write(f"\n[tests] killed after {timeout_s:.0f}s timeout\n".encode())
        if attempt == 2 or returncode == 0 or not aborted_at_exit(log):
            break
        aside = set_aside(cwd, before)
        print(f"[torchrun] {cwd}: a rank aborted in C++ at exit; running the job again once (the first: {aside})")
    return TorchrunResult(cmd, cwd, dict(env or {}), returncode, time.monotonic() - start, log)


def accelerate_launch(venv: Venv, script: Path, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """``accelerate launch`` of 2 processes on this node (torchelastic's agent in accelerate's own process), with
    ``venv``'s clean environment plus ``env``: (its exit code, its output)."""
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(venv.bin / "accelerate"),
        "launch",
        "--multi_gpu",  # torchelastic's agent; on a CPU-only torch the workers use gloo
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(script),
        *args,
    ]
    proc = subprocess.run(cmd, cwd=cwd, env=clean_env(venv, env), capture_output=True, text=True, timeout=420)
    return proc.returncode, proc.stdout + proc.stderr
