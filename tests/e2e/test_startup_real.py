"""Promise (issue 14): on real two-rank ``torchrun`` jobs, a rank that reads slowly is a ``slow_rank`` named with its
``read`` phase while its healthy twin has no startup finding; a cold and a warm node are told apart exactly (bytes from
storage = the evicted copy's file sizes); jobs run with ``LOADTRACE_CLUSTER=alpha`` and ``beta`` group by cluster.

The slow rank sleeps before each tensor it reads (``tests/workers/startup_load.py``), inside its checkpoint files'
spans, with ``HF_DEACTIVATE_ASYNC_LOAD=1`` so that transformers 5.24 reads in order on one thread. The two nodes are
one machine's two ranks, each loading its own copy of the checkpoint, one evicted with ``posix_fadvise(DONTNEED)``;
rank 1's files are then given another ``host.name`` (the report groups nodes by it), as if it had run elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.multirank import TRACE_ROOT
from support.pagecache import evict
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.cli import main
from loadtrace.instrumentation import memory

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "startup_load.py"
# x 69 tensors: about 10 s behind. A rank's startup runs from its process's start (its imports included: 5-10 s on
# 2 busy cores), and slow_rank wants 1.5x the others' and 1 s more.
SLEEP_PER_TENSOR = 0.15
SEQUENTIAL = {"HF_DEACTIVATE_ASYNC_LOAD": "1"}


def report_json(capsys, folder: Path) -> dict:
    assert main(["report", str(folder), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def twins(checkpoint, jobs, tmp_path_factory) -> dict[str, Path]:
    """The slow job (cluster beta) and its healthy twin (cluster alpha): each one's trace folder."""
    venv = VENVS[0]
    jobs.require_installed(venv)
    root = tmp_path_factory.mktemp("startup")
    runs = {}
    for name, cluster, extra in (("healthy", "alpha", []), ("slow", "beta", ["--slow-rank", "1"])):
        cwd = root / name
        args = [str(checkpoint), *extra, "--sleep", str(SLEEP_PER_TENSOR)]
        env = {"LOADTRACE": "1", "LOADTRACE_CLUSTER": cluster, **SEQUENTIAL}
        torchrun(venv, WORKER, args, cwd=cwd, env=env).check()
        runs[name] = cwd / TRACE_ROOT
    return runs


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


def test_a_cold_and_a_warm_node_are_told_apart_exactly(checkpoint, jobs, tmp_path, capsys):
    venv = VENVS[0]
    jobs.require_installed(venv)
    if not hasattr(os, "posix_fadvise") or memory.cached_bytes(__file__) is None:
        pytest.skip("page-cache residency is read on Linux only (cachestat / mincore)")
    copies = {rank: tmp_path / f"ckpt{rank}" for rank in (0, 1)}
    for copy in copies.values():
        shutil.copytree(checkpoint, copy)
    warm_files, cold_files = sorted(copies[0].glob("*.safetensors")), sorted(copies[1].glob("*.safetensors"))
    for shard in warm_files:
        shard.read_bytes()  # in the page cache
    for shard in cold_files:
        evict(shard)
    if any(memory.cached_bytes(shard) != 0 for shard in cold_files):
        pytest.skip(f"posix_fadvise(DONTNEED) cannot evict files under {tmp_path} (tmpfs?): no cold checkpoint")
    if any(memory.cached_bytes(shard) != shard.stat().st_size for shard in warm_files):
        pytest.skip("the page cache does not keep the warm copy")
    cwd = tmp_path / "run"
    torchrun(venv, WORKER, [str(tmp_path / "ckpt{rank}")], cwd=cwd, env={"LOADTRACE": "1"}).check()
    folder = cwd / TRACE_ROOT
    report = report_json(capsys, folder)
    host = report["ranks"][0]["host"]
    rename_host(folder, 1, f"{host}-b")

    (trace,) = report_json(capsys, folder)["traces"]
    nodes = {node["host"]: node for node in trace["startup"]["nodes"]}
    size = sum(shard.stat().st_size for shard in cold_files)
    warm, cold = nodes[host], nodes[f"{host}-b"]
    assert (warm["ranks"], warm["checkpoint"], warm["storage_bytes"], warm["storage_bytes_per_second"]) == (
        [0],
        "warm",
        0,
        None,
    )
    assert (cold["ranks"], cold["checkpoint"], cold["storage_bytes"]) == ([1], "cold", size)
    assert cold["reading_seconds"] > 0
    # reading_seconds is rounded to the microsecond in the JSON, the rate computed before that.
    assert cold["storage_bytes_per_second"] == pytest.approx(size / cold["reading_seconds"], rel=1e-4)
    assert trace["startup"]["storage_bytes_per_second"] == cold["storage_bytes_per_second"]  # the one cold node
