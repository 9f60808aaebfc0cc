"""Promise (issue 15): the CLI explains itself. ``loadtrace --version``; ``python -m loadtrace`` is the same command;
every option of every command has help text; the top-level help says how to record a trace."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def test_version_and_python_dash_m_are_the_same_command():
    by_module = subprocess.run([sys.executable, "-m", "loadtrace", "--version"], capture_output=True, text=True)
    assert by_module.returncode == 0 and by_module.stdout == f"loadtrace {version('loadtrace')}\n"
    bad = subprocess.run([sys.executable, "-m", "loadtrace", "report"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("loadtrace: error: ") and bad.stderr.count("\n") == 1
