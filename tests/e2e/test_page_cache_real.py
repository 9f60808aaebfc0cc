"""Promise: on a real two-rank job the report's per-node I/O note says whether the checkpoint was cold or warm in the
node's page cache, exactly: a checkpoint evicted with ``posix_fadvise(DONTNEED)`` before the job is cold, with its
files' exact bytes from storage; a checkpoint in the page cache (the session's, written at its start and never evicted:
its shared plain job, ``jobs``) is warm, and a warm small checkpoint is never said to have been read from storage for
every rank, whatever ``/proc/self/io`` counted (library imports)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.multirank import COUNT_WORKER, TRACE_ROOT
from support.pagecache import evict
from support.torchrun import torchrun
from support.venvs import discover

from loadtrace.cli import main
from loadtrace.instrumentation.counting import memory

VENVS = discover()


def node_of(capsys, cwd: Path) -> dict:
    assert main(["report", str(cwd / TRACE_ROOT), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (trace,) = report["traces"]
    (node,) = trace["nodes"]
    return node


def test_a_cold_then_warm_checkpoint_is_told_exactly(checkpoint, jobs, tmp_path, capsys):
    venv = VENVS[0]
    jobs.require_installed(venv)
    if not hasattr(os, "posix_fadvise") or memory.cached_bytes(__file__) is None:
        pytest.skip("page-cache residency is read on Linux only (cachestat / mincore)")
    warm_job = jobs.get(venv, "plain", traced=True)  # first: the cold job runs at once after the eviction
    capsys.readouterr()  # what the shared job said when it ran
    copy = tmp_path / "checkpoint"  # a checkpoint of its own: the session's is shared with other tests
    shutil.copytree(checkpoint, copy)
    shards = sorted(copy.glob("*.safetensors"))
    assert len(shards) == 5
    for shard in shards:
        evict(shard)
    if any(memory.cached_bytes(shard) != 0 for shard in shards):
        pytest.skip(f"posix_fadvise(DONTNEED) cannot evict files under {tmp_path} (tmpfs?): no cold checkpoint")
    files = sum(shard.stat().st_size for shard in shards)

    cwd = tmp_path / "cold"
    args = [str(copy), "--mode", "plain", "--out", str(cwd / "out")]
    torchrun(venv, COUNT_WORKER, args, cwd=cwd, env={"LOADTRACE": "1"}).check()
    runs = {"cold": node_of(capsys, cwd), "warm": node_of(capsys, warm_job.run.cwd)}

    cold, warm = runs["cold"], runs["warm"]
    assert (cold["outcome"], cold["checkpoint_file_bytes"], cold["checkpoint_cold_bytes"]) == ("cold", files, files)
    assert f"the checkpoint was cold on {cold['host']}: {files:,} B" in cold["note"]
    assert "came from storage (none of its 5 checkpoint files was in the page cache when first opened)" in cold["note"]
    assert (warm["outcome"], warm["checkpoint_file_bytes"], warm["checkpoint_cold_bytes"]) == ("warm", files, 0)
    assert (
        f"the checkpoint was warm on {warm['host']}: the page cache held all of its 5 checkpoint files" in warm["note"]
    )
    for node in (cold, warm):
        assert node["readers"] == 2 and node["read_bytes"] == 2 * 1_009_152
        assert "did not keep" not in node["note"] and "for every one of them" not in node["note"]
