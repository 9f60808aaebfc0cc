"""A recorded job's OTLP JSON lines made into what ranks write today, for the tests that copy recordings into bigger
jobs (big_job.py): each rank's service its own (``semconv.rank_service``), its parentless spans under its rank group,
the values for machines on the ``loadtrace.data`` event, and rank 0's root and groups (``job_lines``), as rank 0
writes them at its exit. Recordings made before these keep working: ``flatten`` reads them either way.
"""

from __future__ import annotations

from typing import Any

from loadtrace import semconv as sc
from loadtrace.analysis.annotate import Job, structure_spans, traces_data


def flatten(span: dict[str, Any]) -> dict[str, Any]:
    """The span with its ``DATA_EVENT``'s attributes back among its own (as recordings before the event have them)."""
    events = span.get("events", [])
    data = [a for e in events if e.get("name") == sc.DATA_EVENT for a in e.get("attributes", [])]
    if data:
        span["attributes"] = [*span.get("attributes", []), *data]
        span["events"] = [e for e in events if e.get("name") != sc.DATA_EVENT]
        if not span["events"]:
            del span["events"]
    return span


def moved(span: dict[str, Any]) -> dict[str, Any]:
    """The span as a rank writes it now: its ``DATA_KEYS`` on a ``DATA_EVENT`` at its end."""
    data = [a for a in span.get("attributes", []) if a["key"] in sc.DATA_KEYS]
    if data:
        span["attributes"] = [a for a in span["attributes"] if a["key"] not in sc.DATA_KEYS]
        event = {"timeUnixNano": span["endTimeUnixNano"], "name": sc.DATA_EVENT, "attributes": data}
        span["events"] = [*span.get("events", []), event]
    return span


def is_structure(scope_spans: dict[str, Any]) -> bool:
    return (scope_spans.get("scope") or {}).get("name") in sc.NOT_MEASURED_SCOPES


def as_rank(resource: list[dict[str, Any]], rank: int) -> None:
    """A rank's resource attributes (OTLP JSON) with its own service name, in the namespace of the one it had."""
    values = {a["key"]: a["value"].get("stringValue") for a in resource}
    service = values.get(sc.SERVICE_NAMESPACE) or values.get(sc.SERVICE_NAME) or sc.DEFAULT_SERVICE_NAME
    for key, value in ((sc.SERVICE_NAME, sc.rank_service(service, rank)), (sc.SERVICE_NAMESPACE, service)):
        for item in resource:
            if item["key"] == key:
                item["value"] = {"stringValue": value}
                break
        else:
            resource.append({"key": key, "value": {"stringValue": value}})


def under_group(span: dict[str, Any], job_id: str, rank: int, structure: set[str]) -> None:
    """A span that hung from the job's structure (the root, a rank group) hangs from ``rank``'s group."""
    if span.get("parentSpanId") in structure:
        span["parentSpanId"] = f"{sc.rank_group_id(job_id, rank):016x}"


def structure_ids(job_id: str, ranks: int) -> set[str]:
    """The ids the job's structure spans have: its root, and each rank's group."""
    ids = {f"{sc.job_trace_ids(job_id)[1]:016x}"}
    return ids | {f"{sc.rank_group_id(job_id, rank):016x}" for rank in range(ranks)}


def job_lines(job_id: str, world_size: int, start_ns: int, model: str | None, service: str) -> dict[str, Any]:
    """Rank 0's root and every rank's group (one ``TracesData``), placed before ``start_ns`` (the job's first span)."""
    job = Job(job_id, service, world_size, model, [], [])
    trace_id = f"{sc.job_trace_ids(job_id)[0]:032x}"
    begin = start_ns - sc.structure_lead_ns(world_size)
    return traces_data(structure_spans(job, trace_id, begin, range(world_size), root=True))
