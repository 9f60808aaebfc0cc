"""What ``loadtrace annotate`` adds to a job's trace, so that a person opening it in Jaeger's UI sees the story without
clicking (docs/jaeger.md): the report's findings near its top, each a span named by its kind that links to its ranks'
loads; the job's root and rank groups where rank 0 never wrote them (it died); and the job's loads alone, in a trace
of their own (``semconv.loads_trace_id``), where each rank's load is not a sliver behind its imports.

Pure: a report in, OTLP JSON ``TracesData`` out (cli/annotate.py writes it to a file or sends it). Nothing here is
measured: every span carries a scope the analysis leaves out (``semconv.NOT_MEASURED_SCOPES``), so ``loadtrace report``
reads the same numbers with or without them. Span ids are derived from the job and what the spans say, so writing the
same findings twice writes the same spans (Jaeger shows them once); findings that differ (more ranks seen) are a
second set, beside the first, saying what they were made from.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc
from ..version import __version__
from .alike import standouts, who
from .model import Finding, RankLoad, Report
from .ranks import outermost
from .sources import Span

MAX_LINKS = 16  # spans a finding links to: Jaeger's UI lists them under its References, one click each to the span
MAX_FIND = 16  # ranks whose loads a link's ``uiFind`` picks: the stand-outs first, then the warnings' first ranks
STEP = sc.STRUCTURE_STEP_NS


@dataclass
class Existing:
    """The structure a job's trace already holds: its root's start (None: no root), the rank groups there, and
    whether the root is one an older loadtrace wrote (``loadtrace.job`` at rank 0's first span, every rank's spans
    hung from it: no groups to add)."""

    job_start_ns: int | None = None
    groups: set[int] = field(default_factory=set)
    old_root: bool = False


def existing(documents: Iterable[dict[str, Any]], job_id: str) -> Existing:
    """What of the job's structure these ``TracesData`` documents (a folder's lines, Jaeger's answer) hold."""
    root = f"{sc.job_trace_ids(job_id)[1]:016x}"
    found = Existing()
    for data in documents:
        for resource_spans in data.get("resourceSpans") or []:
            for scope_spans in resource_spans.get("scopeSpans") or []:
                structure = (scope_spans.get("scope") or {}).get("name") == sc.SCOPE_STRUCTURE
                for span in scope_spans.get("spans") or []:
                    if span.get("spanId") == root:
                        found.job_start_ns = int(span.get("startTimeUnixNano", 0))
                        found.old_root = not structure
                    elif structure and span.get("name") == sc.SPAN_RANK_GROUP:
                        rank = next((_int(a) for a in span.get("attributes", []) if a.get("key") == sc.RANK), None)
                        if rank is not None:
                            found.groups.add(rank)
    return found


def _int(attribute: dict[str, Any]) -> int | None:
    value = (attribute.get("value") or {}).get("intValue")
    return int(value) if value is not None else None


# Which spans stand for a rank -----------------------------------------------------------------------------------------


def load_spans(rank: RankLoad) -> list[Span]:
    """The rank's outermost model loads (always exported, whatever the span budget folded), in time order."""
    by_id = {span.span_id: span for span in rank.spans}
    loads = outermost(rank.spans, sc.LOAD_SPANS, by_id)
    return sorted(loads, key=lambda span: span.start_ns)


def rank_targets(rank: RankLoad, job_id: str) -> list[str]:
    """What finds a rank in its job's trace: its loads' span ids, else (it never finished one) its group's."""
    loads = [span.span_id for span in load_spans(rank)]
    if loads or rank.rank is None:
        return loads
    return [f"{sc.rank_group_id(job_id, rank.rank):016x}"]


