"""Promise (issue 15): every sample output in README.md, examples/README.md and docs/report.md is the real output.

- ``scripts/gen_docs.py --check``: each sample (a fenced block after ``<!-- gen_docs: NAME -->``) is exactly what the
  installed CLI prints over the recorded real runs in ``docs/samples/`` (rerun ``scripts/gen_docs.py`` after changing
  the output; ``--record`` reruns the jobs);
- no report table in those documents is written by hand (each sits under a marker);
- a fresh real run has the recorded sample's shape: the same lines, columns, findings and advice, once what
  legitimately varies between runs is normalised (ids, times, pids, hosts, memory figures: every number and hex id).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from support.multirank import EXAMPLE_WORKER
from support.venvs import REPO, discover

SCRIPT = REPO / "scripts" / "gen_docs.py"
DOCUMENTS = [REPO / "README.md", REPO / "examples" / "README.md", REPO / "docs" / "report.md"]
FENCE = re.compile(r"(?P<marker><!-- gen_docs: [\w-]+ -->\n)?```[^\n]*\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
VENVS = discover()


def test_the_documents_show_what_the_cli_prints_over_the_recorded_runs():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"rerun scripts/gen_docs.py; it would change:\n{result.stdout}{result.stderr}"


def test_every_report_sample_is_generated():
    for document in DOCUMENTS:
        for block in FENCE.finditer(document.read_text()):
            output = re.search(r"^(rank  host|findings|forecast: |loadtrace: (job|error))", block["body"], re.MULTILINE)
            assert not output or block["marker"], f"{document.name}: a hand-written sample:\n{block['body'][:300]}"


def shape(text: str, host: str) -> list[str]:
    """What a rerun keeps: every hex id, uuid and number becomes N, runs of spaces one space. The ``I/O:`` note goes,
    and a ``Storage:`` line keeps only its host: whether the page cache held the checkpoint (warm, partly_cold, cold,
    and so a storage rate or none) is the machine's state, not the report's; so does the phase that made
    the slowest rank slowest (two ranks that start within a second of each other: waiting in a collective or not is
    the scheduler's call)."""
    text = re.sub(r"^I/O: .*?(?=^\S|^$)", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"^(Storage: [^:]*: checkpoint) .*$", r"\1 RESIDENCY", text, flags=re.MULTILINE)
    text = re.sub(r"(\(slowest: [^,)]*), \S+ phase\)", r"\1, PHASE phase)", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{16,}\b", "N", text)
    text = re.sub(r"\d[\d,]*(\.\d+)?( [kMGTP]?B\b)?", "N", text)
    text = re.sub(rf"\b{re.escape(host)}\b", "HOST", text)
    return [" ".join(line.split()) for line in text.splitlines()]


@pytest.mark.integration
@pytest.mark.skipif(not VENVS or VENVS[0].name != ".venv", reason="the recorded fsdp524 run is .venv's")
def test_a_fresh_run_has_the_recorded_samples_shape(jobs):
    job = jobs.get(VENVS[0], "fsdp", True, EXAMPLE_WORKER)
    fresh = subprocess.run(
        [str(VENVS[0].python), "-m", "loadtrace", "report", str(job.trace_root)], capture_output=True, text=True
    )
    recorded = subprocess.run(
        [str(VENVS[0].python), "-m", "loadtrace", "report", "fsdp524"],
        cwd=REPO / "docs" / "samples",
        capture_output=True,
        text=True,
    )
    assert fresh.returncode == recorded.returncode == 0, fresh.stderr + recorded.stderr
    hosts = [re.search(r"^0 +(\S+)", out, re.MULTILINE)[1] for out in (fresh.stdout, recorded.stdout)]
    assert shape(fresh.stdout, hosts[0]) == shape(recorded.stdout, hosts[1])
