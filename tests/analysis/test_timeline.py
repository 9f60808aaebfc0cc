"""Promise (issue 15): ``loadtrace timeline`` draws one job as lanes of bars, every span of every rank, generic over
span names; its Chrome trace-event JSON is well formed for Perfetto and chrome://tracing; bad input is one line.

Over the stored real runs (``fixtures/spans``: FSDP with findings, a rank SIGKILLed with only its state file left) and
a 512-rank job made from one (``support/big_job.py``). The page in a real browser: test_timeline_browser.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from support.big_job import write_big_job
from support.paths import FIXTURES, SPANS

from loadtrace import semconv as sc
from loadtrace.analysis.nodes import job_nodes
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import Span, read_files
from loadtrace.analysis.startup import job_startup
from loadtrace.analysis.timeline import ERROR, FAILED, INCOMPLETE, KILLED, OK, SLOW, UNFINISHED, timeline
from loadtrace.cli import main
from loadtrace.cli.render_timeline import chrome_trace, html_page, lane_detail, nested_tracks


def job_of(folder: Path):
    spans = read_files(folder)
    (job,) = jobs_from_spans(spans.spans, spans.states)
    return job, spans


def test_every_span_of_every_rank_is_a_bar_with_its_bytes():
    job, spans = job_of(SPANS / "fsdp524")
    picture = timeline(job)
    assert [lane.rank for lane in picture.lanes] == [0, 1] and [node.host for node in picture.nodes] == ["vm"]
    for lane in picture.lanes:
        own = [
            s
            for s in spans.spans
            if s.resource.get(sc.RANK) == lane.rank and s.name not in (sc.SPAN_JOB, sc.SPAN_RANK_EXIT)
        ]
        assert sorted(bar.name for bar in lane.bars) == sorted(s.name for s in own)
        by_start = {(s.name, s.start_ns - job.start_ns): s for s in own}
        for bar in lane.bars:
            span = by_start[(bar.name, bar.start_ns)]
            assert bar.end_ns - bar.start_ns == span.end_ns - span.start_ns
            if sc.READ_BYTES in span.attributes:
                assert bar.bytes == span.attributes[sc.READ_BYTES]
            assert bar.attributes == span.attributes
    loads = [bar for lane in picture.lanes for bar in lane.bars if bar.name == sc.SPAN_FROM_PRETRAINED]
    assert [bar.bytes for bar in loads] == [1_009_152, 1_009_152]  # the checkpoint's tensor bytes, read by each rank
    # Findings are the report's, and mark the ranks they name.
    assert {f.kind for f in picture.findings} == {
        sc.FINDING_DUPLICATE_CHECKPOINT_READ,
        sc.FINDING_NONZERO_RANK_MATERIALIZATION,
        sc.FINDING_DUPLICATE_CONVERSION,
    }
    assert picture.lanes[0].findings == [] and len(picture.lanes[1].findings) == 3
    assert picture.lanes[1].warnings == picture.lanes[1].findings  # all three are warnings


def test_an_info_finding_names_a_lane_without_marking_it_as_a_warning():
    """Issue 34, point 8: the user's plain job (rank 1's replica, an ``info`` finding the report calls expected) had
    rank 1 marked with the warning sign."""
    job, _ = job_of(FIXTURES / "llama524")
    picture = timeline(job)
    assert [(f.kind, f.severity) for f in picture.findings] == [(sc.FINDING_REPLICATED_LOAD, "info")]
    assert [(lane.findings, lane.warnings) for lane in picture.lanes] == [([], []), ([sc.FINDING_REPLICATED_LOAD], [])]
    page = html_page(picture)
    assert '"findings":["replicated_load"],"warnings":[]' in page
    assert 'if (lane.warnings.length) label.appendChild(el("span", "\\u26a0 " + lane.warnings.length' in page


def test_a_child_sits_below_its_parent_and_overlapping_spans_never_share_a_row():
    job, _ = job_of(SPANS / "zero3_524")
    for lane in timeline(job).lanes:
        rows = defaultdict(list)
        for bar in lane.bars:
            rows[bar.row].append(bar)
        for bars in rows.values():
            bars.sort(key=lambda b: b.start_ns)
            assert all(a.end_ns <= b.start_ns for a, b in zip(bars, bars[1:], strict=False))
        (load,) = [bar for bar in lane.bars if bar.name == sc.SPAN_FROM_PRETRAINED]
        assert load.row == 0 and all(bar.row > 0 for bar in lane.bars if bar is not load)
        assert lane.rows == 1 + max(bar.row for bar in lane.bars)


def test_a_killed_rank_is_marked_and_its_open_load_rebuilt_from_its_state_file():
    job, spans = job_of(SPANS / "killed524")
    picture = timeline(job)
    survivor, dead = picture.lanes
    assert survivor.state == OK and survivor.death_ns is None
    assert dead.state == INCOMPLETE and dead.during == sc.SPAN_CONVERT  # no launcher witness: how it died is unknown
    (state,) = [s.state for s in spans.states if s.state.rank == 1]
    (bar,) = dead.bars
    assert bar.status == UNFINISHED and bar.name == sc.SPAN_FROM_PRETRAINED
    assert bar.bytes == state.totals().read_bytes == 735_872
    assert bar.start_ns == state.load_start_ns - job.start_ns
    assert bar.end_ns == dead.death_ns == state.updated_ns - job.start_ns
    assert sc.FINDING_INCOMPLETE_RANK in dead.findings


def test_a_rank_the_launcher_saw_killed_says_how():
    """The launcher's witness span (what a traced launcher writes when a worker dies) in place of the state file."""
    spans = read_files(SPANS / "killed524")
    (state,) = [s for s in spans.states if s.state.rank == 1]
    zero = min(span.start_ns for span in spans.spans)
    resource = {sc.RANK: 1, sc.HOST_NAME: "vm", sc.PROCESS_PID: state.state.pid, sc.WORLD_SIZE: 2}
    witness = Span(
        trace_id=spans.spans[0].trace_id,
        span_id="c3" * 8,
        parent_span_id="",
        name=sc.SPAN_RANK_EXIT,
        start_ns=zero + 50_000_000,
        end_ns=zero + 90_000_000,
        attributes={
            sc.EXIT_SIGNAL: "SIGKILL",
            sc.EXIT_OOM_KILLED: True,
            sc.EXIT_STATUS: "loading",
            sc.EXIT_DURING: sc.SPAN_CONVERT,
            sc.EXIT_LOAD: sc.SPAN_FROM_PRETRAINED,
            sc.READ_BYTES: 4096,
        },
        resource=resource,
    )
    (job,) = jobs_from_spans([*spans.spans, witness], [])
    dead = timeline(job).lanes[1]
    assert dead.state == KILLED and lane_detail(dead) == "killed: SIGKILL (OOM) during transformers.convert"
    (bar,) = dead.bars
    assert (bar.status, bar.bytes) == (UNFINISHED, 4096)
    assert (bar.start_ns, bar.end_ns, dead.death_ns) == (50_000_000, 90_000_000, 90_000_000)


