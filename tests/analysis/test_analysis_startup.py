"""A job's startup from spans built here with the issue-14 contract's names (``loadtrace.startup``,
``torch.init_process_group``, ``accelerate.fsdp2_load_full_state_dict``, ...) and from spans without them: phases that
add up exactly, the slowest rank and the median, storage throughput per node with cold / warm from residency, and the
three findings at their thresholds."""

from __future__ import annotations

import json

import pytest
from support.otlp_lines import T0, attributes, job_lines, line, resource, span, span_id, trace_id_of

from loadtrace import semconv as sc
from loadtrace.analysis.report import build_report, report
from loadtrace.analysis.sources import SpanSet, decode_line
from loadtrace.analysis.startup import STARTUP_PHASES, Thresholds
from loadtrace.cli import main

S = 1_000_000_000  # one second in ns
TRACE = trace_id_of("startup")


def at(seconds: float) -> int:
    return T0 + round(seconds * S)


def spans_of(lines: list[str]) -> SpanSet:
    return SpanSet(spans=[s for text in lines for s in decode_line(text.encode()) or []])


def startup_rank(
    *,
    end: float = 10.0,
    wait: tuple[float, float] | None = (0.0, 2.0),
    load: tuple[float, float] = (2.0, 7.0),
    files: list[tuple[float, float]] | None = None,
    convert: tuple[float, float] | None = (4.0, 6.5),
    materialize: tuple[float, float] | None = (6.5, 6.7),
    broadcast: tuple[float, float] | None = (7.0, 9.0),
    startup_span: bool = True,
    cached: dict[str, tuple[int, int]] | None = None,
    broadcast_bytes: dict[str, int] | None = None,
    fetched: tuple[int, list[tuple[float, float]]] | None = None,
) -> list[dict]:
    """One rank's startup: ``loadtrace.startup`` [0, end] holding the rendezvous, the load (its file spans, a convert
    and a materialize phase) and the weights' broadcast. ``cached``: path → (file size, bytes cached at open);
    ``fetched``: the load's storage reads, bytes and the stretches (in seconds) they moved in."""
    root = span_id()
    result = []
    if startup_span:
        result.append(span(sc.SPAN_STARTUP, TRACE, at(0), at(end), sid=root))
    parent = root if startup_span else ""
    if wait is not None:
        result.append(span(sc.SPAN_INIT_PROCESS_GROUP, TRACE, at(wait[0]), at(wait[1]), parent=parent))
    load_id = span_id()
    result.append(
        span(
            sc.SPAN_FROM_PRETRAINED, TRACE, at(load[0]), at(load[1]), parent=parent, sid=load_id,
            **{sc.STRATEGY: "plain", sc.READ_BYTES: 1000}, **storage_reads(fetched),
        )
    )  # fmt: skip
    for index, (start, stop) in enumerate(files if files is not None else [(3.0, 6.0)]):
        path = f"/ckpt/model-{index}.safetensors"
        attributes = {sc.FILE_PATH: path}
        if cached is not None and path in cached:
            attributes[sc.FILE_SIZE], attributes[sc.FILE_CACHED_BYTES_AT_OPEN] = cached[path]
        result.append(span(sc.SPAN_SAFETENSORS_OPEN, TRACE, at(start), at(stop), parent=load_id, **attributes))
    if convert is not None:
        result.append(span(sc.SPAN_CONVERT, TRACE, at(convert[0]), at(convert[1]), parent=load_id))
    if materialize is not None:
        result.append(span(sc.SPAN_MATERIALIZE_MISSING, TRACE, at(materialize[0]), at(materialize[1]), parent=load_id))
    if broadcast is not None:
        result.append(
            span(
                sc.SPAN_FSDP2_LOAD_FULL_STATE_DICT, TRACE, at(broadcast[0]), at(broadcast[1]), parent=parent,
                **(broadcast_bytes or {}),
            )
        )  # fmt: skip
    return result


