"""The job's trace laid out for Jaeger's UI, as rank 0 writes it when its first load ends (else at its exit): the root
span, named after the model and the world size, and one group per rank, in rank order, that the rank's own spans hang
from (semconv: "The job's trace, laid out for Jaeger's UI"; docs/jaeger.md says why). Nothing here measures anything:
the spans are placed in time so that the UI lists the ranks in order and Jaeger's clock-skew check finds every child
starting after its parent and lasting longer than it. ``loadtrace annotate`` writes the same spans by the same rules
for a job whose rank 0 died.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from ... import semconv
from ...version import __version__
from .. import context

# Without a launcher that starts every rank after a rendezvous (torchrun's agent, deepspeed's launcher), the job's
# start is put this long before rank 0's own: ranks that srun or mpirun started before it still start after the job.
NO_LAUNCHER_LEAD_NS = 1_000_000_000
# What a rank's resource says of that process alone: left off the root, which is the job's.
PROCESS_KEYS = frozenset(
    {
        semconv.RANK,
        semconv.LOCAL_RANK,
        semconv.NODE_RANK,
        semconv.LOCAL_WORLD_SIZE,
        semconv.HOST_NAME,
        semconv.PROCESS_PID,
        semconv.SERVICE_INSTANCE_ID,
    }
)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def job_start_ns(world_size: int, now_ns: int | None = None) -> int:
    """Before the first span of every rank: the launcher's start (torchrun's agent starts before the rendezvous that
    every rank's start follows), else rank 0's own start less ``NO_LAUNCHER_LEAD_NS``; less room for the structure."""
    own = context.process_start_ns() or (now_ns if now_ns is not None else time.time_ns())
    launcher = context.launcher_start_ns()
    start = min(own, launcher) if launcher is not None else own - NO_LAUNCHER_LEAD_NS
    return start - semconv.structure_lead_ns(world_size)


def job_spans(
    job_id: str, rank_resource: dict[str, Any], service: str, world_size: int, model: str | None, start_ns: int
) -> list[ReadableSpan]:
    """The root and the ``world_size`` groups: ``rank_resource`` is rank 0's (the root keeps what it says of the job),
    ``service`` the service the ranks' names are made of."""
    trace_id, root_id = semconv.job_trace_ids(job_id)
    scope = InstrumentationScope(semconv.SCOPE_STRUCTURE, __version__)
    namespace = rank_resource.get(semconv.SERVICE_NAMESPACE, service)
    job_resource = {k: v for k, v in rank_resource.items() if k not in PROCESS_KEYS}
    job_resource[semconv.SERVICE_NAME] = service
    attributes: dict[str, Any] = {semconv.JOB_ID: job_id, semconv.WORLD_SIZE: world_size}
    if model:
        attributes[semconv.MODEL] = model
    if semconv.CLUSTER in rank_resource:
        attributes[semconv.CLUSTER] = rank_resource[semconv.CLUSTER]
    name = semconv.job_operation(model, world_size)
    attributes[semconv.ABOUT] = f"job {job_id}: {name}"
    root_context = SpanContext(trace_id, root_id, is_remote=False, trace_flags=SAMPLED)
    spans = [_span(name, root_context, None, job_resource, attributes, start_ns, semconv.STRUCTURE_STEP_NS, scope)]
    for rank in range(world_size):
        resource = {
            semconv.SERVICE_NAME: semconv.rank_service(service, rank),
            semconv.SERVICE_NAMESPACE: namespace,
            semconv.JOB_ID: job_id,
            semconv.RANK: rank,
            semconv.WORLD_SIZE: world_size,
        }
        group = SpanContext(trace_id, semconv.rank_group_id(job_id, rank), is_remote=False, trace_flags=SAMPLED)
        about = {semconv.RANK: rank, semconv.ABOUT: f"rank {rank} of {world_size:,}: its spans below"}
        start, length = semconv.rank_group_start(start_ns, rank), 2 * semconv.STRUCTURE_STEP_NS
        spans.append(_span(semconv.SPAN_RANK_GROUP, group, root_context, resource, about, start, length, scope))
    return spans


def _span(
    name: str,
    span_context: SpanContext,
    parent: SpanContext | None,
    resource: dict[str, Any],
    attributes: dict[str, Any],
    start_ns: int,
    duration_ns: int,
    scope: InstrumentationScope,
) -> ReadableSpan:
    return ReadableSpan(
        name,
        context=span_context,
        parent=parent,
        resource=Resource(resource),
        attributes=attributes,
        kind=SpanKind.INTERNAL,
        start_time=start_ns,
        end_time=start_ns + duration_ns,
        instrumentation_scope=scope,
    )