def test_a_rank_whose_load_raised_is_marked_failed_and_its_span_an_error():
    spans = read_files(SPANS / "plain524")
    failing = [
        replace(s, status_code=2, attributes={**s.attributes, sc.ERROR_TYPE: "OSError"})
        if s.name == sc.SPAN_FROM_PRETRAINED and s.resource.get(sc.RANK) == 1
        else s
        for s in spans.spans
    ]
    (job,) = jobs_from_spans(failing, [])
    lane = timeline(job).lanes[1]
    assert lane.state == FAILED and lane_detail(lane) == "failed: OSError" and lane.death_ns is None
    assert [bar.status for bar in lane.bars if bar.name == sc.SPAN_FROM_PRETRAINED] == [ERROR]
    assert {f.kind for f in timeline(job).findings} >= {sc.FINDING_FAILED_LOAD}


def test_span_names_it_has_never_seen_are_drawn_like_any_other():
    """Startup phases (issue 14) and whatever comes next need no code here."""
    job, _ = job_of(SPANS / "plain524")
    rank = job.ranks[0]
    load = next(s for s in rank.spans if s.name == sc.SPAN_FROM_PRETRAINED)
    made_up = [
        replace(load, name="accelerate.prepare_model", span_id="a1" * 8, attributes={"x.bytes": 5}),
        replace(load, name="deepspeed.zero_init", span_id="b2" * 8, attributes={sc.READ_BYTES: 7}),
    ]
    rank.spans.extend(made_up)
    (lane, _) = timeline(job).lanes
    names = [bar.name for bar in lane.bars]
    assert "accelerate.prepare_model" in names and "deepspeed.zero_init" in names
    assert next(bar for bar in lane.bars if bar.name == "deepspeed.zero_init").bytes == 7


