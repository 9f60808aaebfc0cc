"""Paths, the job's environment, running workers, and the other small helpers every part uses."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent.parent / "bench_load.py"  # workers are its internal subcommands
REPO = SCRIPT.parent.parent
PY = sys.executable


def worker(subcommand: str, *args: Any) -> list[str]:
    """The command line of one of ``bench_load.py``'s internal subcommands, run by this Python."""
    return [PY, str(SCRIPT), subcommand, *map(str, args)]


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` is a wrapt wrapper or proxy (any subclass: loadtrace's own wrapper classes included), without
    importing wrapt into a process that has not."""
    return any(cls.__name__ in ("FunctionWrapper", "BoundFunctionWrapper", "ObjectProxy") for cls in type(obj).__mro__)


def proc_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, bytes."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                values[key] = int(value.split()[0]) * 1024
    return values


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so the next reading is the peak of what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def clean_env(**extra: str) -> dict[str, str]:
    """The job's environment without any loadtrace / OTel knob the caller may have set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(
        {
            "TRANSFORMERS_VERBOSITY": "error",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_checked(cmd: list[str], env: dict[str, str], timeout: float, logfile: Path, cwd: Path | None = None) -> float:
    """Run; return wall seconds; on failure raise with the log's tail."""
    started = time.perf_counter()
    with open(logfile, "wb") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = logfile.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{tail}")
    return wall


def output(cmd: list[str], env: dict[str, str]) -> str:
    """stdout of a command that must succeed."""
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout


def best_ns(fn: Any, n: int, reps: int = 9) -> float:
    """ns per call: the best of ``reps`` blocks of ``n`` calls (the minimum filters out other jobs' preemptions)."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best