def flagged_ranks(report: Report) -> list[int]:
    """The ranks a person should look at first: those that stand out (incomplete, failed, slow), then the ranks of
    each warning, first ranks first; at most ``MAX_FIND``."""
    flagged: list[int] = []
    for rank, _ in standouts(report.ranks, report.findings):
        if rank.rank is not None and rank.rank not in flagged:
            flagged.append(rank.rank)
    for finding in report.findings:
        if finding.severity == "warning":
            flagged += [number for number in finding.ranks[:MAX_FIND] if number not in flagged]
    return flagged[:MAX_FIND]


def find_text(report: Report, job_id: str, ranks: Sequence[int]) -> str:
    """``uiFind`` for these ranks: their loads' span ids, which Jaeger's UI matches whole (``rank 3`` as text would
    match ranks 30-39 too)."""
    by_rank = {rank.rank: rank for rank in report.ranks}
    return " ".join(target for number in ranks if number in by_rank for target in rank_targets(by_rank[number], job_id))


def trace_link(jaeger_url: str, trace_id: str, find: str = "") -> str:
    """The trace's page in Jaeger's UI, its ``find`` highlighted (``?uiFind=``: the UI's own find box throws in
    jaeger-ui 1.74, the release Jaeger 2.12 serves)."""
    base = f"{jaeger_url.rstrip('/')}/trace/{trace_id}"
    return f"{base}?{urllib.parse.urlencode({'uiFind': find})}" if find else base


# OTLP JSON, as loadtrace's files write it ----------------------------------------------------------------------------


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in values.items() if value is not None]


@dataclass
class OtlpSpan:
    """One span to write: ids in hex, times in ns."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    links: list[tuple[str, str]] = field(default_factory=list)
    error: bool = False

    def json(self) -> dict[str, Any]:
        span: dict[str, Any] = {
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": 1,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(self.end_ns),
            "attributes": _attributes(self.attributes),
            "status": {"code": 2} if self.error else {},
        }
        if self.parent_span_id:
            span["parentSpanId"] = self.parent_span_id
        if self.links:
            span["links"] = [{"traceId": trace, "spanId": span_id} for trace, span_id in self.links]
        return span


def traces_data(spans: Sequence[OtlpSpan]) -> dict[str, Any]:
    """One ``TracesData``: the spans grouped by resource and scope, in order."""
    groups: dict[tuple[str, str], tuple[dict[str, Any], str, list[dict[str, Any]]]] = {}
    for span in spans:
        key = (repr(sorted(span.resource.items())), span.scope)
        groups.setdefault(key, (span.resource, span.scope, []))[2].append(span.json())
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource)},
                "scopeSpans": [{"scope": {"name": scope, "version": __version__}, "spans": found}],
            }
            for resource, scope, found in groups.values()
        ]
    }


def _id(*parts: Any) -> str:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return f"{int.from_bytes(digest[:8], 'big') or 1:016x}"


# The job's trace ------------------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One job of a report, as its trace's structure needs it."""

    job_id: str
    service: str  # the service its ranks' names are made of (``semconv.rank_service``)
    world_size: int
    model: str | None
    ranks: list[RankLoad]
    findings: list[Finding]

    def resource(self, rank: int | None = None) -> dict[str, Any]:
        named = self.service if rank is None else sc.rank_service(self.service, rank)
        resource = {sc.SERVICE_NAME: named, sc.SERVICE_NAMESPACE: self.service, sc.JOB_ID: self.job_id}
        return resource if rank is None else {**resource, sc.RANK: rank, sc.WORLD_SIZE: self.world_size}

    def first_start_ns(self) -> int:
        return min((span.start_ns for rank in self.ranks for span in rank.spans), default=0)


def job_of(report: Report, job_id: str) -> Job:
    """The report's job ``job_id`` (its ranks with a number, its findings)."""
    trace = next(t.trace_id for t in report.traces if t.job_id == job_id)
    ranks = sorted((r for r in report.ranks if r.trace_id == trace and r.rank is not None), key=lambda r: r.rank or 0)
    world = max([t.world_size or 0 for t in report.traces if t.trace_id == trace] + [(r.rank or 0) + 1 for r in ranks])
    named = next((r.resource for r in ranks if r.resource), {})
    service = str(named.get(sc.SERVICE_NAMESPACE) or named.get(sc.SERVICE_NAME) or sc.DEFAULT_SERVICE_NAME)
    first = next((span for r in ranks for span in load_spans(r)), None)
    model = sc.model_name(first.attributes.get(sc.CHECKPOINT), first.attributes.get(sc.MODEL_CLASS)) if first else None
    findings = [f for f in report.findings if f.trace_id == trace]
    return Job(job_id, service, max(world, 1), model, ranks, findings)