def storage_reads(fetched: tuple[int, list[tuple[float, float]]] | None) -> dict:
    if fetched is None:
        return {}
    nbytes, stretches = fetched
    times = [at(second) for stretch in stretches for second in stretch]
    return {sc.IO_STORAGE_READ_BYTES: nbytes, sc.IO_STORAGE_READ_INTERVALS: times}


def startup_of(ranks: dict[int, list[dict]], **kwargs) -> dict:
    (trace,) = build_report(spans_of(job_lines(TRACE, ranks, world_size=len(ranks), **kwargs)))["traces"]
    return trace["startup"]


def findings_of(
    ranks: dict[int, list[dict]], thresholds: Thresholds | None = None, hosts: dict[int, str] | None = None
):
    lines = []
    for rank, spans in ranks.items():
        if rank == 0:
            spans = [span(sc.SPAN_JOB, TRACE, T0, T0, **{sc.JOB_ID: "job-1"})] + spans
        host = (hosts or {}).get(rank, "node-0")
        lines.append(line(resource(rank, world_size=len(ranks), local_world_size=None, host=host), spans))
    result = report(spans_of(lines), thresholds=thresholds)
    return result, [
        f
        for f in result.findings
        if f.kind in (sc.FINDING_SLOW_RANK, sc.FINDING_SLOW_STORAGE, sc.FINDING_RENDEZVOUS_WAIT)
    ]


# One rank's phases ------------------------------------------------------------------------------------------------


def test_phases_of_a_startup_span_add_up_exactly_each_instant_counted_once():
    (rank,) = startup_of({0: startup_rank()})["ranks"]
    assert rank["measured_from"] == "startup span"
    assert rank["seconds"] == 10.0
    # wait [0,2]; broadcast [7,9]; materialize [6.5,6.7]; read: the file span [3,6]; convert [4,6.5] less the read
    # instants [4,6] = 0.5; the rest (the load's [2,3] and [6.7,7], then [9,10]) is other.
    assert rank["phases"] == {
        "open": 0.0, "read": 3.0, "convert": 0.5, "materialize": 0.2, "broadcast": 2.0, "wait": 2.0, "prepare": 0.0,
        "imports": 0.0, "construct": 0.0, "other": 2.3,
    }  # fmt: skip
    assert list(rank["phases"]) == list(STARTUP_PHASES)
    assert sum(rank["phases"].values()) == pytest.approx(rank["seconds"], abs=1e-6)


def test_imports_and_construct_name_the_time_before_the_first_file():
    """Issue 26: the startup's import clock and the load's first file open split what was ``other``: imports from the
    process's start to the end of the first hooked import, and later ones (the second pair, partly inside the load,
    where it wins over construct); construct from the load's start to its first file."""
    spans = startup_rank(wait=(1.5, 2.0), files=[(3.0, 6.0)], convert=None, materialize=None, broadcast=None)
    startup = next(s for s in spans if s["name"] == sc.SPAN_STARTUP)
    startup["attributes"] += attributes({sc.STARTUP_IMPORTS: [at(0.2), at(1.0), at(1.8), at(2.5)]})
    load = next(s for s in spans if s["name"] == sc.SPAN_FROM_PRETRAINED)
    load["attributes"] += attributes({sc.LOAD_FIRST_FILE_OPEN: at(3.0)})
    (rank,) = startup_of({0: spans})["ranks"]
    # imports [0, 1] and [2, 2.5] (its [1.8, 2] is wait's); construct [2.5, 3]; read [3, 6]; other [1, 1.5], [6, 10].
    assert rank["phases"]["imports"] == 1.5 and rank["phases"]["wait"] == 0.5
    assert rank["phases"]["construct"] == 0.5 and rank["phases"]["read"] == 3.0
    assert rank["phases"]["other"] == 4.5
    assert sum(rank["phases"].values()) == pytest.approx(rank["seconds"], abs=1e-6)


