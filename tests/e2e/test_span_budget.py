"""The span budget (docs/reference.md, "The span budget of a big job"): a 1,024-rank job's trace is one Jaeger can open.

Ranks 0-15 of a 1,024-rank job (8 a node) load a real 22-file checkpoint as single processes posing as their ranks
(support/posing.py). Every node behaves as node 1 does, node 0 as itself, so the job's trace is node 0's spans plus
127 times node 1's. Every rank still reports its exact reads; ``LOADTRACE_DETAIL=full`` brings every span back; a job
of 64 ranks keeps every span. One session's processes serve every test here; the rule itself and its knob are
tested in in_job/test_span_budget_rule.py, the analysis of such ranks in analysis/test_span_budget_analysis.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support import posing
from support import venvs as _venvs
from support.multirank import read_spans

from loadtrace import semconv as sc
from loadtrace.analysis.report import build_report

BIG, FULL, SMALL = "posed-1024", "posed-1024-full", "posed-64"
PROBE = 9  # local rank 1 of node 1: a rank that keeps only its summary spans in a big job


@pytest.fixture(scope="session")
def posed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[posing.Posed]]:
    found = _venvs.discover()
    if not found:
        pytest.skip("no venv with transformers (see tests/support/venvs.py)")
    root = tmp_path_factory.mktemp("posed")
    ranks = [posing.Posed(r, posing.WORLD_SIZE, BIG, root / BIG) for r in range(posing.POSED)]
    ranks += [
        posing.Posed(PROBE, posing.WORLD_SIZE, FULL, root / FULL, detail="full"),
        posing.Posed(PROBE, 64, SMALL, root / SMALL),
    ]
    done = posing.run(found[0], root / "checkpoint", ranks)
    jobs: dict[str, list[posing.Posed]] = {}
    for rank in done:
        jobs.setdefault(rank.job_id, []).append(rank)
    return jobs


def spans_per_rank(folder: Path) -> dict[int, Counter[str]]:
    found: dict[int, Counter[str]] = {}
    for span in read_spans(folder / "traces").spans:
        found.setdefault(span.resource[sc.RANK], Counter())[span.name] += 1
    return found


def structure_spans(folder: Path) -> list[dict]:
    """The spans of the job's trace under the scope ``loadtrace.structure`` (its root, rank groups, findings)."""
    found = []
    for path in folder.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    if scope_spans["scope"]["name"] == sc.SCOPE_STRUCTURE:
                        found += scope_spans["spans"]
    return found


def test_a_1024_rank_job_fits_8192_spans(posed):
    counts = spans_per_rank(posed[BIG][0].folder)
    assert sorted(counts) == list(range(posing.POSED))
    node = [sum(counts[r].values()) for r in range(posing.POSED)]
    # Rank 0's root and every rank's group, and its findings (docs/jaeger.md): in the job's trace too.
    structure = structure_spans(posed[BIG][0].folder / "traces")
    assert sum(s["name"] == sc.SPAN_RANK_GROUP for s in structure) == posing.WORLD_SIZE
    job = sum(node[:8]) + 127 * sum(node[8:]) + len(structure)
    assert job <= 8 * posing.WORLD_SIZE, (job, node, len(structure))
    # Per-file detail: rank 0 and local rank 0 of each node, all 22 files (within 3 per rank of the node).
    files = {r: counts[r][sc.SPAN_SAFETENSORS_OPEN] for r in counts}
    assert files == {r: posing.CHECKPOINT_FILES if r % posing.RANKS_PER_NODE == 0 else 0 for r in counts}, files
    # Every other rank: its startup and its load, its phases folded into the load.
    for rank in (r for r in counts if r % posing.RANKS_PER_NODE):
        assert counts[rank] == Counter({sc.SPAN_STARTUP: 1, sc.SPAN_FROM_PRETRAINED: 1}), (rank, counts[rank])


def test_every_rank_reports_its_exact_reads(posed):
    report = build_report(read_spans(posed[BIG][0].folder / "traces"))
    rows = {row["rank"]: row for row in report["ranks"]}
    for rank in posed[BIG]:
        row, count = rows[rank.rank], rank.count
        assert count["read_bytes"] > 0
        assert (row["read_bytes"], row["tensors_read"], row["files_opened"]) == (
            count["read_bytes"],
            count["read_tensors"],
            count["opens"],
        ), rank.rank


def test_a_summarised_node_reads_as_a_full_one(posed):
    """Node 1's I/O and each rank's startup split are the same whether its ranks kept their file spans or not."""
    big = build_report(read_spans(posed[BIG][0].folder / "traces"))
    (trace,) = big["traces"]
    checkpoint_bytes = sum(f.stat().st_size for f in (posed[BIG][0].folder.parent / "checkpoint").glob("*.safetensors"))
    if posing.own_host_names():
        assert [node["host"] for node in trace["nodes"]] == ["node-0", "node-1"]
    for node in trace["nodes"]:
        assert node["checkpoint_file_bytes"] == checkpoint_bytes, node
        assert node["outcome"] in ("warm", "partly_cold", "cold"), node
        assert f"its {posing.CHECKPOINT_FILES} checkpoint files" in node["note"], node
    phases = {r["rank"]: r["phases"] for r in trace["startup"]["ranks"]}
    assert all(phases[r]["read"] > 0 for r in phases), phases  # from the split each rank carried in-job


def test_an_export_message_stays_far_under_4_mib(posed):
    """A file line is one span with its resource, as OTLP JSON: larger than the same span in protobuf. An export
    message holds at most 128 spans of one process (settings.BSP_MAX_EXPORT_BATCH_SIZE): at most its 128 largest."""
    files = list((posed[BIG][0].folder / "traces").rglob("rank*.jsonl"))  # the ranks', not rank 0's findings
    sizes = [sorted((len(line) for line in f.read_bytes().splitlines()), reverse=True) for f in files]
    assert len(sizes) == posing.POSED
    assert max(sum(lines[:128]) for lines in sizes) < 1 << 20


@pytest.mark.parametrize("job", [FULL, SMALL])
def test_every_span_comes_back(posed, job):
    """``LOADTRACE_DETAIL=full`` in a 1,024-rank job, and any rank of a 64-rank job: every file span is exported."""
    (rank,) = posed[job]
    counts = spans_per_rank(rank.folder)
    assert counts[PROBE][sc.SPAN_SAFETENSORS_OPEN] == posing.CHECKPOINT_FILES
    (load,) = [s for s in read_spans(rank.folder / "traces").spans if s.name == sc.SPAN_FROM_PRETRAINED]
    assert sc.FILES_SUMMARIZED not in load.attributes and sc.FOLDED not in load.attributes
    assert load.attributes[sc.FILES_OPENED] == rank.count["opens"]
