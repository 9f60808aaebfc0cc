"""The file reader skips what it cannot read, counts it, and never raises: a rank killed mid-write, a corrupt line,
bytes that are not UTF-8, JSON of the wrong shape, a line too long to hold."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analysis_otlp import T0, line, resource, span, trace_id_of, write_lines

from loadtrace.analysis.sources import SourceError, SpanSet, decode_line, read_files, read_stream
from loadtrace.analysis.sources import files as sources

TRACE = trace_id_of("sources")


def good_line(name: str = "safetensors.open") -> str:
    return line(resource(0), [span(name, TRACE, T0, T0 + 10, **{"loadtrace.read.bytes": 7})])


def test_a_truncated_last_line_is_skipped_and_counted(tmp_path):
    text = good_line() + good_line()[:-40]  # the rank was killed mid-write
    result = read_files(write_lines(tmp_path / "rank-1.jsonl", [text]))
    assert (len(result.spans), result.skipped_lines) == (1, 1)


@pytest.mark.parametrize(
    "bad",
    [
        b"not json at all\n",
        b"\xff\xfe\x00garbage \x80\x81\n",  # not UTF-8
        b"[1, 2, 3]\n",  # JSON, not an object
        b'{"resourceSpans": "nope"}\n',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}\n',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}\n',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": 1e400}]}]}]}\n',
        b'{"resourceSpans": [{"resource": {"attributes": {"key": "x"}}}]}\n',
        b'{"resourceSpans": [{"resource": {"attributes": [{"key": "n", "value": {"intValue": "12x"}}]}}]}\n',
        b'{"resourceSpans": [{"resource": {"attributes": [{"key": "n", "value": {"intValue": true}}]}}]}\n',
        b'{"resourceSpans": [{"resource": {"attributes": [{"value": {"intValue": "1"}}]}}]}\n',
        b"[" * 100_000 + b"\n",  # deeper than the JSON decoder recurses
    ],
)
def test_a_corrupt_line_is_skipped_and_counted_and_the_next_line_read(tmp_path, bad):
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(good_line().encode() + bad + good_line().encode())
    result = read_files(path)
    assert (len(result.spans), result.skipped_lines) == (2, 1)


def test_blank_lines_are_not_counted_as_skipped(tmp_path):
    result = read_files(write_lines(tmp_path / "r.jsonl", ["\n", good_line(), "   \n", "\r\n"]))
    assert (len(result.spans), result.skipped_lines) == (1, 0)


def test_a_line_longer_than_the_limit_is_skipped_unread(monkeypatch):
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 200)
    monkeypatch.setattr(sources, "_CHUNK", 7)
    huge = json.dumps({"resourceSpans": [], "padding": "x" * 1000}).encode() + b"\n"
    result = SpanSet()
    read_stream(io.BytesIO(huge + b"x" * 500 + huge), result)
    assert result.skipped_lines == 2  # the first huge line, then the 500 x's running into the second one
    result = SpanSet()
    small = json.dumps({"resourceSpans": []}).encode() + b"\n"
    read_stream(io.BytesIO(huge + small + huge), result)
    assert (result.skipped_lines, result.spans) == (2, [])


def test_a_saved_jaeger_answer_line_is_read_like_a_traces_data_line():
    data = json.loads(good_line())
    spans = decode_line(json.dumps({"result": data}).encode())
    assert spans is not None and [s.name for s in spans] == ["safetensors.open"]


def test_a_directory_is_read_recursively_and_only_jsonl_files(tmp_path):
    write_lines(tmp_path / "node-0" / "rank-0.jsonl", [good_line()])
    write_lines(tmp_path / "node-1" / "deeper" / "rank-1.jsonl", [good_line(), good_line()])
    write_lines(tmp_path / "config.json", ['{"not": "a trace"}\n'])
    write_lines(tmp_path / "notes.txt", ["hello\n"])
    result = read_files(tmp_path)
    assert (len(result.spans), result.skipped_lines) == (3, 0)


def test_a_missing_path_and_a_directory_without_traces_are_source_errors(tmp_path):
    with pytest.raises(SourceError, match="no such file"):
        read_files(tmp_path / "missing")
    with pytest.raises(SourceError, match=r"no \*\.jsonl"):
        read_files(tmp_path)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_the_file_reader_never_raises_on_arbitrary_bytes(data):
    result = SpanSet()
    read_stream(io.BytesIO(data), result)
    assert result.skipped_lines <= data.count(b"\n") + 1


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
OTLP_KEYS = st.sampled_from(
    [
        "resourceSpans",
        "resource",
        "attributes",
        "scopeSpans",
        "spans",
        "key",
        "value",
        "intValue",
        "stringValue",
        "arrayValue",
        "values",
        "kvlistValue",
        "traceId",
        "name",
        "startTimeUnixNano",
        "status",
        "code",
        "result",
    ]
)
OTLP_SHAPED = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | st.sampled_from(["1", "-3", "x", "9" * 30]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(OTLP_KEYS, children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(JSON | OTLP_SHAPED)
def test_decoding_never_raises_on_any_json_value(value):
    spans = decode_line(json.dumps(value).encode())
    assert spans is None or all(isinstance(s.name, str) and isinstance(s.start_ns, int) for s in spans)
