"""docs/reference.md's "Span and attribute reference", read as the contract: which spans exist and which attributes
each carries, in its own notation (``<device>``, ``<Op>``, ``<name>`` placeholders, ``.after`` shorthand).

Shared by the wire tests (what arrives must be documented) and test_semconv (what semconv names must be documented,
and the reverse).
"""

from __future__ import annotations

import re

from .paths import REPO

README = REPO / "README.md"
REFERENCE = REPO / "docs" / "reference.md"
COMMANDS = REPO / "docs" / "commands.md"
REPORT_MD = REPO / "docs" / "report.md"

RESOURCE_HEADING = "### Resource (one per process"
EVERY_SPAN_HEADING = "#### On every span a rank writes"
SPANS_HEADING = "### Spans"
TOTALS_HEADING = "#### Load totals"
MEMORY_HEADING = "#### Memory and I/O"
PLACEHOLDER = re.compile(r"<[^>]+>")


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table(text: str, heading: str) -> list[list[str]]:
    """Rows (cells) of the first table after ``heading``, without its header and separator."""
    lines = text[text.index(heading) :].splitlines()[1:]
    rows, started = [], False
    for line in lines:
        if line.startswith("|"):
            started = True
            rows.append(cells(line))
        elif started:
            break
    return rows[2:]


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def names(cell: str) -> list[str]:
    """Backticked attribute names of a cell; ``a.b.c`` / ``.d`` shorthand expands to ``a.b.d``."""
    found: list[str] = []
    for token in backticked(cell):
        if token.startswith(".") and found:
            found.append(found[-1].rsplit(".", 1)[0] + token)
        elif "." in token and " " not in token:
            found.append(token)
    return found


def pattern(documented_names) -> re.Pattern:
    """``<device>``, ``<Op>``, ``<name>`` stand for one dotted component."""
    return re.compile("|".join(PLACEHOLDER.sub("[^.]+", re.escape(n)) for n in documented_names))


def _tables(text: str) -> dict[str, list[list[str]]]:
    headings = (RESOURCE_HEADING, EVERY_SPAN_HEADING, SPANS_HEADING, TOTALS_HEADING, MEMORY_HEADING)
    return {h: table(text, h) for h in headings}


def documented_names(text: str | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """(resource attribute names, span name → its attribute names), placeholders kept, shorthand expanded."""
    tables = _tables(REFERENCE.read_text() if text is None else text)
    resource = [n for row in tables[RESOURCE_HEADING] for n in names(row[0])]
    totals = [n for row in tables[TOTALS_HEADING] for n in names(row[0])]
    memory_rows = tables[MEMORY_HEADING]
    memory = [n for row in memory_rows for n in names(row[0])]
    phase_memory = [n for row in memory_rows if not row[1].startswith("load spans") for n in names(row[0])]
    every_span = [n for row in tables[EVERY_SPAN_HEADING] for n in names(row[0])]
    spans: dict[str, list[str]] = {}
    for row in tables[SPANS_HEADING]:
        (name,) = backticked(row[0])
        attributes = names(row[2]) + every_span
        if "load totals" in row[2]:
            attributes += totals
        if "memory attributes" in row[2]:
            attributes += memory if "load totals" in row[2] else phase_memory
        if "materialisation attributes" in row[2]:
            attributes += [n for n in totals if n.startswith("loadtrace.materialized.")]
        spans[name] = attributes
    return resource, spans


def documented() -> tuple[re.Pattern, dict[str, re.Pattern]]:
    """(resource attribute pattern, span name → attribute pattern) as docs/reference.md's span reference lists them."""
    resource, spans = documented_names()
    return pattern(resource), {name: pattern(attributes) for name, attributes in spans.items()}
