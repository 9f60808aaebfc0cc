"""Promise (issue 11): a job that dies, fails or restarts while loading still tells the whole story.

Hand-built spans (``test_analysis_otlp``'s OTLP JSON builders) and state files written with ``statefile.Writer``, as
the instrumentation writes them: ranks killed with and without the launcher's witness, a rank stopped by SIGTERM, a
load that raised, attempts of one job in one trace, damaged state files, memory limits below the node's memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.dead_rank_jobs import (
    CGROUP_LIMIT,
    FSDP,
    JOB,
    NODE_MEMORY,
    ROOT,
    SECOND,
    TRACE,
    full_job,
    killed_totals,
    oom_killed_job,
    report_of,
    state_file,
    witness_line,
)
from support.otlp_lines import MODEL_BYTES, T0, job_lines, line, rank_load, resource, span, write_lines

from loadtrace import semconv as sc
from loadtrace import statefile
from loadtrace.analysis.forecast import Target
from loadtrace.analysis.model import to_json
from loadtrace.cli.render import report_table


def ranks_by_number(result) -> dict[int | None, Any]:
    return {rank.rank: rank for rank in result.ranks}


def test_a_folder_of_only_state_files_is_a_report(tmp_path):
    """Spans went over OTLP (or no span ever ended): the state files alone give each rank's numbers."""
    state_file(tmp_path, 0, status=statefile.STATUS_EXITED, reads=(69, MODEL_BYTES), files=5, strategy="plain")
    state_file(
        tmp_path, 1, status=statefile.STATUS_LOADING, phase=sc.SPAN_CONVERT, load=sc.SPAN_FROM_PRETRAINED,
        reads=(33, 735_872), files=5, rss_peak=366_841_856, strategy="plain",
    )  # fmt: skip
    result = report_of(tmp_path)
    (trace,) = result.traces
    assert (trace.trace_id, trace.job_id, trace.ranks, trace.attempt) == (TRACE, JOB, [0, 1], 0)
    ranks = ranks_by_number(result)
    assert not ranks[0].incomplete and ranks[0].read_bytes == MODEL_BYTES and ranks[0].files_opened == 5
    assert to_json(ranks[0].exit) == {"signal": None, "code": None, "oom_killed": None, "source": None}
    assert ranks[1].incomplete and (ranks[1].read_bytes, ranks[1].tensors_read) == (735_872, 33)
    assert ranks[1].peak_rss_bytes == 366_841_856 and ranks[1].strategy == "plain"
    (finding,) = result.findings
    assert finding.kind == sc.FINDING_INCOMPLETE_RANK and finding.ranks == [1]
    assert finding.detail.startswith(
        "rank 1 died during transformers.convert after reading 735,872 B (735.9 kB)"
        " (no launcher witness: how it ended is unknown)"
    )
    assert result.skipped_state_files == 0


def test_damaged_and_foreign_state_files_are_skipped_and_counted(tmp_path):
    for index, text in enumerate(full_job()):
        write_lines(tmp_path / f"rank-{index}.jsonl", [text])
    good = state_file(tmp_path, 1, status=statefile.STATUS_LOADING, reads=(1, 10), name="good.state")
    data = good.read_bytes()
    good.unlink()
    (tmp_path / "truncated.state").write_bytes(data[:100])
    (tmp_path / "foreign.state").write_bytes(b"not a state file at all" * 400)
    (tmp_path / "empty.state").write_bytes(b"")
    (tmp_path / "zeroed.state").write_bytes(b"\0" * 8192)  # created, never written: no magic yet
    result = report_of(tmp_path)
    assert result.skipped_state_files == 4
    assert not any(rank.incomplete for rank in result.ranks)
    assert [rank.read_bytes for rank in result.ranks] == [MODEL_BYTES, MODEL_BYTES]
    assert "4 corrupt, truncated or foreign state files skipped" in report_table(result)


def test_a_finished_rank_s_state_never_makes_it_look_dead(tmp_path):
    for index, text in enumerate(full_job()):
        write_lines(tmp_path / f"rank-{index}.jsonl", [text])
    state_file(tmp_path, 0, status=statefile.STATUS_EXITED, reads=(69, MODEL_BYTES), files=5, phase="", load="")
    state_file(tmp_path, 1, status=statefile.STATUS_IDLE, reads=(69, MODEL_BYTES), files=5)
    result = report_of(tmp_path)
    assert [(r.incomplete, r.failed, r.read_bytes) for r in result.ranks] == [(False, None, MODEL_BYTES)] * 2
    assert all(r.exit.source is None and r.last_state is None for r in result.ranks)
    assert sc.FINDING_INCOMPLETE_RANK not in {f.kind for f in result.findings}


