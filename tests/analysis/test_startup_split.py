"""Promise: the startup split is one definition (``loadtrace/startup_split.py``) that the rank applies in-job, through
the span processor that keeps what it needs (``instrumentation/counting/phases.py``), and the report applies to the
spans it reads. Here on hand-made timelines: overlaps go to the higher-priority phase, a span still open when the
startup ends counts up to that end, other traces and later spans are not the startup's, and a failure costs the split
alone."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from loadtrace import semconv
from loadtrace.instrumentation import _log
from loadtrace.instrumentation.counting import phases as phases_module
from loadtrace.instrumentation.counting.phases import PhaseRecorder
from loadtrace.startup_split import STARTUP_PHASES, PhaseSpan, split

MS = 1_000_000


def span(name: str, start_ms: int, end_ms: int, span_id: int = 0, parent: int = 0, **attributes) -> PhaseSpan:
    return PhaseSpan(name, start_ms * MS, end_ms * MS, span_id, parent, attributes)


def test_overlaps_go_to_the_first_phase_of_the_priority_and_the_phases_add_up():
    found = split(
        (0, 100 * MS),
        [
            span(semconv.SPAN_INIT_PROCESS_GROUP, 0, 10),
            span(semconv.SPAN_FROM_PRETRAINED, 10, 80, 1, **{semconv.LOAD_FIRST_FILE_OPEN: 20 * MS}),
            span(semconv.SPAN_SAFETENSORS_OPEN, 20, 60, 2, 1),
            span(semconv.SPAN_CONVERT, 50, 70),  # 50-60 is read's (read comes first), 60-70 convert's
            span(semconv.SPAN_ACCELERATE_PREPARE, 75, 120),  # clipped at the startup's end
        ],
    )
    assert found == {
        "open": 0,
        "read": 40 * MS,
        "convert": 10 * MS,
        "materialize": 0,
        "broadcast": 0,
        "wait": 10 * MS,
        "prepare": 25 * MS,
        "imports": 0,
        "construct": 10 * MS,
        "other": 5 * MS,
    }
    assert sum(found.values()) == 100 * MS


def test_a_file_before_its_first_read_span_is_open_time_and_imports_come_from_the_startup():
    found = split(
        (0, 50 * MS),
        [
            span(semconv.SPAN_STARTUP, 0, 50, 9, **{semconv.STARTUP_IMPORTS: [0, 5 * MS, 30 * MS, 32 * MS]}),
            span(semconv.SPAN_SAFETENSORS_OPEN, 10, 30, 2),
            span(semconv.SPAN_SAFETENSORS_READ, 14, 20, 3, 2),
            span(semconv.SPAN_SAFETENSORS_READ, 12, 13, 4, 2),
        ],
    )
    assert (found["open"], found["read"], found["imports"]) == (2 * MS, 18 * MS, 7 * MS)
    assert found["other"] == 50 * MS - 27 * MS


def recorder_and_tracer() -> tuple[PhaseRecorder, trace.Tracer]:
    recorder = PhaseRecorder()
    provider = TracerProvider()
    provider.add_span_processor(recorder)
    return recorder, provider.get_tracer("test")


def test_the_recorder_gives_the_split_of_its_traces_spans_with_open_ones_cut_at_the_end():
    recorder, tracer = recorder_and_tracer()
    startup = tracer.start_span(semconv.SPAN_STARTUP, start_time=0)
    context = trace.set_span_in_context(startup)
    tracer.start_span(semconv.SPAN_INIT_PROCESS_GROUP, context, start_time=10 * MS).end(end_time=20 * MS)
    still_open = tracer.start_span(semconv.SPAN_ACCELERATE_PREPARE, context, start_time=70 * MS)
    tracer.start_span(semconv.SPAN_CONVERT, start_time=30 * MS).end(end_time=40 * MS)  # another trace: not counted
    tracer.start_span(semconv.SPAN_JOB, context, start_time=0).end(end_time=100 * MS)  # not a phase
    carried = recorder.split(startup, 100 * MS, None)
    assert carried is not None
    assert dict(zip(STARTUP_PHASES, carried, strict=True)) == {
        **dict.fromkeys(STARTUP_PHASES, 0),
        "wait": 10 * MS,
        "prepare": 30 * MS,
        "other": 60 * MS,
    }
    recorder.stop()  # the startup is over for good: nothing more is kept, nothing more is said
    still_open.end(end_time=110 * MS)
    tracer.start_span(semconv.SPAN_CONVERT, context, start_time=0).end(end_time=MS)
    assert recorder.split(startup, 200 * MS, None) is None


def test_a_startup_that_keeps_too_many_spans_leaves_its_split_out(monkeypatch):
    monkeypatch.setattr(phases_module, "MAX_KEPT", 3)
    recorder, tracer = recorder_and_tracer()
    startup = tracer.start_span(semconv.SPAN_STARTUP, start_time=0)
    context = trace.set_span_in_context(startup)
    for index in range(3):
        tracer.start_span(semconv.SPAN_CONVERT, context, start_time=index * MS).end(end_time=(index + 1) * MS)
    assert recorder.split(startup, 10 * MS, None) is not None
    startup = tracer.start_span(semconv.SPAN_STARTUP, start_time=0)  # a later startup in the same process
    context = trace.set_span_in_context(startup)
    for index in range(4):
        tracer.start_span(semconv.SPAN_CONVERT, context, start_time=index * MS).end(end_time=(index + 1) * MS)
    assert recorder.split(startup, 10 * MS, None) is None
    assert not recorder.recording


def test_a_split_that_fails_is_left_out_with_one_line_and_nothing_raised(monkeypatch, capsys):
    recorder, tracer = recorder_and_tracer()
    startup = tracer.start_span(semconv.SPAN_STARTUP, start_time=0)

    def broken(*args):
        raise ValueError("no")

    monkeypatch.setattr(phases_module, "split", broken)
    monkeypatch.setattr(_log, "_said", set())
    assert recorder.split(startup, MS, None) is None
    assert recorder.split(startup, MS, None) is None
    assert capsys.readouterr().err.count("the startup's phase split is left out: ValueError: no") == 1
