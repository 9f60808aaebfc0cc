"""Promise (docs/jaeger.md, ``loadtrace annotate``): what annotate writes for a job is the report's findings, near the
top of its trace, each named by its kind with its ranks, bytes and next step and linking to its ranks' loads; the
trace's root and rank groups where rank 0 never wrote them, placed so that Jaeger orders the ranks and its clock-skew
check passes; and the job's loads alone in a trace of their own. Nothing of it counts in the report, the same
findings written twice are the same spans, and the links' ``uiFind`` picks the flagged ranks' loads by span id.

Over recorded real jobs (tests/fixtures/spans/fsdp524, recorded before the structure existed; a 64-rank copy of it as
ranks write today, support/big_job.py, without rank 0's structure as when rank 0 dies).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.big_job import FIXTURE, write_big_job
from support.cli import run, run_json

from loadtrace import semconv as sc
from loadtrace.analysis.annotate import annotate_job, existing, trace_link
from loadtrace.analysis.report import report
from loadtrace.analysis.sources import read_files, spans_from_traces_data
from loadtrace.cli.annotate import structure_lines

STEP = sc.STRUCTURE_STEP_NS


def spans_of(documents: list[dict]) -> list[dict]:
    """(scope, resource, span) of every span the documents hold, OTLP JSON as written."""
    found = []
    for data in documents:
        for resource_spans in data["resourceSpans"]:
            resource = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    found.append({"scope": scope_spans["scope"]["name"], "resource": resource, **span})
    return found


def attribute(span: dict, key: str):
    value = next((a["value"] for a in span["attributes"] if a["key"] == key), None)
    return None if value is None else int(value["intValue"]) if "intValue" in value else value.get("stringValue")


@pytest.fixture(scope="module")
def died(tmp_path_factory) -> Path:
    """A 64-rank job whose rank 0 never wrote its structure (its last line)."""
    folder = write_big_job(tmp_path_factory.mktemp("annotate") / "job", ranks=64, slow=7, killed=30, job_id="a-64")
    (rank0,) = folder.glob("rank00000-*.jsonl")
    rank0.write_text("\n".join(rank0.read_text().splitlines()[:-1]) + "\n")
    return folder


def annotated(folder: Path):
    result = report(read_files(folder))
    (trace,) = result.traces
    return result, annotate_job(result, trace.job_id, existing(structure_lines(folder), trace.job_id), "the files")


def test_the_findings_are_the_reports_named_by_kind_first_under_the_root(died):
    result, made = annotated(died)
    spans = spans_of(made.documents[:1])
    root_id = f"{sc.job_trace_ids('a-64')[1]:016x}"
    (group,) = [s for s in spans if s["name"] == sc.SPAN_FINDINGS]
    findings = sorted(
        (s for s in spans if s.get("parentSpanId") == group["spanId"]), key=lambda s: s["startTimeUnixNano"]
    )
    assert group["parentSpanId"] == root_id and group["scope"] == sc.SCOPE_STRUCTURE
    assert [s["name"] for s in findings] == [f.kind for f in result.findings]
    for span, finding in zip(findings, result.findings, strict=True):
        assert attribute(span, sc.FOUND_BYTES) == finding.bytes and attribute(span, sc.FOUND_NEXT) == finding.next_step
        assert attribute(span, sc.FOUND_KIND) == finding.kind and attribute(span, sc.FOUND_SEVERITY) == finding.severity
        linked = {link["traceId"] for link in span.get("links", [])}
        assert linked <= {made.job_trace_id, made.loads_trace_id} and linked, span["name"]
    starts = [int(s["startTimeUnixNano"]) for s in spans if s.get("parentSpanId") == root_id]
    assert int(group["startTimeUnixNano"]) == min(starts), "the findings first among the root's children"


def test_a_trace_whose_rank_0_died_gets_its_root_and_groups_placed_for_jaeger(died):
    _, made = annotated(died)
    spans = spans_of(made.documents[:1])
    (root,) = [s for s in spans if not s.get("parentSpanId")]
    groups = sorted((s for s in spans if s["name"] == sc.SPAN_RANK_GROUP), key=lambda s: s["startTimeUnixNano"])
    assert [attribute(g, sc.RANK) for g in groups] == list(range(64)), "in rank order"
    assert [g["resource"]["service.name"]["stringValue"] for g in groups[:2]] == [
        "loadtrace rank 0",
        "loadtrace rank 1",
    ]
    start, end = int(root["startTimeUnixNano"]), int(root["endTimeUnixNano"])
    assert end - start == STEP and root["name"] == sc.job_operation(attribute(root, sc.MODEL), 64)
    measured = read_files(died).spans
    for g in groups:  # each after the root and longer than it, each before its rank's spans and shorter than them
        g_start, g_end = int(g["startTimeUnixNano"]), int(g["endTimeUnixNano"])
        assert start < g_start and g_end - g_start > end - start
        own = [s for s in measured if s.parent_span_id == g["spanId"]]
        assert all(s.start_ns >= g_start and s.end_ns - s.start_ns > g_end - g_start for s in own), attribute(
            g, sc.RANK
        )


def test_nothing_annotate_writes_counts_and_writing_it_again_writes_the_same(died, tmp_path, capsys):
    before = run_json(capsys, "report", str(died))
    code, out, err = run(capsys, "annotate", str(died))
    assert code == 0 and "findings; written to" in out, err
    assert run_json(capsys, "report", str(died)) == before
    (written,) = died.glob("annotations-*.jsonl")
    first = written.read_text()
    written.unlink()
    assert run(capsys, "annotate", str(died))[0] == 0
    (again,) = died.glob("annotations-*.jsonl")
    assert again.read_text() == first, "the same spans: Jaeger keeps one of each"
    again.unlink()


def test_a_recording_with_an_older_root_gets_findings_under_it_and_no_groups():
    result, made = annotated(FIXTURE)
    spans = spans_of(made.documents[:1])
    assert not [s for s in spans if s["name"] == sc.SPAN_RANK_GROUP] and not [
        s for s in spans if not s.get("parentSpanId")
    ]
    (group,) = [s for s in spans if s["name"] == sc.SPAN_FINDINGS]
    assert group["parentSpanId"] == f"{sc.job_trace_ids(result.traces[0].job_id or '')[1]:016x}"


def test_the_loads_view_holds_each_ranks_loads_and_the_links_find_the_flagged_ones_by_id():
    result, made = annotated(FIXTURE)
    view = spans_of(made.documents[1:])
    assert {s["scope"] for s in view} == {sc.SCOPE_LOADS_VIEW}
    loads = [s for s in view if s["name"] == sc.SPAN_FROM_PRETRAINED]
    assert sorted(attribute(s, sc.RANK) for s in loads) == [0, 1]
    assert all(attribute(s, sc.ABOUT).startswith("read 1.0 MB") for s in loads), "its figures in words"
    assert made.loads_find == next(s["spanId"] for s in loads if attribute(s, sc.RANK) == 1), "rank 1, flagged"
    (rank1,) = [s for s in read_files(FIXTURE).spans if s.name == sc.SPAN_FROM_PRETRAINED and s.resource[sc.RANK] == 1]
    assert made.job_find == rank1.span_id
    assert trace_link("http://j:16686/", made.loads_trace_id, made.loads_find) == (
        f"http://j:16686/trace/{made.loads_trace_id}?uiFind={made.loads_find}"
    )
    assert not list(spans_from_traces_data(made.documents[1])), "the analysis leaves the view out"


def test_report_prints_the_links_with_a_jaeger_url(capsys, monkeypatch):
    monkeypatch.setenv(sc.ENV_JAEGER_URL, "http://jaeger.example:16686")
    _, made = annotated(FIXTURE)
    code, out, _ = run(capsys, "report", str(FIXTURE))
    assert code == 0
    assert f"Jaeger: http://jaeger.example:16686/trace/{made.job_trace_id}?uiFind={made.job_find}" in out
    assert f"  its loads alone: http://jaeger.example:16686/trace/{made.loads_trace_id}?uiFind={made.loads_find}" in out
    monkeypatch.delenv(sc.ENV_JAEGER_URL)
    assert "Jaeger: " not in run(capsys, "report", str(FIXTURE))[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["annotate", "--jaeger", "http://127.0.0.1:9"],
        ["annotate", "--trace-id", "abc"],
        ["annotate", "/no/such/folder"],
    ],
)
def test_bad_input_is_one_line(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err


def test_annotate_link_format_prints_the_loads_link_alone(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(sc.ENV_JAEGER_URL, "http://j:16686")
    for path in FIXTURE.glob("*.jsonl"):
        (tmp_path / path.name).write_text(path.read_text())
    code, out, _ = run(capsys, "annotate", str(tmp_path), "--format", "link", "--no-file")
    _, made = annotated(FIXTURE)
    assert code == 0 and out == f"http://j:16686/trace/{made.loads_trace_id}?uiFind={made.loads_find}\n"
    assert json.dumps(made.documents)  # plain JSON
