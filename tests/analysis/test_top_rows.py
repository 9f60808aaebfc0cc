"""Promise: ``loadtrace top`` tells from the state files alone what each rank is doing: its status (a pid gone on this
host without exiting is dead), phase, bytes of the bytes it will read, rate and ETA, time since its last progress, and
memory against its limit; it marks the slowest rank, a stuck one and one whose memory trend reaches its limit before
its load can end. The live fields are written off the loading thread and read as zeros from an older file."""

from __future__ import annotations

import os

from loadtrace import semconv, statefile
from loadtrace.analysis.sources import StateFile
from loadtrace.analysis.top import History, rows

S = 10**9
NOW = 1_800_000_000 * S
GB = 10**9


def state_file(
    tmp_path, rank: int, pid: int, read: int, *, status=statefile.STATUS_LOADING, host="node-a", job="job-1", **live
):
    path = tmp_path / f"rank{rank:05d}-{host}-{pid}.state"
    writer = statefile.Writer(str(path), {"pid": pid, "rank": rank, "world_size": 2}, {"job_id": job, "host": host})
    writer["created_ns"] = NOW - 60 * S
    writer.load_started()
    writer["load_start_ns"] = live.pop("load_start", NOW - 10 * S)
    writer["status"] = status
    writer["loads_open"] = 1 if status == statefile.STATUS_LOADING else 0
    writer["checkpoint_tensor_bytes"] = live.pop("expected", 1000)
    writer["memory_limit"], writer["memory_limit_source"] = live.pop("limit", (4 * GB, statefile.LIMIT_CGROUP_V1))
    writer["updated_ns"] = live.pop("updated", NOW - 9 * S)
    writer.set_text("phase", live.pop("phase", semconv.SPAN_CONVERT))
    writer.set_text("strategy", live.pop("strategy", semconv.STRATEGY_PLAIN))
    writer.new_slot().add(read)
    for name, value in live.items():
        writer.set_live(name, value)
    writer.close()
    return StateFile(str(path), statefile.read(path))


def everyone_alive(pid: int, created: int) -> bool:
    return True


def by_rank(found):
    return {row.rank: row for row in found}


def test_a_loading_rank_s_bytes_rate_eta_and_progress(tmp_path):
    states = [state_file(tmp_path, 1, 11, 250, progress_ns=NOW - 2 * S, rss_now=GB, rss_sampled_ns=NOW - S)]
    (row,) = rows(states, NOW, "node-a", everyone_alive)
    assert (row.status, row.phase, row.read_bytes, row.expected_bytes, row.percent) == (
        "loading",
        semconv.SPAN_CONVERT,
        250,
        1000,
        25.0,
    )
    assert row.read_rate_bytes_per_s == 25.0  # 250 B in the 10 s since the load began
    assert row.eta_seconds == 30.0 and row.seconds_since_progress == 2.0
    assert row.rss_bytes == GB and row.limit_bytes == 4 * GB and row.limit_source == "cgroup v1"
    assert row.marks == []  # one rank of the job: nobody to be slowest against


def test_a_live_view_rate_is_the_recent_one(tmp_path):
    history = History()
    rows([state_file(tmp_path, 1, 11, 100)], NOW - 2 * S, "node-a", everyone_alive, history)
    (row,) = rows([state_file(tmp_path, 1, 11, 300)], NOW, "node-a", everyone_alive, history)
    assert row.read_rate_bytes_per_s == 100.0  # 200 B in the last 2 s, not 30 B/s since the load began


def test_a_pid_gone_on_this_host_is_dead_and_another_host_s_is_as_written(tmp_path):
    states = [state_file(tmp_path, 0, 10, 5), state_file(tmp_path, 1, 11, 5, host="node-b")]
    found = by_rank(rows(states, NOW, "node-a", lambda pid, created: False))
    assert found[0].status == "dead" and found[0].rss_bytes is None
    assert found[1].status == "loading"


def test_an_exited_rank_is_never_dead(tmp_path):
    states = [state_file(tmp_path, 0, 10, 5, status=statefile.STATUS_EXITED)]
    (row,) = rows(states, NOW, "node-a", lambda pid, created: False)
    assert row.status == "exited" and row.read_rate_bytes_per_s is None and row.eta_seconds is None


