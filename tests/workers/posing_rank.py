"""Test worker: one process posing as one rank of a big job, loading a checkpoint, with an independent count.

    RANK=9 LOCAL_RANK=1 WORLD_SIZE=1024 LOCAL_WORLD_SIZE=8 GROUP_RANK=1 LOADTRACE_JOB_ID=... \\
        python tests/workers/posing_rank.py CKPT OUT_DIR

The launcher's variables say which rank it is; no process group is made (a 1,024-rank job cannot be run here, and
loadtrace reads the rank from those variables). It loads ``CKPT`` with ``from_pretrained`` (plain: every rank reads the
whole model) inside ``count_load.Counter``, the count that knows nothing of loadtrace, and writes
``OUT_DIR/count-rank<R>.json``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def main(ckpt: str, out: str) -> int:
    spec = importlib.util.spec_from_file_location("_count_load", Path(__file__).with_name("count_load.py"))
    count_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(count_load)
    load = count_load.load_example("load")
    rank = int(os.environ["RANK"])
    with count_load.Counter() as counts:
        load.from_pretrained(ckpt)
    load.write_json(out, f"count-rank{rank}.json", {"rank": rank, "pid": os.getpid(), **counts.as_dict()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
