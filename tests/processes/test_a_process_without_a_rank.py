"""Promise (docs/reference.md, ``LOADTRACE_DIR``; docs/report.md): a process that no launcher gave a rank (a plain
``python`` run, a test run) writes ``process-<host>-<pid>.jsonl`` into a job folder of its own, and ``report`` shows it
as a job of one row named ``<host>/<pid>``, its ``rank`` ``null`` in the JSON."""

import contextlib
import io
import json
import os
import socket
import subprocess
import sys

from loadtrace.cli import main

LOAD = """
import os, loadtrace, safetensors, safetensors.torch, torch
safetensors.torch.save_file({"w": torch.ones(4, 4)}, "w.safetensors")
with loadtrace.traced_load("plain script"):
    with safetensors.safe_open("w.safetensors", framework="pt") as handle:
        handle.get_tensor("w")
print(os.getpid())
"""


def test_a_plain_python_load_writes_a_process_file_and_reports_one_unnumbered_row(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update({"LOADTRACE": "1", "PYTHONPATH": ""})
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    ran = subprocess.run(
        [sys.executable, "-c", LOAD], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    pid = int(ran.stdout.split()[-1])
    (trace,) = (tmp_path / "loadtrace-traces").glob("*/*.jsonl")
    assert trace.name == f"process-{socket.gethostname()}-{pid}.jsonl"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["report", str(trace.parent), "--format", "json"]) == 0
    (rank,) = json.loads(out.getvalue())["ranks"]
    assert (rank["rank"], rank["instance"], rank["world_size"]) == (None, f"{socket.gethostname()}/{pid}", None)
    assert rank["read_bytes"] == 64
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["report", str(trace.parent)])
    assert f"\n{socket.gethostname()}/{pid} " in out.getvalue()
