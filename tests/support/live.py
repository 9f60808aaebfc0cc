"""A torchrun job left running in the background, to be watched while it loads (``loadtrace top``, OTLP metrics).

The same command and clean environment as ``support.torchrun.torchrun``, but started and handed back at once; the
caller polls what it wants to see while the job really runs, then ``finish``es it (killing its process group when it
outlives its timeout).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .torchrun import clean_env, free_port
from .venvs import Venv


class Job:
    def __init__(self, venv: Venv, script: Path, args: list[str], cwd: Path, env: dict[str, str], prefix=()):
        cwd.mkdir(parents=True, exist_ok=True)
        self.venv, self.cwd, self.log = venv, cwd, cwd / "torchrun.log"
        cmd = [*prefix, str(venv.torchrun), "--nproc_per_node", "2", "--master_port", str(free_port()), str(script)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd + args,
                cwd=cwd,
                env=clean_env(venv, env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout_s: float = 300) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def top_json(venv: Venv, folder: Path) -> dict[str, Any]:
    """``loadtrace top FOLDER --once --format json``, run as a user runs it (the installed CLI)."""
    result = subprocess.run(
        [str(venv.bin / "loadtrace"), "top", str(folder), "--once", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def rank_of(snapshot: dict[str, Any], rank: int) -> dict[str, Any] | None:
    return next((row for row in snapshot["ranks"] if row["rank"] == rank), None)


def wait_for(
    what: Callable[[], Any], timeout_s: float, job: Job | None = None, every_s: float = 0.2, why: str = ""
) -> Any:
    """Poll ``what`` until it returns something truthy; fail (with the job's log) when time runs out or the job ends
    first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        if job is not None and not job.running():
            found = what()
            if found:
                return found
            raise AssertionError(f"the job ended before {why or 'the wait was over'}:\n{job.tail()}")
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {why}" + (f":\n{job.tail()}" if job is not None else ""))