def test_overlapping_files_count_once_and_spans_outside_the_startup_are_clipped():
    spans = startup_rank(end=6.0, files=[(3.0, 5.0), (4.0, 6.5)], convert=None, materialize=None, broadcast=None)
    (rank,) = startup_of({0: spans})["ranks"]
    assert rank["seconds"] == 6.0
    assert rank["phases"]["read"] == 3.0  # [3, 6]: the two files overlap in [4, 5], the second ends past the startup
    assert rank["phases"]["other"] == 1.0  # the load's [2, 3]
    assert sum(rank["phases"].values()) == pytest.approx(6.0, abs=1e-6)


def test_open_is_a_file_spans_time_before_its_first_read_span():
    spans = startup_rank(files=[(3.0, 6.0)], convert=None, materialize=None, broadcast=None, wait=None)
    file_span = next(s for s in spans if s["name"] == sc.SPAN_SAFETENSORS_OPEN)
    spans.append(span(sc.SPAN_SAFETENSORS_READ, TRACE, at(3.5), at(4.0), parent=file_span["spanId"]))
    (rank,) = startup_of({0: spans})["ranks"]
    assert rank["phases"]["open"] == 0.5 and rank["phases"]["read"] == 2.5


def test_without_a_startup_span_a_rank_runs_from_its_first_span_to_the_end_of_its_last_load():
    spans = startup_rank(startup_span=False, wait=None, broadcast=None)  # today's traces: the load alone
    (rank,) = startup_of({0: spans})["ranks"]
    assert rank["measured_from"] == "spans"
    assert rank["seconds"] == 5.0  # the load [2, 7]; the job root span does not count as the rank's work
    assert rank["phases"]["read"] == 3.0 and rank["phases"]["other"] == pytest.approx(1.3)


def test_a_job_without_loads_or_startup_spans_has_no_startup_block():
    only_root = [line(resource(0), [span(sc.SPAN_JOB, TRACE, T0, T0, **{sc.JOB_ID: "job-1"})])]
    (trace,) = build_report(spans_of(only_root))["traces"]
    assert "startup" not in trace


# The job: slowest rank, median, slow_rank ---------------------------------------------------------------------------


def slow_reader_job(read_seconds: float, ranks: int = 3) -> dict[int, list[dict]]:
    """``ranks`` ranks of startup 10 s with 3 s of reading, the last one reading ``read_seconds`` instead."""
    job = {rank: startup_rank() for rank in range(ranks - 1)}
    extra = read_seconds - 3.0
    job[ranks - 1] = startup_rank(
        end=10.0 + extra,
        load=(2.0, 7.0 + extra),
        files=[(3.0, 6.0 + extra)],
        convert=(4.0, 6.5 + extra),
        materialize=(6.5 + extra, 6.7 + extra),
        broadcast=(7.0 + extra, 9.0 + extra),
    )
    return job


def test_the_slow_reader_is_a_slow_rank_and_its_read_phase_made_the_difference():
    result, found = findings_of(slow_reader_job(read_seconds=9.0))
    startup = result.traces[0].startup
    assert (startup.seconds, startup.slowest_rank, startup.slowest_phase) == (16.0, 2, "read")
    assert startup.median_rank_seconds == 10.0
    (finding,) = found
    assert (finding.kind, finding.severity, finding.ranks) == ("slow_rank", "warning", [2])
    (evidence,) = finding.evidence["per_rank"]
    assert evidence["phase"] == "read" and evidence["phase_difference_seconds"] == 6.0
    assert (evidence["startup_seconds"], evidence["others_median_seconds"]) == (16.0, 10.0)
    assert "rank 2 took 16.00 s to start, 6.00 s behind the median of the other ranks (10.00 s)" in finding.detail
    assert "its read phase made the difference: 9.00 s against their 3.00 s (3.0x), 6.00 s more" in finding.detail


def test_its_healthy_twin_has_no_startup_finding():
    result, found = findings_of(slow_reader_job(read_seconds=3.0))
    assert found == [] and result.traces[0].startup.seconds == 10.0


