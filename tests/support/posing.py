"""Ranks 0-15 of a 1,024-rank job, each a single process posing as its rank through the launcher's variables.

No 1,024-rank job runs here: loadtrace reads a rank from ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE`` and ``GROUP_RANK``, so one process given those (and one ``LOADTRACE_JOB_ID``) is that rank of that
job to it; no process group is needed for a plain load. Nodes 0 and 1 (8 ranks a node) stand for all 128 nodes: what a
rank keeps depends only on its local rank and on being rank 0. Each loads a real checkpoint of ``CHECKPOINT_FILES``
files, with an independent count of its reads. The processes are children forked, a few at a time, from one server
that imported torch and transformers once with loadtrace off (``tests/workers/posing_server.py``: 0.6 s of CPU a rank
instead of 5); each turns loadtrace on as ``LOADTRACE=1`` does at interpreter start (the installed ``loadtrace.pth``,
the libraries already imported), and ends through the interpreter's normal exit. Each has a UTS namespace of its own
with its node's host name (``node-<GROUP_RANK>``) where ``unshare -u`` is allowed. What only a fresh interpreter has
(the startup's ``imports`` phase: the hooked libraries' imports timed) is 0 on these ranks, and not asserted here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import WORKERS
from .torchrun import clean_env
from .venvs import Venv

SERVER = WORKERS / "posing_server.py"
WORLD_SIZE, RANKS_PER_NODE, POSED = 1024, 8, 16
CHECKPOINT_FILES = 22
# A tiny Qwen3-MoE whose safetensors shards number CHECKPOINT_FILES (the tensors, not the bytes, set the count).
CHECKPOINT_ARGS = ("--layers", "4", "--experts", "4", "--shard-size", "40KB")
AT_ONCE = 4  # processes loading at a time (2 cores here)


@dataclass
class Posed:
    """One posing process: its rank, the job it poses in, its trace folder and its independent count."""

    rank: int
    world_size: int
    job_id: str
    folder: Path
    detail: str | None = None
    count: dict[str, Any] = field(default_factory=dict)

    def variables(self) -> dict[str, str]:
        """What the launcher gives this rank, and loadtrace on."""
        extra = {
            "LOADTRACE": "1",
            "LOADTRACE_JOB_ID": self.job_id,
            "LOADTRACE_DIR": str(self.folder / "traces"),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.rank % RANKS_PER_NODE),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(RANKS_PER_NODE),
            "GROUP_RANK": str(self.rank // RANKS_PER_NODE),
        }
        if self.detail is not None:
            extra["LOADTRACE_DETAIL"] = self.detail
        return extra


def own_host_names() -> bool:
    """Whether a process can be given its node's host name here (``unshare -u``: root, or user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-u", "true"], capture_output=True).returncode == 0


def run(venv: Venv, checkpoint: Path, posed: list[Posed]) -> list[Posed]:
    """Write the checkpoint to ``checkpoint``, then run every posing process, ``AT_ONCE`` at a time, all forked from
    one server (``SERVER``); each one's count read back."""
    for rank in posed:
        rank.folder.mkdir(parents=True, exist_ok=True)
    own_hosts = own_host_names()
    plan = {
        "checkpoint": str(checkpoint),
        "checkpoint_args": list(CHECKPOINT_ARGS),
        "at_once": AT_ONCE,
        "ranks": [
            {
                "rank": rank.rank,
                "env": rank.variables(),
                "folder": str(rank.folder),
                "host": f"node-{rank.rank // RANKS_PER_NODE}" if own_hosts else None,
            }
            for rank in posed
        ],
    }
    plan_file = checkpoint.parent / "posing-plan.json"
    plan_file.write_text(json.dumps(plan, indent=2))
    proc = subprocess.run(
        [str(venv.python), str(SERVER), str(plan_file)],
        env=clean_env(venv, {}),  # no LOADTRACE: the server itself is never traced, each child turns it on
        capture_output=True,
        text=True,
        timeout=600,
    )
    made = checkpoint.with_suffix(".log")
    assert proc.returncode == 0, proc.stdout + proc.stderr + (made.read_text() if made.exists() else "")
    assert len(list(checkpoint.glob("*.safetensors"))) == CHECKPOINT_FILES, made.read_text()
    ended = [line.split()[:4] for line in proc.stdout.splitlines() if line.startswith("rank ")]
    assert len(ended) == len(posed), proc.stdout + proc.stderr
    for rank in posed:
        log = rank.folder / f"posing-rank{rank.rank}.log"
        assert ["rank", str(rank.rank), "exit", "0"] in ended, f"rank {rank.rank}: {proc.stdout}{log.read_text()}"
        rank.count = json.loads((rank.folder / "counts" / f"count-rank{rank.rank}.json").read_text())
    return posed