def test_a_state_file_that_never_began_a_load_is_no_rank(tmp_path):
    for index, text in enumerate(full_job(ranks=(0,))):
        write_lines(tmp_path / f"rank-{index}.jsonl", [text])
    state_file(tmp_path, 3, status=statefile.STATUS_EXITED, load_start=0)
    assert [rank.rank for rank in report_of(tmp_path).ranks] == [0]


OOM_SENTENCE = (
    "rank 1 was OOM-killed during transformers.convert after reading 210,323,968 B (210.3 MB) and materialising"
    " 1,009,216 B (1.0 MB) on cpu; peak RSS 1,200,000,000 B (1.2 GB); the memory limit was 1,258,291,200 B (1.3 GB)"
    " (cgroup v1)"
)


def test_a_witness_span_and_the_state_file_of_one_process_count_once(tmp_path):
    result = report_of(oom_killed_job(tmp_path))
    ranks = ranks_by_number(result)
    assert list(ranks) == [0, 1]
    dead = ranks[1]
    assert dead.incomplete and dead.failed is None
    assert (dead.read_bytes, dead.tensors_read, dead.files_opened) == (210_323_968, 33, 5)
    assert dead.materialized_bytes == {"cpu": 1_009_216} and dead.strategy == FSDP
    assert to_json(dead.exit) == {"signal": "SIGKILL", "code": None, "oom_killed": True, "source": "launcher"}
    assert dead.last_state.source == "state file"
    assert (dead.memory_limit_bytes, dead.memory_limit_source) == (CGROUP_LIMIT, "cgroup v1")
    (incomplete,) = [f for f in result.findings if f.kind == sc.FINDING_INCOMPLETE_RANK]
    assert incomplete.detail.startswith(OOM_SENTENCE)
    assert "node's memory" not in incomplete.detail  # the old hint is gone


def test_the_witness_alone_tells_it_when_there_is_no_state_file(tmp_path):
    """Spans over OTLP: the witness span carries the same exact last totals."""
    result = report_of(oom_killed_job(tmp_path, with_state=False))
    dead = ranks_by_number(result)[1]
    assert dead.incomplete and dead.last_state.source == "launcher witness"
    assert (dead.read_bytes, dead.materialized_bytes) == (210_323_968, {"cpu": 1_009_216})
    (incomplete,) = [f for f in result.findings if f.kind == sc.FINDING_INCOMPLETE_RANK]
    assert incomplete.detail.startswith(OOM_SENTENCE)


def test_byte_findings_judge_a_dead_rank_s_last_known_state(tmp_path):
    """Rank 1 was killed after reading 21% of the model under fsdp_cpu_ram_efficient: a duplicate read all the same."""
    result = report_of(oom_killed_job(tmp_path))
    (duplicate,) = [f for f in result.findings if f.kind == sc.FINDING_DUPLICATE_CHECKPOINT_READ]
    assert duplicate.ranks == [1] and duplicate.bytes == 210_323_968
    assert "did not finish: these are the last known numbers" in duplicate.detail
    # Its projection is set against the cgroup's limit, lower than the node's memory.
    assert "(memory limit 1,258,291,200 B (1.3 GB) (cgroup v1))" in duplicate.detail
    assert "node memory" not in duplicate.detail


def test_a_sigkill_that_was_not_the_oom_killer(tmp_path):
    folder = oom_killed_job(tmp_path, with_state=False)
    text = (folder / "witness-node-0-999.jsonl").read_text().replace('"boolValue": true', '"boolValue": false')
    (folder / "witness-node-0-999.jsonl").write_text(text)
    result = report_of(folder)
    assert ranks_by_number(result)[1].exit.oom_killed is False
    (incomplete,) = [f for f in result.findings if f.kind == sc.FINDING_INCOMPLETE_RANK]
    assert incomplete.detail.startswith("rank 1 was killed (SIGKILL) during transformers.convert after reading")