@pytest.mark.parametrize(
    "read_seconds, slow",
    [
        (4.5, True),  # its read phase exactly 1.5x the others' 3 s; its startup 11.5 s, 1.5 s behind their 10 s
        (4.49, False),  # 1.497x in its read phase, 1.49 s behind
    ],
)
def test_slow_rank_ratio_at_its_edge_in_the_phase(read_seconds, slow):
    _, found = findings_of(slow_reader_job(read_seconds))
    assert bool(found) is slow


def imports_then_read(read_seconds: float) -> list[dict]:
    """A rank that imports for 11 s (its startup span's import clock), waits 0.3 s for the others, then reads the
    checkpoint for ``read_seconds`` inside a 0.5 s longer load, and is ready 0.2 s later."""
    end_of_read = 11.34 + read_seconds
    spans = startup_rank(
        end=end_of_read + 0.2, wait=(11.0, 11.3), load=(11.3, end_of_read), files=[(11.34, end_of_read)],
        convert=None, materialize=None, broadcast=None,
    )  # fmt: skip
    startup = next(s for s in spans if s["name"] == sc.SPAN_STARTUP)
    startup["attributes"] += attributes({sc.STARTUP_IMPORTS: [at(0.0), at(11.0)]})
    return spans


def test_a_rank_4x_the_other_in_its_read_phase_is_slow_though_11_s_of_imports_dilute_its_startup():
    """Issue 34, point 5: a read phase of 1.87 s against the other rank's 0.46 s (4x, 1.41 s behind) after 11 s of
    the same imports: the whole startup is 1.1x the other's, and no slow_rank was said."""
    result, found = findings_of({0: imports_then_read(0.46), 1: imports_then_read(1.87)})
    fast, slow = result.traces[0].startup.ranks
    assert (fast.phases["imports"], slow.phases["imports"]) == (11.0, 11.0)
    assert (fast.phases["read"], slow.phases["read"]) == (0.46, 1.87)
    assert round(slow.seconds / fast.seconds, 2) == 1.12
    (finding,) = found
    assert (finding.kind, finding.ranks) == ("slow_rank", [1])
    (evidence,) = finding.evidence["per_rank"]
    assert (evidence["phase"], evidence["phase_seconds"], evidence["others_phase_seconds"]) == ("read", 1.87, 0.46)
    assert "its read phase made the difference: 1.87 s against their 0.46 s (4.1x), 1.41 s more" in finding.detail
    assert result.traces[0].startup.slowest_phase == "read"


def test_a_phase_several_times_theirs_but_a_small_part_of_the_lead_does_not_make_a_rank_slow():
    """Rank 1 is 1.2 s behind for its imports (1.1x theirs); its read phase is 4x theirs but 0.06 s of it."""
    fast, slow = imports_then_read(0.02), imports_then_read(0.08)
    startup = next(s for s in slow if s["name"] == sc.SPAN_STARTUP)
    startup["attributes"] = [a for a in startup["attributes"] if a["key"] != sc.STARTUP_IMPORTS]
    startup["attributes"] += attributes({sc.STARTUP_IMPORTS: [at(0.0), at(12.2)]})
    for item in slow:
        if item["name"] == sc.SPAN_STARTUP:
            item["endTimeUnixNano"] = str(int(item["endTimeUnixNano"]) + round(1.2 * S))
        elif item["name"] != sc.SPAN_JOB:
            item["startTimeUnixNano"] = str(int(item["startTimeUnixNano"]) + round(1.2 * S))
            item["endTimeUnixNano"] = str(int(item["endTimeUnixNano"]) + round(1.2 * S))
    result, found = findings_of({0: fast, 1: slow})
    ranks = result.traces[0].startup.ranks
    assert (ranks[1].phases["read"], ranks[1].phases["imports"]) == (0.08, 12.2)
    assert found == []
    assert result.traces[0].startup.slowest_phase == "imports"  # it explains the 1.26 s lead, though not a slow rank


