"""Promise (issue 10): ruff (lint and format) and mypy are clean, run here so that README's test command (the whole
suite, which CI runs) fails on them. They read the whole tree (mypy about 10 s on 2 cores), so this folder is in the
slow tier (marked ``integration`` and ``lint`` by conftest.py): ``-m lint`` runs these two alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.venvs import REPO

BIN = Path(sys.executable).parent  # the test venv's own ruff and mypy (the ``test`` extra pins them)


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} not found: install the test extra (pip install '.[test]'), as scripts/setup.sh does")
    return str(path)


def run_tool(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_clean():
    check = run_tool(tool("ruff"), "check", "--output-format", "concise", ".")
    assert check.returncode == 0, f"ruff check .:\n{check.stdout}{check.stderr}"
    formatted = run_tool(tool("ruff"), "format", "--check", ".")
    assert formatted.returncode == 0, f"ruff format --check . (run `ruff format .`):\n{formatted.stdout}"


def test_mypy_clean():
    result = run_tool(tool("mypy"))  # files and options from pyproject.toml's [tool.mypy]
    assert result.returncode == 0, f"mypy:\n{result.stdout}{result.stderr}"
