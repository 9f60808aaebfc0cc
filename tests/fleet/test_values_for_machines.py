"""Promise (docs/reference.md, ``loadtrace.data``): a span's values for machines (timestamps, arrays of them, folded
JSON) travel on one span event, out of the tags Jaeger's UI lists for a person, and every reader reads them back as
the span's own: the report over such files is the report over the same spans with them as attributes (files written
before the event, as tests/fixtures and docs/samples hold them), from the files and from ClickHouse alike; the job's
structure (root, rank groups, findings, loads view) changes no number.

The spans: a recorded 2-rank FSDP2 job (tests/fixtures/fsdp2_prepare524, recorded before the event) rewritten as a
rank of today writes them (the values moved onto the event), and a 1,024-rank copy of docs/samples/fsdp524 through the
span budget (support/big_job.py: folded spans, and the event as ranks write it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.big_job import RECORDED, write_big_job
from support.cli import run, run_json
from support.paths import FIXTURES

from loadtrace import semconv as sc
from loadtrace.analysis.annotate import annotate_job, existing
from loadtrace.analysis.report import report
from loadtrace.analysis.sources import read_files
from loadtrace.cli.annotate import structure_lines

chdb_session = pytest.importorskip("chdb.session")


def moved(span: dict) -> dict:
    """The span as a rank writes it now: its ``DATA_KEYS`` on a ``DATA_EVENT`` at its end."""
    data = [a for a in span.get("attributes", []) if a["key"] in sc.DATA_KEYS]
    if data:
        span["attributes"] = [a for a in span["attributes"] if a["key"] not in sc.DATA_KEYS]
        event = {"timeUnixNano": span["endTimeUnixNano"], "name": sc.DATA_EVENT, "attributes": data}
        span["events"] = [*span.get("events", []), event]
    return span


def rewrite(source: Path, target: Path) -> Path:
    """Every trace file of ``source`` with its spans ``moved`` (state files copied as they are)."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.suffix != sc.TRACE_FILE_SUFFIX:
            shutil.copy(path, target / path.name)
            continue
        lines = []
        for text in path.read_text().splitlines():
            data = json.loads(text)
            for resource_spans in data["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    scope_spans["spans"] = [moved(span) for span in scope_spans["spans"]]
            lines.append(json.dumps(data, separators=(",", ":")))
        (target / path.name).write_text("\n".join(lines) + "\n")
    return target


@pytest.fixture(scope="module", params=["2 ranks", "1,024 ranks"])
def folders(request, tmp_path_factory) -> tuple[Path, Path]:
    """(the job's files as recorded, the same with the values on the event and the job's annotations beside)."""
    root = tmp_path_factory.mktemp("machines")
    if request.param == "2 ranks":
        old = FIXTURES / "fsdp2_prepare524"
    else:
        old = write_big_job(root / "big", ranks=1024, source=RECORDED)
    new = rewrite(old, root / "new")
    spans = read_files(new)
    result = report(spans)
    (trace,) = result.traces
    found = existing(structure_lines(new), trace.job_id)
    # the recording was made before the structure (its root: rank 0's loadtrace.job); its copy has today's
    assert found.old_root == (request.param == "2 ranks") and len(found.groups) == (0 if found.old_root else 1024)
    made = annotate_job(result, trace.job_id, found, "the files of this test")
    text = "".join(json.dumps(data) + "\n" for data in made.documents)
    (new / "annotations-test-1.jsonl").write_text(text)
    return old, new


def test_the_event_reads_back_as_attributes(folders):
    old, new = folders
    assert any(sc.DATA_EVENT in path.read_text() for path in new.glob("rank*.jsonl"))
    before, after = read_files(old), read_files(new)
    assert sorted((s.span_id, s.name, s.attributes) for s in after.spans) == sorted(
        (s.span_id, s.name, s.attributes) for s in before.spans
    ), "no span added, none lost, the same attributes"


def test_the_report_is_the_same_from_files_and_from_clickhouse(folders, capsys, tmp_path):
    old, new = folders
    expected = run_json(capsys, "report", str(old))
    assert run_json(capsys, "report", str(new)) == expected
    url = f"chdb:{tmp_path / 'db'}"
    code, _, err = run(capsys, "ingest", str(new), "--clickhouse", url)
    assert code == 0, err
    (trace,) = expected["traces"]
    from_table = run_json(capsys, "report", "--clickhouse", url, "--job", trace["trace_id"])
    assert from_table["ranks"] == expected["ranks"]
    assert from_table["findings"] == expected["findings"]
    assert from_table["traces"] == expected["traces"]
