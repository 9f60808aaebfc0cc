"""Promise (issue 24): a torch.distributed.checkpoint (DCP) load is a load, told right. Real torchrun jobs (gloo on
CPU, FSDP2 ``fully_shard`` per layer) load a tiny Llama saved by ``dcp.save`` or ``save_pretrained``; each rank's
bytes are compared with the rank's own count of what it read (tests/workers/dcp_load.py), the model's size with the
checkpoint's, and the findings with what the bytes say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv as sc
from loadtrace import statefile
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "dcp_load.py"
SPAN_BUDGET = 20  # spans per rank and load beyond one per checkpoint file


def run(mode: str, ckpt: Path, out: Path, nproc: int = 2, traced: bool = True, extra: tuple[str, ...] = ()):
    env = {"LOADTRACE": "1"} if traced else {}
    return torchrun(VENVS[0], WORKER, [mode, str(ckpt), "--out", str(out), *extra], cwd=out, env=env, nproc=nproc)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """One untraced job saves the three checkpoints: a DCP checkpoint saved by 2 sharded ranks, one saved by 1 unsharded
    rank, and a Hugging Face checkpoint."""
    root = tmp_path_factory.mktemp("dcp")
    run("save", root, root / "save", traced=False).check()
    return {name: root / name for name in ("two", "one", "hf")}


def counts(out: Path) -> dict[int, dict]:
    return {int(p.stem.removeprefix("count-rank")): json.loads(p.read_text()) for p in out.glob("count-rank*.json")}


def report_of(out: Path) -> tuple[dict, dict[int, dict]]:
    (job_dir,) = (out / "loadtrace-traces").iterdir()
    report = build_report(read_files(job_dir))
    return report, {rank["rank"]: rank for rank in report["ranks"]}


def rank_spans(out: Path) -> dict[int, list]:
    (job_dir,) = (out / "loadtrace-traces").iterdir()
    by_rank: dict[int, list] = {}
    for span in read_files(job_dir).spans:
        by_rank.setdefault(span.resource.get(sc.RANK), []).append(span)
    return by_rank


def kinds(report: dict) -> set[str]:
    return {finding["kind"] for finding in report["findings"]}


def test_native_dcp_load_is_one_sharded_load_read_once(saved, tmp_path):
    run("native", saved["two"], tmp_path).check()
    own = counts(tmp_path)
    report, ranks = report_of(tmp_path)
    model = own[0]["model_bytes"]
    assert report["traces"][0]["model_bytes"] == model, "the model is the whole checkpoint, from its metadata"
    for number in (0, 1):
        assert own[number]["read_bytes"] == own[number]["local_bytes"] < model
        assert ranks[number]["read_bytes"] == own[number]["local_bytes"], "each rank's bytes: its own local shard"
        assert ranks[number]["tensors_read"] == own[number]["read_items"]
        assert ranks[number]["strategy"] == sc.STRATEGY_DCP_SHARDED
        assert ranks[number]["load_seconds"] is not None
    assert ranks[0]["read_bytes"] + ranks[1]["read_bytes"] == model
    assert not kinds(report) & {sc.FINDING_REPLICATED_LOAD, sc.FINDING_DUPLICATE_CHECKPOINT_READ}
    (node,) = report["traces"][0]["nodes"]
    assert "asked for 1x the checkpoint" in node["note"], node["note"]
    assert "not measured" not in node["note"], "page-cache residency per checkpoint file"
    for number, spans in rank_spans(tmp_path).items():
        loads = [s for s in spans if s.name == sc.SPAN_DCP_LOAD]
        files = [s for s in spans if s.name == sc.SPAN_DCP_FILE]
        assert len(loads) == 1 and loads[0].attributes[sc.STRATEGY] == sc.STRATEGY_DCP_SHARDED
        assert loads[0].attributes[sc.CHECKPOINT_TENSOR_BYTES] == model
        assert not [s for s in spans if s.name == sc.SPAN_TORCH_LOAD], "torch.load inside DCP is part of its file"
        assert len(files) == loads[0].attributes[sc.FILES_OPENED] >= 1
        assert sum(s.attributes[sc.READ_BYTES] for s in files) == own[number]["local_bytes"]
        assert all(sc.FILE_CACHED_BYTES_AT_OPEN in s.attributes for s in files)
        assert len(spans) <= len(files) + SPAN_BUDGET, [s.name for s in spans]
    sharded = [f for f in report["findings"] if f["kind"] == sc.FINDING_SHARDED_READ]
    assert all("tensor parallel" not in (f.get("next_step") or "") for f in sharded)


def test_resharded_two_to_one(saved, tmp_path):
    run("plain", saved["two"], tmp_path, nproc=1).check()
    own = counts(tmp_path)
    report, ranks = report_of(tmp_path)
    assert ranks[0]["read_bytes"] == own[0]["local_bytes"] == own[0]["model_bytes"]
    assert ranks[0]["strategy"] == sc.STRATEGY_DCP_RESHARDED
    assert report["traces"][0]["model_bytes"] == own[0]["model_bytes"]


def test_resharded_one_to_two_reads_whole_saved_tensors(saved, tmp_path):
    """Saved by one rank, loaded by two: each rank's ``torch.load`` reads every saved tensor it needs a part of in
    full; its count says so, and the report's advice names the cause (saved at another world size)."""
    run("native", saved["one"], tmp_path).check()
    own = counts(tmp_path)
    report, ranks = report_of(tmp_path)
    for number in (0, 1):
        assert ranks[number]["read_bytes"] == own[number]["read_bytes"] > own[number]["local_bytes"]
        assert ranks[number]["strategy"] == sc.STRATEGY_DCP_RESHARDED
    (replicated,) = [f for f in report["findings"] if f["kind"] == sc.FINDING_REPLICATED_LOAD]
    assert "another world size" in replicated["next_step"] and "resharded" in replicated["detail"]


