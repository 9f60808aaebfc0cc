"""Promise (docs/jaeger.md, "Replay files written without a collector"): a job's files, picked up from the folder by the
collector's ``otlpjsonfile`` receiver (exporters/collector.yaml), arrive in Jaeger once: no span twice, none lost. The
job is the shared killed-rank job (``support/killed_rank.py``: rank 1 SIGKILLed mid-load, written without a collector):
every span its file holds, the launcher's stand-ins for what the kill left open among them, hangs from its parent in
Jaeger as in the files (no orphans).
"""

from __future__ import annotations

import json

from support import backends, parents
from support.installed import file_spans, job_dir, job_trace_spans, require_installed
from support.killed_rank import killed_rank_job
from support.venvs import discover

from loadtrace import semconv as sc


def test_replayed_killed_rank_job_arrives_once_with_every_parent(checkpoint, tmp_path_factory):
    backends.require()
    venv = discover()[0]
    require_installed(venv)
    folder = job_dir(killed_rank_job(venv, checkpoint, tmp_path_factory))
    files = job_trace_spans(folder)
    assert {resource.get(sc.RANK) for resource, _ in files} == {0, 1, None}  # None: the structure
    (trace_id,) = {span["traceId"] for _, span in files}
    work = tmp_path_factory.mktemp("replay")
    with backends.Jaeger(work) as jaeger:
        # The folder as `loadtrace view` mounts it: everything under it, at any depth, from the start.
        sets = {
            "exporters.otlp/jaeger.endpoint": jaeger.otlp_grpc,
            "receivers.otlpjsonfile.include": f"[{folder}/**/*.jsonl]",
        }
        with backends.Collector(work, "collector.yaml", sets):

            def arrived() -> list | None:
                status, answer = jaeger.trace(trace_id)
                if status != 200:
                    return None
                (work / "answer").mkdir(exist_ok=True)
                (work / "answer" / "trace.jsonl").write_text(json.dumps(answer["result"]) + "\n")
                found = file_spans(work / "answer")
                return found if len(found) >= len(files) else None

            # Settle past the collector's 2 s batch: a second copy of any file would be in the answer by then.
            in_jaeger = backends.wait_for(f"the replayed {len(files)} spans", arrived, settle_s=6)
    assert sorted(s["spanId"] for _, s in in_jaeger) == sorted(s["spanId"] for _, s in files)
    assert not parents.orphans(parents.from_files(in_jaeger)), parents.orphans(parents.from_files(in_jaeger))
    killed = {s["name"] for r, s in in_jaeger if r.get(sc.RANK) == 1}
    assert sc.SPAN_SAFETENSORS_OPEN in killed or sc.SPAN_FROM_PRETRAINED in killed, killed
