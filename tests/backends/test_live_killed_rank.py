"""Promise (docs/jaeger.md, "View it in Jaeger"; issue 26's no orphans, live): a job sending OTLP to the collector
while one of its ranks is SIGKILLed mid-load is one trace in Jaeger in which every span's parent is present, holding
the same spans as the job's files: what the dead rank finished, and the stand-ins its launcher's witness wrote for what
the kill left open, sent over OTLP as the files are written.

The job is tests/workers/killed_load.py (support/killed_rank.py's): a real 2-rank ``torchrun``, rank 1 SIGKILLed at
its 5th weight conversion, here with an OTLP/HTTP endpoint (the collector, exporters/collector.yaml → Jaeger,
exporters/jaeger.yaml) and ``LOADTRACE_DIR`` at once.
"""

from __future__ import annotations

import json

from support import backends, parents
from support.installed import file_spans, job_trace_spans, require_installed
from support.killed_rank import KILLED_WORKER
from support.torchrun import torchrun
from support.venvs import discover

from loadtrace import semconv as sc


def test_a_rank_killed_mid_load_is_in_jaeger_whole_with_every_parent(checkpoint, tmp_path):
    backends.require()
    venv = discover()[0]
    require_installed(venv)
    nothing = tmp_path / "nothing-to-replay"
    nothing.mkdir()
    (tmp_path / "tmp").mkdir()
    with backends.Jaeger(tmp_path) as jaeger:
        sets = {
            "exporters.otlp/jaeger.endpoint": jaeger.otlp_grpc,
            "receivers.otlpjsonfile.include": f"[{nothing}/**/*.jsonl]",
        }
        with backends.Collector(tmp_path, "collector.yaml", sets) as collector:
            env = {
                "HF_DEACTIVATE_ASYNC_LOAD": "1",
                "TMPDIR": str(tmp_path / "tmp"),
                "LOADTRACE": "1",
                "LOADTRACE_DIR": str(tmp_path / "files"),
                "OTEL_EXPORTER_OTLP_ENDPOINT": collector.http,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "LOADTRACE_EXIT_TIMEOUT": "10",  # 2 busy cores: what arrives is tested here, not the exit's bound
            }
            job = torchrun(venv, KILLED_WORKER, [str(checkpoint), "--out", str(tmp_path)], cwd=tmp_path, env=env)
            assert job.returncode != 0, job.tail()  # the launcher says its rank died
            files = job_trace_spans(tmp_path / "files")
            (trace_id,) = {span["traceId"] for _, span in files}

            def arrived() -> list | None:
                status, answer = jaeger.trace(trace_id)
                if status != 200:
                    return None
                (tmp_path / "answer").mkdir(exist_ok=True)
                (tmp_path / "answer" / "trace.jsonl").write_text(json.dumps(answer["result"]) + "\n")
                found = file_spans(tmp_path / "answer")
                return found if len(found) >= len(files) else None

            # Settle past the collector's 2 s batch: a second copy of any span would be in the answer by then.
            in_jaeger = backends.wait_for(f"the job's {len(files)} spans", arrived, settle_s=6)
    assert sorted(s["spanId"] for _, s in in_jaeger) == sorted(s["spanId"] for _, s in files)
    by_id = {s["spanId"]: s for _, s in files}
    for _, span in in_jaeger:
        mine = by_id[span["spanId"]]
        assert (span["name"], span.get("parentSpanId") or "") == (mine["name"], mine.get("parentSpanId") or "")
    assert not parents.orphans(parents.from_files(in_jaeger)), parents.orphans(parents.from_files(in_jaeger))
    killed = {s["name"] for r, s in in_jaeger if r.get(sc.RANK) == 1}
    # What rank 1 finished before the kill, and its startup and load, which its launcher's witness ended in its place.
    assert {sc.SPAN_INIT_PROCESS_GROUP, sc.SPAN_CONVERT} <= killed, killed
    ended_by_launcher = {
        s["name"]
        for r, s in in_jaeger
        if r.get(sc.RANK) == 1 and s["attributes"].get(sc.EXIT_SOURCE) == sc.EXIT_SOURCE_LAUNCHER
    }
    assert {sc.SPAN_RANK_EXIT, sc.SPAN_STARTUP, sc.SPAN_FROM_PRETRAINED} <= ended_by_launcher, ended_by_launcher