def structure_spans(job: Job, trace_id: str, start_ns: int, ranks: Iterable[int], root: bool) -> list[OtlpSpan]:
    """The root (``root``) and the groups of ``ranks``, as rank 0 writes them (instrumentation/tracing/structure.py)."""
    root_id = f"{sc.job_trace_ids(job.job_id)[1]:016x}"
    spans = []
    if root:
        name = sc.job_operation(job.model, job.world_size)
        attributes = {sc.JOB_ID: job.job_id, sc.WORLD_SIZE: job.world_size, sc.MODEL: job.model}
        attributes[sc.ABOUT] = f"job {job.job_id}: {name}"
        end = start_ns + STEP
        spans.append(
            OtlpSpan(trace_id, root_id, "", name, start_ns, end, attributes, job.resource(), sc.SCOPE_STRUCTURE)
        )
    for rank in ranks:
        start = sc.rank_group_start(start_ns, rank)
        about = {sc.RANK: rank, sc.ABOUT: f"rank {rank} of {job.world_size:,}: its spans below"}
        group = f"{sc.rank_group_id(job.job_id, rank):016x}"
        spans.append(
            OtlpSpan(
                trace_id, group, root_id, sc.SPAN_RANK_GROUP, start, start + 2 * STEP, about, job.resource(rank),
                sc.SCOPE_STRUCTURE,
            )
        )  # fmt: skip
    return spans


Targets = dict[int, list[tuple[str, str]]]  # rank → (trace id, span id) of what stands for it there


def finding_spans(
    job: Job, trace_id: str, parent: str, start_ns: int, source: str, targets: list[Targets], scope: str
) -> list[OtlpSpan]:
    """The findings under ``parent``, first among its children: a span per finding, named by its kind, linking to
    its ranks' spans in each of ``targets`` (this trace's, then the other's: jaeger-ui 1.74 throws on a link within
    the trace, and opens one to another trace in a tab of its own, the span highlighted)."""
    seen = len(job.ranks)
    warnings = sum(f.severity == "warning" for f in job.findings)
    kinds = ", ".join(dict.fromkeys(f.kind for f in job.findings)) or "none"
    about = f"{len(job.findings)} findings ({warnings} warnings) from {source}, {seen:,} of {job.world_size:,} ranks"
    attributes = {sc.ABOUT: f"{about}: {kinds}", sc.FINDINGS_SOURCE: source, sc.FINDINGS_RANKS_SEEN: seen}
    content = repr([(f.kind, f.severity, f.ranks, f.bytes, f.detail) for f in job.findings]) + about
    group = _id(trace_id, "findings", content)
    # The UI orders children by their start, to the microsecond: a finding a microsecond after the one before it.
    start, resource = start_ns + STEP, job.resource()
    end = start + (len(job.findings) + 2) * STEP
    spans = [OtlpSpan(trace_id, group, parent, sc.SPAN_FINDINGS, start, end, attributes, resource, scope)]
    for index, finding in enumerate(job.findings):
        links = [link for each in targets for link in _links(each, finding.ranks)]
        words = finding.symptom or finding.detail
        values = {
            sc.ABOUT: f"{finding.severity.upper()} {who(finding.ranks)}: {words}" if finding.ranks else words,
            sc.FOUND_KIND: finding.kind,
            sc.FOUND_SEVERITY: finding.severity,
            sc.FOUND_RANKS: who(finding.ranks) if finding.ranks else None,
            sc.FOUND_BYTES: finding.bytes,
            sc.FOUND_NEXT: finding.next_step,
        }
        span_id, begin = _id(group, index), start + index * STEP
        spans.append(
            OtlpSpan(trace_id, span_id, group, finding.kind, begin, begin + STEP, values, resource, scope, links)
        )
    return spans


