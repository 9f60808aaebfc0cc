"""Ranks 0-15 of a 1,024-rank job, each a single process posing as its rank through the launcher's variables.

No 1,024-rank job runs here: loadtrace reads a rank from ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE`` and ``GROUP_RANK``, so one process given those (and one ``LOADTRACE_JOB_ID``) is that rank of that
job to it; no process group is needed for a plain load. Nodes 0 and 1 (8 ranks a node) stand for all 128 nodes: what a
rank keeps depends only on its local rank and on being rank 0. Each loads a real checkpoint of ``CHECKPOINT_FILES``
files (``tests/workers/posing_rank.py``), with an independent count of its reads. The processes start a few at a time,
each in a UTS namespace of its own with its node's host name (``node-<GROUP_RANK>``) where ``unshare -u`` is allowed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import REPO, WORKERS
from .torchrun import clean_env
from .venvs import Venv

WORKER = WORKERS / "posing_rank.py"
MAKE_CHECKPOINT = REPO / "examples" / "make_checkpoint.py"
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

    def env(self, venv: Venv) -> dict[str, str]:
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
        return clean_env(venv, extra)


def own_host_names() -> bool:
    """Whether a process can be given its node's host name here (``unshare -u``: root, or user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-u", "true"], capture_output=True).returncode == 0


def make_checkpoint(venv: Venv, out: Path) -> Path:
    proc = subprocess.run(
        [str(venv.python), str(MAKE_CHECKPOINT), str(out), *CHECKPOINT_ARGS],
        env=clean_env(venv, {}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = sorted(out.glob("*.safetensors"))
    assert len(files) == CHECKPOINT_FILES, proc.stdout
    return out


def run(venv: Venv, checkpoint: Path, posed: list[Posed]) -> list[Posed]:
    """Run every posing process, ``AT_ONCE`` at a time; each one's count read back."""

    as_node = ["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"'] if own_host_names() else []

    def one(rank: Posed) -> Posed:
        out = rank.folder / "counts"
        host = [f"node-{rank.rank // RANKS_PER_NODE}"] if as_node else []
        proc = subprocess.run(
            [*as_node, *host, str(venv.python), str(WORKER), str(checkpoint), str(out)],
            cwd=rank.folder,
            env=rank.env(venv),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"rank {rank.rank}: {proc.stdout}{proc.stderr}"
        rank.count = json.loads((out / f"count-rank{rank.rank}.json").read_text())
        return rank

    for rank in posed:
        rank.folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(one, posed))
