"""(b) In-process A/B of warm loads: loadtrace's hooks removed (off) and put back (on) between loads of ONE process, in
rotating triples off / on / off (null). Same process, same allocator state, same imported modules: the tightest
pairing there is for the steady-state per-load cost. The tracer stays built, so the one-time costs of the first traced
load (tracer, resource, file) are NOT in these figures."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from .common import clean_env, run_checked, worker
from .stats import summarize_ab

LABELS = ["off", "on", "off (null)"]


def one_triple(load: Any, registry_: Any, ckpt: str, order: list[str]) -> dict[str, float]:
    """Wall and CPU seconds of one warm load per label, hooks installed only for ``on``."""
    import gc

    row = {}
    for label in order:
        if label == "on":
            registry_.install()
        else:
            registry_.uninstall()
        gc.collect()
        c0 = time.process_time()
        t0 = time.perf_counter()
        model = load(ckpt)
        row[label] = time.perf_counter() - t0
        row[label + " cpu"] = time.process_time() - c0
        del model
    registry_.install()
    return row


def cmd_ab(argv: list[str]) -> int:
    """Worker (``LOADTRACE=1``): ``_ab CKPT TRIPLES OUT``."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from loadtrace.instrumentor import registry

    hf_logging.disable_progress_bar()
    ckpt, triples, out = argv[0], int(argv[1]), argv[2]
    registry_ = registry()
    assert registry_.active, "start this worker with LOADTRACE=1"
    AutoModelForCausalLM.from_pretrained(ckpt)  # cold: imports, tracer; not measured
    rows = []
    for t in range(triples):
        order = LABELS[t % 3 :] + LABELS[: t % 3]
        rows.append(one_triple(AutoModelForCausalLM.from_pretrained, registry_, ckpt, order))
    Path(out).write_text(json.dumps(rows))
    return 0


def bench_ab(ckpt: Path, triples: int, work: Path) -> dict[str, Any]:
    out = work / "results" / "ab.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces" / "ab"))
    shutil.rmtree(work / "traces" / "ab", ignore_errors=True)
    run_checked(worker("_ab", ckpt, triples, out), env, 1800, work / "results" / "ab.log", cwd=work)
    rows = json.loads(out.read_text())
    return {"triples": triples, "rows": rows, **summarize_ab(rows)}
