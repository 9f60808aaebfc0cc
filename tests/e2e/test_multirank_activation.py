"""Promise: ``LOADTRACE=1`` in the environment of an unchanged job is all it takes, from a real (non-editable) install:
the ``.pth`` file reaches every torchrun worker; without the variable nothing is imported or patched."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.multirank import EXAMPLE_WORKER, WORLD_SIZE
from support.venvs import discover, installed_problems

VENVS = discover()

BY_ID = {"ids": [v.id for v in VENVS]}


@pytest.mark.parametrize("venv", VENVS, **BY_ID)
def test_loadtrace_is_a_real_install(venv):
    assert installed_problems(venv) == [], venv.install_hint()


@pytest.mark.parametrize("venv", VENVS, **BY_ID)
def test_workers_activate_from_the_installed_package(jobs, venv):
    job = jobs.get(venv, "fsdp", traced=True)  # a job every venv runs (support.multirank.cases)
    for rank in range(WORLD_SIZE):
        activation = job.counts[rank]["activation"]
        assert activation["loadtrace_imported"], f"rank {rank}: LOADTRACE=1 did not activate loadtrace"
        where = Path(activation["loadtrace_file"]).resolve()
        assert where.is_relative_to(venv.site_packages.resolve()), f"rank {rank} imported loadtrace from {where}"


@pytest.mark.parametrize("venv", VENVS, **BY_ID)
def test_unset_means_not_imported_and_not_patched(jobs, venv):
    job = jobs.get(venv, "fsdp", traced=False)
    for rank in range(WORLD_SIZE):
        activation = job.counts[rank]["activation"]
        assert activation == {
            "loadtrace_imported": False,
            "loadtrace_file": None,
            "zeros_like_original": True,
            "empty_like_original": True,
        }, f"rank {rank}"


@pytest.mark.parametrize("venv", VENVS[:1], ids=[v.id for v in VENVS[:1]])
def test_the_example_job_is_traced_unchanged(jobs, venv):
    """``examples/load.py`` as a user runs it: no test code in the process, still one trace with both ranks. The
    session's FSDP run of it (e2e/test_forecast_real_run.py and test_docs_samples_fresh_run.py read it too), against
    the same load counted by the test worker without loadtrace (e2e/test_weights_identical.py's). The current release;
    on 5.12, e2e/test_examples.py's run of the FSDP2 example holds its zeros_like sites to the same rule."""
    example = jobs.get(venv, "fsdp", traced=True, script=EXAMPLE_WORKER)
    reference = jobs.get(venv, "fsdp", traced=False)
    spans = example.spans().spans
    assert len({s.trace_id for s in spans}) == 1
    loads = {s.resource.get("loadtrace.rank"): s for s in spans if s.name == "transformers.from_pretrained"}
    assert sorted(loads) == [0, 1]
    for rank, span in loads.items():
        a = span.attributes
        assert a.get("loadtrace.read.bytes") == reference.counts[rank]["read_bytes"]
        assert example.digests[rank]["sha256"] == reference.digests[rank]["sha256"]
        # With no test wrapper in between, each call site is transformers' own line (the first frame outside torch):
        # one per rank, and on 5.12 rank 1's second model (zeros_like of the parameters, then of the buffers).
        cpu = reference.counts[rank]["materialized"]["cpu"]["bytes"]
        assert a.get("loadtrace.materialized.bytes.cpu") == cpu
        sites = a.get("loadtrace.materialized.sites") or []
        assert sites and all(s.startswith("modeling_utils.py:") and s.endswith(" cpu") for s in sites), sites
        assert sum(a.get("loadtrace.materialized.site_bytes")) == cpu
