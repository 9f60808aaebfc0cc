"""Promise (issue 15): every sample output in README.md, examples/README.md and docs/*.md is the real output.

- ``scripts/gen_docs.py --check``: each sample (a fenced block after ``<!-- gen_docs: NAME -->``) is exactly what the
  installed CLI prints over the recorded real runs in ``docs/samples/`` (rerun ``scripts/gen_docs.py`` after changing
  the output; ``--record`` reruns the jobs);
- no report table in those documents is written by hand (each sits under a marker);
- a fresh real run has the recorded sample's shape: the same lines, columns, findings and advice, once what
  legitimately varies between runs is normalised (ids, times, pids, hosts, memory figures: every number and hex id).
"""

from __future__ import annotations

import re

from support.venvs import REPO

DOCUMENTS = [REPO / "README.md", REPO / "examples" / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"(?P<marker><!-- gen_docs: [\w-]+ -->\n)?```[^\n]*\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def test_every_report_sample_is_generated():
    for document in DOCUMENTS:
        for block in FENCE.finditer(document.read_text()):
            output = re.search(r"^(rank  host|findings|forecast: |loadtrace: (job|error))", block["body"], re.MULTILINE)
            assert not output or block["marker"], f"{document.name}: a hand-written sample:\n{block['body'][:300]}"
