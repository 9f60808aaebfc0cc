"""Promise: ``loadtrace report`` over the real two-rank jobs (plain, FSDP cpu_ram_efficient, ZeRO-3, each installed
transformers release) gives per-rank totals equal to the worker's independent counts and the findings of the
field-facts table, including the one the newer release did not fix; ``loadtrace compare`` of a 5.12 run against a
later one shows what changed for rank 1."""

from __future__ import annotations

import json

import pytest
from support import field_facts
from support.multirank import STRATEGY, WORLD_SIZE, Job, cases
from support.venvs import discover

from loadtrace.cli import main

VENVS = discover()
CASES = cases(VENVS)
WARN = field_facts.WARN


@pytest.fixture(params=CASES, ids=[f"{venv.id}-{mode}" for venv, mode in CASES])
def job(request, jobs) -> Job:
    venv, mode = request.param
    return jobs.get(venv, mode, traced=True)


def report(capsys, job: Job, *flags: str) -> tuple[int, dict]:
    code = main(["report", str(job.trace_root), "--format", "json", *flags])
    return code, json.loads(capsys.readouterr().out)


def test_report_totals_equal_the_independent_count(job: Job, capsys):
    _, result = report(capsys, job)
    assert result["skipped_lines"] == 0 and len(result["traces"]) == 1
    ranks = {rank["rank"]: rank for rank in result["ranks"]}
    assert sorted(ranks) == list(range(WORLD_SIZE))
    for number, rank in ranks.items():
        count = job.counts[number]
        where = f"{job.label} rank {number}"
        assert (rank["files_opened"], rank["tensors_read"], rank["read_bytes"]) == (
            count["opens"],
            count["read_tensors"],
            count["read_bytes"],
        ), where
        cpu = count["materialized"].get("cpu", {}).get("bytes", 0)
        assert rank["materialized_bytes"].get("cpu", 0) == cpu, where
        # Every conversion, ZeRO-3's path included (the tiny MoE renames no key: every one is a WeightConverter's).
        assert (rank["conversions"], rank["conversion_bytes"]) == (count["conversions"], count["conversion_bytes"]), (
            where
        )
        assert (rank["world_size"], rank["strategy"]) == (WORLD_SIZE, STRATEGY[job.mode]), where
        assert rank["load_seconds"] > 0 and rank["peak_rss_bytes"] > 0 and rank["host"], where


def test_report_findings_match_what_each_release_really_does(job: Job, capsys):
    code, result = report(capsys, job, "--fail-on-findings")
    found = {(f["kind"], f["severity"], tuple(f["ranks"])) for f in result["findings"]}
    facts = field_facts.FINDINGS.get((job.venv.release, job.mode))
    if facts is None:
        pytest.skip(f"no field facts for transformers {job.venv.transformers}")
    expected = {(kind, severity, (1,)) for kind, severity in facts}
    assert found == expected, f"{job.label}: {[f['detail'] for f in result['findings']]}"
    assert code == (1 if any(severity == WARN for _, severity, _ in expected) else 0)


def test_compare_5_12_against_a_later_release_shows_rank_1_change(jobs, capsys):
    by_release = {venv.release: venv for venv in VENVS}
    later = sorted((r for r in by_release if r != "5.12"), key=lambda r: tuple(map(int, r.split("."))))
    if "5.12" not in by_release or not later:
        pytest.skip("needs a transformers 5.12 venv and a later one")
    old, new = jobs.get(by_release["5.12"], "fsdp", True), jobs.get(by_release[later[-1]], "fsdp", True)
    assert main(["compare", str(old.trace_root), str(new.trace_root), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {(r["phase"], r["rank"], r["metric"]): r for r in result["phases"]}
    created = rows[("materialize", 1, "bytes")]
    assert created["a"] == old.counts[1]["materialized"]["cpu"]["bytes"]  # a whole second model on 5.12
    assert created["b"] == new.counts[1]["materialized"]["cpu"]["bytes"] < created["a"]  # buffers only later
    assert rows[("read", 1, "bytes")]["difference"] == 0  # ... but rank 1 still reads everything
    differs = {r["name"] for r in result["resources"] if r["differs"]}
    assert "loadtrace.lib.transformers" in differs
