"""``sources.parse_line`` parses a file's repeated resource once and reuses it: each line must come out exactly as
``json.loads`` makes it, or fail where it fails, whatever the line looks like."""

from __future__ import annotations

import json

import pytest

from loadtrace.analysis.sources import ResourceCache, parse_line

RESOURCE = '{"attributes":[{"key":"service.name","value":{"stringValue":"loadtrace"}}]}'
OTHER = '{"attributes":[{"key":"service.name","value":{"stringValue":"other"}}]}'
SPANS = '"scopeSpans":[{"spans":[{"traceId":"ab","spanId":"cd","name":"x"}]}]'


def line(resource: str, rest: str = SPANS) -> bytes:
    return ('{"resourceSpans":[{"resource":' + resource + "," + rest + "}]}").encode()


LINES = [
    line(RESOURCE),
    line(RESOURCE),  # the same resource: reused
    line(OTHER),  # another: parsed again
    line(RESOURCE, SPANS + ',"resource":{"attributes":[]}'),  # a second "resource" key: the last wins
    line(RESOURCE, SPANS + '},{"resource":' + OTHER),  # a second resourceSpans
    line(RESOURCE)[:-1] + b',"result":{"resourceSpans":[]}}',  # a saved Jaeger answer's key
    line(RESOURCE, SPANS.replace('"x"', '"\\u00e9\\ud800"')),  # escapes, a lone surrogate
    line(RESOURCE, '"scopeSpans":[{"spans":[{"name":"caf\u00e9"}]}]'),  # UTF-8 text
    b'{"resourceSpans":[{"resource": ' + RESOURCE.encode() + b"," + SPANS.encode() + b"}]}",  # a space
    line("[1,2]"),  # not an object
    line("7"),
    line(RESOURCE + "7"),  # malformed after the resource
    line(RESOURCE, SPANS)[:-5],  # cut short
    line(RESOURCE).replace(b"loadtrace", b"\xff\xfe"),  # not UTF-8
    line(RESOURCE[:-1]),  # the resource cut short
    b'{"resourceSpans":[]}',
    b"not json",
]


def outcome(parse, raw: bytes):
    try:
        return ("ok", parse(raw))
    except ValueError as error:
        return ("error", type(error).__name__)


@pytest.mark.parametrize("order", [LINES, LINES[::-1], [x for pair in zip(LINES, LINES, strict=True) for x in pair]])
def test_each_line_parses_as_json_loads_parses_it(order):
    cache = ResourceCache()
    for raw in order:
        assert outcome(lambda r: parse_line(r, cache), raw) == outcome(json.loads, raw), raw


def test_a_repeated_resource_is_parsed_once():
    cache = ResourceCache()
    first, second = parse_line(LINES[0], cache), parse_line(LINES[1], cache)
    assert first == second and first["resourceSpans"][0]["resource"] is second["resourceSpans"][0]["resource"]
