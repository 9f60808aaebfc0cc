"""Promise (issue 15): every sample output in README.md, examples/README.md and docs/report.md is the real output.

- ``scripts/gen_docs.py --check``: each sample (a fenced block after ``<!-- gen_docs: NAME -->``) is exactly what the
  installed CLI prints over the recorded real runs in ``docs/samples/`` (rerun ``scripts/gen_docs.py`` after changing
  the output; ``--record`` reruns the jobs);
- no report table in those documents is written by hand (each sits under a marker);
- a fresh real run has the recorded sample's shape: the same lines, columns, findings and advice, once what
  legitimately varies between runs is normalised (ids, times, pids, hosts, memory figures: every number and hex id).
"""

from __future__ import annotations

import subprocess
import sys

from support.venvs import REPO

SCRIPT = REPO / "scripts" / "gen_docs.py"


def test_the_documents_show_what_the_cli_prints_over_the_recorded_runs():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"rerun scripts/gen_docs.py; it would change:\n{result.stdout}{result.stderr}"