def test_a_rank_stopped_by_sigterm_ends_its_spans_and_says_so(tmp_path):
    """torchrun SIGTERMs the survivors: their handler ends the open spans (ERROR, loadtrace.exit.signal) and flushes
    them; the state says signalled. The load span already counts the load: nothing is added twice."""
    spans = rank_load(TRACE, 0, "plain", 400_000)
    spans[0]["status"] = {"code": 2, "message": "SIGTERM"}
    for stopped in (spans[0], spans[-2]):  # the load and transformers.convert were open
        stopped["attributes"].append({"key": sc.EXIT_SIGNAL, "value": {"stringValue": "SIGTERM"}})
    write_lines(tmp_path / "rank00000-node-0-1000.jsonl", job_lines(TRACE, {0: spans}))
    state_file(
        tmp_path, 0, status=statefile.STATUS_SIGNALLED, signal=15, phase=sc.SPAN_CONVERT,
        load=sc.SPAN_FROM_PRETRAINED, reads=(27, 400_000), files=5,
    )  # fmt: skip
    result = report_of(tmp_path)
    (rank,) = result.ranks
    assert rank.incomplete and rank.failed is None and rank.read_bytes == 400_000
    assert to_json(rank.exit) == {"signal": "SIGTERM", "code": None, "oom_killed": None, "source": "rank"}
    (incomplete,) = [f for f in result.findings if f.kind == sc.FINDING_INCOMPLETE_RANK]
    assert incomplete.detail.startswith("rank 0 was stopped by SIGTERM during transformers.convert after reading")
    assert "no launcher witness" not in incomplete.detail


def test_a_load_that_raised_is_a_failed_load_not_a_finished_one(tmp_path):
    spans = rank_load(TRACE, 1, "plain", 300_000)
    spans[0]["status"] = {"code": 2, "message": "FileNotFoundError: ..."}
    spans[0]["attributes"].append({"key": sc.ERROR_TYPE, "value": {"stringValue": "FileNotFoundError"}})
    lines = job_lines(TRACE, {0: rank_load(TRACE, 0, "plain", MODEL_BYTES), 1: spans})
    exited = {sc.EXIT_CODE: 1, sc.EXIT_SOURCE: "launcher", sc.EXIT_STATUS: "exited", **killed_totals(300_000)}
    lines.append(witness_line(1, exited, start=T0 + 2 * SECOND))
    write_lines(tmp_path / "spans.jsonl", lines)
    result = report_of(tmp_path)
    failed = ranks_by_number(result)[1]
    assert failed.failed == "FileNotFoundError" and not failed.incomplete
    assert to_json(failed.exit) == {"signal": None, "code": 1, "oom_killed": None, "source": "launcher"}
    assert failed.read_bytes == 300_000  # the witness repeats the spans' totals: not added again
    (finding,) = [f for f in result.findings if f.kind == sc.FINDING_FAILED_LOAD]
    assert (finding.severity, finding.ranks, finding.bytes) == ("warning", [1], 300_000)
    assert finding.detail.startswith(
        "rank 1's transformers.from_pretrained raised FileNotFoundError after reading 300,000 B (300.0 kB);"
        " the process exited with code 1"
    )
    assert result.has_warnings


def test_a_killed_second_load_adds_only_the_open_load(tmp_path):
    """The first model's span counts it; the second, killed, is known from the state file only."""
    first = rank_load(TRACE, 0, "plain", MODEL_BYTES)
    write_lines(tmp_path / "rank00000-node-0-1000.jsonl", job_lines(TRACE, {0: first}))
    state_file(
        tmp_path, 0, status=statefile.STATUS_LOADING, phase=sc.SPAN_LOAD_STATE_DICT, load=sc.SPAN_FROM_PRETRAINED,
        reads=(10, 123_456), files=2, load_start=T0 + 10 * SECOND, updated=T0 + 11 * SECOND,
    )  # fmt: skip
    (rank,) = report_of(tmp_path).ranks
    assert rank.incomplete and rank.read_bytes == MODEL_BYTES + 123_456 and rank.files_opened == 5 + 2


def attempt_lines(attempt: int | None, start: int, pids: tuple[int, int], launch: str | None = None) -> list[str]:
    extra: dict[str, Any] = {}
    if attempt is not None:
        extra[sc.ATTEMPT] = attempt
    if launch is not None:
        extra[sc.LAUNCH_ID] = launch
    lines = []
    for rank, pid in zip((0, 1), pids, strict=True):
        spans = rank_load(TRACE, rank, FSDP, MODEL_BYTES, start=start)
        if rank == 0:
            spans = [span(sc.SPAN_JOB, TRACE, start, start, sid=ROOT, **{"loadtrace__job__id": JOB})] + spans
        lines.append(line(resource(rank, **{sc.PROCESS_PID: pid, **extra}), spans))
    return lines


