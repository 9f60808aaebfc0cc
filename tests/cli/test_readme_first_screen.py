"""Promise (issue 26): the README's first screen is for a newcomer: the quick start (the two commands and a short demo)
comes first, and its reference tables keep their cells short, with the detail below each table."""

from __future__ import annotations

from support.span_reference import README, cells

QUICK_START_BY_LINE = 40
CELL_MAX = 300


def test_the_quick_start_is_within_the_first_forty_lines():
    lines = README.read_text().splitlines()
    heading = next(number for number, line in enumerate(lines, 1) if line.startswith("## Quick start"))
    assert heading <= QUICK_START_BY_LINE, heading
    first_screen = "\n".join(lines[:QUICK_START_BY_LINE])
    assert "bash scripts/setup.sh && bash examples/demo.sh" in first_screen
    assert "LOADTRACE=1 torchrun" in first_screen and "loadtrace report" in first_screen


def test_no_readme_table_cell_is_over_300_characters():
    long = [
        (number, len(cell), cell[:60])
        for number, line in enumerate(README.read_text().splitlines(), 1)
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