def test_a_slow_rank_and_a_cut_rank_of_a_512_rank_job(tmp_path):
    job, _ = job_of(write_big_job(tmp_path / "big"))
    picture = timeline(job)
    assert len(picture.lanes) == 512 and len(picture.nodes) == 64 and picture.missing_ranks == []
    states = {lane.rank: lane.state for lane in picture.lanes}
    assert states[7] == SLOW and states[300] == INCOMPLETE
    assert {state for rank, state in states.items() if rank not in (7, 300)} == {OK}
    # Alike ranks form one group (the page shows it as one lane); rank 0 (no finding of the others), the slow and the
    # cut rank stand out.
    (group,) = picture.groups
    assert group.ranks == [r for r in range(1, 512) if r not in (7, 300)] and group.hosts == 64
    assert {lane.rank for lane in picture.lanes if lane.group is None} == {0, 7, 300}
    assert group.shown in group.ranks and group.findings == sorted(set(picture.lanes[1].findings))


def test_nodes_in_natural_order_node2_before_node10(tmp_path):
    job, _ = job_of(write_big_job(tmp_path / "big", ranks=12, slow=-1, killed=-1, ranks_per_node=1))
    for rank in job.ranks:
        rank.host = f"node{rank.rank}"
    natural = [f"node{n}" for n in range(12)]
    assert [node.host for node in timeline(job).nodes] == natural
    # The report's nodes too: its I/O lines and its startup's storage.
    assert [node.host for node in job_nodes(job, 0)] == natural
    assert [node.host for node in job_startup(job).nodes] == natural
    assert timeline(job).groups[0].ranks == list(range(1, 12))  # 11 alike: at least MIN_GROUP


def check_trace_events(trace: dict) -> None:
    """The trace-event format's rules that Perfetto's and chrome://tracing's importers rely on."""
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] in ("ms", "ns")
    json.dumps(trace, allow_nan=False)
    for event in trace["traceEvents"]:
        assert isinstance(event["name"], str) and event["ph"] in ("X", "M", "i")
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            assert isinstance(event["args"], dict)
        else:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0 and isinstance(event["args"], dict)
        if event["ph"] == "i":
            assert event["s"] in ("g", "p", "t")
    # Complete events of one thread nest: each one ends before the one around it does.
    threads = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            threads[(event["pid"], event["tid"])].append(event)
    for events in threads.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for event in events:
            while stack and stack[-1] <= event["ts"]:
                stack.pop()
            end = event["ts"] + event["dur"]
            assert not stack or end <= stack[-1] + 1e-6, f"{event['name']} overlaps without nesting"
            stack.append(end)


@pytest.mark.parametrize("fixture", ["fsdp524", "killed524", "zero3_524"])
def test_chrome_trace_holds_every_rank_and_phase(fixture):
    job, spans = job_of(SPANS / fixture)
    trace = chrome_trace(timeline(job))
    check_trace_events(trace)
    events = trace["traceEvents"]
    threads = [e["args"]["name"] for e in events if e["name"] == "thread_name"]
    for rank in job.ranks:
        assert any(re.match(rf"rank {rank.rank}\b", name) for name in threads), threads
    phases = {e["name"] for e in events if e["ph"] == "X"}
    recorded = {s.name for s in spans.spans} - {sc.SPAN_JOB, sc.SPAN_RANK_EXIT}
    assert recorded <= phases
    processes = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert processes == ["node vm"]


def test_chrome_trace_of_a_killed_rank_says_so():
    job, _ = job_of(SPANS / "killed524")
    events = chrome_trace(timeline(job))["traceEvents"]
    assert any(e["name"] == "thread_name" and e["args"]["name"].startswith("rank 1 (incomplete") for e in events)
    assert any(e["ph"] == "i" and "during transformers.convert" in e["name"] for e in events)
    assert any(e["ph"] == "X" and e["args"].get("status") == "unfinished" for e in events)


