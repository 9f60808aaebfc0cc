"""Promise: a rank stopped by SIGTERM, SIGINT or SIGHUP while loading first ends every open span with the numbers it has
so far, status ERROR and `loadtrace.exit.signal`, and flushes them; then it does exactly what it would untraced (the
job's own handler runs, or the process dies by the signal), and a handler the job set is never replaced
(loadtrace/instrumentation/beside/termination.py, spans.Tracing).

Unit cases are real processes (a handler only runs in a real signal); the integration case is a real torchrun job whose
rank 0 torchrun SIGTERMs in the middle of its load because rank 1 failed."""

from __future__ import annotations

import json
import re
import signal

from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv, statefile
from loadtrace.analysis.sources import read_files

VENVS = discover()


def by_name(spans: list) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def test_a_rank_torchrun_stops_mid_load_ends_its_spans_and_dies_by_sigterm(checkpoint, tmp_path):
    result = torchrun(
        VENVS[0],
        REPO / "tests" / "workers" / "stopped_load.py",
        [str(checkpoint), "--out", str(tmp_path)],
        cwd=tmp_path,
        env={"LOADTRACE": "1", "HF_DEACTIVATE_ASYNC_LOAD": "1"},
        timeout_s=300,
    )
    log = result.log.read_text(errors="replace")
    assert result.returncode != 0, "rank 1 failed, so the job fails"
    count = json.loads((tmp_path / "count-rank0.json").read_text())  # rank 0's own count when it stopped waiting
    assert count["read_bytes"] > 0

    (job_dir,) = (tmp_path / "loadtrace-traces").iterdir()
    spans = [s for s in read_files(job_dir).spans if s.resource.get(semconv.RANK) == 0]
    by = by_name(spans)
    (load,) = by[semconv.SPAN_FROM_PRETRAINED]
    (convert,) = by[semconv.SPAN_CONVERT]
    for span in (load, convert):
        assert span.attributes[semconv.EXIT_SIGNAL] == "SIGTERM" and span.status_code == 2, span.attributes
    assert load.attributes[semconv.READ_BYTES] == count["read_bytes"] > 0
    assert load.attributes[semconv.READ_TENSORS] == count["read_tensors"]
    open_files = [s for s in by[semconv.SPAN_SAFETENSORS_OPEN] if semconv.EXIT_SIGNAL in s.attributes]
    assert sum(s.attributes[semconv.READ_BYTES] for s in by[semconv.SPAN_SAFETENSORS_OPEN]) == count["read_bytes"]
    assert open_files or load.attributes[semconv.FILES_OPENED] == len(by[semconv.SPAN_SAFETENSORS_OPEN])
    assert load.attributes[semconv.MEMORY_LIMIT] > 0 and load.attributes[semconv.MEMORY_LIMIT_SOURCE]

    (state_path,) = job_dir.glob(f"rank00000-*{semconv.STATE_SUFFIX}")
    state = statefile.read(state_path)
    assert state is not None and state.status == "signalled" and state.signal == signal.SIGTERM
    assert state.totals().read_bytes == count["read_bytes"]

    # The launcher saw rank 0 die by SIGTERM (-15), exactly as untraced: its witness says so, and so does its log.
    witnessed = [s for s in read_files(job_dir).spans if s.name == semconv.SPAN_RANK_EXIT]
    rank0 = [s for s in witnessed if s.resource.get(semconv.RANK) == 0]
    assert rank0 and rank0[0].attributes[semconv.EXIT_SIGNAL] == "SIGTERM", [s.attributes for s in witnessed]
    assert rank0[0].attributes[semconv.EXIT_STATUS] == "signalled"
    assert re.search(r"exitcode\s*:\s*-15 \(pid: \d+\)\s*\(SIGTERM\)", log), log[-3000:]
