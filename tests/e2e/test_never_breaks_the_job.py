"""Promise: whatever goes wrong inside loadtrace or around it, the traced job finishes with exit 0 and bit-identical
weights, and loadtrace says what went wrong once, in one line per process, without a traceback.

Each case is a real 2-rank torchrun load (plain mode) with LOADTRACE=1 and one thing broken."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import threading

import pytest
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


def assert_unharmed(result, log, digests, said, baseline, expect: str | tuple[str, ...]):
    assert result.returncode == 0, log[-3000:]
    assert digests == baseline, "weights must be bit-identical to the untraced job"
    assert "Traceback" not in log, log[-3000:]
    assert said, f"loadtrace said nothing; expected a line about {expect!r}"
    expected = (expect,) if isinstance(expect, str) else expect
    assert all(any(e in line for e in expected) for line in said), said
    assert len(said) <= 3, said  # once per process: the launcher and the two ranks


@pytest.mark.parametrize(
    "env, expect",
    [
        ({"LOADTRACE": "maybe"}, "LOADTRACE='maybe'"),
        ({"LOADTRACE_DETAIL": "everything"}, "LOADTRACE_DETAIL='everything'"),
        ({"LOADTRACE_DIR": "/dev/null/traces"}, "cannot write traces"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "team=ml,,=oops,%zz"}, "OpenTelemetry setup"),
        # One line, whichever export (spans, or the startup metrics sent at the startup's end) fails first.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://not a url:43"}, ("span export failing", "metrics export failing")),
    ],
    ids=["unknown-LOADTRACE", "bad-detail", "unwritable-dir", "bad-resource-attributes", "unparsable-endpoint"],
)
def test_bad_settings(checkpoint, tmp_path, baseline, env, expect):
    assert_unharmed(*run_job(checkpoint, tmp_path, env), baseline, expect)


def test_full_disk(checkpoint, tmp_path, baseline):
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        try:
            with open(full / "filler", "wb") as filler:
                while True:
                    filler.write(b"\0" * 4096)
                    filler.flush()
        except OSError:
            pass  # full
        assert_unharmed(*run_job(checkpoint, tmp_path, {"LOADTRACE_DIR": str(full)}), baseline, "cannot write traces")
    finally:
        subprocess.run(["umount", str(full)], check=False)


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
    assert_unharmed(result, log, digests, said, baseline, ("span", "metrics export failing"))


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
