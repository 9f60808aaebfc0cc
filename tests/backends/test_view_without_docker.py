"""Promise (issue 48, point 7): without Docker, ``loadtrace view DIR`` prints the commands that start the built Jaeger
and collector on this host, every port named, and those commands work as printed.

The script ``loadtrace view`` prints (``loadtrace/cli/view.py``, ``binaries_script``: the one place the commands are
written, and what docs/jaeger.md shows) is run here with ``sh``, as a person pipes it, against the binaries
``scripts/build_backends.sh`` built: it returns once both programs say they are ready; a recorded real job's files in
DIR are replayed into Jaeger, and a traced process sending OTLP to the collector reaches it as well. Beside other users'
backends on this shared host every port is moved by one ``--port-offset``, the option a person on such a host uses.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support import backends
from support.installed import require_installed
from support.jaeger_ui import UI_BUILD
from support.paths import REPO
from support.venvs import discover

from loadtrace import semconv as sc
from loadtrace.cli import view

RECORDED = REPO / "docs" / "samples" / "fsdp524"  # a real 2-rank job's files (scripts/gen_docs.py records them)
TRACED = """
import safetensors, loadtrace
with loadtrace.traced_load("over-otlp"):
    pass
"""


def free_offset() -> int:
    """An offset at which every port of ``view.Ports`` is free on the loopback now."""
    for _ in range(200):
        offset = random.randrange(10_000, 40_000)
        ports = view.Ports().moved(offset)
        try:
            for port in (getattr(ports, name) for name in ports.__dataclass_fields__):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return offset
    pytest.skip("no port offset free on this host")


SCRIPT_TOOLS = ("sh", "mkdir", "grep", "cat", "tail", "sleep")  # what the printed script runs besides the binaries


def without_docker(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a person without Docker: a PATH of the venv and the tools the script runs (no ``docker``,
    whatever this host has), no ``DOCKER_HOST``, a temporary folder of its own."""
    tools = tmp / "bin"
    tools.mkdir(exist_ok=True)
    for name in SCRIPT_TOOLS:
        if not (tools / name).exists():
            (tools / name).symlink_to(shutil.which(name) or f"/bin/{name}")
    path = os.pathsep.join([str(discover()[0].bin), str(tools)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "DOCKER_"))}
    return {**env, "PATH": path, "TMPDIR": str(tmp), **extra}


