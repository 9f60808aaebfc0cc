"""Ranks of a big job that did not export every span (the span budget: instrumentation/exporting/budget.py).

Above 64 ranks most ranks export only their startup and load spans. Their other spans (rendezvous, preparation, a
load's phases) come folded, whole, into the span they hung from (``loadtrace.folded``): ``unfold`` rebuilds each as it
was, before anything else reads the spans, so those ranks are read as if every such span had been exported. Their file
spans are not folded but summarized: their loads carry what the report needs of them instead: how many were left out
(``loadtrace.files.summarized``), the checkpoint's files they opened with their page-cache residency
(``loadtrace.io.checkpoint_files``, ``_file_bytes``, ``_cold_bytes``), and when their reading began and ended
(``loadtrace.load.first_file_open``, ``loadtrace.load.last_file_close``). The rank's startup split is the one it
computed in-job from every span, exported or not (``loadtrace.startup.phases``). Per-rank totals never needed file
spans: they are the loads'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from .. import semconv as sc
from ..startup_split import STARTUP_PHASES, Interval, whole_int
from .attrs import opt_int_attr
from .model import RankLoad
from .sources import STATUS_ERROR, Span


def unfold(spans: Iterable[Span]) -> Iterator[Span]:
    """Each span, and after one that carries folded spans each of them as it was (with the carrier's trace and
    resource); the carrier without them. A folded text that does not decode is passed over."""
    for span in spans:
        folded = span.attributes.get(sc.FOLDED)
        if folded is None:
            yield span
            continue
        attributes = {key: value for key, value in span.attributes.items() if key != sc.FOLDED}
        yield dataclasses.replace(span, attributes=attributes)
        for text in folded if isinstance(folded, list) else [folded]:
            found = sc.unfold_span(text)
            if found is not None:
                yield Span(
                    span.trace_id,
                    found.span_id,
                    found.parent_span_id,
                    found.name,
                    found.start_ns,
                    found.end_ns,
                    found.attributes,
                    span.resource,
                    STATUS_ERROR if found.error else 0,
                )


def summarizing_loads(rank: RankLoad) -> list[Span]:
    """The rank's load spans whose file spans were not all exported."""
    return [
        span
        for span in rank.spans
        if span.name in sc.LOAD_SPANS and (opt_int_attr(span.attributes, sc.FILES_SUMMARIZED) or 0) > 0
    ]


def carried_split(rank: RankLoad, bounds: Interval) -> dict[str, int] | None:
    """The startup split the rank carried, when its file spans were left out and its one startup span is ``bounds``
    and carries a whole split; None otherwise (the report computes it from the spans, as for any rank)."""
    if not summarizing_loads(rank):
        return None
    startups = [span for span in rank.spans if span.name == sc.SPAN_STARTUP]
    if len(startups) != 1 or (startups[0].start_ns, startups[0].end_ns) != bounds:
        return None
    carried = startups[0].attributes.get(sc.STARTUP_PHASE_NS)
    if not isinstance(carried, list) or len(carried) != len(STARTUP_PHASES):
        return None
    values = [whole_int(value) for value in carried]
    if any(value is None or value < 0 for value in values):
        return None
    return dict(zip(STARTUP_PHASES, values, strict=True))  # type: ignore[arg-type]


def residency(ranks: list[RankLoad]) -> list[tuple[int, int, int]] | None:
    """(files, their bytes, bytes not in the page cache then) of each summarising load of ``ranks``; None when one
    lacks them (its files' residency was not measured)."""
    found = []
    for rank in ranks:
        for load in summarizing_loads(rank):
            files, total, cold = (
                opt_int_attr(load.attributes, key)
                for key in (sc.IO_CHECKPOINT_FILES, sc.IO_CHECKPOINT_FILE_BYTES, sc.IO_CHECKPOINT_COLD_BYTES)
            )
            if files is None or total is None or cold is None:
                return None
            found.append((files, total, cold))
    return found


def unseen_reads(rank: RankLoad) -> list[tuple[int, int]]:
    """(when its first file opened, bytes read through file spans it did not export) of each summarising load: what
    those spans would have added, as one file opened when its first one was (transformers opens every shard first)."""
    found = []
    for load in summarizing_loads(rank):
        opened = opt_int_attr(load.attributes, sc.LOAD_FIRST_FILE_OPEN)
        if opened is None:
            continue
        shown = sum(
            opt_int_attr(span.attributes, sc.READ_BYTES) or 0
            for span in rank.spans
            if span.name in sc.FILE_SPANS and load.start_ns <= span.start_ns <= load.end_ns
        )
        found.append((opened, max(0, (opt_int_attr(load.attributes, sc.READ_BYTES) or 0) - shown)))
    return found
