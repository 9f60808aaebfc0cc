"""Two nodes of a static-rendezvous torchrun (TORCHELASTIC_RUN_ID=none) join one trace; two such jobs never share
one."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import safetensors.torch
import torch

from loadtrace import semconv
from loadtrace.analysis.sources import read_files

WORKER = """
import os, sys, torch.distributed as dist, safetensors
dist.init_process_group("gloo")
assert os.environ["TORCHELASTIC_RUN_ID"] == "none"
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_node_job(tmp_path: Path, traces: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    ckpt = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(ckpt))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(LOADTRACE="1", LOADTRACE_DIR=str(traces), LOADTRACE_QUIET="1")  # rank 0's closing line is no complaint
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
    ]
    nodes = [
        subprocess.Popen(
            [*torchrun, "--node_rank", str(n), str(worker), str(ckpt)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in (0, 1)
    ]
    for node in nodes:
        output, _ = node.communicate(timeout=180)
        assert node.returncode == 0, output
        assert "loadtrace:" not in output  # no "no job id" complaint: rank 0 published one


def test_static_rendezvous_ranks_share_a_trace_and_jobs_do_not(tmp_path):
    traces = []
    for job in ("first", "second"):
        run_two_node_job(tmp_path, tmp_path / job)
        spans = read_files(tmp_path / job).spans
        opens = [s for s in spans if s.name == "safetensors.open"]
        assert sorted(s.resource["loadtrace.rank"] for s in opens) == [0, 1]
        (trace_id,) = {s.trace_id for s in spans}
        startups = {s.resource["loadtrace.rank"]: s for s in spans if s.name == "loadtrace.startup"}
        job_id = startups[0].resource["loadtrace.job.id"]
        assert sorted(startups) == [0, 1] and all(  # under each rank's group, in the job's trace (docs/jaeger.md)
            s.parent_span_id == f"{semconv.rank_group_id(job_id, rank):016x}" for rank, s in startups.items()
        )
        # Each rank's bare safe_open is a load of its own (loose.py), under its startup.
        loads = {s.resource["loadtrace.rank"]: s for s in spans if s.name == "loadtrace.load"}
        assert all(s.parent_span_id == startups[rank].span_id for rank, s in loads.items())
        assert all(s.parent_span_id == loads[s.resource["loadtrace.rank"]].span_id for s in opens)
        traces.append(trace_id)
    assert traces[0] != traces[1]
