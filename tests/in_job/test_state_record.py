"""Promise (issue 43): a state file decodes into a typed record (``statefile.State``), and typing it changed nothing in
the file: one written before (``fixtures/state/every-field-v1.state``, a distinct value in every field) reads the same
field by field, and today's writer writes it byte for byte and reads back what it wrote. A renamed or misspelt field
fails at type checking, on the reading and the writing side."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from loadtrace import statefile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"
FIXTURE = FIXTURES / "every-field-v1.state"
REPO = Path(__file__).resolve().parents[2]


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_every_field", FIXTURES / "make_every_field.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def by_name(state: statefile.State) -> dict[str, Any]:
    """The record's fields under the file's names: its two ``Counters`` opened into the counters and their ``load_``
    twins."""
    found = {}
    for item in fields(state):
        value = getattr(state, item.name)
        if isinstance(value, statefile.Counters):
            prefix = "load_" if item.name == "load_counters" else ""
            found.update({f"{prefix}{counter.name}": getattr(value, counter.name) for counter in fields(value)})
        elif item.name not in ("slots", "open_scopes", *STORAGE):
            found[item.name] = value
    return found


STORAGE = ("storage_read_load_start", "storage_read_now", "storage_sampled_ns", "storage_intervals")


def encoded(values: dict[str, Any]) -> dict[str, Any]:
    """The fields whose file value the record decodes into a meaning, decoded as the record documents it."""
    meanings = {
        "rank": values["rank"] if values["rank"] >= 0 else None,
        "local_rank": values["local_rank"] if values["local_rank"] >= 0 else None,
        "status": statefile.STATUSES.get(values["status"], "unknown"),
        "memory_limit_source": statefile.LIMIT_SOURCES.get(values["memory_limit_source"]),
    }
    return {**values, **meanings}


def test_a_file_written_before_the_record_was_typed_reads_the_same():
    before = json.loads((FIXTURES / "every-field-v1.json").read_text())  # what the untyped reader decoded
    state = statefile.read(FIXTURE)
    assert state is not None
    expected = encoded({**before["ints"], **before["texts"]})
    assert by_name(state) == expected
    # The storage reads came later, in the header's gap (statefile.FETCH_OFFSET): zeros there, read as not known.
    assert [getattr(state, name) for name in STORAGE] == [0, 0, 0, []]
    assert len(expected) == 57, "every field of version 1: 38 ints, 10 texts, 8 live ints, 1 live text"
    assert [list(slot) for slot in state.slots] == before["slots"], "the slots handed out (the rest are zeros)"
    assert before["slots_in_file"] == 256 and FIXTURE.read_bytes()[statefile.HEADER_BYTES + 16 * 3 :] == bytes(16 * 253)
    assert [vars(scope) for scope in state.open_scopes] == before["open_scopes"]
    assert (state.rank, state.status) == (before["rank"], before["status"])
    for since_load, key in ((True, "totals"), (False, "totals_of_process")):
        totals = state.totals(since_load)
        assert {item.name: getattr(totals, item.name) for item in fields(totals)} == before[key]
        assert state.materialized(since_load) == totals.materialized() == before[key.replace("totals", "materialized")]


def test_a_file_written_before_reads_as_its_writer_meant():
    """The values as the fixture's script wrote them, independently of any reader: no field was swapped with another
    that happens to decode alike."""
    made = _generator()
    state = statefile.read(FIXTURE)
    assert state is not None
    cgroup_size = dict(statefile.TEXT_FIELDS)["cgroup"]
    texts = {**made.TEXTS, "cgroup": made.TEXTS["cgroup"][: cgroup_size - 1], "exception": made.EXCEPTION}
    ints = {"version": 1, "slots_used": 3, "load_first_slot": 1, **made.INTS}
    assert by_name(state) == encoded({**ints, **made.LIVE, **texts})
    assert state.memory_limit_source == "cgroup v2" and state.status == "loading" and state.rank == 3
    assert state.slots[:3] == made.READS
    expected_scopes = [(name[: statefile.SCOPE_NAME_BYTES], *ids) for name, *ids in made.SCOPES]
    assert [(s.name, s.trace_id, s.parent_span_id, s.start_ns, s.span_id) for s in state.open_scopes] == expected_scopes
    totals = state.totals()
    assert (totals.tensors_read, totals.read_bytes, totals.files_opened, totals.hook_errors) == (50, 5_000, 7, 1)
    assert totals.materialized() == {"cpu": 900_000, "cuda": 1_800_000, "meta": 2_700, "other": 3_600}


def test_todays_writer_writes_the_same_bytes(tmp_path):
    path = tmp_path / "again.state"
    _generator().write(path)
    assert path.read_bytes() == FIXTURE.read_bytes()


def test_todays_writer_round_trips(tmp_path):
    """Each field written through the writer's typed names reads back from the record's attribute of that name."""
    path = tmp_path / "trip.state"
    identity: dict[statefile.HeaderField, int] = {"pid": 77, "rank": 0, "local_rank": 0, "world_size": 1}
    writer = statefile.Writer(str(path), identity, {"host": "h", "job_id": "j"})
    writer.load_started()
    slot = writer.new_slot()
    slot.add(4096)
    written: dict[str, Any] = {}
    for offset, name in enumerate(statefile.HEADER_FIELDS):
        if name not in ("version", "slots_used", "load_first_slot", "status", "memory_limit_source"):
            writer[name] = written[name] = 10_000 + offset
    for offset, live in enumerate(statefile.LIVE_FIELDS):
        written[live] = 20_000 + offset
        writer.set_live(live, written[live])
    for text, _ in (*statefile.TEXT_FIELDS, *statefile.LIVE_TEXT_FIELDS):
        written[text] = f"{text}-é"
        writer.set_text(text, written[text])
    writer["status"], writer["memory_limit_source"] = statefile.STATUS_SIGNALLED, statefile.LIMIT_NODE
    stretches = [(30_000 + 10 * i, 30_005 + 10 * i) for i in range(statefile.FETCH_INTERVALS)]
    writer.fetched(1_000, 9_000, 40_000, stretches)
    writer.close()
    state = statefile.read(path)
    assert state is not None
    assert [getattr(state, name) for name in STORAGE] == [1_000, 9_000, 40_000, stretches]
    assert by_name(state) == {
        **written,
        "version": statefile.VERSION,
        "slots_used": 1,
        "load_first_slot": 0,
        "status": "signalled",
        "memory_limit_source": "node",
    }
    assert state.slots[0] == (1, 4096) and state.open_scopes == []


@pytest.mark.parametrize(("rank", "status", "source"), [(-1, 99, 7), (5, statefile.STATUS_EXITED, 0)])
def test_encoded_fields_decode_to_their_meaning(tmp_path, rank, status, source):
    """-1 is an unknown rank; a status or limit source this loadtrace does not know reads as unknown, never raises."""
    path = tmp_path / "s.state"
    writer = statefile.Writer(str(path), {"rank": rank, "local_rank": rank}, {})
    writer["status"], writer["memory_limit_source"] = status, source
    writer.close()
    state = statefile.read(path)
    assert state is not None
    assert state.rank == state.local_rank == (None if rank < 0 else rank)
    assert state.status == statefile.STATUSES.get(status, "unknown")
    assert state.memory_limit_source == statefile.LIMIT_SOURCES.get(source)


def test_the_record_has_a_field_per_field_of_the_file():
    names = set(by_name(statefile.read(FIXTURE)))  # type: ignore[arg-type]
    texts = {name for name, _ in (*statefile.TEXT_FIELDS, *statefile.LIVE_TEXT_FIELDS)}
    assert names == {*statefile.HEADER_FIELDS, *statefile.LIVE_FIELDS, *texts}
    assert [item.name for item in fields(statefile.Counters)] == list(statefile.COUNTERS)
    assert statefile.LOAD_COUNTERS == tuple(f"load_{name}" for name in statefile.COUNTERS)


MISNAMED = """
from loadtrace import statefile

def reader(state: statefile.State) -> int:
    return state.rss_peek

def writer(state: statefile.Writer) -> None:
    state["rss_peek"] = 1
    state.set_text("phaze", "")
    state.set_live("rss_nwo", 1)
    state.add("files_openend", 1)
"""


@pytest.mark.integration
def test_a_misnamed_field_fails_at_type_checking(tmp_path):
    source = tmp_path / "misnamed.py"
    source.write_text(MISNAMED)
    mypy = Path(sys.executable).parent / "mypy"
    result = subprocess.run(
        [str(mypy), "--no-incremental", "--follow-imports=silent", str(source)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MYPYPATH": str(REPO)},
    )
    errors = [line for line in result.stdout.splitlines() if f"{source.name}:" in line and "error:" in line]
    assert len(errors) == 5, result.stdout + result.stderr
    assert all(name in result.stdout for name in ("rss_peek", "phaze", "rss_nwo", "files_openend"))