def _links(targets: Targets, ranks: list[int]) -> list[tuple[str, str]]:
    return [link for rank in ranks for link in targets.get(rank, [])][:MAX_LINKS]


# The loads view: the same job's loads, in a trace of their own ------------------------------------------------------


def subtree(rank: RankLoad, top: Span) -> list[Span]:
    """``top`` and every span of the rank below it."""
    children: dict[str, list[Span]] = {}
    for span in rank.spans:
        children.setdefault(span.parent_span_id, []).append(span)
    found, todo = [], [top]
    while todo:
        span = todo.pop()
        found.append(span)
        todo += [child for child in children.get(span.span_id, []) if child.span_id != span.span_id]
    return found


def view_copy(job: Job, rank: int, span: Span, trace_id: str, parent: str, original: str | None) -> OtlpSpan:
    """A load (or a span under it) in the loads view: its readable attributes (the values for machines stay in the
    job's trace), its figures in words where its loadtrace was older, a link to the original (``original``: the
    job's trace id) on the load itself."""
    attributes = {k: v for k, v in span.attributes.items() if k not in sc.DATA_KEYS}
    if span.name in sc.LOAD_SPANS and sc.ABOUT not in attributes:
        attributes.update(sc.about_load(span.attributes))
    attributes[sc.RANK] = rank
    resource = {**span.resource, sc.SERVICE_NAME: sc.rank_service(job.service, rank)}
    resource.setdefault(sc.SERVICE_NAMESPACE, job.service)
    links = [(original, span.span_id)] if original else []
    span_id = _id(trace_id, span.span_id)
    error = span.status_code == 2
    return OtlpSpan(
        trace_id, span_id, parent, span.name, span.start_ns, span.end_ns, attributes, resource, sc.SCOPE_LOADS_VIEW,
        links, error,
    )  # fmt: skip


def loads_view(job: Job) -> tuple[list[OtlpSpan], Targets]:
    """The loads view's spans but its findings, and rank → its loads there (its group, for a rank a finding names
    that finished no load): what the findings link to."""
    trace_id, job_trace = f"{sc.loads_trace_id(job.job_id):032x}", f"{sc.job_trace_ids(job.job_id)[0]:032x}"
    loads = {rank.rank: load_spans(rank) for rank in job.ranks if rank.rank is not None}
    first = min((span.start_ns for spans in loads.values() for span in spans), default=job.first_start_ns())
    start = first - sc.structure_lead_ns(job.world_size)
    root = _id(trace_id, "root")
    name = f"loads: {sc.job_operation(job.model, job.world_size)}"
    attributes = {
        sc.JOB_ID: job.job_id,
        sc.WORLD_SIZE: job.world_size,
        sc.MODEL: job.model,
        sc.ABOUT: f"job {job.job_id}'s loads alone; the whole job: trace {job_trace}",
    }
    spans = [OtlpSpan(trace_id, root, "", name, start, start + STEP, attributes, job.resource(), sc.SCOPE_LOADS_VIEW)]
    targets: Targets = {}
    by_rank = {rank.rank: rank for rank in job.ranks}
    named = {rank for finding in job.findings for rank in finding.ranks}
    for number, tops in loads.items():
        if not tops and number not in named:
            continue
        group = _id(trace_id, "rank", number)
        begin = sc.rank_group_start(start, number)
        about = {sc.RANK: number, sc.ABOUT: f"rank {number} of {job.world_size:,}: its loads below"}
        spans.append(
            OtlpSpan(
                trace_id, group, root, sc.SPAN_RANK_GROUP, begin, begin + 2 * STEP, about, job.resource(number),
                sc.SCOPE_LOADS_VIEW,
            )
        )  # fmt: skip
        targets[number] = [(trace_id, _id(trace_id, top.span_id)) for top in tops] or [(trace_id, group)]
        for top in tops:
            for span in subtree(by_rank[number], top):
                parent = group if span is top else _id(trace_id, span.parent_span_id)
                spans.append(view_copy(job, number, span, trace_id, parent, job_trace if span is top else None))
    return spans, targets


