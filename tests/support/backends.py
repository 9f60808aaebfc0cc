"""The real backends that ``scripts/build_backends.sh`` builds from their Go modules (Jaeger v2 and an OpenTelemetry
Collector with the components ``exporters/`` names), and Debian's Prometheus: each started on free loopback ports with
the project's own config file, unchanged. Only addresses are given on the command line (``--set``, which the
collector's command applies over the file), as a user on one host moves ports (docs/jaeger.md, "Many nodes"); a
collector may also take the project's overlays after its file (a second ``--config``, merged over the first)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Self

import pytest

from .paths import REPO
from .torchrun import free_port

BIN = Path(os.environ.get("LOADTRACE_BACKENDS_BIN", REPO / ".backends" / "bin"))
JAEGER, COLLECTOR = BIN / "jaeger", BIN / "otelcol-loadtrace"
EXPORTERS = REPO / "exporters"
HOW = "no Go-built Jaeger and collector in .backends/bin: `bash scripts/build_backends.sh` builds them (Go needed)"
PROMETHEUS = shutil.which("prometheus")
HOW_PROMETHEUS = (
    "no prometheus on PATH: `apt-get install prometheus` (Debian's 2.42; scripts/setup.sh installs it as root)"
)
# The collector's own metrics (localhost:8888 by default) would collide between the backends of one host: off.
QUIET = {"service.telemetry.metrics.level": "none"}


def require() -> None:
    if not (os.access(JAEGER, os.X_OK) and os.access(COLLECTOR, os.X_OK)):
        pytest.skip(HOW)


def require_prometheus() -> None:
    require()
    if PROMETHEUS is None:
        pytest.skip(HOW_PROMETHEUS)


def loopback() -> str:
    return f"127.0.0.1:{free_port()}"


def get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Backend:
    """One backend process: started by ``with``, ready once ``health`` answers 200, stopped (SIGTERM) at the end.
    Its output goes to ``log``."""

    def __init__(self, argv: list[str], health: str, log: Path, env: dict[str, str] | None = None) -> None:
        self.argv, self.health, self.log, self.env = argv, health, log, env or {}
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env}, cwd=self.log.parent
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.argv[0]} exited {self.process.returncode}:\n{self.output()}")
            try:
                if get(self.health, timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.3)
        self.__exit__()
        raise AssertionError(f"{self.argv[0]} not ready in 90 s:\n{self.output()}")

    def __exit__(self, *exc: Any) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


def otelcol(binary: Path, configs: list[Path], sets: dict[str, str]) -> list[str]:
    return [
        str(binary),
        *(f"--config={config}" for config in configs),
        *(f"--set={key}={value}" for key, value in {**QUIET, **sets}.items()),
    ]


class Jaeger(Backend):
    """``jaeger --config exporters/jaeger.yaml``: OTLP in at ``otlp_grpc`` / ``otlp_http``, the query API at ``url``."""

    def __init__(self, folder: Path) -> None:
        self.otlp_grpc, self.otlp_http, health = loopback(), loopback(), loopback()
        self.url = f"http://{loopback()}"
        sets = {
            "receivers.otlp.protocols.grpc.endpoint": self.otlp_grpc,
            "receivers.otlp.protocols.http.endpoint": self.otlp_http,
            "extensions.healthcheckv2.http.endpoint": health,
            "extensions.jaeger_query.http.endpoint": self.url.removeprefix("http://"),
            "extensions.jaeger_query.grpc.endpoint": loopback(),
        }
        argv = otelcol(JAEGER, [EXPORTERS / "jaeger.yaml"], sets)
        super().__init__(argv, f"http://{health}/status", folder / "jaeger.log")

    def trace(self, trace_id: str, raw: bool = False) -> tuple[int, dict]:
        """``/api/v3/traces/{id}``; ``raw``: without Jaeger's adjusters, which in its in-memory storage write their
        warnings into the stored spans (jaeger#787): polling a trace still arriving must not leave them there."""
        status, body = get(f"{self.url}/api/v3/traces/{trace_id}" + ("?raw_traces=true" if raw else ""))
        return status, json.loads(body)


class Collector(Backend):
    """The built collector with ``exporters/<config>`` (then each of ``overlays``, merged over it): OTLP in at ``grpc``
    / ``http`` (``http://`` URLs for a job's ``OTEL_EXPORTER_OTLP_ENDPOINT``), ``sets`` for where it sends."""

    def __init__(
        self,
        folder: Path,
        config: str,
        sets: dict[str, str],
        env: dict[str, str] | None = None,
        overlays: tuple[str, ...] = (),
    ) -> None:
        grpc, http, health = loopback(), loopback(), loopback()
        self.grpc, self.http = f"http://{grpc}", f"http://{http}"
        sets = {
            "receivers.otlp.protocols.grpc.endpoint": grpc,
            "receivers.otlp.protocols.http.endpoint": http,
            "extensions.health_check.endpoint": health,
            **sets,
        }
        name = config.removesuffix(".yaml")
        argv = otelcol(COLLECTOR, [EXPORTERS / c for c in (config, *overlays)], sets)
        super().__init__(argv, f"http://{health}/", folder / f"{name}.log", env)


class Prometheus(Backend):
    """Debian's ``prometheus`` with ``config`` (a copy of exporters/prometheus.yml pointed at the test's collector),
    exemplar storage on as docker-compose.yml starts it; its HTTP API at ``url``."""

    def __init__(self, folder: Path, config: Path) -> None:
        self.url = f"http://{loopback()}"
        argv = [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'prometheus-data'}",
            f"--web.listen-address={self.url.removeprefix('http://')}",
            "--enable-feature=exemplar-storage",
        ]
        super().__init__(argv, f"{self.url}/-/ready", folder / "prometheus.log")

    def api(self, path: str, **params: str) -> Any:
        """``/api/v1/<path>?params``' ``data``; AssertionError where the API says it failed."""
        status, body = get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", (path, params, answer)
        return answer["data"]


def prometheus_version() -> tuple[int, ...]:
    """``prometheus --version``'s release, e.g. (2, 42, 0) for Debian's ``2.42.0+ds``."""
    out = subprocess.run([str(PROMETHEUS), "--version"], capture_output=True, text=True, timeout=60).stdout
    return tuple(int(part) for part in out.split()[2].split("+")[0].split(".")[:3])


def wait_for(what: str, probe, timeout_s: float = 120, settle_s: float = 0.0) -> Any:
    """``probe()`` until it returns something true (then, with ``settle_s``, once more after that long: what came
    later, e.g. a second copy, is in the answer); AssertionError with the last answer after ``timeout_s``."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            if settle_s:
                time.sleep(settle_s)
                last = probe()
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")