def test_the_headline_names_no_phase_when_the_ranks_differ_by_a_millisecond(tmp_path, capsys):
    """Issue 34, point 5: ranks 1 ms apart were said to be slowest in `wait` (and in `other` on an identical rerun)."""
    job = {0: startup_rank(), 1: startup_rank(end=10.001, wait=(0.0, 2.001))}
    (tmp_path / "job.jsonl").write_text("".join(job_lines(TRACE, job, world_size=2)))
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Startup: 10.001 s (slowest: rank 1), median rank 10.001 s; in seconds:" in out
    assert startup_of(job)["slowest_phase"] is None


def test_slow_rank_needs_a_second_behind_as_well():
    short = {rank: startup_rank(end=1.0, wait=None, load=(0.1, 0.5), files=[(0.2, 0.4)], convert=None,
                                materialize=None, broadcast=None) for rank in range(2)}  # fmt: skip
    short[2] = startup_rank(end=1.9, wait=None, load=(0.1, 1.4), files=[(0.2, 1.3)], convert=None, materialize=None,
                            broadcast=None)  # fmt: skip
    _, found = findings_of(short)
    assert found == []  # 1.9x the median, but only 0.9 s behind it
    _, found = findings_of(short, Thresholds(slow_rank_seconds=0.5))
    assert [f.kind for f in found] == ["slow_rank"]