def test_slowest_and_stuck(tmp_path):
    states = [
        state_file(tmp_path, 0, 10, 900, progress_ns=NOW - S),
        state_file(tmp_path, 1, 11, 100, progress_ns=NOW - 40 * S, updated=NOW - 40 * S, load_start=NOW - 60 * S),
    ]
    found = by_rank(rows(states, NOW, "node-a", everyone_alive))
    assert found[1].marks == [semconv.MARK_SLOWEST, semconv.MARK_STUCK] and found[0].marks == []
    assert found[1].seconds_since_progress == 40.0


def test_no_slowest_among_ranks_equally_late(tmp_path):
    """Two ranks at the same bytes and ETA: neither is the slowest (a mark on one of a tie would point at a rank
    that is no worse than the other)."""
    states = [state_file(tmp_path, 0, 10, 500), state_file(tmp_path, 1, 11, 500)]
    found = by_rank(rows(states, NOW, "node-a", everyone_alive))
    assert found[0].eta_seconds == found[1].eta_seconds and found[0].marks == found[1].marks == []


def test_slowest_is_per_job_in_a_folder_of_several(tmp_path):
    states = [state_file(tmp_path, rank, 10 + rank, 100 * (rank + 1)) for rank in (0, 1)]
    states += [state_file(tmp_path, rank, 20 + rank, 500, job="job-2") for rank in (0, 1)]
    found = {(row.job_id, row.rank): row.marks for row in rows(states, NOW, "node-a", everyone_alive)}
    assert found == {("job-1", 0): [semconv.MARK_SLOWEST], ("job-1", 1): [], ("job-2", 0): [], ("job-2", 1): []}


def test_oom_ahead_when_the_memory_trend_reaches_the_limit_before_the_load_ends(tmp_path):
    # RSS rose 1 GB in 5 s and has 1 GB to go: the limit in 5 s; the load needs 30 s more.
    heading = dict(rss_load_start=2 * GB, rss_load_start_ns=NOW - 6 * S, rss_now=3 * GB, rss_sampled_ns=NOW - S)
    (row,) = rows([state_file(tmp_path, 1, 11, 250, **heading)], NOW, "node-a", everyone_alive)
    assert row.oom_in_seconds == 5.0 and row.marks == [semconv.MARK_OOM_AHEAD]
    # The same trend with the load nearly done: it ends first.
    (row,) = rows([state_file(tmp_path, 1, 11, 990, **heading)], NOW, "node-a", everyone_alive)
    assert row.oom_in_seconds == 5.0 and row.marks == []


def test_expected_bytes_unknown_where_the_rank_does_not_read_everything(tmp_path):
    tp = state_file(tmp_path, 1, 11, 5, strategy=semconv.STRATEGY_TP)
    zero3 = state_file(tmp_path, 2, 12, 5, strategy=semconv.STRATEGY_ZERO3)
    unknown = state_file(tmp_path, 3, 13, 5, expected=0)
    for row in rows([tp, zero3, unknown], NOW, "node-a", everyone_alive):
        assert row.expected_bytes is None and row.percent is None and row.eta_seconds is None


def test_live_fields_read_as_unknown_from_a_file_without_them(tmp_path):
    found = state_file(tmp_path, 1, 11, 5)
    assert all(getattr(found.state, name) == 0 for name in statefile.LIVE_FIELDS)
    assert found.state.exception == ""
    # They sit after every older field: an older reader's layout is untouched.
    assert statefile.LIVE_OFFSET >= max(
        offset + size for name, (offset, size) in statefile.TEXT_OFFSETS.items() if name != "exception"
    )


def test_a_process_that_never_loaded_is_no_row(tmp_path):
    path = tmp_path / "launcher.state"
    statefile.Writer(str(path), {"pid": os.getpid()}, {"host": "node-a"}).close()
    assert rows([StateFile(str(path), statefile.read(path))], NOW, "node-a", everyone_alive) == []
