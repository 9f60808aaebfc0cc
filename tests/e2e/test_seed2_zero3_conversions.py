"""Promise (issue 39, the second public report told whole): under ZeRO-3 every rank's weight conversion is counted on
that rank, exactly, though transformers converts there outside ``convert_and_load_state_dict_in_model``; a rank other
than 0 that converted real bytes is named (``duplicate_conversion``, one cause with its ``duplicate_checkpoint_read``),
and one that converted only ``meta`` tensors is not.

The report's model: a 2-layer, 4-expert Qwen3 MoE (hidden 256, ``moe_intermediate_size`` 128) saved with
``save_pretrained``, loaded by 2 ranks under real torchrun with an ``HfDeepSpeedConfig`` (stage 3) kept alive, then
``AutoModelForCausalLM.from_pretrained``. The yardstick is ``tests/workers/count_load.py``'s own wrapper around
``WeightConverter.convert``; the per-release facts are ``field_facts.SEED2``.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import pytest
from support import field_facts
from support.multirank import Job, Jobs
from support.shared import once
from support.torchrun import clean_env
from support.venvs import REPO, Venv, discover

from loadtrace.cli import main

VENVS = discover()


def write_seed2_checkpoint(venv: Venv, out: Path) -> Path:
    overrides = [f"--set={key}={value}" for key, value in field_facts.SEED2_CONFIG.items()]
    args = ["--layers", str(field_facts.SEED2_LAYERS), "--experts", str(field_facts.SEED2_EXPERTS)]
    args += ["--shard-size", field_facts.SEED2_SHARD_SIZE, *overrides]
    made = subprocess.run(
        [str(venv.python), str(REPO / "examples" / "make_checkpoint.py"), str(out), *args],
        cwd=out,
        env=clean_env(venv, {}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0 and field_facts.SEED2_SUMMARY in made.stdout, made.stdout + made.stderr
    return out


@pytest.fixture(scope="module")
def seed2_jobs(tmp_path_factory) -> Jobs:
    if not VENVS:
        pytest.skip("no venv with torchrun and transformers (see tests/support/venvs.py)")
    checkpoint = once(
        tmp_path_factory, "seed2-checkpoint", lambda: write_seed2_checkpoint(VENVS[0], tmp_path_factory.mktemp("seed2"))
    )
    return Jobs(checkpoint, tmp_path_factory)


@pytest.fixture(params=VENVS, ids=[venv.id for venv in VENVS])
def job(request, seed2_jobs: Jobs) -> Job:
    return seed2_jobs.get(request.param, "zero3", traced=True)


def report(job: Job) -> dict:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["report", str(job.trace_root), "--format", "json"])
    return json.loads(out.getvalue())


def test_the_independent_count_reproduces_the_report_behind_seed_2(job: Job):
    facts = field_facts.SEED2.get(job.venv.release)
    if facts is None:
        pytest.skip(f"no field facts for transformers {job.venv.transformers}")
    counted = tuple((job.counts[rank]["conversions"], job.counts[rank]["conversion_bytes"]) for rank in (0, 1))
    assert counted == facts[0], job.label


def test_every_ranks_conversions_are_counted_exactly(job: Job):
    ranks = {rank["rank"]: rank for rank in report(job)["ranks"]}
    for number in (0, 1):
        count = job.counts[number]
        assert count["conversions"] > 0, f"{job.label} rank {number}: the MoE converts on every rank"
        where = f"{job.label} rank {number}"
        found = (ranks[number]["conversions"], ranks[number]["conversion_bytes"])
        assert found == (count["conversions"], count["conversion_bytes"]), where


def test_a_rank_that_converted_real_bytes_is_named_under_one_cause(job: Job):
    facts = field_facts.SEED2.get(job.venv.release)
    if facts is None:
        pytest.skip(f"no field facts for transformers {job.venv.transformers}")
    findings = report(job)["findings"]
    assert {f["kind"] for f in findings} == facts[1], [f["detail"] for f in findings]
    assert all(f["ranks"] == [1] for f in findings), findings
    if findings:
        assert len({f["cause"] for f in findings}) == 1, findings  # one cause: the whole model on rank 1
        (conversion,) = [f for f in findings if f["kind"] == "duplicate_conversion"]
        assert conversion["bytes"] == job.counts[1]["conversion_bytes"]