def test_two_attempts_in_one_trace_are_never_summed(tmp_path):
    """torchrun --max-restarts 1: attempt 0's rank 1 was OOM-killed, attempt 1 loaded in full."""
    first = attempt_lines(0, T0, (1000, 1001), launch="abc")[:1]
    witness = {
        sc.EXIT_SIGNAL: "SIGKILL", sc.EXIT_OOM_KILLED: True, sc.EXIT_STATUS: "loading", sc.EXIT_SOURCE: "launcher",
        sc.EXIT_DURING: sc.SPAN_CONVERT, sc.STRATEGY: FSDP, **killed_totals(500_000),
    }  # fmt: skip
    first.append(witness_line(1, witness, **{sc.ATTEMPT: 0, sc.LAUNCH_ID: "abc"}))
    second = attempt_lines(1, T0 + 60 * SECOND, (2000, 2001), launch="abc")
    write_lines(tmp_path / "spans.jsonl", first + second)
    result = report_of(tmp_path)
    assert [(t.trace_id, t.attempt, t.launch_id, t.run, t.ranks) for t in result.traces] == [
        (TRACE, 0, "abc", 0, [0, 1]),
        (TRACE, 1, "abc", 0, [0, 1]),
    ]
    by_attempt = {(r.attempt, r.rank): r for r in result.ranks}
    assert by_attempt[(0, 1)].incomplete and by_attempt[(0, 1)].read_bytes == 500_000
    assert by_attempt[(1, 1)].read_bytes == MODEL_BYTES and not by_attempt[(1, 1)].incomplete
    assert by_attempt[(1, 0)].loads == 1  # not 2: attempt 0's load is not summed in
    kinds = {(f.attempt, f.kind) for f in result.findings}
    assert (0, sc.FINDING_INCOMPLETE_RANK) in kinds and (1, sc.FINDING_INCOMPLETE_RANK) not in kinds
    assert (1, sc.FINDING_DUPLICATE_CHECKPOINT_READ) in kinds
    table = report_table(result)
    assert f"trace {TRACE}  attempt 0 of launch abc" in table and f"trace {TRACE}  attempt 1 of launch abc" in table
    assert "1 incomplete (SIGKILL OOM)" in table


def test_a_reused_job_id_is_split_by_launch_id(tmp_path):
    lines = attempt_lines(0, T0, (1000, 1001), launch="first") + attempt_lines(0, T0 + 60 * SECOND, (3000, 3001), "2nd")
    write_lines(tmp_path / "spans.jsonl", lines)
    result = report_of(tmp_path)
    assert [(t.attempt, t.launch_id, t.run) for t in result.traces] == [(0, "first", 0), (0, "2nd", 1)]
    assert [r.read_bytes for r in result.ranks] == [MODEL_BYTES] * 4


def test_the_same_ranks_again_under_new_pids_are_a_new_run(tmp_path):
    """Neither the attempt nor a launch id tells them apart (a reused LOADTRACE_JOB_ID without a witnessing launcher):
    the pids do, in start order."""
    lines = attempt_lines(None, T0, (1000, 1001)) + attempt_lines(None, T0 + 60 * SECOND, (3000, 3001))
    write_lines(tmp_path / "spans.jsonl", lines)
    result = report_of(tmp_path)
    assert [(t.attempt, t.run, t.ranks) for t in result.traces] == [(None, 0, [0, 1]), (None, 1, [0, 1])]
    assert {r.run: r.loads for r in result.ranks} == {0: 1, 1: 1}
    assert "run 2 of 2 (the same ranks again, new pids)" in report_table(result)


def crashed_lines(start: int, pids: tuple[int, ...], launch: str | None, ranks: tuple[int, ...] = (0, 1)) -> list[str]:
    """Ranks that crashed in their own code after the rendezvous: a startup and the rendezvous, no load."""
    extra = {sc.LAUNCH_ID: launch} if launch is not None else {}
    lines = []
    raised = start + 3 * SECOND
    for rank, pid in zip(ranks, pids, strict=True):
        spans = [
            span(sc.SPAN_STARTUP, TRACE, start, raised),
            span(sc.SPAN_INIT_PROCESS_GROUP, TRACE, start + SECOND, start + 2 * SECOND),
            span(sc.SPAN_EXCEPTION, TRACE, raised, raised, **{sc.EXCEPTION_TYPE: "RuntimeError"}),
        ]
        lines.append(line(resource(rank, **{sc.PROCESS_PID: pid, **extra}), spans))
    return lines