# All of it ------------------------------------------------------------------------------------------------------------


@dataclass
class Annotations:
    """What ``annotate`` writes for one job, and what finds its flagged ranks in each of its two traces."""

    job_id: str
    documents: list[dict[str, Any]]  # ``TracesData``: the job's trace's additions, then the loads view
    job_trace_id: str
    loads_trace_id: str
    job_find: str  # ``uiFind`` of the flagged ranks' loads in the job's trace
    loads_find: str  # the same in the loads view
    findings: int


def annotate_job(report: Report, job_id: str, found: Existing, source: str) -> Annotations:
    """The findings (and, where rank 0 never wrote them, the root and the rank groups) for the job's trace, and its
    loads view; ``source`` says what the report was made from (``files of node000``, ``jaeger``)."""
    job = job_of(report, job_id)
    trace_id = f"{sc.job_trace_ids(job_id)[0]:032x}"
    root = found.job_start_ns is None
    start = job.first_start_ns() - sc.structure_lead_ns(job.world_size) if root else found.job_start_ns or 0
    missing = [rank for rank in range(job.world_size) if rank not in found.groups and not found.old_root]
    spans = structure_spans(job, trace_id, start, missing, root)
    targets = {r.rank: [(trace_id, t) for t in rank_targets(r, job_id)] for r in job.ranks if r.rank is not None}
    view, view_targets = loads_view(job)
    root_id = f"{sc.job_trace_ids(job_id)[1]:016x}"
    spans += finding_spans(job, trace_id, root_id, start, source, [targets, view_targets], sc.SCOPE_STRUCTURE)
    view_root, view_start = view[0].span_id, view[0].start_ns
    view += finding_spans(
        job, view[0].trace_id, view_root, view_start, source, [view_targets, targets], sc.SCOPE_LOADS_VIEW
    )
    flagged = flagged_ranks(report)
    return Annotations(
        job_id=job_id,
        documents=[traces_data(spans), traces_data(view)],
        job_trace_id=trace_id,
        loads_trace_id=view[0].trace_id,
        job_find=" ".join(span for rank in flagged for _, span in targets.get(rank, [])),
        loads_find=" ".join(span for rank in flagged for _, span in view_targets.get(rank, [])),
        findings=len(job.findings),
    )


def job_finds(report: Report) -> list[tuple[str, str, str, str]]:
    """Each job of the report with a job id: (its trace id, its ``uiFind`` there, its loads view's trace id, its
    ``uiFind`` there), the flagged ranks' loads."""
    found = []
    flagged = flagged_ranks(report)
    for trace in report.traces:
        if trace.job_id is None:
            continue
        ranks = [rank for rank in report.ranks if rank.trace_id == trace.trace_id and rank.rank is not None]
        mine = [number for number in flagged if any(rank.rank == number for rank in ranks)]
        job_targets = {rank.rank: rank_targets(rank, trace.job_id) for rank in ranks}
        loads = f"{sc.loads_trace_id(trace.job_id):032x}"
        named = {number for f in report.findings if f.trace_id == trace.trace_id for number in f.ranks}
        view = {
            rank.rank: [_id(loads, span.span_id) for span in load_spans(rank)]
            or ([_id(loads, "rank", rank.rank)] if rank.rank in named else [])
            for rank in ranks
        }
        job_find = " ".join(t for number in mine for t in job_targets.get(number, []))
        loads_find = " ".join(t for number in mine for t in view.get(number, []))
        found.append((trace.trace_id, job_find, loads, loads_find))
    return found
