"""Promise (issue 26): the report's table is for people. Symptoms of one cause show as one finding (a headline, a line
per symptom with its numbers, one ``next:``) while the JSON keeps every symptom with its kind, numbers and the cause;
sizes are printed once, human (``--wide`` and the JSON keep exact bytes); a finding is under 6 lines at 120 columns.

Over the stored real two-rank jobs under ``tests/fixtures/spans/`` (FSDP ``cpu_ram_efficient_loading`` on 5.24 and
5.12: three symptoms of one cause)."""

from __future__ import annotations

import json
import re

import pytest
from support.paths import FIXTURES

from loadtrace import semconv as sc
from loadtrace.cli import main

SYMPTOMS = {
    sc.FINDING_DUPLICATE_CHECKPOINT_READ,
    sc.FINDING_DUPLICATE_CONVERSION,
    sc.FINDING_NONZERO_RANK_MATERIALIZATION,
}
EXACT_AND_HUMAN = re.compile(r"\d[\d,]* B \(\d")


def run(capsys, monkeypatch, *argv: str) -> str:
    monkeypatch.chdir(FIXTURES)
    main(list(argv))
    return capsys.readouterr().out


def findings_block(table: str) -> list[list[str]]:
    """Each finding's lines: from one ``  SEVERITY`` line to the next."""
    text = table[table.index("findings (") :].split("\n\n")[0]
    entries: list[list[str]] = []
    for line in text.splitlines()[1:]:
        if re.match(r"  (WARNING|INFO) ", line):
            entries.append([line])
        elif entries:
            entries[-1].append(line)
    return entries


@pytest.mark.parametrize("job", ["fsdp524", "fsdp512"])
def test_one_finding_for_the_fsdp_cause_listing_its_three_symptoms_with_numbers(job, capsys, monkeypatch):
    table = run(capsys, monkeypatch, "report", f"spans/{job}")
    (entry,) = findings_block(table)
    assert entry[0].startswith("  WARNING rank 1 loaded the whole model under fsdp_cpu_ram_efficient"), entry[0]
    body = "\n".join(entry)
    for kind in SYMPTOMS:
        (line,) = [line for line in entry if line.startswith(f"    {kind}: ")]
        assert re.search(r"\d+(\.\d)? [kMG]?B", line), line
    assert body.count("next:") == 1

    data = json.loads(run(capsys, monkeypatch, "report", f"spans/{job}", "--format", "json"))
    assert {f["kind"] for f in data["findings"]} == SYMPTOMS
    assert {f["cause"] for f in data["findings"]} == {sc.CAUSE_WHOLE_MODEL_ON_OTHER_RANKS}
    assert all(f["bytes"] > 0 and f["evidence"]["per_rank"] for f in data["findings"])


@pytest.mark.parametrize("job", ["fsdp524", "fsdp512", "zero3_524", "plain524", "killed524", "faulty524"])
def test_the_table_prints_each_size_once_and_the_wide_table_exactly(job, capsys, monkeypatch):
    table = run(capsys, monkeypatch, "report", f"spans/{job}")
    assert not EXACT_AND_HUMAN.search(table), EXACT_AND_HUMAN.findall(table)
    assert "25,2" not in table  # the node's memory, in bytes
    wide = run(capsys, monkeypatch, "report", f"spans/{job}", "--wide")
    if "findings: none" not in wide and job != "plain524":
        assert EXACT_AND_HUMAN.search(wide), wide


@pytest.mark.parametrize("job", ["fsdp524", "fsdp512", "zero3_524", "plain524", "killed524", "faulty524"])
def test_a_finding_is_under_six_lines_at_120_columns(job, capsys, monkeypatch):
    """A finding of its own: under 6 lines. A cause's: its headline, at most 2 lines per symptom, one next."""
    table = run(capsys, monkeypatch, "report", f"spans/{job}")
    assert all(len(line) <= 120 for line in table.splitlines())
    for entry in findings_block(table) if "findings: none" not in table else []:
        symptoms = [line for line in entry if re.match(r"    [a-z_]+: ", line) and not line.startswith("    next:")]
        if not symptoms:
            assert len(entry) < 6, entry
            continue
        nexts = [number for number, line in enumerate(entry) if line.startswith("    next:")]
        assert len(nexts) == 1 and len(entry) - nexts[0] <= 3, entry
        assert nexts[0] - 1 <= 2 * len(symptoms), entry