def piped(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``loadtrace view DIR | sh``: the script run by ``sh``, as printed."""
    return subprocess.run(
        [shutil.which("sh") or "/bin/sh"], input=script, env=env, capture_output=True, text=True, timeout=120
    )


def stop(run: Path) -> None:
    for name in ("jaeger", "collector"):
        try:
            os.kill(int((run / f"{name}.pid").read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def test_the_printed_commands_start_both_binaries_and_a_job_reaches_jaeger(tmp_path):
    backends.require()
    venv = discover()[0]
    require_installed(venv)
    folder = tmp_path / "loadtrace-traces" / "job"
    shutil.copytree(RECORDED, folder, ignore=shutil.ignore_patterns("summary.txt"))
    offset = free_offset()
    env = without_docker(tmp_path, **{view.BACKENDS_BIN: str(backends.BIN)})
    printed = subprocess.run(
        [str(venv.bin / "loadtrace"), "view", str(tmp_path / "loadtrace-traces"), "--port-offset", str(offset)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert printed.returncode == 0 and printed.stderr == "", printed.stderr
    assert "docker" not in printed.stdout.split("# Ready")[1], "no Docker: the binaries' commands"
    ports = view.Ports().moved(offset)
    configs = Path(venv.site_packages) / "loadtrace" / "_compose" / "exporters"
    run = tmp_path / f"loadtrace-view-{os.geteuid()}"
    found = (backends.JAEGER.absolute(), backends.COLLECTOR.absolute())
    expected = view.binaries_script(str(tmp_path / "loadtrace-traces"), found, configs, run, ports)
    assert printed.stdout.splitlines() == expected
    try:
        started = piped(printed.stdout, env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"Jaeger: http://localhost:{ports.ui}" in started.stdout
        jaeger = f"http://127.0.0.1:{ports.ui}"
        ranks_files = folder.glob("rank*.jsonl")  # the job's trace (annotate's file holds its loads view too)
        (replayed,) = {span["traceId"] for path in ranks_files for span in _file_spans(path)}
        found_spans = backends.wait_for("the replayed job in Jaeger", lambda: _spans(jaeger, replayed), settle_s=3)
        # the job's root (named for its model and ranks, docs/jaeger.md) and the ranks' loads
        assert {span["name"] for span in found_spans} >= {"checkpoint on 2 ranks", sc.SPAN_FROM_PRETRAINED}
        job_id = f"view-without-docker-{offset}"
        live = subprocess.run(
            [sys.executable, "-c", TRACED],
            env={**env, "LOADTRACE": "1", "LOADTRACE_JOB_ID": job_id, "LOADTRACE_EXIT_TIMEOUT": "10",
                 "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports.otlp_http}"},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert live.returncode == 0 and "export failing" not in live.stderr, live.stderr
        trace_id = format(sc.job_trace_ids(job_id)[0], "032x")
        sent = backends.wait_for("the live process's spans in Jaeger", lambda: _spans(jaeger, trace_id))
        assert sc.SPAN_LOAD in {span["name"] for span in sent}
    finally:
        stop(run)


def _flat(data: dict) -> list[dict]:
    return [s for rs in data.get("resourceSpans", []) for ss in rs.get("scopeSpans", []) for s in ss.get("spans", [])]


def _file_spans(path: Path) -> list[dict]:
    return [span for line in path.read_text().splitlines() if line.strip() for span in _flat(json.loads(line))]


def _spans(jaeger: str, trace_id: str) -> list[dict]:
    """The trace's spans as Jaeger's query API answers (none while it has not got it)."""
    status, body = backends.get(f"{jaeger}/api/v3/traces/{trace_id}", timeout=10)
    return _flat(json.loads(body).get("result", {})) if status == 200 else []


def test_a_port_another_program_holds_stops_the_script_with_that_program_s_own_words(tmp_path):
    """The issue's collector failed on 8888 and its readiness check answered from another user's Jaeger: here the UI's
    port is taken before the script runs; it ends at once, non-zero, with Jaeger's own lines, never "ready"."""
    ports, env, command = view_setup(tmp_path)
    printed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports.ui))
        holder.listen()
        try:
            started = piped(printed, env)
        finally:
            stop(tmp_path / f"loadtrace-view-{os.geteuid()}")
    assert started.returncode == 1 and started.stdout.startswith("jaeger stopped:"), started.stdout
    assert str(ports.ui) in started.stdout and "Jaeger: http" not in started.stdout


def test_with_a_built_ui_the_printed_jaeger_serves_it(tmp_path):
    """Jaeger built from its Go module carries no UI: without ``--jaeger-ui`` the script says so and where one comes
    from; with it (a built jaeger-ui, ../shared/jaeger-ui here), the Jaeger it starts serves that UI's page."""
    if not (UI_BUILD / "index.html").is_file():
        pytest.skip(f"no built Jaeger UI at {UI_BUILD} (../shared/jaeger-ui/build beside the repository)")
    ports, env, command = view_setup(tmp_path)
    plain = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "Jaeger serves no UI" in plain and "--jaeger-ui DIR" in plain and "ui.assets_path" not in plain
    printed = subprocess.run(
        [*command, "--jaeger-ui", str(UI_BUILD)], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert f"--set=extensions.jaeger_query.ui.assets_path={UI_BUILD}" in printed
    try:
        started = piped(printed, env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"Jaeger: http://localhost:{ports.ui} (service loadtrace" in started.stdout
        status, page = backends.get(f"http://127.0.0.1:{ports.ui}/search")
        assert status == 200 and b"<!doctype html>" in page.lower()[:200], page[:200]
    finally:
        stop(tmp_path / f"loadtrace-view-{os.geteuid()}")


def view_setup(tmp_path):
    """The installed venv, the moved ports, the environment without Docker and the command that prints the script."""
    backends.require()
    venv = discover()[0]
    require_installed(venv)
    offset = free_offset()
    env = without_docker(tmp_path, **{view.BACKENDS_BIN: str(backends.BIN)})
    (tmp_path / "traces").mkdir()
    command = [str(venv.bin / "loadtrace"), "view", str(tmp_path / "traces"), "--port-offset", str(offset)]
    return view.Ports().moved(offset), env, command
