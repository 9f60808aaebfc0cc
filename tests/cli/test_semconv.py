"""Promise: docs/reference.md's "Span and attribute reference" documents every span name and attribute key that
``loadtrace.semconv`` defines, and nothing else; the finding kinds and strategies semconv defines are exactly those the
commands page, the reference and docs/report.md document.

Names are compared in the reference's notation: a semconv prefix (``loadtrace.model.held_bytes.``) and its key function
(``held_bytes_key(device)``) stand for the reference's ``loadtrace.model.held_bytes.<device>``; any ``<placeholder>``
matches any other.
"""

from __future__ import annotations

import re
import types

from support.span_reference import (
    COMMANDS,
    PLACEHOLDER,
    REFERENCE,
    REPORT_MD,
    backticked,
    cells,
    documented_names,
    table,
)

from loadtrace import semconv

ANY = "<>"  # the placeholder both sides are normalised to
# A span name or attribute key: dotted lowercase components ("loadtrace.read.bytes", "host.name"); a prefix ends in ".".
KEY = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+")
PREFIX = re.compile(r"loadtrace(\.[a-z0-9_]+)*\.")
# Key functions and the arguments that enumerate their keys; a placeholder stands for a free component.
KEY_FUNCTIONS = {
    "lib_key": [(ANY,)],
    "held_bytes_key": [(ANY,)],
    "materialized_bytes_key": [(ANY,)],
    "convert_op_key": [(ANY, "count"), (ANY, "bytes")],
    "rss_key": [(kind, moment) for kind in (None, *semconv.RSS_KINDS) for moment in semconv.MOMENTS],
    "about_key": [(ANY,)],
}


def normalise(name: str) -> str:
    return PLACEHOLDER.sub(ANY, name)


def string_constants() -> dict[str, str]:
    return {k: v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str)}


def semconv_names() -> tuple[set[str], set[str], set[str]]:
    """(span names, attribute keys, prefixes) that semconv defines; keys built by its functions included."""
    constants = {  # metrics: test_metrics_...; scopes name who wrote a span, not an attribute
        k: v for k, v in string_constants().items() if not k.startswith(("METRIC_", "SCOPE_"))
    }
    spans = {v for k, v in constants.items() if k.startswith("SPAN_")}
    prefixes = {v for v in constants.values() if PREFIX.fullmatch(v)}
    keys = {v for v in constants.values() if KEY.fullmatch(v) and v not in spans}
    for function, calls in KEY_FUNCTIONS.items():
        keys |= {getattr(semconv, function)(*args) for args in calls}
    return spans, keys, prefixes


def reference_names() -> tuple[set[str], set[str]]:
    """(span names, attribute keys) of docs/reference.md's span reference, placeholders normalised."""
    resource, spans = documented_names()
    keys = {normalise(n) for n in resource} | {normalise(n) for names in spans.values() for n in names}
    return set(spans), keys


def test_every_key_function_is_enumerated():
    functions = {k for k, v in vars(semconv).items() if isinstance(v, types.FunctionType) and k.endswith("_key")}
    assert functions == set(KEY_FUNCTIONS), "a semconv key function this test does not expand: add it to KEY_FUNCTIONS"


def test_span_constants_are_all_spans():
    spans, _, _ = semconv_names()
    assert not spans - semconv.ALL_SPANS, f"SPAN_ constants missing from ALL_SPANS: {sorted(spans - semconv.ALL_SPANS)}"
    assert not semconv.ALL_SPANS - spans, f"ALL_SPANS without a SPAN_ constant: {sorted(semconv.ALL_SPANS - spans)}"


def test_span_names_are_documented_both_ways():
    spans, _, _ = semconv_names()
    documented, _ = reference_names()
    assert not spans - documented, (
        f"in semconv, not in docs/reference.md's span reference: {sorted(spans - documented)}"
    )
    assert not documented - spans, (
        f"in docs/reference.md's span reference, not in semconv: {sorted(documented - spans)}"
    )


def test_attribute_keys_are_documented_both_ways():
    _, keys, _ = semconv_names()
    _, documented = reference_names()
    assert not keys - documented, f"in semconv, not in docs/reference.md's span reference: {sorted(keys - documented)}"
    assert not documented - keys, f"in docs/reference.md's span reference, not in semconv: {sorted(documented - keys)}"


