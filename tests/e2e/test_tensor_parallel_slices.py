"""Promise: a tensor-parallel loader without transformers (each rank reads its own slices through ``get_slice``
inside ``loadtrace.traced_load``) is reported exactly: each rank's bytes equal its own count, the model's size is the
checkpoint's tensor bytes (from the safetensors headers, not what one rank read), and the ranks' disjoint reads are a
``sharded_read``, never a ``replicated_load``."""

from __future__ import annotations

import json

from support import field_facts
from support.multirank import read_spans
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv
from loadtrace.analysis.report import build_report

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "slice_tp_load.py"


def test_slice_reading_ranks_are_a_sharded_read_of_the_whole_checkpoint(checkpoint, tmp_path):
    out = tmp_path / "out"
    run = torchrun(VENVS[0], WORKER, [str(checkpoint), "--out", str(out)], cwd=tmp_path, env={"LOADTRACE": "1"})
    run.check()
    report = build_report(read_spans(tmp_path / "loadtrace-traces"))
    (trace,) = report["traces"]
    assert trace["model_bytes"] == field_facts.BYTES, "the checkpoint's tensor bytes, from its headers"
    ranks = {rank["rank"]: rank for rank in report["ranks"]}
    for number in (0, 1):
        counted = json.loads((out / f"count-rank{number}.json").read_text())
        assert ranks[number]["read_bytes"] == counted["read_bytes"]
        assert ranks[number]["tensors_read"] == counted["tensors_read"]
    assert sum(rank["read_bytes"] for rank in ranks.values()) == field_facts.BYTES
    kinds = {finding["kind"] for finding in report["findings"]}
    assert semconv.FINDING_SHARDED_READ in kinds, report["findings"]
    assert semconv.FINDING_REPLICATED_LOAD not in kinds, report["findings"]