def test_thresholds_are_overridable_on_the_command_line(tmp_path, capsys):
    lines = job_lines(TRACE, slow_reader_job(read_seconds=6.0), world_size=3)  # its read phase 2x, 3 s behind
    (tmp_path / "job.jsonl").write_text("".join(lines))
    assert main(["report", str(tmp_path), "--format", "json", "--slow-rank-ratio", "2.5"]) == 0
    assert "slow_rank" not in {f["kind"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert main(["report", str(tmp_path), "--format", "json", "--slow-rank-seconds", "3.5"]) == 0
    assert "slow_rank" not in {f["kind"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert main(["report", str(tmp_path), "--format", "json", "--fail-on-findings"]) == 1
    assert "slow_rank" in {f["kind"] for f in json.loads(capsys.readouterr().out)["findings"]}
    with pytest.raises(SystemExit) as bad:
        main(["report", str(tmp_path), "--slow-rank-ratio", "fast"])
    assert bad.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_table_shows_the_startup_and_each_ranks_phases(tmp_path, capsys):
    (tmp_path / "job.jsonl").write_text("".join(job_lines(TRACE, slow_reader_job(read_seconds=9.0), world_size=3)))
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Startup: 16.000 s (slowest: rank 2, read phase), median rank 10.000 s; in seconds:" in out
    assert "WARNING slow_rank  rank 2" in out


# Rendezvous ---------------------------------------------------------------------------------------------------------


def test_a_rank_that_waited_for_a_late_one_is_told_and_for_whom():
    early = startup_rank(wait=(0.0, 8.0), load=(8.0, 9.0), files=[(8.2, 8.8)], convert=None, materialize=None,
                         broadcast=None, end=9.0)  # fmt: skip
    late = startup_rank(wait=(7.9, 8.0), load=(8.0, 9.0), files=[(8.2, 8.8)], convert=None, materialize=None,
                        broadcast=None, end=9.0)  # fmt: skip
    early_too = startup_rank(wait=(0.0, 8.0), load=(8.0, 9.0), files=[(8.2, 8.8)], convert=None, materialize=None,
                             broadcast=None, end=9.0)  # fmt: skip
    result, found = findings_of({0: early, 1: late, 2: early_too})
    (finding,) = found
    assert (finding.kind, finding.severity, finding.ranks) == ("rendezvous_wait", "info", [0, 2])
    assert finding.evidence["waited_for"] == [1]
    # Ranks that waited alike share one sentence (issue 42).
    assert "ranks 0, 2 waited 8.00 s in torch.init_process_group, arriving 7.90 s before rank 1" in finding.detail
    assert result.traces[0].startup.ranks[0].phases["wait"] == 8.0
    _, found = findings_of({0: early, 1: late}, Thresholds(rendezvous_wait_seconds=8.5))
    assert found == []


# Storage per node ---------------------------------------------------------------------------------------------------

GB = 10**9


def cold_rank(files: list[tuple[float, float]], cached: int, fetched: int, stretches: list[tuple[float, float]]):
    path = "/ckpt/model-0.safetensors"
    return startup_rank(
        files=files, cached={path: (GB, cached)}, fetched=(fetched, stretches), convert=None, wait=None, broadcast=None
    )


def test_storage_throughput_per_node_from_the_bytes_fetched_and_when_they_moved():
    """Each node's figure is what its ranks fetched (``loadtrace.io.storage_read_bytes``) over the stretches it moved in
    (``loadtrace.io.storage_read_intervals``); its residency (cold, warm) is the files' own, at first open."""
    fast = cold_rank([(3.0, 4.0)], 0, GB, [(3.0, 4.0)])
    slow = cold_rank([(3.0, 6.0)], 0, GB, [(3.0, 6.0)])
    warm = cold_rank([(3.0, 3.5)], GB, 0, [])
    part = cold_rank([(3.0, 4.0)], GB // 2, GB // 2, [(3.0, 4.0)])
    again = cold_rank([(3.0, 4.0)], 0, GB, [(3.0, 3.5), (3.6, 4.1)])
    hosts = {0: "node-a", 1: "node-b", 2: "node-c", 3: "node-d", 4: "node-e"}
    result, found = findings_of({0: fast, 1: slow, 2: warm, 3: part, 4: again}, hosts=hosts)
    nodes = {n.host: n for n in result.traces[0].startup.nodes}
    assert (nodes["node-a"].checkpoint, nodes["node-a"].storage_bytes, nodes["node-a"].fetch_seconds) == (
        "cold", GB, 1.0,
    )  # fmt: skip
    assert nodes["node-a"].storage_bytes_per_second == 1e9
    assert (nodes["node-b"].checkpoint, nodes["node-b"].storage_bytes_per_second) == ("cold", round(GB / 3, 1))
    assert (nodes["node-c"].checkpoint, nodes["node-c"].storage_bytes, nodes["node-c"].storage_bytes_per_second) == (
        "warm", 0, None,
    )  # fmt: skip
    assert (nodes["node-d"].checkpoint, nodes["node-d"].storage_bytes) == ("partly_cold", GB // 2)
    # Median of the nodes that read from storage: 1e9, 1/3e9, 5e8, 1e9 → 7.5e8; node-b is under half of it.
    assert result.traces[0].startup.storage_bytes_per_second == 7.5e8
    (finding,) = [f for f in found if f.kind == "slow_storage"]
    assert (finding.severity, finding.ranks, finding.bytes) == ("warning", [1], GB)
    assert finding.detail.startswith("node-b fetched 1,000,000,000 B (1.0 GB) from storage in 3.00 s of fetching")
    _, found = findings_of({0: fast, 1: slow, 2: warm, 3: part, 4: again}, Thresholds(slow_storage_ratio=0.4), hosts)
    assert not [f for f in found if f.kind == "slow_storage"]


def test_one_node_reading_from_storage_has_nothing_to_be_slower_than():
    cold = cold_rank([(3.0, 6.0)], 0, GB, [(3.0, 6.0)])
    warm = cold_rank([(3.0, 4.0)], GB, 0, [])
    _, found = findings_of({0: cold, 1: warm}, hosts={0: "node-a", 1: "node-b"})
    assert not [f for f in found if f.kind == "slow_storage"]


def test_a_storage_figure_is_what_was_fetched_never_what_was_cold_and_a_brief_one_has_no_rate():
    """Issue 48: a cold node whose ranks fetched part of the checkpoint says that part; a mostly warm node that
    fetched 1.2 MB in stretches adding to 0.2 s gets no rate, never 1.2 MB over its whole reading time; two ranks
    fetching at once on one node count their time once; a rank without the figure makes the node's unknown."""
    cast = cold_rank([(3.0, 3.013)], 0, 305_000_000, [(3.0, 4.6)])  # fetched during a 1.6 s cast, not in the files
    mostly_warm = cold_rank([(3.0, 3.96)], GB - 1_200_000, 1_200_000, [(3.0, 3.1), (3.8, 3.9)])
    parallel = [cold_rank([(3.0, 5.0)], 0, GB // 2, [(3.0, 5.0)]), cold_rank([(3.0, 5.0)], 0, GB // 2, [(3.5, 5.0)])]
    unknown = [cold_rank([(3.0, 5.0)], 0, GB, [(3.0, 5.0)]), startup_rank(cached={"/ckpt/model-0.safetensors": (1, 0)})]
    ranks = dict(enumerate([cast, mostly_warm, *parallel, *unknown]))
    hosts = {0: "cast", 1: "mostly-warm", 2: "parallel", 3: "parallel", 4: "unknown", 5: "unknown"}
    result, _ = findings_of(ranks, hosts=hosts)
    nodes = {n.host: n for n in result.traces[0].startup.nodes}
    assert (nodes["cast"].storage_bytes, nodes["cast"].fetch_seconds) == (305_000_000, 1.6)
    assert nodes["cast"].storage_bytes_per_second == round(305_000_000 / 1.6, 1)
    assert (nodes["mostly-warm"].checkpoint, nodes["mostly-warm"].storage_bytes) == ("partly_cold", 1_200_000)
    assert (nodes["mostly-warm"].fetch_seconds, nodes["mostly-warm"].storage_bytes_per_second) == (0.2, None)
    assert (nodes["parallel"].storage_bytes, nodes["parallel"].fetch_seconds) == (GB, 2.0)
    assert (nodes["unknown"].checkpoint, nodes["unknown"].storage_bytes, nodes["unknown"].fetch_seconds) == (
        "cold", None, None,
    )  # fmt: skip


def test_broadcast_bytes_do_not_disturb_the_phases():
    spans = startup_rank(broadcast_bytes={sc.BROADCAST_BYTES_SENT: 1000})
    (rank,) = startup_of({0: spans})["ranks"]
    assert rank["phases"]["broadcast"] == 2.0


def test_a_zero3_startup_shows_deepspeed_initialisation_as_prepare_and_gathering_as_broadcast():
    root = span_id()
    spans = [
        span(sc.SPAN_STARTUP, TRACE, at(0), at(10), sid=root),
        span(sc.SPAN_INIT_PROCESS_GROUP, TRACE, at(0), at(1), parent=root),
        span(sc.SPAN_ZERO_INIT, TRACE, at(1), at(3), parent=root),  # the model built partitioned
        span(sc.SPAN_FROM_PRETRAINED, TRACE, at(3), at(6), parent=root, **{sc.STRATEGY: "zero3"}),
        span(sc.SPAN_GATHERED_PARAMETERS, TRACE, at(4), at(5), parent=root),
        span(sc.SPAN_DEEPSPEED_INITIALIZE, TRACE, at(6), at(9.5), parent=root),
    ]
    (rank,) = startup_of({0: spans})["ranks"]
    assert rank["phases"] == {
        "open": 0.0, "read": 0.0, "convert": 0.0, "materialize": 0.0, "broadcast": 1.0, "wait": 1.0, "prepare": 5.5,
        "imports": 0.0, "construct": 0.0, "other": 2.5,
    }  # fmt: skip


def crashed_before_its_load(ready: float, raised: float) -> list[dict]:
    """A rank whose own code raised after the rendezvous, before any load (issue 48): its startup, awaiting a load
    that never came, ended at the exit, at its last activity (the rendezvous), and the exception came after."""
    root = span_id()
    return [
        span(sc.SPAN_STARTUP, TRACE, at(0), at(ready), sid=root, **{sc.STARTUP_END: sc.STARTUP_END_EXIT}),
        span(sc.SPAN_INIT_PROCESS_GROUP, TRACE, at(0), at(ready), parent=root),
        span(sc.SPAN_EXCEPTION, TRACE, at(raised), at(raised), **{sc.EXCEPTION_TYPE: "RuntimeError"}),
    ]


def test_a_rank_that_crashed_in_its_own_code_before_it_was_ready_is_shown_never_judged():
    """Its 2 s "startup" is its rendezvous: the rank that loaded in 10 s was said slow against it (issue 48, the
    closing line's "rank 1 slow" of a job that crashed in its own code)."""
    result, found = findings_of({0: crashed_before_its_load(2.0, 4.0), 1: startup_rank(broadcast=None)})
    assert found == []
    (trace,) = result.traces
    assert trace.startup is not None and trace.startup.slowest_rank == 1 and trace.startup.median_rank_seconds == 10.0
    assert [rank.rank for rank in trace.startup.ranks] == [0, 1]  # shown


def test_an_exception_after_a_rank_was_ready_leaves_it_judged():
    """A plain rank whose startup ended at its load, then raised in its own code: it was ready, and is judged."""
    ready = startup_rank(broadcast=None)
    ready[0]["attributes"] += attributes({sc.STARTUP_END: sc.STARTUP_END_LOAD})
    ready.append(span(sc.SPAN_EXCEPTION, TRACE, at(12), at(12), **{sc.EXCEPTION_TYPE: "RuntimeError"}))
    result, _ = findings_of({0: ready, 1: startup_rank(broadcast=None, end=13.0)})
    (trace,) = result.traces
    assert trace.startup is not None and trace.startup.median_rank_seconds == 11.5


def test_a_startup_no_rank_of_which_is_judged_says_so_above_its_table(tmp_path, capsys):
    """Issue 48, point 5: every rank died loading (their startups ended by the launcher's witness): the header read
    "Startup: - s (slowest: a rank without a number)" above a table giving each its seconds."""
    ranks = {rank: startup_rank(broadcast=None, end=11.744 - rank) for rank in (0, 1)}
    for spans in ranks.values():
        spans[0]["attributes"] += attributes({sc.EXIT_SOURCE: sc.EXIT_SOURCE_LAUNCHER})
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(job_lines(TRACE, ranks)) + "\n")
    assert main(["report", str(path)]) == 0
    table = capsys.readouterr().out
    assert "a rank without a number" not in table and "Startup: - s" not in table, table
    assert (
        "Startup: not judged (no rank was whole and ready: each died, failed, was stopped or lost spans first)" in table
    )
    assert "\n0      11.744 " in table, table


def test_load_s_says_the_model_class_s_import_before_it_is_under_imports():
    """Issue 48, point 5, on a recorded real run (docs/samples/fsdp524 as recorded on 2026-12-01, kept in
    tests/fixtures/recorded): ``AutoModelForCausalLM.from_pretrained``
    imports the model's class (4.5 s here) before the class's own ``from_pretrained``, where ``load s`` (0.439 s)
    starts; a person who timed the call read nothing of it where ``load s`` stands."""
    from support.paths import REPO

    from loadtrace.analysis.sources import read_files
    from loadtrace.cli.render import report_table

    result = report(read_files(str(REPO / "tests" / "fixtures" / "recorded" / "fsdp524")))
    seconds = {rank.rank: (rank.load_seconds, rank.class_import_seconds) for rank in result.ranks}
    assert seconds == {0: (0.438709, 4.537272), 1: (0.231587, 4.582213)}, seconds
    table = report_table(result)
    assert (
        "load s starts at the model class's own from_pretrained: importing that class just before it (AutoModel does)"
        " took 4.537-4.582 s, counted under Startup's imports." in " ".join(table.split())
    ), table
