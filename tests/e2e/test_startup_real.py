"""Promise (issue 14): on real two-rank ``torchrun`` jobs, a rank that reads slowly is a ``slow_rank`` named with its
``read`` phase while its healthy twin has no startup finding; a cold and a warm node are told apart exactly (bytes from
storage = the evicted copy's file sizes); jobs run with ``LOADTRACE_CLUSTER=alpha`` and ``beta`` group by cluster.

The slow rank sleeps before each tensor it reads (``tests/workers/startup_load.py``), inside its checkpoint files'
spans, with ``HF_DEACTIVATE_ASYNC_LOAD=1`` so that transformers 5.24 reads in order on one thread. The healthy twin is
also the cold and the warm node: one machine's two ranks, each loading its own copy of the checkpoint, one evicted with
``posix_fadvise(DONTNEED)``; in a copy of its folder rank 1's files are then given another ``host.name`` (the report
groups nodes by it), as if it had run elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.multirank import TRACE_ROOT
from support.pagecache import evict
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.cli import main
from loadtrace.instrumentation.counting import memory

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "startup_load.py"
# x 69 tensors: about 5.5 s behind. A rank's startup runs from its process's start, but the rendezvous evens out the
# ranks' imports (5-10 s on 2 busy cores): what follows it differs by the sleeps. slow_rank wants 1 s more than the
# others and, in its read phase, 1.5x theirs and half the lead.
SLEEP_PER_TENSOR = 0.08
SEQUENTIAL = {"HF_DEACTIVATE_ASYNC_LOAD": "1"}


def report_json(capsys, folder: Path) -> dict:
    assert main(["report", str(folder), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@dataclass
class Healthy:
    """The healthy twin: its trace folder, and the copies of the checkpoint its ranks read (``ckpt0`` warm in the page
    cache, ``ckpt1`` evicted from it); ``not_cold`` says why the cold and warm copies are not that here, if so."""

    folder: Path
    warm_files: list[Path]
    cold_files: list[Path]
    not_cold: str | None


@pytest.fixture(scope="module")
def healthy(checkpoint, jobs, tmp_path_factory) -> Healthy:
    venv = VENVS[0]
    jobs.require_installed(venv)
    root = tmp_path_factory.mktemp("healthy")
    copies = {rank: root / f"ckpt{rank}" for rank in (0, 1)}
    for copy in copies.values():
        shutil.copytree(checkpoint, copy)
    warm_files, cold_files = sorted(copies[0].glob("*.safetensors")), sorted(copies[1].glob("*.safetensors"))
    not_cold = None
    if not hasattr(os, "posix_fadvise") or memory.cached_bytes(__file__) is None:
        not_cold = "page-cache residency is read on Linux only (cachestat / mincore)"
    else:
        for shard in warm_files:
            shard.read_bytes()  # in the page cache
        for shard in cold_files:
            evict(shard)
        if any(memory.cached_bytes(shard) != 0 for shard in cold_files):
            not_cold = f"posix_fadvise(DONTNEED) cannot evict files under {root} (tmpfs?): no cold checkpoint"
        elif any(memory.cached_bytes(shard) != shard.stat().st_size for shard in warm_files):
            not_cold = "the page cache does not keep the warm copy"
    cwd = root / "run"
    env = {"LOADTRACE": "1", "LOADTRACE_CLUSTER": "alpha", **SEQUENTIAL}
    torchrun(venv, WORKER, [str(root / "ckpt{rank}")], cwd=cwd, env=env).check()
    return Healthy(cwd / TRACE_ROOT, warm_files, cold_files, not_cold)


@pytest.fixture(scope="module")
def twins(checkpoint, healthy, tmp_path_factory) -> dict[str, Path]:
    """The slow job (cluster beta) and its healthy twin (cluster alpha): each one's trace folder."""
    cwd = tmp_path_factory.mktemp("slow")
    args = [str(checkpoint), "--slow-rank", "1", "--sleep", str(SLEEP_PER_TENSOR)]
    env = {"LOADTRACE": "1", "LOADTRACE_CLUSTER": "beta", **SEQUENTIAL}
    torchrun(VENVS[0], WORKER, args, cwd=cwd, env=env).check()
    return {"healthy": healthy.folder, "slow": cwd / TRACE_ROOT}