@pytest.mark.parametrize("launches", [("first", "2nd"), (None, None)], ids=["launch-ids", "no-launch-ids"])
def test_a_launch_that_ended_before_any_load_is_a_run_of_its_own(tmp_path, launches):
    """Issue 48, point 2: a crash after the rendezvous, then a relaunch with the job id: two runs, never one whose
    startup spans both launches (with launch ids, and without: the first launch's processes were over before the
    second's began)."""
    relaunch = attempt_lines(None, T0 + 60 * SECOND, (3000, 3001), launches[1])
    write_lines(tmp_path / "spans.jsonl", crashed_lines(T0, (1000, 1001), launches[0]) + relaunch)
    result = report_of(tmp_path)
    assert [(t.run, t.ranks) for t in result.traces] == [(0, [0, 1]), (1, [0, 1])]
    assert {(r.run, r.rank): r.loads for r in result.ranks} == {(0, 0): 0, (0, 1): 0, (1, 0): 1, (1, 1): 1}
    relaunched = result.traces[1].startup
    assert relaunched is not None and all(rank.seconds < 60 for rank in relaunched.ranks)


def test_a_relaunch_is_no_child_of_a_rank_that_crashed_before_its_load(tmp_path):
    """Hostile: in the first launch rank 0 crashed before loading while rank 1 loaded; the relaunch's rank 0 is not
    rank 0 of the first launch's run come late, nor is a second crash before any load, without launch ids."""
    first = crashed_lines(T0, (1000,), None, ranks=(0,)) + attempt_lines(None, T0, (1000, 1001))[1:]
    again = crashed_lines(T0 + 30 * SECOND, (2000, 2001), None)
    relaunch = attempt_lines(None, T0 + 60 * SECOND, (3000, 3001))
    write_lines(tmp_path / "spans.jsonl", first + again + relaunch)
    result = report_of(tmp_path)
    assert [(t.run, t.ranks) for t in result.traces] == [(0, [0, 1]), (1, [0, 1]), (2, [0, 1])]
    loads = {(r.run, r.rank): r.loads for r in result.ranks}
    assert loads == {(0, 0): 0, (0, 1): 1, (1, 0): 0, (1, 1): 0, (2, 0): 1, (2, 1): 1}


def test_the_nodes_of_one_job_under_separate_launchers_are_one_run(tmp_path):
    """Two nodes, each with its own torchrun (its own launch id), ranks 0-1 and 2-3: one job, not two."""
    lines = []
    for rank, launch, host in ((0, "a", "n0"), (1, "a", "n0"), (2, "b", "n1"), (3, "b", "n1")):
        spans = rank_load(TRACE, rank, "plain", MODEL_BYTES, start=T0 + rank * 1000)
        lines.append(line(resource(rank, world_size=4, host=host, **{sc.ATTEMPT: 0, sc.LAUNCH_ID: launch}), spans))
    write_lines(tmp_path / "spans.jsonl", lines)
    (trace,) = report_of(tmp_path).traces
    assert trace.ranks == [0, 1, 2, 3] and trace.launch_id == "a, b"


def test_a_forked_child_stays_with_its_rank(tmp_path):
    """A DataLoader worker's bare torch.load: another pid of rank 0, but no load of its own: the same run."""
    lines = attempt_lines(None, T0, (1000, 1001))
    child = span(sc.SPAN_TORCH_LOAD, TRACE, T0 + 30 * SECOND, T0 + 31 * SECOND, parent=ROOT)
    child["attributes"] += [{"key": sc.READ_BYTES, "value": {"intValue": "100"}}]
    lines.append(line(resource(0, **{sc.PROCESS_PID: 1234}), [child]))
    write_lines(tmp_path / "spans.jsonl", lines)
    result = report_of(tmp_path)
    assert len(result.traces) == 1 and ranks_by_number(result)[0].read_bytes == MODEL_BYTES + 100


def test_a_process_that_does_not_name_its_attempt_joins_the_only_one(tmp_path):
    """Spans of an older loadtrace (no loadtrace.attempt) and a state file (attempt 0) of one job: one attempt."""
    write_lines(tmp_path / "rank00000-node-0-1000.jsonl", attempt_lines(None, T0, (1000, 1001))[:1])
    state_file(tmp_path, 1, status=statefile.STATUS_LOADING, reads=(3, 30_000), files=1, strategy=FSDP)
    result = report_of(tmp_path)
    (trace,) = result.traces
    assert trace.ranks == [0, 1] and trace.attempt == 0


