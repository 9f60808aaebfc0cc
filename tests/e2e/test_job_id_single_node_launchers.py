"""Promise: every rank of a single-node torchrun or `accelerate launch` lands in one trace from its first line, even
when the launcher's run id is the placeholder `none` (any `--master-port`, every `accelerate launch`) and the job loads
before `init_process_group`: what one launcher gives all its workers on one node is the job id. Several nodes never
use it (each node's launcher has its own): they still join through the process group's store
(tests/in_job/test_job_id_multinode.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.torchrun import accelerate_launch, torchrun
from support.venvs import discover

from loadtrace import semconv
from loadtrace.analysis.sources import read_files
from loadtrace.instrumentation.context import (
    SOURCE_LAUNCH,
    SOURCE_LAUNCH_DIR,
)

EARLY_LOAD = """
import os, sys
if os.environ.get("INSTRUMENT_IN_WORKER"):  # only the workers traced: the launcher gives them no launch id
    import loadtrace
    loadtrace.instrument()
import torch.distributed as dist
from transformers import AutoModelForCausalLM
assert os.environ["TORCHELASTIC_RUN_ID"] == "none"
AutoModelForCausalLM.from_pretrained(sys.argv[1])  # before any process group
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def venv_or_skip():
    found = discover()
    if not found:
        pytest.skip("no venv with torchrun and transformers (see tests/support/venvs.py)")
    return found[0]


def assert_one_trace(traces: Path, output: str, source: str) -> None:
    spans = read_files(traces).spans
    loads = [s for s in spans if s.name == "transformers.from_pretrained"]
    assert sorted(s.resource["loadtrace.rank"] for s in loads) == [0, 1], output
    assert len({s.trace_id for s in spans}) == 1, {(s.resource["loadtrace.rank"], s.trace_id) for s in loads}
    assert {s.resource["loadtrace.job.id_source"] for s in loads} == {source}
    startups = {s.resource["loadtrace.rank"]: s for s in spans if s.name == "loadtrace.startup"}
    job_id = loads[0].resource["loadtrace.job.id"]
    # Under each rank's group in the job's trace (docs/jaeger.md), which rank 0 writes with the job's root.
    assert all(s.parent_span_id == f"{semconv.rank_group_id(job_id, r):016x}" for r, s in startups.items())
    structure = Path(next(iter(traces.rglob("rank00000-*.jsonl")))).read_text()
    assert semconv.SCOPE_STRUCTURE in structure, "rank 0 wrote the job's root and groups"
    assert all(s.parent_span_id == startups[s.resource["loadtrace.rank"]].span_id for s in loads)
    assert "found no job id" not in output


def test_accelerate_launch_loading_before_init_process_group_is_one_trace(checkpoint, tmp_path):
    """Also: ``loadtrace.launcher`` names ``accelerate launch`` as ``accelerate`` (issue 40;
    e2e/test_launcher_named_real.py the others)."""
    venv = venv_or_skip()
    script = tmp_path / "early_load.py"
    script.write_text(EARLY_LOAD)
    traces = tmp_path / "traces"
    code, output = accelerate_launch(
        venv, script, [str(checkpoint)], tmp_path / "run", {"LOADTRACE": "1", "LOADTRACE_DIR": str(traces)}
    )
    assert code == 0, output[-4000:]
    assert_one_trace(traces, output, SOURCE_LAUNCH)
    launchers = {s.resource["loadtrace.rank"]: s.resource["loadtrace.launcher"] for s in read_files(traces).spans}
    assert launchers == {0: "accelerate", 1: "accelerate"}


@pytest.mark.parametrize("traced_launcher", [True, False], ids=["traced-launcher", "workers-only"])
def test_torchrun_without_rdzv_id_loading_before_init_process_group_is_one_trace(checkpoint, tmp_path, traced_launcher):
    venv = venv_or_skip()
    script = tmp_path / "early_load.py"
    script.write_text(EARLY_LOAD)
    traces = tmp_path / "traces"
    env = {"LOADTRACE_DIR": str(traces)}
    env.update({"LOADTRACE": "1"} if traced_launcher else {"INSTRUMENT_IN_WORKER": "1"})
    run = torchrun(venv, script, [str(checkpoint)], cwd=tmp_path / "run", env=env).check()  # --master_port: "none"
    output = run.log.read_text(errors="replace")
    assert_one_trace(traces, output, SOURCE_LAUNCH if traced_launcher else SOURCE_LAUNCH_DIR)
