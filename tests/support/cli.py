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
