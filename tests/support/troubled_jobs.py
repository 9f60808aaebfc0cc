"""Real two-rank jobs with something broken around loadtrace, for test_never_breaks_the_job.py: OTLP collectors that
are down, hang or refuse, and what a job's log says.

The worker is ``tests/workers/faulty_load.py`` (``examples/load.py``, with hook faults by rank); each job's log is read
for the ranks' digests and for every ``loadtrace:`` message.
"""

from __future__ import annotations

import gzip
import http.server
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from .torchrun import TorchrunResult, torchrun
from .venvs import REPO, Venv
from .wire import TRACES_PATH, attributes

FAULTY_WORKER = REPO / "tests" / "workers" / "faulty_load.py"
WORLD_SIZE = 2
# What a refusing collector answers the spans of each rank (and every metrics export): both statuses in one job.
REFUSALS = {0: 500, 1: 400}


class Collector:
    """A local OTLP endpoint that is down (nothing listens), hangs (accepts, never answers) or refuses (an HTTP
    status by rank: ``REFUSALS``)."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.answered: set[int] = set()  # the statuses a refusing collector gave
        self._sockets: list[socket.socket] = []
        self._server: http.server.ThreadingHTTPServer | None = None
        if behaviour == "down":
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]  # closed again: nothing listens
        elif behaviour == "hangs":
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)  # accepts connections (kernel backlog) and never answers
            self._sockets.append(listener)
            self.port = listener.getsockname()[1]
        elif behaviour == "refuses":
            self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._refusing_handler())
            self._server.daemon_threads = True
            self.port = self._server.server_address[1]
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        else:
            raise ValueError(behaviour)

    def _refusing_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        answered = self.answered

        class Refuse(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = REFUSALS[0]
                if self.path == TRACES_PATH:
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    ranks = {attributes(r.resource.attributes).get("loadtrace.rank") for r in request.resource_spans}
                    status = REFUSALS[max(ranks)] if ranks <= set(REFUSALS) else status
                answered.add(status)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        return Refuse

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class TroubledJob:
    run: TorchrunResult
    log: str
    digests: dict[int, str]  # rank → sha256 of its weights, from the rank's own line
    said: list[str]  # every ``loadtrace: ...`` message in the log
    out: Path
    answered: set[int] = field(default_factory=set)  # the HTTP statuses a refusing collector gave

    def worker_json(self, name: str) -> Any:
        return json.loads((self.out / name).read_text())


def run_troubled(
    venv: Venv, checkpoint: Path, cwd: Path, env: dict[str, str], args: tuple[str, ...] = ()
) -> TroubledJob:
    """``torchrun`` of the faulty worker with ``LOADTRACE=1`` (unless ``env`` says otherwise) and ``env``."""
    out = cwd / "out"
    result = torchrun(
        venv,
        FAULTY_WORKER,
        [str(checkpoint), "--out", str(out), *args],
        cwd=cwd,
        env={"LOADTRACE": "1", **env},
        timeout_s=300,
    )
    log = result.log.read_text(errors="replace")
    # Two processes' writes can share a line of the log: find messages, not lines.
    digests = dict(re.findall(r"rank (\d+)/\d+ mode \w+ digest ([0-9a-f]{64})", log))
    said = re.findall(r"loadtrace: .*?(?=rank \d+/\d+ mode|loadtrace: |\n|$)", log)
    return TroubledJob(result, log, {int(r): d for r, d in digests.items()}, said, out)
