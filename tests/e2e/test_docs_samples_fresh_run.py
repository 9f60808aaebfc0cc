"""Promise (issue 15), with a real job (the documents themselves: cli/test_docs_samples.py and
processes/test_docs_samples_generated.py): a fresh real run has the recorded sample's shape, the same lines, columns,
findings and advice, once what legitimately varies between runs is normalised (every number and hex id)."""

from __future__ import annotations

import re

import pytest
from support.cli import run
from support.multirank import EXAMPLE_WORKER
from support.venvs import REPO, discover

VENVS = discover()


def shape(text: str, host: str) -> list[str]:
    """What a rerun keeps: every hex id, uuid and number becomes N, runs of spaces one space. The ``I/O:`` note goes,
    and a ``Storage:`` line keeps only its host: whether the page cache held the checkpoint (warm, partly_cold, cold,
    and so a storage rate or none) is the machine's state, not the report's; so are whether a phase made the slowest
    rank slowest and which (two ranks that start within a second of each other: waiting in a collective or not is
    the scheduler's call)."""
    text = re.sub(r"^I/O: .*?(?=^\S|^$)", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"^(Storage: [^:]*: checkpoint) .*$", r"\1 RESIDENCY", text, flags=re.MULTILINE)
    text = re.sub(r"(\(slowest: [^,)]*), \S+ phase\)", r"\1)", text)  # named or not: the run's timing says
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{16,}\b", "N", text)
    text = re.sub(r"\d[\d,]*(\.\d+)?( [kMGTP]?B\b)?", "N", text)
    text = re.sub(rf"\b{re.escape(host)}\b", "HOST", text)
    return [" ".join(line.split()) for line in text.splitlines()]


@pytest.mark.skipif(not VENVS or VENVS[0].name != ".venv", reason="the recorded fsdp524 run is .venv's")
def test_a_fresh_run_has_the_recorded_samples_shape(jobs, capsys, monkeypatch):
    job = jobs.get(VENVS[0], "fsdp", True, EXAMPLE_WORKER)
    capsys.readouterr()  # what running the job printed
    fresh = run(capsys, "report", str(job.trace_root))
    monkeypatch.chdir(REPO / "docs" / "samples")  # the recorded run, named as the documents name it
    recorded = run(capsys, "report", "fsdp524")
    assert fresh[0] == recorded[0] == 0, fresh[2] + recorded[2]
    hosts = [re.search(r"^0 +(\S+)", out, re.MULTILINE)[1] for _, out, _ in (fresh, recorded)]
    assert shape(fresh[1], hosts[0]) == shape(recorded[1], hosts[1])