def test_the_slow_reader_is_a_slow_rank_in_its_read_phase(twins, capsys):
    report = report_json(capsys, twins["slow"])
    (trace,) = report["traces"]
    startup = trace["startup"]
    assert (startup["slowest_rank"], startup["slowest_phase"]) == (1, "read")
    ranks = {rank["rank"]: rank for rank in startup["ranks"]}
    assert all(rank["measured_from"] in ("spans", "startup span") for rank in ranks.values())
    for rank in ranks.values():
        assert sum(rank["phases"].values()) == pytest.approx(rank["seconds"], abs=1e-5)
    # 69 tensors x SLEEP_PER_TENSOR of sleep, in rank 1's read phase alone.
    assert ranks[1]["phases"]["read"] - ranks[0]["phases"]["read"] >= 69 * SLEEP_PER_TENSOR * 0.9
    (finding,) = [f for f in report["findings"] if f["kind"] == "slow_rank"]
    assert (finding["severity"], finding["ranks"]) == ("warning", [1])
    (evidence,) = finding["evidence"]["per_rank"]
    assert evidence["phase"] == "read" and evidence["phase_difference_seconds"] >= 69 * SLEEP_PER_TENSOR * 0.9
    assert "its read phase made the difference" in finding["detail"]


def test_its_healthy_twin_has_no_startup_finding(twins, capsys):
    report = report_json(capsys, twins["healthy"])
    assert not [f for f in report["findings"] if f["kind"] in ("slow_rank", "slow_storage", "rendezvous_wait")]
    (trace,) = report["traces"]
    assert all(rank["phases"]["read"] < 69 * SLEEP_PER_TENSOR / 2 for rank in trace["startup"]["ranks"])  # nobody slept


def test_jobs_of_clusters_alpha_and_beta_group_right(twins, tmp_path, capsys):
    both = tmp_path / "both"
    for name, folder in twins.items():
        shutil.copytree(folder, both / name)
    assert main(["jobs", str(both), "--group-by", "cluster", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {row["cluster"]: row for row in result["jobs"]}
    assert set(rows) == {"alpha", "beta"}
    assert rows["beta"]["findings"].get("slow_rank") == 1 and "slow_rank" not in rows["alpha"]["findings"]
    assert (rows["beta"]["slowest_rank"], rows["beta"]["slowest_phase"]) == (1, "read")
    groups = {group["by"]["cluster"]: group for group in result["groups"]}
    assert {name: group["jobs"] for name, group in groups.items()} == {"alpha": 1, "beta": 1}
    assert groups["beta"]["startup_seconds"]["p50"] == rows["beta"]["startup_seconds"]
    (difference,) = result["differences"]
    assert difference.startswith("cluster beta: startup p50 ") and difference.endswith(
        "alpha; read phase " + (difference.rsplit("read phase ", 1)[-1])
    )
    assert main(["jobs", str(both), "--where", "cluster=gamma"]) == 2


def rename_host(folder: Path, rank: int, host: str) -> None:
    """Give every file of one rank another ``host.name``: the same spans, as if that rank had run on another node."""
    for path in folder.rglob(f"rank{rank:05d}-*.jsonl"):
        lines = []
        for text in path.read_text().splitlines():
            data = json.loads(text)
            for rs in data["resourceSpans"]:
                for attribute in rs["resource"]["attributes"]:
                    if attribute["key"] == "host.name":
                        attribute["value"] = {"stringValue": host}
            lines.append(json.dumps(data))
        path.write_text("\n".join(lines) + "\n")


def test_a_cold_and_a_warm_node_are_told_apart_exactly(healthy, tmp_path, capsys):
    if healthy.not_cold:
        pytest.skip(healthy.not_cold)
    folder = tmp_path / "traces"
    shutil.copytree(healthy.folder, folder)
    cold_files = healthy.cold_files
    report = report_json(capsys, folder)
    host = report["ranks"][0]["host"]
    rename_host(folder, 1, f"{host}-b")

    (trace,) = report_json(capsys, folder)["traces"]
    nodes = {node["host"]: node for node in trace["startup"]["nodes"]}
    size = sum(shard.stat().st_size for shard in cold_files)
    warm, cold = nodes[host], nodes[f"{host}-b"]
    # Each node's figure is what its rank's process fetched (issue 48): the warm one little or nothing (what else it
    # read), the cold one at least what entered the page cache for its copy; 1 MB in well under a second: no rate.
    entered = sum(memory.cached_bytes(shard) or 0 for shard in cold_files)
    assert (warm["ranks"], warm["checkpoint"], warm["storage_bytes_per_second"]) == ([0], "warm", None)
    assert warm["storage_bytes"] < 16 * 2**20
    assert (cold["ranks"], cold["checkpoint"], cold["storage_bytes_per_second"]) == ([1], "cold", None)
    assert entered <= cold["storage_bytes"] <= size + 16 * 2**20 and 0 < cold["fetch_seconds"] < 1, (cold, entered)
    assert trace["startup"]["storage_bytes_per_second"] is None
