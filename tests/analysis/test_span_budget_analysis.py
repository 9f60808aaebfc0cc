"""The report of a rank that kept only its summary spans (the span budget) is the report of the same rank with all
of them: per-rank totals, per-node I/O, the startup (each rank's split, each node's reading) and the findings, over
the recorded real runs of docs/samples.

Each recorded job is read twice: as recorded, and with rank 1's file spans taken out and its load carrying what the
in-job code puts there instead (instrumentation/attributes.py ``left_out`` and ``checkpoint_residency``).
"""

from __future__ import annotations

import dataclasses

import pytest
from support.paths import REPO

from loadtrace import semconv as sc
from loadtrace.analysis.compare import compare
from loadtrace.analysis.forecast import Target, windows
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files
from loadtrace.cli.render import compare_table

SAMPLES = REPO / "docs" / "samples"


def summarised(spans: list, rank: int) -> list:
    """``spans`` with ``rank``'s file spans left out, as a rank over the budget exports them."""
    mine = [s for s in spans if s.resource.get(sc.RANK) == rank]
    files = [s for s in mine if s.name in sc.FILE_SPANS]
    first: dict[str, tuple[int, int]] = {}
    for span in sorted(files, key=lambda s: s.start_ns):
        first.setdefault(
            span.attributes[sc.FILE_PATH],
            (span.attributes[sc.FILE_SIZE], span.attributes[sc.FILE_CACHED_BYTES_AT_OPEN]),
        )
    carried = {
        sc.FILES_SUMMARIZED: len(files),
        sc.LOAD_LAST_FILE_CLOSE: max(s.end_ns for s in files),
        sc.IO_CHECKPOINT_FILES: len(first),
        sc.IO_CHECKPOINT_FILE_BYTES: sum(size for size, _ in first.values()),
        sc.IO_CHECKPOINT_COLD_BYTES: sum(max(0, size - cached) for size, cached in first.values()),
        sc.LOAD_FIRST_FILE_OPEN: min(s.start_ns for s in files),
    }
    kept = []
    for span in spans:
        if span in files:
            continue
        if span in mine and span.name in sc.LOAD_SPANS:
            span = dataclasses.replace(span, attributes={**span.attributes, **carried})
        kept.append(span)
    return kept


def without_counts(report: dict) -> dict:
    for trace in report["traces"]:
        trace.pop("spans")
    return report


@pytest.mark.parametrize("job", ["fsdp512", "fsdp524", "zero3_512", "zero3_524"])
def test_a_summarised_rank_reports_as_a_full_one(job):
    recorded = read_files(SAMPLES / job)
    full = without_counts(build_report(recorded))
    summary = without_counts(build_report(dataclasses.replace(recorded, spans=summarised(recorded.spans, 1))))
    assert summary["ranks"] == full["ranks"]
    assert summary["findings"] == full["findings"]
    assert summary["traces"][0]["nodes"] == full["traces"][0]["nodes"]
    assert summary["traces"][0]["startup"] == full["traces"][0]["startup"]


@pytest.mark.parametrize("job", ["fsdp524", "zero3_512"])
def test_the_forecast_and_compare_of_a_summarised_rank(job):
    """The forecast reads the rank's reads from its load where its file spans are missing; compare shows its file
    time and bytes as unknown, not as zero, and prints."""
    recorded = read_files(SAMPLES / job)
    summary = dataclasses.replace(recorded, spans=summarised(recorded.spans, 1))
    target = Target(model_bytes=54 * 10**9, ranks_per_node=16)
    assert build_report(summary, target)["forecast"] == build_report(recorded, target)["forecast"]
    (full_job,) = jobs_from_spans(recorded.spans, recorded.states)
    (summary_job,) = jobs_from_spans(summary.spans, summary.states)
    total = full_job.rank(1).read_bytes
    assert windows(summary_job.rank(1), total) == windows(full_job.rank(1), total)
    compared = compare(full_job, summary_job, "full", "summary")
    (opened,) = [row for row in compared.phases if row.phase == "open" and row.metric == "bytes" and row.rank == 1]
    assert opened.b is None and opened.a
    assert "open" in compare_table(compared)
