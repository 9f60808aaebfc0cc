"""Promise (issue 26): a dead rank's open startup, loads and phases are ended by its launcher's witness, under their
own ids, so every span's parent is in the trace; the report counts none of them.

Unit level: the state file's scope records (the span id written last and cleared first), the witness's stand-in
spans, and the analysis leaving them out. The real kills (two nodes, teardown, OOM; files and OTLP) are in
test_orphan_spans.py and test_dying_jobs.py.
"""

from __future__ import annotations

import json
import signal
import struct

from support.otlp_files import read_lines
from support.paths import SPANS
from support.witnessing import DEAD_PID, RANK1_ENV

from loadtrace import semconv, statefile
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files
from loadtrace.instrumentation.beside import witness
from loadtrace.instrumentation.settings import Settings

FIXTURES = SPANS
TRACE = 0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0


def test_open_scopes_round_trip_and_free_again(tmp_path):
    writer = statefile.Writer(str(tmp_path / "s.state"), {"pid": 7}, {})
    startup = writer.open_scope(semconv.SPAN_STARTUP, TRACE, 2**63 + 5, 100, 2**64 - 1)  # ids past int64: unsigned
    load = writer.open_scope(semconv.SPAN_FROM_PRETRAINED, TRACE, 2**64 - 1, 200, 42)
    state = statefile.read(tmp_path / "s.state")
    assert state is not None
    assert [(s.name, s.trace_id, s.parent_span_id, s.start_ns, s.span_id) for s in state.open_scopes] == [
        (semconv.SPAN_STARTUP, TRACE, 2**63 + 5, 100, 2**64 - 1),
        (semconv.SPAN_FROM_PRETRAINED, TRACE, 2**64 - 1, 200, 42),
    ]
    assert load is not None and startup is not None
    writer.close_scope(load)
    assert [s.name for s in statefile.read(tmp_path / "s.state").open_scopes] == [semconv.SPAN_STARTUP]
    assert writer.open_scope("again", TRACE, 1, 300, 43) == load  # a freed record is reused


def test_a_record_without_its_span_id_is_not_read_as_one(tmp_path):
    """The span id is written last: a record caught half-written (the process killed in between) reads as free."""
    writer = statefile.Writer(str(tmp_path / "s.state"), {"pid": 7}, {})
    index = writer.open_scope(semconv.SPAN_FROM_PRETRAINED, TRACE, 9, 200, 42)
    assert index is not None
    offset = statefile.SCOPES_OFFSET + index * statefile._SCOPE.size + statefile._SPAN_ID_OFFSET
    struct.pack_into("<q", writer._header, offset, 0)
    assert statefile.read(tmp_path / "s.state").open_scopes == []


def test_when_every_record_is_taken_no_more_are_kept(tmp_path):
    writer = statefile.Writer(None, {"pid": 7}, {})
    taken = [writer.open_scope(f"phase-{i}", TRACE, 1, 10, i + 1) for i in range(statefile.SCOPE_RECORDS)]
    assert None not in taken and writer.open_scope("one more", TRACE, 1, 10, 99) is None


def test_the_witness_ends_each_open_scope_in_its_place(tmp_path, witness_dir):
    traces = tmp_path / "traces"
    traces.mkdir()
    trace_id, root_id = semconv.job_trace_ids("job-7")
    startup_id, load_id = 0xABC, 0xDEF
    state_path = traces / f"rank00001-h-{DEAD_PID}.state"
    identity = {"pid": DEAD_PID, "rank": 1, "local_rank": 1, "world_size": 2, "local_world_size": 2}
    texts = {"job_id": "job-7", "host": "node-3", "trace_file": str(traces / f"rank00001-h-{DEAD_PID}.jsonl")}
    writer = statefile.Writer(str(state_path), identity, texts)
    writer.load_started()
    writer["loads_open"], writer["status"] = 1, statefile.STATUS_LOADING
    writer.open_scope(semconv.SPAN_STARTUP, trace_id, root_id, 1_000, startup_id)
    writer.open_scope(semconv.SPAN_FROM_PRETRAINED, trace_id, startup_id, 2_000, load_id)
    writer.close()
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))

    witness.Witness(Settings(exit_timeout_s=5)).witness([witness.Death(DEAD_PID, -signal.SIGKILL, RANK1_ENV)])

    (written,) = traces.glob("witness-*.jsonl")
    spans = {span["name"]: (resource, span) for resource, span in read_lines(written)}
    assert set(spans) == {semconv.SPAN_RANK_EXIT, semconv.SPAN_STARTUP, semconv.SPAN_FROM_PRETRAINED}
    exit_resource, exit_span = spans[semconv.SPAN_RANK_EXIT]
    for name, span_id, parent, start in (
        (semconv.SPAN_STARTUP, startup_id, root_id, 1_000),
        (semconv.SPAN_FROM_PRETRAINED, load_id, startup_id, 2_000),
    ):
        resource, span = spans[name]
        assert resource == exit_resource, "the dead rank's own resource"
        assert (span["traceId"], span["spanId"], span["parentSpanId"]) == (
            f"{trace_id:032x}",
            f"{span_id:016x}",
            f"{parent:016x}",
        )
        assert int(span["startTimeUnixNano"]) == start and span["endTimeUnixNano"] == exit_span["endTimeUnixNano"]
        assert span["status"] == {"code": 2, "message": exit_span["status"]["message"]}
        assert span["attributes"] == {semconv.EXIT_SIGNAL: "SIGKILL", semconv.EXIT_SOURCE: "launcher"}


def test_the_report_counts_none_of_the_spans_the_witness_ended(tmp_path):
    """A stand-in load beside a real job changes no number of the report. (A stand-in startup does, by design: a dead
    rank's startup is the one its witness ended, tests/analysis/test_dead_rank_figures.py.)"""
    source = FIXTURES / "killed524"
    before = build_report(read_files(source))
    lines = [path.read_text() for path in sorted(source.glob("*.jsonl"))]
    one = json.loads(lines[0].splitlines()[0])
    resource_spans = one["resourceSpans"][0]
    span = resource_spans["scopeSpans"][0]["spans"][0]
    ended = [
        {
            **span,
            "spanId": f"{0xFEED + i:016x}",
            "name": name,
            "attributes": [
                {"key": semconv.EXIT_SOURCE, "value": {"stringValue": "launcher"}},
                {"key": semconv.EXIT_SIGNAL, "value": {"stringValue": "SIGKILL"}},
            ],
            "status": {"code": 2, "message": "SIGKILL"},
        }
        for i, name in enumerate((semconv.SPAN_FROM_PRETRAINED,))
    ]
    extra = {"resourceSpans": [{**resource_spans, "scopeSpans": [{"scope": {"name": "loadtrace"}, "spans": ended}]}]}
    for path in sorted(source.iterdir()):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "witness-extra.jsonl").write_text(json.dumps(extra) + "\n")
    assert build_report(read_files(tmp_path)) == before
