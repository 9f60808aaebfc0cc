"""Promise: whatever goes wrong inside loadtrace or around it, the traced job finishes with exit 0 and bit-identical
weights, and loadtrace says what went wrong once, without a traceback: a bad setting (an unwritable LOADTRACE_DIR
included) in one line for the whole job, anything else in one line per process.

Each case is a real 2-rank torchrun load (plain mode) with LOADTRACE=1 and one thing broken."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import threading

import pytest
from support.full_disk import full_tmpfs
from support.multirank import EXAMPLE_WORKER
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace.analysis.sources import read_files

VENVS = discover()
FAULTY_WORKER = REPO / "tests" / "workers" / "faulty_load.py"


@pytest.fixture(scope="module")
def baseline(jobs):
    """Digests of the same load without loadtrace."""
    job = jobs.get(VENVS[0], "plain", traced=False, script=EXAMPLE_WORKER)
    return {rank: digest["sha256"] for rank, digest in job.digests.items()}


def run_job(checkpoint, cwd, env, script=EXAMPLE_WORKER):
    result = torchrun(
        VENVS[0],
        script,
        [str(checkpoint), "--out", str(cwd / "out")],
        cwd=cwd,
        env={"LOADTRACE": "1", **env},
        timeout_s=300,
    )
    log = result.log.read_text()
    # Two processes' writes can share a line of the log: find messages, not lines.
    digests = {int(rank): digest for rank, digest in re.findall(r"rank (\d+)/\d+ mode \w+ digest ([0-9a-f]{64})", log)}
    said = re.findall(r"loadtrace: .*?(?=rank \d+/\d+ mode|loadtrace: |\n|$)", log)
    return result, log, digests, said


def assert_unharmed(result, log, digests, said, baseline, expect: str | tuple[str, ...], once_per_job: bool = False):
    assert result.returncode == 0, log[-3000:]
    assert digests == baseline, "weights must be bit-identical to the untraced job"
    assert "Traceback" not in log, log[-3000:]
    assert said, f"loadtrace said nothing; expected a line about {expect!r}"
    parts = (expect,) if isinstance(expect, str) else expect
    assert all(part in line for line in said for part in parts), said
    assert len(said) <= (1 if once_per_job else 3), said  # the job's, or each process's: the launcher and two ranks


UNWRITABLE = "/proc/loadtrace-x"  # issue 34: said nothing of the traces, and rank 0 offered `loadtrace report` on it


@pytest.mark.parametrize(
    "env, expect, once_per_job",
    [
        ({"LOADTRACE": "yse"}, "LOADTRACE='yse'", True),  # issue 34: said 3 times in a 2-rank job
        ({"LOADTRACE_DETAIL": "everything"}, "LOADTRACE_DETAIL='everything'", True),
        # rank 0's closing line (LOADTRACE_QUIET=0) must not point at the folder: every line said is the one below
        (
            {"LOADTRACE_DIR": UNWRITABLE, "LOADTRACE_QUIET": "0"},
            (f"cannot write traces to LOADTRACE_DIR={UNWRITABLE} (", "): this job's trace files are not being written"),
            True,
        ),
        ({"OTEL_RESOURCE_ATTRIBUTES": "team=ml,,=oops,%zz"}, "OpenTelemetry setup", False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://not a url:43"}, "export failing", False),
    ],
    ids=[
        "unknown-LOADTRACE",
        "bad-detail",
        "unwritable-dir",
        "bad-resource-attributes",
        "unparsable-endpoint",
    ],
)
def test_bad_settings(checkpoint, tmp_path, baseline, env, expect, once_per_job):
    assert_unharmed(*run_job(checkpoint, tmp_path, env), baseline, expect, once_per_job)


def test_full_disk(checkpoint, tmp_path, baseline):
    with full_tmpfs(tmp_path / "full", "16k") as full:
        assert_unharmed(*run_job(checkpoint, tmp_path, {"LOADTRACE_DIR": str(full)}), baseline, "cannot write traces")


class Collector:
    """A local OTLP endpoint that is down, hangs, or refuses."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.sockets = []
        if behaviour == "down":
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]  # closed again: nothing listens
        elif behaviour == "hangs":
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)  # accepts connections (kernel backlog) and never answers
            self.sockets.append(listener)
            self.port = listener.getsockname()[1]
        else:
            status = {"refuses-500": 500, "refuses-400": 400}[behaviour]

            class Refuse(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    self.send_response(status)
                    self.end_headers()

                def log_message(self, *args):
                    pass

            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
            self.port = self.server.server_address[1]
            threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        for sock in self.sockets:
            sock.close()
        if hasattr(self, "server"):
            self.server.shutdown()


@pytest.mark.parametrize("behaviour", ["down", "hangs", "refuses-500", "refuses-400"])
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_collector_trouble(checkpoint, tmp_path, baseline, behaviour, protocol):
    if protocol == "grpc" and behaviour.startswith("refuses"):
        pytest.skip("an HTTP status is an http/protobuf answer")
    collector = Collector(behaviour)
    try:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        }
        result, log, digests, said = run_job(checkpoint, tmp_path, env)
    finally:
        collector.close()
    assert_unharmed(result, log, digests, said, baseline, "export failing")


@pytest.mark.parametrize("fault", ["file_open", "tensor_read", "materialize", "phase", "conversion"])
def test_a_failing_hook_lets_the_call_through_and_is_counted(checkpoint, tmp_path, baseline, fault):
    result, log, digests, said = run_job(checkpoint, tmp_path, {"LOADTRACE_TEST_FAULT": fault}, FAULTY_WORKER)
    assert_unharmed(result, log, digests, said, baseline, "injected fault")
    loads = [s for s in read_files(tmp_path / "loadtrace-traces").spans if s.name == "transformers.from_pretrained"]
    assert sorted(s.resource["loadtrace.rank"] for s in loads) == [0, 1]
    assert all(s.attributes["loadtrace.hook_errors"] >= 1 for s in loads)


EXIT_PROBE = """
import sys, time, safetensors
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
print(time.time(), flush=True)
"""


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_hanging_collector_holds_exit_for_at_most_the_exit_timeout(tmp_path, protocol):
    """A collector that accepts and never answers: the process exits within LOADTRACE_EXIT_TIMEOUT (1 s) of the
    job's last line, beyond what an untraced exit takes."""
    import sys
    import time

    import safetensors.torch
    import torch

    ckpt = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(ckpt))
    collector = Collector("hangs")

    def exit_delay(env_extra):
        env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
        env.update(env_extra)
        proc = subprocess.run(
            [sys.executable, "-c", EXIT_PROBE, str(ckpt)], env=env, capture_output=True, text=True, timeout=120
        )
        ended = time.time()
        assert proc.returncode == 0, proc.stderr
        return ended - float(proc.stdout.split()[-1])

    try:
        untraced = min(exit_delay({}) for _ in range(2))
        traced = exit_delay(
            {
                "LOADTRACE": "1",
                "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
            }
        )
    finally:
        collector.close()
    assert traced - untraced <= 1.0 + 0.5, (traced, untraced)  # the exit timeout, plus scheduling noise
