"""Promise (docs/jaeger.md, "Many nodes"): a 1,024-rank job under the span budget, sent by its nodes to their agents
(exporters/collector-agent.yaml) and on through the central collector (collector-central.yaml) into Jaeger
(jaeger.yaml), arrives whole: every span its ranks exported, none dropped for message size or queue, in one trace that
Jaeger answers.

The job is a recorded 2-rank FSDP job (docs/samples/fsdp524) whose rank 1 is made again through the span budget as a
summarised rank of a 1,024-rank job (support/replay.py), then copied to ranks 1-1023 on 128 nodes (support/big_job.py).
Each rank's file goes to its node's agent as its exporter sends it: one OTLP/HTTP JSON request per line, all ranks at
once; two agents stand for the 128 nodes' (even and odd nodes).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from support import backends
from support.big_job import RANKS_PER_NODE, RECORDED, write_big_job
from support.installed import file_spans
from support.replay import rank_spans, write

from loadtrace import semconv as sc

RANKS = 1024


def budgeted_job(monkeypatch, folder: Path) -> Path:
    source = folder / "source"
    source.mkdir()
    for path in RECORDED.glob("rank00000-*.jsonl"):
        shutil.copy(path, source / path.name)
    write(monkeypatch, rank_spans(RECORDED, 1), 9, source / "rank00001-budgeted.jsonl")
    return write_big_job(folder / "job", ranks=RANKS, slow=-1, killed=-1, source=source)


def send(path: Path, endpoint: str) -> int:
    """A rank's file to ``endpoint`` as OTLP/HTTP JSON, a request a line; how many requests."""
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    for line in lines:
        request = urllib.request.Request(
            f"{endpoint}/v1/traces", data=line, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200, path
    return len(lines)


def test_a_1024_rank_job_arrives_whole_through_agents_and_central(monkeypatch, tmp_path):
    backends.require()
    job = budgeted_job(monkeypatch, tmp_path)
    files = file_spans(job)
    assert len({r.get(sc.RANK) for r, _ in files} - {None}) == RANKS and len(files) <= 8 * RANKS, len(files)
    (trace_id,) = {s["traceId"] for _, s in files}
    for agent in ("a0", "a1"):  # each agent's log in a folder of its own
        (tmp_path / agent).mkdir()
    with backends.Jaeger(tmp_path) as jaeger:
        central_env = {"LOADTRACE_JAEGER_ENDPOINT": jaeger.otlp_grpc}
        with backends.Collector(tmp_path, "collector-central.yaml", {}, central_env) as central:
            agent_env = {"LOADTRACE_CENTRAL_COLLECTOR": central.grpc.removeprefix("http://")}
            with (
                backends.Collector(tmp_path / "a0", "collector-agent.yaml", {}, agent_env) as even,
                backends.Collector(tmp_path / "a1", "collector-agent.yaml", {}, agent_env) as odd,
            ):
                paths = sorted(job.rglob("*.jsonl"))
                agents = [even.http, odd.http]

                def agent_of(path: Path) -> str:
                    rank = int(path.name[4:9])
                    return agents[(rank // RANKS_PER_NODE) % 2]

                with ThreadPoolExecutor(16) as pool:
                    sent = sum(pool.map(lambda p: send(p, agent_of(p)), paths))
                assert sent >= RANKS

                def whole() -> dict | None:
                    status, answer = jaeger.trace(trace_id)
                    if status != 200:
                        return None
                    (tmp_path / "answer").mkdir(exist_ok=True)
                    (tmp_path / "answer" / "trace.jsonl").write_text(json.dumps(answer["result"]) + "\n")
                    return answer if len(file_spans(tmp_path / "answer")) >= len(files) else None

                # groupbytrace holds a trace 10 s after its last span; settle past it for any late second copy.
                backends.wait_for(f"{len(files)} spans of {RANKS} ranks", whole, timeout_s=300, settle_s=12)
                in_jaeger = file_spans(tmp_path / "answer")
                assert sorted(s["spanId"] for _, s in in_jaeger) == sorted(s["spanId"] for _, s in files)
                assert len({r.get(sc.RANK) for r, _ in in_jaeger} - {None}) == RANKS
                seconds = []
                for _ in range(3):
                    start = time.monotonic()
                    assert jaeger.trace(trace_id)[0] == 200
                    seconds.append(time.monotonic() - start)
                print(
                    f"[many nodes] {len(files)} spans, {RANKS} ranks: Jaeger answered the trace in "
                    f"{statistics.median(seconds):.2f} s (median of 3: {', '.join(f'{s:.2f}' for s in seconds)})"
                )
