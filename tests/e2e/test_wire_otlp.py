"""Promise: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a real two-rank job's spans leave over OTLP (http/protobuf, or
grpc with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``) as one trace, each rank with the resource and span attributes of
docs/reference.md's span reference, and with ``LOADTRACE_DIR`` set as well the files hold exactly the same spans,
numbers and ids. Each rank's startup and load also leave as one measurement of the startup histograms, with no job,
trace, rank or process in them, and an exemplar naming the job's trace and the span measured.

The receivers are this test's own (``support/wire.py``) on 127.0.0.1; what arrived is decoded with opentelemetry-proto,
independently of loadtrace's encoding.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from pathlib import Path

import pytest
from support import field_facts
from support.installed import require_installed
from support.multirank import STRATEGY, WORLD_SIZE, read_spans
from support.span_reference import documented
from support.venvs import discover
from support.wire import GRPC_METHOD, PROTOCOLS, TRACES_PATH, WIRE_CLUSTER, WireRun, attributes, wire_run

from loadtrace import semconv, statefile

VENVS = discover()
MODE = "fsdp"  # rank 1 reads, converts and holds a whole model: every byte counter is non-zero somewhere
# Added to every Resource by the OpenTelemetry SDK itself (Resource.create): standard, not loadtrace's to document.
SDK_RESOURCE = {"telemetry.sdk.language", "telemetry.sdk.name", "telemetry.sdk.version"}


@pytest.fixture(scope="module", params=PROTOCOLS)
def wire(request, checkpoint: Path, tmp_path_factory) -> WireRun:
    venv = VENVS[0]
    require_installed(venv)
    return wire_run(venv, request.param, checkpoint, tmp_path_factory, MODE)


def measured(wire: WireRun) -> list:
    """The ranks' own spans (scope ``loadtrace``): not the job's structure, findings or loads view (docs/jaeger.md)."""
    return [span for span in wire.spans if span.scope[0] == semconv.SCOPE_NAME]


def job_trace(wire: WireRun) -> list:
    """The job's trace as it arrived: the ranks' spans and the structure rank 0 wrote (root, groups, findings)."""
    return [span for span in wire.spans if span.scope[0] != semconv.SCOPE_LOADS_VIEW]


def by_rank(spans) -> dict[int, list]:
    ranks: dict[int, list] = {}
    for span in spans:
        ranks.setdefault(span.resource.get("loadtrace.rank"), []).append(span)
    return ranks


def only(spans, name: str, rank: int | None = None):
    found = [s for s in spans if s.name == name and (rank is None or s.resource.get("loadtrace.rank") == rank)]
    assert len(found) == 1, f"expected one {name!r} span, found {len(found)}"
    return found[0]


# The promises ------------------------------------------------------------------------------------------------------


def test_spans_arrive_as_otlp_export_calls(wire: WireRun):
    assert wire.arrivals, f"{wire.label}: nothing arrived at the receiver\n{wire.run.tail()}"
    assert not wire.rejected, f"{wire.label}: requests the receiver refused: {wire.rejected}"
    for arrival in wire.arrivals:
        if wire.protocol == "grpc":
            assert arrival.path == GRPC_METHOD and arrival.content_type in (None, "application/grpc")
        else:
            assert (arrival.path, arrival.content_type) == (TRACES_PATH, "application/x-protobuf")
        scopes = {ss.scope.name for rs in arrival.request.resource_spans for ss in rs.scope_spans}
        if "loadtrace/" in (arrival.user_agent or ""):  # rank 0's findings, from ``loadtrace annotate`` at its exit
            assert scopes <= semconv.NOT_MEASURED_SCOPES, scopes
        else:
            assert "OTel-OTLP-Exporter-Python" in (arrival.user_agent or ""), arrival.user_agent
    log = wire.run.log.read_text(errors="replace")
    assert "loadtrace:" not in log, f"{wire.label}: loadtrace complained:\n{wire.run.tail()}"


def test_one_trace_across_ranks_with_one_root(wire: WireRun):
    spans = job_trace(wire)
    assert {s.trace_id for s in spans} and len({s.trace_id for s in spans}) == 1, Counter(s.trace_id for s in spans)
    assert set(by_rank(measured(wire))) == set(range(WORLD_SIZE))
    twice = [k for k, n in Counter(s.span_id for s in spans).items() if n > 1]
    assert not twice, f"{wire.label}: span ids sent more than once: {twice}"
    ids = {s.span_id for s in spans}
    (root,) = [s for s in spans if not s.parent_span_id]
    job_id, model = root.resource["loadtrace.job.id"], Path(only(spans, "transformers.from_pretrained", 0).attributes[
        "loadtrace.checkpoint"]).name  # fmt: skip
    assert (root.name, root.scope[0]) == (semconv.job_operation(model, WORLD_SIZE), semconv.SCOPE_STRUCTURE)
    assert {k: root.attributes[k] for k in ("loadtrace.job.id", "loadtrace.model", "loadtrace.world_size")} == {
        "loadtrace.job.id": job_id, "loadtrace.model": model, "loadtrace.world_size": WORLD_SIZE
    }  # fmt: skip
    assert root.end_ns - root.start_ns == semconv.STRUCTURE_STEP_NS and root.start_ns < min(
        s.start_ns for s in spans if s is not root
    ), "the root: 1 µs before every other span"
    orphans = [
        (s.name, s.resource.get("loadtrace.rank")) for s in spans if s.parent_span_id and s.parent_span_id not in ids
    ]
    assert not orphans, f"{wire.label}: parents that never arrived: {orphans}"


def test_resource_says_which_rank(wire: WireRun):
    pattern, _ = documented()
    host = socket.gethostname()
    job_ids, pids = set(), set()
    for rank, spans in by_rank(measured(wire)).items():
        resources = {tuple(sorted(s.resource.items())) for s in spans}
        assert len(resources) == 1, f"{wire.label} rank {rank}: {len(resources)} resources"
        r = spans[0].resource
        where = f"{wire.label} rank {rank}"
        assert (r["loadtrace.rank"], r["loadtrace.local_rank"]) == (rank, rank), where
        assert (r["loadtrace.world_size"], r["loadtrace.local_world_size"]) == (WORLD_SIZE, WORLD_SIZE), where
        assert r["loadtrace.launcher"] == "torchrun", where
        assert (r["service.name"], r["service.namespace"]) == (f"loadtrace rank {rank}", "loadtrace"), where
        assert r["service.instance.id"] == f"{r['loadtrace.job.id']}/rank-{rank}", where
        assert r["host.name"] == host, where
        assert isinstance(r["process.pid"], int) and r["process.pid"] != os.getpid(), where
        assert r["loadtrace.job.id"] not in ("", "none") and r["loadtrace.job.id_source"], where
        assert r["loadtrace.lib.transformers"] == wire.venv.transformers, where
        assert r.get("loadtrace.version"), where
        undocumented = sorted(k for k in r if k not in SDK_RESOURCE and not pattern.fullmatch(k))
        assert not undocumented, (
            f"{where}: resource attributes not in docs/reference.md's span reference: {undocumented}"
        )
        job_ids.add(r["loadtrace.job.id"])
        pids.add(r["process.pid"])
    assert len(job_ids) == 1 and len(pids) == WORLD_SIZE, (job_ids, pids)


def test_every_span_and_attribute_is_documented(wire: WireRun):
    """docs/reference.md's span reference promises every span and every attribute: nothing on the wire may be missing
    from it."""
    _, documented_spans = documented()
    undocumented: dict[str, set[str]] = {}
    for span in wire.spans:
        pattern = documented_spans.get(documented_as(span))
        if pattern is None:
            undocumented.setdefault(span.name, set()).add("(span name)")
            continue
        undocumented.setdefault(span.name, set()).update(k for k in span.attributes if not pattern.fullmatch(k))
    undocumented = {name: sorted(keys) for name, keys in undocumented.items() if keys}
    assert not undocumented, f"{wire.label}: on the wire but not in docs/reference.md's span reference: {undocumented}"


def documented_as(span) -> str:
    """The span's name as docs/reference.md lists it: the job's root (and its loads view's) by ``loadtrace.job``, a
    finding by ``loadtrace.findings`` (each is named by its kind)."""
    if span.scope[0] in semconv.NOT_MEASURED_SCOPES and not span.parent_span_id:
        return semconv.SPAN_JOB
    return semconv.SPAN_FINDINGS if span.name in semconv.FINDING_KINDS else span.name


def test_span_attributes_carry_the_loads_numbers(wire: WireRun, checkpoint: Path):
    for span in measured(wire):
        where = f"{wire.label} rank {span.resource.get('loadtrace.rank')} {span.name}"
        assert span.scope[0] == "loadtrace" and span.status_code == 0, where
        assert span.kind == 1, f"{where}: kind {span.kind}, expected INTERNAL (1)"
    for rank, spans in by_rank(measured(wire)).items():
        where = f"{wire.label} rank {rank}"
        load = only(spans, "transformers.from_pretrained")
        a = load.attributes
        assert a["loadtrace.strategy"] == STRATEGY[MODE], where
        assert a["loadtrace.model.class"] == "Qwen3MoeForCausalLM" and a["loadtrace.checkpoint"] == str(checkpoint), (
            where
        )
        assert a["loadtrace.hook_errors"] == 0, where
        assert a["loadtrace.rss.peak"] >= max(a["loadtrace.rss.before"], a["loadtrace.rss.after"]) > 0, where
        # Under FSDP cpu_ram_efficient loading both ranks read the whole checkpoint, on every release so far.
        assert (a["loadtrace.files.opened"], a["loadtrace.read.tensors"], a["loadtrace.read.bytes"]) == (
            field_facts.FILES,
            field_facts.TENSORS,
            field_facts.BYTES,
        ), where
        assert a["loadtrace.model.held_bytes.cpu"] == field_facts.MODEL_BYTES, where
        assert a["loadtrace.materialized.calls"] > 0 and a["loadtrace.materialized.bytes.cpu"] > 0, where
        sites, site_bytes = a["loadtrace.materialized.sites"], a["loadtrace.materialized.site_bytes"]
        assert (
            isinstance(sites, list)
            and len(sites) == len(site_bytes)
            and sum(site_bytes) <= sum(v for k, v in a.items() if k.startswith("loadtrace.materialized.bytes."))
        ), where
        files = [s for s in spans if s.name == "safetensors.open"]
        assert len(files) == field_facts.FILES, where
        assert sum(s.attributes["loadtrace.read.bytes"] for s in files) == a["loadtrace.read.bytes"], where
        assert sum(s.attributes["loadtrace.read.tensors"] for s in files) == a["loadtrace.read.tensors"], where
        for span in files:
            path = Path(span.attributes["loadtrace.file.path"])
            assert path.parent.resolve() == checkpoint.resolve(), f"{where}: {path}"
            assert span.attributes["loadtrace.file.size"] == os.path.getsize(path), f"{where}: {path}"
            assert span.attributes["loadtrace.file.tensors"] > 0, f"{where}: {path}"
            assert span.parent_span_id == load.span_id, f"{where}: {path} not under from_pretrained"
        for span in spans:
            if span.name.startswith("transformers.") and span.name != "transformers.from_pretrained":
                assert span.attributes["loadtrace.calls"] >= 1, f"{where} {span.name}"
        assert len(spans) <= a["loadtrace.files.opened"] + 20 + (rank == 0), (
            f"{where}: {Counter(s.name for s in spans)}"
        )


BYTE_KEYS = (
    "loadtrace.read.bytes",
    "loadtrace.read.tensors",
    "loadtrace.files.opened",
    "loadtrace.materialized.calls",
    "loadtrace.materialized.bytes.cpu",
    "loadtrace.model.held_bytes.cpu",
)


def test_files_hold_the_same_spans_as_the_wire(wire: WireRun):
    files = sorted(wire.files_dir.glob("*.jsonl"))
    assert [f.name.split("-")[0] for f in files] == ["annotations", "rank00000", "rank00001"], files
    assert not (wire.run.cwd / "loadtrace-traces").exists(), "LOADTRACE_DIR was set: nothing under ./loadtrace-traces"
    leftovers = sorted(p.name for p in wire.files_dir.iterdir() if p.suffix not in (".jsonl", semconv.STATE_SUFFIX))
    assert not leftovers, f"{wire.label}: left beside the trace files after a clean exit: {leftovers}"
    states = [statefile.read(p) for p in wire.files_dir.glob(f"*{semconv.STATE_SUFFIX}")]
    assert len(states) == 2 and all(s is not None and s.status == "exited" for s in states), (
        f"{wire.label}: a rank that exited cleanly must say so in its state file"
    )
    from_files = read_spans(wire.files_dir)
    assert from_files.skipped_lines == 0
    on_file = {s.span_id: s for s in from_files.spans}
    on_wire = {s.span_id: s for s in measured(wire)}
    assert len(on_file) == len(from_files.spans), "a span id twice in the files"
    only_file = sorted((s.name, s.resource.get("loadtrace.rank")) for k, s in on_file.items() if k not in on_wire)
    only_wire = sorted((s.name, s.resource.get("loadtrace.rank")) for k, s in on_wire.items() if k not in on_file)
    assert not only_file and not only_wire, f"{wire.label}: only in files {only_file}, only on the wire {only_wire}"
    for span_id, w in on_wire.items():
        f = on_file[span_id]
        where = f"{wire.label} rank {w.resource.get('loadtrace.rank')} {w.name} {span_id}"
        assert (f.trace_id, f.parent_span_id, f.name, f.start_ns, f.end_ns, f.status_code) == (
            w.trace_id,
            w.parent_span_id,
            w.name,
            w.start_ns,
            w.end_ns,
            w.status_code,
        ), where
        assert f.attributes == w.attributes, where
        assert f.resource == w.resource, where
    # The numbers the report is built from, rank by rank (already implied above; spelled out for the failure message).
    for rank, spans in by_rank(measured(wire)).items():
        w = only(spans, "transformers.from_pretrained")
        f = on_file[w.span_id]
        assert {k: w.attributes.get(k) for k in BYTE_KEYS} == {k: f.attributes.get(k) for k in BYTE_KEYS}, rank
        converts = [s for s in spans if s.name == "transformers.convert"]
        assert [on_file[s.span_id].attributes.get("loadtrace.convert.bytes") for s in converts] == [
            s.attributes.get("loadtrace.convert.bytes") for s in converts
        ], rank


# Startup metrics (issue 35) ----------------------------------------------------------------------------------------

SDK_ONLY = {"service.name", *SDK_RESOURCE}
MEASURED = {
    semconv.METRIC_STARTUP_DURATION: semconv.SPAN_STARTUP,
    semconv.METRIC_LOAD_DURATION: semconv.SPAN_FROM_PRETRAINED,
}


def histogram_points(wire: WireRun) -> dict[str, list]:
    """metric name → [(resource, temporality, data point)] of every histogram that arrived."""
    found: dict[str, list] = {}
    for request in wire.metrics:
        for resource_metrics in request.resource_metrics:
            resource = attributes(resource_metrics.resource.attributes)
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    if metric.WhichOneof("data") == "histogram":
                        for point in metric.histogram.data_points:
                            entry = (resource, metric.histogram.aggregation_temporality, point)
                            found.setdefault(metric.name, []).append(entry)
    return found


def test_each_ranks_startup_and_load_arrive_as_histograms_without_identity_and_with_the_jobs_trace(wire: WireRun):
    spans = measured(wire)
    job_id = spans[0].resource["loadtrace.job.id"]
    (trace_id,) = {s.trace_id for s in spans}
    identity = {job_id, trace_id, *(str(s.resource["process.pid"]) for s in spans)}
    identity |= {s.resource["service.instance.id"] for s in spans}
    found = histogram_points(wire)
    assert set(found) == set(MEASURED), f"{wire.label}: histograms that arrived: {sorted(found)}"
    for metric, span_name in MEASURED.items():
        taken = {s.span_id: s for s in spans if s.name == span_name}
        assert len(taken) == WORLD_SIZE, f"{wire.label}: {span_name} spans {len(taken)}"
        exemplars = {}
        for resource, temporality, point in found[metric]:
            where = f"{wire.label} {metric}"
            assert set(resource) == SDK_ONLY and resource["service.name"] == "loadtrace", f"{where}: {resource}"
            assert temporality == 1, f"{where}: delta, so that a collector adds every rank's up"
            labels = attributes(point.attributes)
            assert labels[semconv.CLUSTER] == WIRE_CLUSTER and labels[semconv.STRATEGY] == STRATEGY[MODE], where
            assert set(labels) <= {semconv.CLUSTER, semconv.STRATEGY, semconv.STARTUP_END, semconv.ERROR_TYPE}, labels
            assert not identity & {str(v) for v in [*labels.values(), *resource.values()]}, f"{where}: {labels}"
            for exemplar in point.exemplars:
                exemplars[exemplar.span_id.hex()] = (exemplar.trace_id.hex(), exemplar.as_double)
        assert sum(point.count for _, _, point in found[metric]) == WORLD_SIZE, f"{wire.label} {metric}"
        assert set(exemplars) == set(taken), f"{wire.label} {metric}: one exemplar per rank, of the span measured"
        for span_id, (exemplar_trace, seconds) in exemplars.items():
            span = taken[span_id]
            assert exemplar_trace == trace_id, f"{wire.label} {metric}: exemplar not in the job's trace"
            assert seconds == (span.end_ns - span.start_ns) / 1e9, f"{wire.label} {metric}: the span's own duration"
    ends = {s.attributes[semconv.STARTUP_END] for s in spans if s.name == semconv.SPAN_STARTUP}
    labelled = {attributes(p.attributes)[semconv.STARTUP_END] for _, _, p in found[semconv.METRIC_STARTUP_DURATION]}
    assert labelled == ends, f"{wire.label}: how the startups ended"
