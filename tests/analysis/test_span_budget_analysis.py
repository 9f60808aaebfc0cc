"""The report of a job whose ranks export only their summary spans (the span budget) is the report of the same job with
every span: per-rank totals, per-node I/O, the startup (each rank's split, each node's reading), the findings, the
forecast and the timeline's bars, over recorded real jobs of each strategy.

Each recorded 2-rank job is read twice: as recorded, and with rank 1's spans made again in-process through the span
budget as rank 9 of a 1,024-rank job of 8 ranks a node (support/replay.py): its startup and load exported, its other
spans folded into them, its file spans summarized on its load, written as a rank writes its trace file. Most of these
jobs were recorded before a load carried its files' page-cache residency; their rank 1's load is given it as the
in-job code computes it today (instrumentation/counting/attributes.py ``checkpoint_residency``), from its own file
spans.
"""

from __future__ import annotations

import dataclasses
import shutil
from types import SimpleNamespace

import pytest
from support.paths import FIXTURES, REPO
from support.replay import rank_spans, write

from loadtrace import semconv as sc
from loadtrace.analysis.compare import compare
from loadtrace.analysis.forecast import Target, windows
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.timeline import timeline
from loadtrace.cli.render import compare_table
from loadtrace.instrumentation.counting.attributes import checkpoint_residency

SAMPLES = REPO / "docs" / "samples"
JOBS = {
    "plain": FIXTURES / "llama524",
    "fsdp512": SAMPLES / "fsdp512",
    "fsdp524": SAMPLES / "fsdp524",
    "fsdp2_prepare": FIXTURES / "fsdp2_prepare524",
    "zero3_512": SAMPLES / "zero3_512",
    "zero3_524": SAMPLES / "zero3_524",
}


def with_residency(spans: list) -> list:
    """A rank's spans, its load given its files' residency where the recording predates it."""
    files = [SimpleNamespace(residency=residency(s)) for s in sorted(spans, key=lambda s: s.start_ns)]
    carried = checkpoint_residency([f for f in files if f.residency is not None])
    return [
        dataclasses.replace(s, attributes={**carried, **s.attributes}) if s.name == sc.SPAN_FROM_PRETRAINED else s
        for s in spans
    ]


def residency(span) -> tuple | None:
    if span.name not in sc.FILE_SPANS:
        return None
    keys = (sc.FILE_PATH, sc.FILE_SIZE, sc.FILE_CACHED_BYTES_AT_OPEN)
    return tuple(span.attributes.get(key) for key in keys)


@pytest.fixture
def summarised(monkeypatch, tmp_path):
    """The recorded job ``name`` with rank 1 as rank 9 of a 1,024-rank job exports it; (full, summarised) spans."""

    def made(name: str):
        folder, out = JOBS[name], tmp_path / name
        out.mkdir()
        for path in folder.glob("rank00000-*.jsonl"):
            shutil.copy(path, out / path.name)
        write(monkeypatch, with_residency(rank_spans(folder, 1)), 9, out / "rank00001-posed.jsonl")
        return read_files(folder), read_files(out)

    return made


def without_counts(report: dict) -> dict:
    for trace in report["traces"]:
        trace.pop("spans")
    return report


@pytest.mark.parametrize("job", JOBS)
def test_a_summarised_rank_reports_as_a_full_one(summarised, job):
    recorded, summary = summarised(job)
    kept = [s for s in summary.spans if s.resource.get(sc.RANK) == 1]
    assert sorted(s.name for s in kept) == [sc.SPAN_STARTUP, sc.SPAN_FROM_PRETRAINED]  # what the trace holds
    full = without_counts(build_report(recorded))
    shown = without_counts(build_report(summary))
    assert shown["ranks"] == full["ranks"]
    assert shown["findings"] == full["findings"]
    assert shown["traces"][0] == full["traces"][0]


@pytest.mark.parametrize("job", JOBS)
def test_a_summarised_rank_draws_its_phases(summarised, job):
    """The timeline draws every span of the rank but its files, each as the full job's (its load says, besides, what
    it summarized)."""
    recorded, summary = summarised(job)
    added = {sc.FILES_SUMMARIZED, sc.LOAD_LAST_FILE_CLOSE, sc.IO_CHECKPOINT_FILES}
    added |= {sc.IO_CHECKPOINT_FILE_BYTES, sc.IO_CHECKPOINT_COLD_BYTES}

    def shown(attributes: dict) -> list:
        return sorted(item for item in attributes.items() if item[0] not in added)

    def bars(spans):
        (found,) = jobs_from_spans(spans.spans, spans.states)
        (lane,) = [lane for lane in timeline(found).lanes if lane.rank == 1]
        return sorted(
            (b.name, b.start_ns, b.end_ns, b.bytes, b.status, shown(b.attributes))
            for b in lane.bars
            if b.name not in sc.FILE_SPANS
        )

    assert bars(summary) == bars(recorded)


@pytest.mark.parametrize("job", ["fsdp524", "fsdp2_prepare", "zero3_512"])
def test_the_forecast_and_compare_of_a_summarised_rank(summarised, job):
    """The forecast reads the rank's reads from its load where its file spans are missing, its phases' memory from
    the spans folded; compare shows its file time and bytes as unknown, not as zero, and prints."""
    recorded, summary = summarised(job)
    target = Target(model_bytes=54 * 10**9, ranks_per_node=16)
    assert build_report(summary, target)["forecast"] == build_report(recorded, target)["forecast"]
    (full_job,) = jobs_from_spans(recorded.spans, recorded.states)
    (summary_job,) = jobs_from_spans(summary.spans, summary.states)
    total = full_job.rank(1).read_bytes
    assert windows(summary_job.rank(1), total) == windows(full_job.rank(1), total)
    compared = compare(full_job, summary_job, "full", "summary")
    (opened,) = [row for row in compared.phases if row.phase == "open" and row.metric == "bytes" and row.rank == 1]
    assert opened.b is None and opened.a
    others = [row for row in compared.phases if row.rank == 1 and row.phase != "open"]
    assert all(row.a == row.b for row in others), [row for row in others if row.a != row.b]
    assert "open" in compare_table(compared)


def test_a_folded_text_that_does_not_decode_is_passed_over(summarised, tmp_path):
    """A store that cut an attribute short loses that span, never the report."""
    _, summary = summarised("zero3_524")
    spans = [
        dataclasses.replace(s, attributes={**s.attributes, sc.FOLDED: ['{"name": "cut', 7, *s.attributes[sc.FOLDED]]})
        if sc.FOLDED in s.attributes
        else s
        for s in summary.spans
    ]
    assert build_report(dataclasses.replace(summary, spans=spans))["ranks"] == build_report(summary)["ranks"]
