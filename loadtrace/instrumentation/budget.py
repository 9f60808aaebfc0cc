"""The span budget of a big job: which ranks export their file spans (issue 33).

Up to ``DETAIL_WORLD_SIZE`` ranks every rank exports every span. Above it, the ranks' per-file spans
(``safetensors.open``, ``torch.load``, ``dcp.read_file`` inside a load) would make the job's trace too big for Jaeger to
open (a span per file per rank: ~26,600 spans for 1,024 ranks of a 22-file checkpoint), so at default detail:

- global rank 0 keeps all of them: it is the rank that reads under FSDP ``cpu_ram_efficient_loading``, ZeRO-3 and
  ``broadcast_from_rank0``, whose files are the job's story;
- local rank 0 of every node keeps the first ``NODE_FILE_SPANS_PER_RANK`` × ``LOCAL_WORLD_SIZE`` of each load's (24 at
  8 ranks a node: 3 for each rank of its node), so each node shows its storage and page cache file by file, and the
  node's spans stay within 8 a rank whatever the checkpoint's file count;
- every other rank keeps none.

What a rank keeps depends only on its rank within its node and on being rank 0, so every node looks alike. A file span
not exported is still made (the startup's phase split and the load's totals are computed from it as ever); only its
export is left out, and its load says how many were (``loadtrace.files.summarized``). ``LOADTRACE_DETAIL=full`` (or
``tensor``) brings every span back. Standard library only: the export side (export.py, ``Budget``) leaves them out.
"""

from __future__ import annotations

from .context import Rank
from .settings import Settings

DETAIL_WORLD_SIZE = 64  # up to this many ranks, every rank keeps every span
NODE_FILE_SPANS_PER_RANK = 3  # a node's local rank 0 keeps this many file spans per load for each rank of its node


def file_spans_kept(settings: Settings, rank: Rank) -> int | None:
    """How many file spans of each load this rank exports; None: all of them."""
    if settings.detail != "default" or rank.world_size is None or rank.world_size <= DETAIL_WORLD_SIZE:
        return None
    if rank.rank == 0:
        return None
    if rank.local_rank == 0:
        return NODE_FILE_SPANS_PER_RANK * max(1, rank.local_world_size or 1)
    return 0
