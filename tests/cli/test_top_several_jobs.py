"""Promise: ``loadtrace top`` on a folder holding several jobs says so and names each rank's job (a ``job`` column),
so that rank 0 of one job is not read as rank 0 of another; one job alone keeps its narrower table."""

from __future__ import annotations

from support.big_job import write_live_job

from loadtrace.analysis.top import rows
from loadtrace.cli.render_top import top_lines
from loadtrace.cli.top import state_files

NOW = 1_800_000_000 * 10**9


def everyone_alive(pid: int, created_ns: int) -> bool:
    return True


def screen(folder):
    return top_lines(rows(state_files(folder), NOW, "here", everyone_alive), "here", NOW, live=False)


def test_two_jobs_on_one_node_have_a_job_column(tmp_path):
    for job in ("job-a", "job-b"):
        write_live_job(tmp_path / job, 6, NOW, ranks_per_node=12, job_id=job)
    lines = screen(tmp_path)
    assert "12 ranks of 2 jobs on 1 node, 12 loading" in lines[0]
    (header,) = [line for line in lines if line.split()[:2] == ["job", "rank"]]
    ranks = [line.split()[:2] for line in lines if line.split()[:1] in (["job-a"], ["job-b"])]
    assert ranks == [[job, str(rank)] for job in ("job-a", "job-b") for rank in range(6)], header


def test_one_job_has_no_job_column(tmp_path):
    write_live_job(tmp_path / "job-a", 6, NOW, ranks_per_node=12, job_id="job-a")
    lines = screen(tmp_path)
    assert "6 ranks on 1 node, 6 loading" in lines[0]
    assert [line.split()[0] for line in lines if line.strip().startswith("rank")] == ["rank"]
