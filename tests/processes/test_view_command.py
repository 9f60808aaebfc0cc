"""Promise (issue 15): `loadtrace view DIR` prints one command that replays DIR into Jaeger from any folder.

The compose file mounts `${LOADTRACE_DIR}` relative to itself, and a relative path without `./` is taken by Compose as a
named volume: the README's old step 5 failed from anywhere but the repository root. The command `view` prints names
DIR absolutely and the compose file shipped in the wheel (`loadtrace/_compose/`), so it works from any folder. Checked
with Debian's `docker-compose config` (no Docker engine needed), run from another folder than the one `view` ran in.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.cli import run

from loadtrace.cli import view as view_module


def view(capsys, directory: str, cwd: Path, *flags: str) -> tuple[int, str, str]:
    """``loadtrace view DIRECTORY --docker`` typed in ``cwd`` (the Docker command, whether or not a daemon is here;
    ``flags`` instead): (exit code, stdout, stderr)."""
    with contextlib.chdir(cwd):
        return run(capsys, "view", directory, *(flags or ("--docker",)))


def compose_config(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """The printed ``docker compose ... up -d`` line, run as ``docker-compose ... config``."""
    words = shlex.split(command)
    env = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-"))
    arguments = [word for word in words if not ("=" in word and not word.startswith("-"))]
    assert arguments[:2] == ["docker", "compose"] and arguments[-2:] == ["up", "-d"], command
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (Debian/Ubuntu: apt-get install -y docker-compose)")
    return subprocess.run(
        [binary, *arguments[2:-2], "config"],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
    )


def test_view_prints_a_compose_command_that_works_from_any_folder(tmp_path, capsys):
    traces = tmp_path / "demo-run" / "loadtrace-traces" / "job-1"
    traces.mkdir(parents=True)
    (traces / "rank00000-vm-1.jsonl").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, err = view(capsys, "demo-run/loadtrace-traces", cwd=tmp_path)  # relative, no ./: what broke the README
    assert code == 0 and err == ""
    commands = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 1, out
    config = compose_config(commands[0], cwd=elsewhere)
    assert config.returncode == 0, config.stderr
    services = yaml.safe_load(config.stdout)["services"]
    volumes = services["collector"]["volumes"]
    assert f"{tmp_path / 'demo-run' / 'loadtrace-traces'}:/loadtrace-traces:ro" in volumes
    for service in services.values():  # the configs it mounts are the shipped files, found from another folder
        for volume in service.get("volumes", []):
            if "/" not in volume.split(":")[0]:  # a named volume (the fleet profile's ClickHouse data)
                continue
            assert Path(volume.split(":")[0]).exists(), volume


def test_the_relative_path_the_readme_used_to_suggest_is_a_named_volume(tmp_path, capsys):
    """Why `view` prints an absolute path: the same command with the path as typed is refused by Compose."""
    (tmp_path / "demo-run" / "loadtrace-traces").mkdir(parents=True)
    _, out, _ = view(capsys, "demo-run/loadtrace-traces", cwd=tmp_path)
    command = next(line for line in out.splitlines() if not line.startswith("#"))
    relative = command.replace(str(tmp_path / "demo-run" / "loadtrace-traces"), "demo-run/loadtrace-traces")
    refused = compose_config(relative, cwd=tmp_path)
    assert refused.returncode != 0 and "volume" in (refused.stderr + refused.stdout).lower()


def test_view_of_a_missing_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert view(capsys, "no-such-folder", cwd=tmp_path) == (
        2,
        "",
        "loadtrace: error: no-such-folder: not a directory of trace files\n",
    )


# Without Docker (issue 48, point 7): tests/backends/test_view_without_docker.py runs the printed commands.


def no_docker(monkeypatch, tmp_path: Path, binaries: bool) -> Path:
    """A PATH without ``docker`` (and, with ``binaries``, with a built Jaeger and collector stand-in on it)."""
    folder = tmp_path / "path"
    folder.mkdir()
    if binaries:
        for name in (view_module.JAEGER, view_module.COLLECTOR):
            (folder / name).write_text("#!/bin/sh\n")
            (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv(view_module.BACKENDS_BIN, raising=False)
    monkeypatch.setattr(view_module, "SOURCE_TREE", tmp_path)  # not a clone with .backends/bin
    return folder


def test_without_docker_view_prints_the_binaries_commands_with_every_port(tmp_path, capsys, monkeypatch):
    (tmp_path / "traces").mkdir()
    on_path = no_docker(monkeypatch, tmp_path, binaries=True)
    code, out, err = view(capsys, "traces", tmp_path, "--port-offset", "0")
    assert code == 0 and err == "" and "docker compose" not in out
    assert f"JAEGER={on_path / 'jaeger'}" in out and f"COLLECTOR={on_path / 'otelcol-loadtrace'}" in out
    for port in (4317, 4318, 13133, 16686, 16685, 14317, 14318, 13134):
        assert f"{port}" in out.split("JAEGER=")[0], port  # named in the header
        assert f"127.0.0.1:{port}" in out, port  # and given to one of the two
    assert "--set=service.telemetry.metrics.level=none" in out and "8888" in out.split("JAEGER=")[0]
    assert f"'--set=receivers.otlpjsonfile.include=[{tmp_path / 'traces'}/**/*.jsonl]'" in out
    code, moved, _ = view(capsys, "traces", tmp_path, "--port-offset", "20000")
    assert "127.0.0.1:24318" in moved and "127.0.0.1:36686" in moved and "127.0.0.1:4318 " not in moved


def test_without_docker_or_binaries_view_says_how_to_build_them(tmp_path, capsys, monkeypatch):
    (tmp_path / "traces").mkdir()
    no_docker(monkeypatch, tmp_path, binaries=False)
    code, out, _ = view(capsys, "traces", tmp_path, "--port-offset", "0")
    assert code == 0 and "JAEGER=jaeger\nCOLLECTOR=otelcol-loadtrace" in out
    assert "bash scripts/build_backends.sh" in out and view_module.BACKENDS_BIN in out


def test_with_a_docker_daemon_view_prints_the_compose_command(tmp_path, capsys, monkeypatch):
    (tmp_path / "traces").mkdir()
    on_path = no_docker(monkeypatch, tmp_path, binaries=True)
    (on_path / "docker").write_text("#!/bin/sh\n")
    (on_path / "docker").chmod(0o755)
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    code, out, _ = view(capsys, "traces", tmp_path, "--port-offset", "0")
    assert code == 0 and " up -d" in out and "JAEGER=" not in out
    assert view(capsys, "traces", tmp_path, "--binaries")[1].count("JAEGER=") == 1
    assert view(capsys, "traces", tmp_path, "--port-offset", "99999")[0] == 2