def limited_job(tmp_path: Path, memory: dict[str, Any]) -> Path:
    from support.otlp_lines import memory_attributes

    base = memory_attributes(100_000_000, 300_000_000, anon=(60_000_000, 200_000_000), file=(40_000_000, 100_000_000))
    loads = {rank: rank_load(TRACE, rank, FSDP, MODEL_BYTES, memory={**base, **memory}) for rank in (0, 1)}
    write_lines(tmp_path / "spans.jsonl", job_lines(TRACE, loads))
    return tmp_path


def test_a_cgroup_limit_below_the_node_s_memory_is_what_findings_compare_with(tmp_path):
    memory = {sc.NODE_MEMORY_TOTAL: NODE_MEMORY, sc.MEMORY_LIMIT: 3_145_728_000, sc.MEMORY_LIMIT_SOURCE: "cgroup v1"}
    result = report_of(limited_job(tmp_path, memory))
    (duplicate,) = [f for f in result.findings if f.kind == sc.FINDING_DUPLICATE_CHECKPOINT_READ]
    assert "(memory limit 3,145,728,000 B (3.1 GB) (cgroup v1))." in duplicate.detail
    rank = result.ranks[1]
    assert (rank.memory_limit_bytes, rank.memory_limit_source) == (3_145_728_000, "cgroup v1")


def test_without_loadtrace_memory_limit_the_lower_of_node_and_cgroup_is_taken(tmp_path):
    memory = {sc.NODE_MEMORY_TOTAL: NODE_MEMORY, sc.CGROUP_MEMORY_MAX: 2_000_000_000}
    result = report_of(limited_job(tmp_path, memory))
    assert (result.ranks[1].memory_limit_bytes, result.ranks[1].memory_limit_source) == (2_000_000_000, "cgroup")
    (duplicate,) = [f for f in result.findings if f.kind == sc.FINDING_DUPLICATE_CHECKPOINT_READ]
    assert "(memory limit 2,000,000,000 B (2.0 GB) (cgroup))." in duplicate.detail


def test_the_node_s_memory_when_it_is_the_lower(tmp_path):
    memory = {sc.NODE_MEMORY_TOTAL: NODE_MEMORY, sc.MEMORY_LIMIT: NODE_MEMORY, sc.MEMORY_LIMIT_SOURCE: "node"}
    (duplicate,) = [f for f in report_of(limited_job(tmp_path, memory)).findings if "duplicate_checkpoint" in f.kind]
    assert "(node memory 25,000,000,000 B (25.0 GB))." in duplicate.detail


def test_the_forecast_compares_with_the_cgroup_limit(tmp_path):
    memory = {sc.NODE_MEMORY_TOTAL: NODE_MEMORY, sc.MEMORY_LIMIT: 3_145_728_000, sc.MEMORY_LIMIT_SOURCE: "cgroup v1"}
    result = report_of(limited_job(tmp_path, memory), Target(model_bytes=10 * MODEL_BYTES))
    forecast = result.forecast
    assert forecast.node_memory_bytes == 3_145_728_000
    assert forecast.basis.node.node_memory_source == sc.MEMORY_LIMIT
    assert forecast.basis.node.memory_limit_source == "cgroup v1"
    assert "memory limit (cgroup v1): 3.1 GB (loadtrace.memory.limit)" in report_table(result)  # sizes once (issue 26)


def test_the_forecast_leaves_out_a_failed_rank(tmp_path):
    from support.otlp_lines import memory_attributes

    base = memory_attributes(100_000_000, 300_000_000, node_total=NODE_MEMORY)
    loads = {rank: rank_load(TRACE, rank, "plain", MODEL_BYTES, memory=base) for rank in (0, 1)}
    loads[1][0]["status"] = {"code": 2}
    loads[1][0]["attributes"].append({"key": sc.ERROR_TYPE, "value": {"stringValue": "OSError"}})
    write_lines(tmp_path / "spans.jsonl", job_lines(TRACE, loads))
    forecast = report_of(tmp_path, Target(model_bytes=10 * MODEL_BYTES)).forecast
    assert [tuple(left) for left in forecast.basis.left_out_ranks] == [(1, "its load raised OSError")]