def test_every_prefix_is_documented_with_a_placeholder():
    _, keys, prefixes = semconv_names()
    _, documented = reference_names()
    for prefix in prefixes:
        assert any(n.startswith(prefix + ANY) for n in documented), (
            f"{prefix}<...> not in docs/reference.md's span reference"
        )
        assert any(k.startswith(prefix + ANY) for k in keys), f"{prefix}: no semconv key function builds its keys"
    placeholders = sorted(n for n in documented if ANY in n)
    assert all(any(n.startswith(p) for p in prefixes) for n in placeholders), (placeholders, prefixes)


# Finding kinds and strategies ---------------------------------------------------------------------------------------


def first_column(text: str, header: str) -> list[str]:
    """The backticked first cells of the table whose header row starts with ``| header |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and cells(line)[0] == header)
    rows = []
    for line in lines[start + 2 :]:  # past the header and its separator
        if not line.startswith("|"):
            break
        rows.append(backticked(cells(line)[0])[0])
    return rows


def json_enum(text: str, field: str) -> list[str]:
    """``"field": "a | b | c"`` in docs/report.md's JSON schema."""
    (values,) = [v for v in re.findall(rf'"{field}": "([^"]+)"', text) if "|" in v]
    return [v.strip() for v in values.split("|")]


def test_finding_kinds_match_the_commands_page():
    assert first_column(COMMANDS.read_text(), "finding") == list(semconv.FINDING_KINDS)


def test_finding_kinds_match_docs_report():
    text = REPORT_MD.read_text()
    assert first_column(text, "kind") == list(semconv.FINDING_KINDS)
    assert json_enum(text, "kind") == list(semconv.FINDING_KINDS)


def listed_strategies(span: str) -> list[str]:
    """The strategies docs/reference.md lists for ``span``: in its row, or in the row's detail below the
    table (cells stay under 300 characters: test_readme_first_screen.py)."""
    text = REFERENCE.read_text()
    (row,) = [row for row in table(text, "### Spans") if row[0] == f"`{span}`"]
    notes = [line for line in text.splitlines() if line.startswith(f"- `{span}`, attributes:")]
    (listed,) = re.findall(rf"`{re.escape(semconv.STRATEGY)}` \(([^)]*)\)", " ".join([row[2], *notes]))
    return backticked(listed)


def test_strategies_match_the_span_reference():
    """from_pretrained's strategies, then DCP's, on the spans that set them: every one, once."""
    dcp = [*listed_strategies(semconv.SPAN_DCP_LOAD), *listed_strategies(semconv.SPAN_DCP_SET_STATE_DICT)]
    assert listed_strategies(semconv.SPAN_FROM_PRETRAINED) + dcp == list(semconv.STRATEGIES)
    assert dcp == list(semconv.DCP_STRATEGIES)


def test_strategies_match_docs_report():
    text = REPORT_MD.read_text()
    assert json_enum(text, "strategy") == [*semconv.STRATEGIES, "null"]
    (sentence,) = re.findall(r"the \*sharded strategies\* are ([^,]+),", text)
    assert set(backticked(sentence)) == set(semconv.SHARDED_STRATEGIES)


def test_every_strategy_and_finding_constant_is_listed():
    constants = string_constants()
    strategies = {v for k, v in constants.items() if k.startswith("STRATEGY_")}
    kinds = {v for k, v in constants.items() if k.startswith("FINDING_")}
    listed_strategies, listed_kinds = set(semconv.STRATEGIES), set(semconv.FINDING_KINDS)
    assert strategies == listed_strategies, f"STRATEGY_ vs STRATEGIES: {sorted(strategies ^ listed_strategies)}"
    assert kinds == listed_kinds, f"FINDING_ constants vs FINDING_KINDS: {sorted(kinds ^ listed_kinds)}"
    assert len(semconv.STRATEGIES) == len(strategies) and len(semconv.FINDING_KINDS) == len(kinds), "listed twice"


def test_metrics_are_documented_both_ways():
    """The progress metrics (issue 25) and their one data-point attribute: docs/reference.md's "Metrics" table,
    exactly."""
    rows = table(REFERENCE.read_text(), "### Metrics")
    documented = [backticked(row[0])[0] for row in rows]
    assert documented == list(semconv.METRICS)
    constants = {v for k, v in string_constants().items() if k.startswith("METRIC_")}
    attributes = {name for row in rows for name in backticked(row[2]) if name in constants}
    assert constants == set(semconv.METRICS) | attributes, "a METRIC_ constant the reference's table does not name"