def test_hugging_face_storage_reader(saved, tmp_path):
    """Through ``safe_open``: one span per file, none for ``read_metadata``'s header reads; with reader threads (rank 1
    reads with two, rank 0 with one), the files they open are the load's all the same."""
    run("hf", saved["hf"], tmp_path).check()
    own = counts(tmp_path)
    report, ranks = report_of(tmp_path)
    model = own[0]["model_bytes"]
    assert report["traces"][0]["model_bytes"] == model
    for number in (0, 1):
        assert ranks[number]["read_bytes"] == own[number]["sliced_bytes"] == own[number]["local_bytes"]
        assert ranks[number]["strategy"] == sc.STRATEGY_DCP_SHARDED
        assert ranks[number]["load_seconds"] is not None
    (node,) = report["traces"][0]["nodes"]
    assert "asked for 1x" in node["note"] and "not measured" not in node["note"], node["note"]
    on_disk = len(list(saved["hf"].glob("*.safetensors")))
    assert on_disk > 1
    for spans in rank_spans(tmp_path).values():
        (load,) = [s for s in spans if s.name == sc.SPAN_DCP_LOAD]
        files = [s for s in spans if s.name == sc.SPAN_SAFETENSORS_OPEN]
        assert len(files) == on_disk == load.attributes[sc.FILES_OPENED], "read_metadata's header reads make none"
        assert len(spans) <= len(files) + SPAN_BUDGET
    (sharded,) = [f for f in report["findings"] if f["kind"] == sc.FINDING_SHARDED_READ]
    assert "tensor parallel" not in sharded["next_step"] and "shard" in sharded["next_step"]
    assert not kinds(report) & {sc.FINDING_REPLICATED_LOAD, sc.FINDING_DUPLICATE_CHECKPOINT_READ}


def test_full_state_dict_on_every_rank_is_duplicate_reads(saved, tmp_path):
    run("full", saved["two"], tmp_path).check()
    own = counts(tmp_path)
    report, ranks = report_of(tmp_path)
    for number in (0, 1):
        assert own[number]["identical"]
        assert ranks[number]["read_bytes"] == own[number]["read_bytes"] == own[number]["model_bytes"]
        assert ranks[number]["strategy"] == sc.STRATEGY_DCP_FULL_STATE
    (duplicate,) = [f for f in report["findings"] if f["kind"] == sc.FINDING_DUPLICATE_CHECKPOINT_READ]
    assert duplicate["ranks"] == [1]
    assert "broadcast_from_rank0=True" in duplicate["next_step"]
    assert sc.FINDING_NONZERO_RANK_MATERIALIZATION not in kinds(report), "each rank's own shard is no copy of the model"


def test_broadcast_from_rank0_reads_on_rank_0_only(saved, tmp_path):
    run("broadcast", saved["two"], tmp_path).check()
    own = counts(tmp_path)
    report, ranks = report_of(tmp_path)
    assert own[0]["identical"] and own[1]["identical"]
    assert ranks[0]["read_bytes"] == own[0]["read_bytes"] == own[0]["model_bytes"]
    assert ranks[1]["read_bytes"] == 0
    assert ranks[1]["strategy"] == sc.STRATEGY_DCP_BROADCAST
    assert sc.FINDING_DUPLICATE_CHECKPOINT_READ not in kinds(report)
    moved = {}
    for number, spans in rank_spans(tmp_path).items():
        (load,) = [s for s in spans if s.name == sc.SPAN_DCP_SET_STATE_DICT]
        moved[number] = load.attributes
    assert moved[0][sc.BROADCAST_BYTES_SENT] == own[0]["model_bytes"] and moved[0][sc.BROADCAST_BYTES_RECEIVED] == 0
    assert moved[1][sc.BROADCAST_BYTES_RECEIVED] == own[0]["model_bytes"] and moved[1][sc.BROADCAST_BYTES_SENT] == 0


def test_rank_killed_mid_dcp_load_is_exact(saved, tmp_path):
    result = run("kill", saved["two"], tmp_path, extra=("--kill-after", "7"))
    assert result.returncode != 0, "rank 1 was killed, so the job fails"
    count = json.loads((tmp_path / "count-rank1.json").read_text())
    (job_dir,) = (tmp_path / "loadtrace-traces").iterdir()
    (killed,) = job_dir.glob(f"rank00001-*{sc.STATE_SUFFIX}")
    state = statefile.read(killed)
    assert state is not None and state.status == "loading"
    assert state.load == sc.SPAN_DCP_LOAD and state.phase == sc.SPAN_DCP_READ_DATA
    assert state.strategy == sc.STRATEGY_DCP_SHARDED
    assert state.totals().read_bytes == count["read_bytes"] and state.totals().tensors_read == count["read_items"]
    report = build_report(read_files(job_dir))
    ranks = {rank["rank"]: rank for rank in report["ranks"]}
    assert ranks[1]["incomplete"] is True and ranks[1]["last_state"]["read_bytes"] == count["read_bytes"]
    (finding,) = [f for f in report["findings"] if f["kind"] == sc.FINDING_INCOMPLETE_RANK]
    assert f"during {sc.SPAN_DCP_READ_DATA} after reading {count['read_bytes']:,} B" in finding["detail"]
    assert state.checkpoint_tensor_bytes == count["model_bytes"], "a rank that dies still tells the model's size"
    assert report["traces"][0]["model_bytes"] == count["model_bytes"]
