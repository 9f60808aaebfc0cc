"""Promise (issue 49): every loader people run at scale is counted exactly, and weights read anywhere make a load.

One real ``torchrun --nproc_per_node 2`` job (gloo on CPU, ``tests/workers/stream_load.py``) runs, one after another
on the session's checkpoint, the serving engines' own iterators (vLLM's lazy, eager and thread-pool ones, SGLang's
``disable_mmap`` thread pool), fastsafetensors (vLLM's iterator: files spread over the ranks, then broadcast) and the
Run:ai Model Streamer (distributed: the ranks split the reads and broadcast them). Each rank counts, without
loadtrace, what it read from storage per file and what ``torch.distributed.broadcast`` moved; loadtrace's spans must
say the same. One more process runs fastsafetensors alone, without a process group: it writes its trace.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.shared import once
from support.torchrun import clean_env, torchrun
from support.venvs import REPO, discover

from loadtrace import semconv as sc
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "stream_load.py"
ITERATORS = ("vllm_lazy", "vllm_eager", "vllm_threads", "sglang_no_mmap")
ENV = {"LOADTRACE": "1", "LOADTRACE_LOAD_IDLE": "0.3", "RUNAI_STREAMER_DIST": "1"}


def _job(ckpt: Path, out: Path) -> Path:
    torchrun(VENVS[0], WORKER, [str(ckpt), "--out", str(out), "--runai-distributed"], cwd=out, env=ENV).check()
    return out


@pytest.fixture(scope="session")
def streamed(checkpoint: Path, tmp_path_factory) -> Path:
    if not VENVS:
        pytest.skip("no test venv")
    return once(tmp_path_factory, "stream_load", lambda: _job(checkpoint, tmp_path_factory.mktemp("stream")))


def counts(out: Path) -> dict[int, dict]:
    return {int(p.stem.removeprefix("stream-rank")): json.loads(p.read_text()) for p in out.glob("stream-rank*.json")}


def spans_by_rank(out: Path) -> dict[int, list]:
    (job_dir,) = (out / "loadtrace-traces").iterdir()
    by_rank: dict[int, list] = {}
    for span in read_files(job_dir).spans:
        by_rank.setdefault(span.resource.get(sc.RANK), []).append(span)
    return by_rank


def during(spans: list, loader: dict, names: frozenset[str]) -> list:
    return [s for s in spans if s.name in names and loader["start_ns"] <= s.start_ns <= s.end_ns <= loader["end_ns"]]


def children(spans: list, loads: list) -> list:
    ids = {load.span_id for load in loads}
    return [s for s in spans if s.parent_span_id in ids and s.name in sc.FILE_SPANS | sc.BYTES_SPANS]


def per_file(files: list) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for span in files:
        entry = found.setdefault(span.attributes[sc.FILE_PATH], {"tensors": 0, "bytes": 0})
        entry["tensors"] += span.attributes[sc.READ_TENSORS]
        entry["bytes"] += span.attributes[sc.READ_BYTES]
    return {path: entry for path, entry in found.items() if entry["tensors"]}


@pytest.mark.parametrize("iterator", ITERATORS)
def test_an_engine_iterator_is_one_load_from_its_first_read_to_its_last(streamed, iterator):
    for rank, record in counts(streamed).items():
        spans = spans_by_rank(streamed)[rank]
        loader = record["loaders"][iterator]
        (load,) = during(spans, loader, frozenset({sc.SPAN_LOAD}))
        assert load.attributes[sc.LOAD_NAME] == sc.LOAD_NAME_READS
        files = children(spans, [load])
        assert per_file(files) == loader["files"], (rank, iterator)
        assert load.attributes[sc.READ_BYTES] == sum(f["bytes"] for f in loader["files"].values()) == 1_009_152
        assert load.attributes[sc.FILES_OPENED] == 5
        # From its first read to its last: it ends where its last file did, not after the idle wait.
        assert load.start_ns <= min(f.start_ns for f in files) and load.end_ns == max(f.end_ns for f in files)
        assert sc.IO_STORAGE_READ_BYTES in load.attributes and sc.RSS_PEAK in load.attributes


def test_bytes_loaded_from_f_read_know_their_file(streamed):
    """vLLM's eager strategy and SGLang's ``disable_mmap``: each ``safetensors.load`` names its file and what the page
    cache held of it before it was read, so the storage check is measured."""
    for rank, record in counts(streamed).items():
        spans = spans_by_rank(streamed)[rank]
        for iterator in ("vllm_eager", "sglang_no_mmap"):
            loads = during(spans, record["loaders"][iterator], frozenset({sc.SPAN_LOAD}))
            files = children(spans, loads)
            assert {f.name for f in files} == {sc.SPAN_SAFETENSORS_LOAD} and len(files) == 5
            for span in files:
                path = span.attributes[sc.FILE_PATH]
                assert span.attributes[sc.FILE_SIZE] == os.path.getsize(path)
                assert isinstance(span.attributes[sc.FILE_CACHED_BYTES_AT_OPEN], int)


def test_fastsafetensors_reads_each_ranks_files_exactly(streamed):
    seen: set[str] = set()
    for rank, record in counts(streamed).items():
        spans = spans_by_rank(streamed)[rank]
        loader = record["loaders"]["fastsafetensors"]
        loads = during(spans, loader, frozenset({sc.SPAN_FASTSAFETENSORS_LOAD}))
        assert len(loads) == 3  # vLLM's iterator: one loader per batch of world-size files (5 files, 2 ranks)
        files = children(spans, loads)
        assert {f.name for f in files} == {sc.SPAN_FASTSAFETENSORS_READ}
        assert per_file(files) == loader["files"] and loader["files"], rank
        assert not seen & set(loader["files"])  # each file read by one rank only
        seen |= set(loader["files"])
    assert len(seen) == 5


def test_fastsafetensors_broadcast_counted_as_broadcast(streamed):
    for rank, record in counts(streamed).items():
        loader = record["loaders"]["fastsafetensors"]
        loads = during(spans_by_rank(streamed)[rank], loader, frozenset({sc.SPAN_FASTSAFETENSORS_LOAD}))
        sent = sum(load.attributes[sc.BROADCAST_BYTES_SENT] for load in loads)
        received = sum(load.attributes[sc.BROADCAST_BYTES_RECEIVED] for load in loads)
        assert (sent, received) == (loader["broadcast_sent"], loader["broadcast_received"]), rank
        assert sent == sum(f["bytes"] for f in loader["files"].values())  # what it read, it sent
        assert sent + received == 1_009_152


def test_runai_streamer_reads_its_share_and_broadcasts_it(streamed):
    for rank, record in counts(streamed).items():
        spans = spans_by_rank(streamed)[rank]
        loader = record["loaders"]["runai"]
        (load,) = during(spans, loader, frozenset({sc.SPAN_RUNAI_LOAD}))
        assert load.attributes[sc.RUNAI_DISTRIBUTED] is True
        assert per_file(children(spans, [load])) == loader["files"] and loader["files"], rank
        own = sum(f["bytes"] for f in loader["files"].values())
        assert load.attributes[sc.READ_BYTES] == own
        assert load.attributes[sc.BROADCAST_BYTES_SENT] == own
        # The streamer's own bookkeeping also goes through ``dist.broadcast`` (its batch tables, and objects whose
        # pickles it broadcasts): the weights received are the rest of the checkpoint, the other rank's share.
        assert load.attributes[sc.BROADCAST_BYTES_RECEIVED] == 1_009_152 - own
        assert loader["broadcast_received"] >= 1_009_152 - own


def test_the_report_tells_the_model_and_each_ranks_reads(streamed):
    (job_dir,) = (streamed / "loadtrace-traces").iterdir()
    report = build_report(read_files(job_dir))
    assert report["traces"][0]["model_bytes"] == 1_009_152  # the files the ranks streamed, each once
    for row in report["ranks"]:
        record = counts(streamed)[row["rank"]]
        expected = sum(f["bytes"] for loader in record["loaders"].values() for f in loader["files"].values())
        assert row["read_bytes"] == expected


def test_a_one_process_fastsafetensors_load_writes_its_trace(checkpoint, tmp_path):
    """No process group, no torchrun (``SingleGroup``): the trace is written and ``loadtrace report`` reads it."""
    if not VENVS:
        pytest.skip("no test venv")
    venv = VENVS[0]
    env = clean_env(venv, {"LOADTRACE": "1", "LOADTRACE_DIR": str(tmp_path / "traces")})
    args = [str(venv.python), str(WORKER), str(checkpoint), "--out", str(tmp_path), "--loaders", "fastsafetensors"]
    subprocess.run(args, cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    report = subprocess.run(
        [str(venv.bin / "loadtrace"), "report", str(tmp_path / "traces"), "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["ranks"]
    assert row["read_bytes"] == 1_009_152 and row["files_opened"] == 5 and row["loads"] == 5  # a loader per file
