"""``loadtrace`` run in this process as a person runs it: its exit code and what it printed (capsys's capture)."""

from __future__ import annotations

import json
from typing import Any

from loadtrace.cli import main

ERROR = "loadtrace: error: "


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); argparse's own usage errors are its SystemExit's code."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: Any, *argv: str) -> dict[str, Any]:
    """``--format json``'s answer, which must come with exit 0."""
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def one_line(capsys: Any, *argv: str) -> str:
    """Bad input's answer: exit 2, nothing on stdout, one line on stderr (returned) and no traceback."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith(ERROR) and "Traceback" not in err, err
    return err


def ok(capsys: Any, *argv: str) -> str:
    """stdout of a command that must exit 0."""
    code, out, err = run(capsys, *argv)
    assert code == 0, out + err
    return out


def rank_rows(table: str) -> list[str]:
    """A report's rank table: the lines from its header to the note under ``load s`` or the first I/O line."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("rank "))
    end = next(i for i, line in enumerate(lines) if line.startswith(("I/O: ", "load s starts ")))
    return lines[start + 1 : end]
