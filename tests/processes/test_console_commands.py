"""Promise (issue 15): the installed commands behave as the in-process tests of cli/ say, as a user runs them:
``python -m loadtrace`` is the same command as ``loadtrace`` (``--version``, bad input one line and exit 2), and the
console entry point never shows a traceback, with exit codes passed through (``--fail-on-findings``: 1)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from support.paths import SPANS

MODULE = (sys.executable, "-m", "loadtrace")
CONSOLE = (str(Path(sys.executable).with_name("loadtrace")),)  # the entry point pip installed next to the interpreter


def loadtrace(*args: str, command: tuple[str, ...] = MODULE) -> subprocess.CompletedProcess:
    """The installed command (cwd: away from the source tree, which ``-m`` would import instead of the wheel)."""
    return subprocess.run([*command, *args], cwd="/", capture_output=True, text=True)


def test_version_and_python_dash_m_are_the_same_command():
    by_module = loadtrace("--version")
    assert by_module.returncode == 0 and by_module.stdout == f"loadtrace {version('loadtrace')}\n"
    bad = loadtrace("report")
    assert bad.returncode == 2 and bad.stderr.startswith("loadtrace: error: ") and bad.stderr.count("\n") == 1


def test_the_console_entry_point_never_shows_a_traceback(tmp_path):
    missing = loadtrace("report", str(tmp_path / "nope"), command=CONSOLE)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr == f"loadtrace: error: {tmp_path / 'nope'}: no such file or directory\n"
    ok = loadtrace("report", str(SPANS / "fsdp524"), "--fail-on-findings", command=CONSOLE)
    assert ok.returncode == 1 and "duplicate_checkpoint_read" in ok.stdout and ok.stderr == ""
