"""Promise (issue 48, point 2): a job id used again is a new run each launch, even when a launch ended before any load.

Real ``torchrun`` launches with one ``LOADTRACE_JOB_ID`` (``support/relaunch.py``): both ranks crash after the
rendezvous under an untraced launcher (no launch id: only the processes' times tell the launches apart), then rank 0
crashes while rank 1 loads, then both load; those three into one folder, and a fourth that loads into another
folder. Each launch is its own run, its startup within its own launch's seconds, and ``loadtrace jobs`` over both
folders carries no startup longer than a launch took. Two launches that both loaded are two entries in one trace,
never summed.
"""

from __future__ import annotations

import pytest
from support import field_facts
from support.installed import report, require_installed
from support.relaunch import JOB_ID, Relaunched, relaunched
from support.venvs import discover

from loadtrace.analysis.jobs import jobs_report
from loadtrace.analysis.report import report as build
from loadtrace.analysis.sources import read_files
from loadtrace.cli.render import report_table

VENVS = discover()


@pytest.fixture(scope="module")
def launches(checkpoint, tmp_path_factory) -> Relaunched:
    venv = VENVS[0]
    require_installed(venv)
    return relaunched(venv, checkpoint, tmp_path_factory)


def test_the_launches_ended_as_arranged(launches: Relaunched):
    codes = {name: launch.returncode for name, launch in launches.launches.items()}
    assert codes == {"crashed": 1, "half": 1, "loaded": 0, "elsewhere": 0}, {
        name: launch.log[-2000:] for name, launch in launches.launches.items()
    }


def test_each_launch_into_one_folder_is_its_own_run(launches: Relaunched):
    result = build(read_files(str(launches.folder)))
    runs = [(trace.job_id, trace.attempt, trace.run) for trace in result.traces]
    assert runs == [(JOB_ID, 0, 0), (JOB_ID, 0, 1), (JOB_ID, 0, 2)], runs
    by_run: dict[int, dict[int | None, int]] = {}
    for rank in result.ranks:
        by_run.setdefault(rank.run, {})[rank.rank] = rank.loads
    assert by_run == {0: {0: 0, 1: 0}, 1: {0: 0, 1: 1}, 2: {0: 1, 1: 1}}, by_run
    assert len({trace.trace_id for trace in result.traces}) == 1, "one job id, one trace id"
    # Never summed: each load's rank has its own launch's bytes, not the folder's.
    loaded = [rank for rank in result.ranks if rank.loads]
    assert len(loaded) == 3
    assert all((rank.read_bytes, rank.tensors_read) == (field_facts.BYTES, field_facts.TENSORS) for rank in loaded)
    table = report_table(result)
    assert "run 3 of 3 (the same ranks again, new pids)" in table, table


def test_no_run_s_startup_spans_more_than_its_own_launch(launches: Relaunched):
    """The merged run's startup ran from the first launch's start to the second's load (49 s for jobs of seconds)."""
    result = build(read_files(str(launches.folder)))
    took = [launches.launches[name].seconds for name in ("crashed", "half", "loaded")]
    for trace, seconds in zip(result.traces, took, strict=True):
        assert trace.startup is not None
        for rank in trace.startup.ranks:
            assert rank.seconds < seconds, (trace.run, rank, seconds)


def test_a_launch_into_another_folder_is_its_own_run_there_and_beside_the_others(launches: Relaunched):
    alone = build(read_files(str(launches.elsewhere)))
    assert [(t.job_id, t.run) for t in alone.traces] == [(JOB_ID, 0)]
    both = build(read_files(str(launches.cwd)))
    assert [t.run for t in both.traces] == [0, 1, 2, 3]
    assert [rank.loads for rank in both.ranks if rank.run == 3] == [1, 1]


def test_jobs_carries_no_startup_longer_than_a_launch(launches: Relaunched):
    """``loadtrace jobs`` over both folders: a row per run, none of them longer than the longest launch; so too the
    p95 (the merged run's 138.8 s startup for a 36 s job went into it)."""
    listed = jobs_report(read_files(str(launches.cwd)))
    longest = max(launch.seconds for launch in launches.launches.values())
    rows = [row for row in listed.jobs if row.job_id == JOB_ID]
    assert len(rows) == 4, rows
    assert all(row.startup_seconds is None or row.startup_seconds < longest for row in rows), rows
    (group,) = listed.groups
    assert group.startup_seconds.p95 is not None and group.startup_seconds.p95 < longest


def test_the_report_of_the_folder_runs_as_a_user_runs_it(launches: Relaunched):
    code, table, err = report(VENVS[0], launches.folder)
    assert code == 0 and err == "", err
    assert table.count(f"job {JOB_ID}  trace ") == 3, table
