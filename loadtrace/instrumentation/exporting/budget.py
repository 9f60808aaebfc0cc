"""The span budget of a big job: which spans each rank exports (issue 33). export.py's ``Budget`` applies it.

Up to ``DETAIL_WORLD_SIZE`` ranks every rank exports every span. Above it, a span per file per rank (~26,600 spans for
1,024 ranks of a 22-file checkpoint) and the rendezvous, preparation and phases of every rank (5 to 8 spans each under
plain, FSDP2 and ZeRO-3) would make the job's trace too big for Jaeger to open, so at default detail:

- global rank 0 exports every span, and the first ``world_size`` file spans of each load (one a rank of the job: all of
  any checkpoint of fewer files): it is the rank that reads under FSDP ``cpu_ram_efficient_loading``, ZeRO-3 and
  ``broadcast_from_rank0``, whose files are the job's story;
- local rank 0 of every node exports every span but the files, and the first ``NODE_FILE_SPANS_PER_RANK`` ×
  ``LOCAL_WORLD_SIZE`` file spans of each load (24 at 8 ranks a node), so each node shows its storage and page cache
  file by file, and one rank of each node shows the strategy's phases as spans;
- every other rank exports only its startup and its loads (``EXPORTED_WHOLE``): each carries the rank's exact totals
  (bytes and tensors read, files, conversions, ``zeros_like``/``empty_like`` bytes, peak RSS), so the duplicate work
  stays visible rank by rank. Its other spans (rendezvous, preparation, phases) are folded, whole, into the nearest of
  those they hang from (``loadtrace.folded``: semconv.fold_span), and the report rebuilds them; its file spans are
  summarized on their load (``loadtrace.files.summarized``, with the residency and reading times the report needs).

So 7 ranks of a node of 8 export 2 spans each (one load), the node's local rank 0 its own spans (7 under FSDP2, 8 under
ZeRO-3) and 24 files: 46 for the node, under 6 a rank, and rank 0's files add at most one a rank whatever the file
count. What a rank exports depends only on its rank within its node and on being rank 0, never on its node's number,
so every node looks alike. A span not exported is still made (the startup's phase split is computed from every span),
and a span left out or folded never takes a span it hangs from with it: an exported span hangs from the nearest
exported one. ``LOADTRACE_DETAIL=full`` (or ``tensor``) brings every span back. Standard library only.
"""

from __future__ import annotations

from ... import semconv
from ..context import Rank
from ..settings import Settings

DETAIL_WORLD_SIZE = 64  # up to this many ranks, every rank exports every span
NODE_FILE_SPANS_PER_RANK = 3  # a node's local rank 0 exports this many file spans per load for each rank of its node
# What a rank that folds exports: its startup, its loads (the totals), and the exception it died of (a point in time
# that no other span of it may outlive to carry).
EXPORTED_WHOLE = frozenset({semconv.SPAN_STARTUP, semconv.SPAN_EXCEPTION}) | semconv.LOAD_SPANS


def applies(settings: Settings, rank: Rank) -> bool:
    """Whether the budget applies to this rank at all: a job above ``DETAIL_WORLD_SIZE`` ranks, at default detail."""
    return settings.detail == "default" and rank.world_size is not None and rank.world_size > DETAIL_WORLD_SIZE


def file_spans_kept(settings: Settings, rank: Rank) -> int | None:
    """How many file spans of each load this rank exports; None: all of them."""
    if not applies(settings, rank):
        return None
    if rank.rank == 0:
        return rank.world_size
    if rank.local_rank == 0:
        return NODE_FILE_SPANS_PER_RANK * max(1, rank.local_world_size or 1)
    return 0


def folds(settings: Settings, rank: Rank) -> bool:
    """Whether this rank exports only ``EXPORTED_WHOLE`` spans, its others folded into them."""
    return applies(settings, rank) and rank.rank != 0 and rank.local_rank != 0
