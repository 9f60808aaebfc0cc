"""Promise (issue 15): ``scripts/gen_docs.py --check`` passes: each sample in README.md, examples/README.md and
docs/*.md (a fenced block after ``<!-- gen_docs: NAME -->``) is exactly what the installed CLI prints over the
recorded real runs in ``docs/samples/`` (rerun ``scripts/gen_docs.py`` after changing the output)."""

from __future__ import annotations

import subprocess
import sys

from support.venvs import REPO

SCRIPT = REPO / "scripts" / "gen_docs.py"


def test_the_documents_show_what_the_cli_prints_over_the_recorded_runs():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"rerun scripts/gen_docs.py; it would change:\n{result.stdout}{result.stderr}"
