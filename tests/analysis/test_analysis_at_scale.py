"""Promise: what ``loadtrace report``, ``timeline``, ``top`` and ``jobs`` do grows with the rank count, never faster.

The work is counted, not timed (the speed itself is benchmarks/bench_scale.py's): every Python call the analysis
makes over a generated job (``support/big_job.py``, a real job replicated, with a slow, a dead and a cut-short rank)
of ``SMALL`` and of 4x as many ranks. Four times the ranks may cost at most ``LINEAR`` x 4 times the calls: a
quadratic step (a median of the other ranks for each rank, a scan of a run's members for each process that joins it)
costs 16x on its own.
"""

from __future__ import annotations

import cProfile
import pstats
import random
import statistics
from pathlib import Path

import pytest
from support.big_job import RECORDED, write_big_job, write_live_job

from loadtrace.analysis.jobs import job_row
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.report import report
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.sources.files import any_value, key_values
from loadtrace.analysis.startup import OthersMedian, Thresholds
from loadtrace.analysis.timeline import timeline
from loadtrace.analysis.top import rows
from loadtrace.cli.render_timeline import page_data
from loadtrace.cli.render_top import top_lines
from loadtrace.cli.top import state_files

SMALL = 32
LINEAR = 1.1  # room for what does not grow with the ranks (imports done once, a job's findings)
NOW = 1_800_000_000 * 10**9


def calls(work) -> int:
    profile = cProfile.Profile()
    profile.runcall(work)
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("scale")
    return {
        ranks: write_big_job(
            root / f"job{ranks}", ranks, slow=9, killed=-1, slow_by=20.0, dead=20, partial=30, source=RECORDED
        )
        for ranks in (SMALL, 4 * SMALL)
    }


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("live")
    return {
        ranks: write_live_job(root / f"live{ranks}", ranks, NOW, behind=(5,), stuck=(6,), dead=(7,), near_limit=(8,))
        for ranks in (SMALL, 4 * SMALL)
    }


def grows_linearly(work) -> None:
    small, large = calls(lambda: work(SMALL)), calls(lambda: work(4 * SMALL))
    assert large <= LINEAR * 4 * small, f"{large} calls at {4 * SMALL} ranks, {small} at {SMALL}: {large / small:.1f}x"


def test_the_report_grows_with_the_ranks(jobs):
    spans = {ranks: read_files(folder) for ranks, folder in jobs.items()}
    grows_linearly(lambda ranks: report(spans[ranks]))


def test_reading_the_files_grows_with_the_ranks(jobs):
    grows_linearly(lambda ranks: read_files(jobs[ranks]))


def test_the_timeline_grows_with_the_ranks(jobs):
    found = {ranks: jobs_from_spans(read_files(folder).spans) for ranks, folder in jobs.items()}
    grows_linearly(lambda ranks: page_data(timeline(found[ranks][0])))


def test_a_jobs_row_grows_with_the_ranks(jobs):
    found = {ranks: jobs_from_spans(read_files(folder).spans) for ranks, folder in jobs.items()}
    grows_linearly(lambda ranks: job_row(found[ranks][0], Thresholds()))


def test_top_grows_with_the_ranks(live):
    def top(ranks: int) -> None:
        found = rows(state_files(live[ranks]), NOW, "vm", lambda pid, created: pid != 4_194_305)
        top_lines(found, "here", NOW, live=False)

    grows_linearly(top)


@pytest.mark.parametrize("count", [1, 2, 3, 10, 11, 64, 65])
def test_the_median_of_the_others_is_the_median_of_the_others_exactly(count):
    numbers = random.Random(count)
    values = [round(numbers.uniform(0, 30), numbers.choice([1, 6])) for _ in range(count)]
    values[0] = values[-1]  # a tie
    medians = OthersMedian(values)
    for index in range(count):
        others = values[:index] + values[index + 1 :]
        assert medians.without(index) == (statistics.median(others) if others else None)


@pytest.mark.parametrize(
    "value",
    [
        {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "22"}]}},
        {"arrayValue": {"values": [{"intValue": "-3"}, {"intValue": "4"}]}},
        {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}},
        {"arrayValue": {"values": [{"intValue": "1", "stringValue": "a"}]}},
        {"arrayValue": {"values": []}},
        {"arrayValue": {}},
    ],
)
def test_the_quick_path_for_integer_arrays_decodes_as_the_checked_one(value):
    assert key_values([{"key": "k", "value": value}]) == {"k": any_value(value)}
