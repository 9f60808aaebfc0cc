"""Promise (issue 26): the README's first screen is for a newcomer: the quick start (the two commands and a short demo)
comes first, and the reference tables (README and its docs/ pages since issue 43) keep their cells short, with the
detail below each table."""

from __future__ import annotations

import re

from support.paths import REPO
from support.span_reference import README, cells

QUICK_START_BY_LINE = 40
CELL_MAX = 300
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "README.md"]
# The pages the README's reference, guides and figures moved to (issue 43); docs/report.md keeps its own tables.
MOVED = ("reference", "commands", "jaeger", "fleet", "performance", "development")
FROM_README = [README, *(REPO / "docs" / f"{page}.md" for page in MOVED)]


def test_the_quick_start_is_within_the_first_forty_lines():
    lines = README.read_text().splitlines()
    heading = next(number for number, line in enumerate(lines, 1) if line.startswith("## Quick start"))
    assert heading <= QUICK_START_BY_LINE, heading
    first_screen = "\n".join(lines[:QUICK_START_BY_LINE])
    assert "bash scripts/setup.sh && source .venv/bin/activate" in first_screen
    assert "bash examples/demo.sh" in first_screen
    assert "LOADTRACE=1 torchrun" in first_screen and "loadtrace report" in first_screen


def test_the_install_names_no_package_that_no_index_serves():
    """Issue 34: ``pip install loadtrace`` named a package no index serves; loadtrace is installed from this repository
    (a path or a wheel built from it), with its ClickHouse driver by its own name."""
    for document in DOCUMENTS:
        text = document.read_text()
        assert not re.search(r"pip install '?loadtrace\b", text), (
            document.name,
            re.findall(r"pip install '?loadtrace\S*", text),
        )
    text = README.read_text()
    assert "pip install /path/to/this/repo" in text and "pip wheel --no-deps -w dist /path/to/this/repo" in text


def test_no_reference_table_cell_is_over_300_characters():
    long = [
        (document.name, number, len(cell), cell[:60])
        for document in FROM_README
        for number, line in enumerate(document.read_text().splitlines(), 1)
        if line.startswith("|")
        for cell in cells(line)
        if len(cell) > CELL_MAX
    ]
    assert not long, long


def test_the_promises_are_one_liners():
    text = README.read_text()
    section = text[text.index("## What loadtrace promises") :]
    section = section[: section.index("\n## ", 1)]
    promises = [line for line in section.splitlines() if line.startswith("- **")]
    assert len(promises) >= 8 and all(len(line) <= 120 for line in promises), promises