def test_overlapping_spans_go_to_threads_where_they_nest():
    job, _ = job_of(SPANS / "fsdp524")
    lane = timeline(job).lanes[0]
    tracks = nested_tracks(lane.bars)
    assert max(tracks) >= 1  # its files are read on several threads at once
    trace = chrome_trace(timeline(job))
    check_trace_events(trace)


def test_the_page_loads_nothing_from_anywhere():
    job, _ = job_of(SPANS / "fsdp524")
    page = html_page(timeline(job))
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.IGNORECASE)
    assert not re.search(r"<link\b|@import|url\(|<iframe\b|<img\b", page, re.IGNORECASE)
    assert "/*TIMELINE_DATA*/" not in page


def test_no_text_in_the_spans_can_end_the_pages_script():
    job, _ = job_of(SPANS / "plain524")
    span = job.ranks[0].spans[1]
    span.attributes[sc.FILE_PATH] = "</script><script>alert(1)</script>"
    page = html_page(timeline(job))
    assert page.count("</script>") == 2  # the data's and the code's, nothing from the span


def test_numbers_json_has_no_words_for_stay_valid_json():
    job, _ = job_of(SPANS / "plain524")
    job.ranks[0].spans[1].attributes.update({"x.nan": float("nan"), "x.inf": [float("-inf")]})
    picture = timeline(job)
    data = re.search(r'<script id="timeline-data" type="application/json">(.*?)</script>', html_page(picture), re.S)
    json.loads(data.group(1), parse_constant=lambda word: pytest.fail(f"{word} in the page's data"))
    check_trace_events(chrome_trace(picture))


def test_ranks_missing_from_the_source_are_named():
    job, _ = job_of(next((SPANS / "fsdp524").glob("rank00000-*.jsonl")))
    picture = timeline(job)
    assert [lane.rank for lane in picture.lanes] == [0] and picture.world_size == 2 and picture.missing_ranks == [1]


def command(capsys, monkeypatch, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``loadtrace ARGS`` in this process (from ``cwd``): its exit code and what it printed."""
    if cwd is not None:
        monkeypatch.chdir(cwd)
    try:
        code = main(list(args))
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


def test_the_command_writes_the_page_and_the_chrome_json(tmp_path, capsys, monkeypatch):
    page = tmp_path / "job.html"
    result = command(capsys, monkeypatch, "timeline", str(SPANS / "killed524"), "-o", str(page))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {page}: 2 ranks on 1 node\n" and result.stderr == ""
    assert page.read_text().startswith("<!doctype html>")
    result = command(capsys, monkeypatch, "timeline", str(SPANS / "killed524"), "--format", "chrome", "-o", "-")
    assert result.returncode == 0, result.stderr
    check_trace_events(json.loads(result.stdout))
    result = command(capsys, monkeypatch, "timeline", str(SPANS / "fsdp524"), "--format", "chrome", cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "cc2eef90-40e1-446d-ac10-d780c6600db0.trace.json").is_file()


def test_a_source_of_several_jobs_needs_job(tmp_path, capsys, monkeypatch):
    result = command(capsys, monkeypatch, "timeline", str(SPANS), "-o", str(tmp_path / "x.html"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "holds 6 jobs" in result.stderr and "--job ID" in result.stderr
    result = command(capsys, monkeypatch, "timeline", str(SPANS), "--job", "fb0f766f", "-o", str(tmp_path / "x.html"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and (tmp_path / "x.html").is_file()


@pytest.mark.parametrize(
    "args, says",
    [
        (["/no/such/dir", "-o", "x.html"], "no such file or directory"),
        ([str(SPANS / "fsdp524"), "--job", "nope", "-o", "x.html"], "no job of"),
        ([str(SPANS / "fsdp524"), "-o", "/no/such/dir/x.html"], "No such file or directory"),
        ([str(SPANS / "fsdp524"), "--format", "svg"], "invalid choice"),
        ([], "loadtrace-traces: no such folder; give a SOURCE"),  # the default folder, not here
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path, capsys, monkeypatch):
    result = command(capsys, monkeypatch, "timeline", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("loadtrace: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr
