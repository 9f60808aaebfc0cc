"""Promise (docs/jaeger.md, "View it in Jaeger"): a job sending OTLP to the collector is ONE trace in Jaeger, holding
every span its ranks exported, with their rank tags; ``loadtrace report --jaeger`` tells what ``loadtrace report`` tells
over the job's files.

The real backends (``scripts/build_backends.sh``): Jaeger v2 with exporters/jaeger.yaml and the collector with
exporters/collector.yaml, both unchanged but for their addresses; a real 2-rank ``torchrun`` job (FSDP
``cpu_ram_efficient_loading``) over OTLP/HTTP and one over OTLP/gRPC, each writing its files too (``LOADTRACE_DIR``).
Jaeger's Go module has no UI assets: the query API the UI reads (``/api/v3``) is what is tested.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import backends
from support.cli import run_json
from support.installed import file_spans, job_trace_spans, require_installed
from support.multirank import EXAMPLE_WORKER
from support.torchrun import torchrun
from support.venvs import discover
from support.wire import PROTOCOLS, wire_env

from loadtrace import semconv as sc

# docs/jaeger.md's table of a rank's resource tags in Jaeger (step 3, "Find the trace").
JAEGER_WARNINGS = "@jaeger@warnings"
RANK_TAGS = (sc.RANK, sc.LOCAL_RANK, sc.WORLD_SIZE, "host.name", "process.pid", "service.instance.id", sc.LAUNCHER)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    backends.require()
    folder = tmp_path_factory.mktemp("backends")
    replayed = folder / "nothing-to-replay"
    replayed.mkdir()
    with backends.Jaeger(folder) as jaeger:
        sets = {
            "exporters.otlp/jaeger.endpoint": jaeger.otlp_grpc,
            "receivers.otlpjsonfile.include": f"[{replayed}/**/*.jsonl]",
        }
        with backends.Collector(folder, "collector.yaml", sets) as collector:
            yield jaeger, collector


@pytest.fixture(scope="module", params=PROTOCOLS)
def job(request, stack, checkpoint: Path, tmp_path_factory):
    """(protocol, the job's files folder, its trace id, the spans Jaeger answered as (resource, span) pairs)."""
    jaeger, collector = stack
    venv = discover()[0]
    require_installed(venv)
    protocol = request.param
    cwd = tmp_path_factory.mktemp(f"job-{protocol.replace('/', '-')}")
    endpoint = collector.grpc if protocol == "grpc" else collector.http
    env = {**wire_env("fsdp", cwd / "files", endpoint, protocol), "LOADTRACE_JOB_ID": f"backends-{cwd.name}"}
    torchrun(venv, EXAMPLE_WORKER, [str(checkpoint), "--mode", "fsdp"], cwd=cwd, env=env).check()
    trace_id = f"{sc.job_trace_ids(env['LOADTRACE_JOB_ID'])[0]:032x}"
    files = job_trace_spans(cwd / "files")  # not its loads view

    def complete() -> list | None:
        status, answer = jaeger.trace(trace_id, raw=True)  # a partial trace read adjusted keeps its warnings (#787)
        if status != 200:
            return None
        saved = cwd / "jaeger" / "answer.jsonl"
        saved.parent.mkdir(exist_ok=True)
        saved.write_text(json.dumps(answer["result"]) + "\n")
        found = file_spans(saved.parent)
        return found if len(found) >= len(files) else None

    # The collector batches for 2 s, Jaeger's own batch after it: settle 5 s more, so a second copy would be seen.
    in_jaeger = backends.wait_for(f"{protocol} job's {len(files)} spans in Jaeger", complete, settle_s=5)
    return protocol, cwd / "files", trace_id, in_jaeger


def test_one_trace_with_every_span_the_ranks_exported(job, stack):
    protocol, folder, trace_id, in_jaeger = job
    files = job_trace_spans(folder)
    assert {span["traceId"] for _, span in in_jaeger} == {trace_id}, protocol
    got = sorted(span["spanId"] for _, span in in_jaeger)
    assert got == sorted(span["spanId"] for _, span in files), protocol  # each once: none lost, none twice
    by_id = {span["spanId"]: (resource, span) for resource, span in in_jaeger}
    for resource, span in files:
        got_resource, got_span = by_id[span["spanId"]]
        assert (got_span["name"], got_span.get("parentSpanId") or "") == (span["name"], span.get("parentSpanId") or "")
        assert JAEGER_WARNINGS not in got_span["attributes"], (span["name"], got_span["attributes"][JAEGER_WARNINGS])
        assert got_span["attributes"] == span["attributes"], span["name"]
        assert {tag: got_resource.get(tag) for tag in RANK_TAGS} == {tag: resource.get(tag) for tag in RANK_TAGS}
    assert {resource.get(sc.RANK) for resource, _ in in_jaeger} == {0, 1, None}  # None: the job's root, findings
    # No span Jaeger warns of as its query service reads the trace (its adjusters): none before its parent, none
    # zero-length (its sanitizer's "negative duration"), every parent there.
    jaeger, _ = stack
    status, answer = jaeger.trace(trace_id)
    flagged = [(s["name"], a["value"]) for rs in answer["result"]["resourceSpans"] for ss in rs["scopeSpans"]
               for s in ss["spans"] for a in s.get("attributes", []) if a["key"] == JAEGER_WARNINGS]  # fmt: skip
    assert status == 200 and not flagged, flagged


def test_report_from_jaeger_equals_report_over_files(job, stack, capsys):
    protocol, folder, trace_id, _ = job
    jaeger, _ = stack
    files = run_json(capsys, "report", str(folder))
    got = run_json(capsys, "report", "--jaeger", jaeger.url, "--trace-id", trace_id)
    assert got["ranks"] == files["ranks"], protocol
    assert got["findings"] == files["findings"], protocol
    assert "duplicate_checkpoint_read" in {f["kind"] for f in got["findings"]}
    assert got["traces"] == files["traces"], protocol


def test_latest_and_jobs_read_the_same_job(job, stack, capsys):
    protocol, folder, trace_id, _ = job
    jaeger, _ = stack
    latest = run_json(capsys, "report", "--jaeger", jaeger.url, "--latest")
    # Both jobs share the Jaeger: the latest is the one that started last (the gRPC run, the second parameter).
    ((latest_trace,),) = [[t["trace_id"] for t in latest["traces"]]]
    if protocol == PROTOCOLS[-1]:
        assert latest_trace == trace_id
        assert latest["ranks"] == run_json(capsys, "report", str(folder))["ranks"]
    jobs = run_json(capsys, "jobs", "--jaeger", jaeger.url, "--service", "loadtrace")
    from_files = run_json(capsys, "jobs", str(folder))
    (row,) = [r for r in jobs["jobs"] if r["trace_id"] == trace_id]
    (file_row,) = from_files["jobs"]
    assert row == file_row, protocol
