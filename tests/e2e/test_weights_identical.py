"""Promise: tracing changes nothing about the job. With and without ``LOADTRACE=1`` every rank ends up with
bit-identical weights (a SHA-256 over every parameter and buffer, gathered for ZeRO-3), and does exactly the same
reads and materialisations."""

from __future__ import annotations

import pytest
from support import field_facts
from support.multirank import WORLD_SIZE, Job, cases
from support.venvs import discover

VENVS = discover()
CASES = cases(VENVS)


@pytest.fixture(params=CASES, ids=[f"{v.id}-{m}" for v, m in CASES])
def traced_and_untraced(request, jobs) -> tuple[Job, Job]:
    """The session's two runs of the same job, with ``LOADTRACE=1`` and without."""
    venv, mode = request.param
    return jobs.get(venv, mode, traced=True), jobs.get(venv, mode, traced=False)


def test_weights_bit_identical_with_and_without_loadtrace(traced_and_untraced):
    traced, untraced = traced_and_untraced
    for rank in range(WORLD_SIZE):
        on, off = traced.digests[rank], untraced.digests[rank]
        assert on["tensors"] == off["tensors"] > 0
        assert on["sha256"] == off["sha256"], f"{traced.label} rank {rank}: weights differ under LOADTRACE=1"


def test_same_reads_and_materialisations_with_and_without_loadtrace(traced_and_untraced):
    traced, untraced = traced_and_untraced
    for rank in range(WORLD_SIZE):
        on, off = traced.counts[rank], untraced.counts[rank]
        assert field_facts.observed(on) == field_facts.observed(off), f"{traced.label} rank {rank}"
        assert on["files"] == off["files"]
        assert on["phases"] == off["phases"]
        assert on["held_bytes"] == off["held_bytes"]
    assert not untraced.trace_root.exists(), "an untraced job wrote traces"
