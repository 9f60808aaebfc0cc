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


def view(capsys, directory: str, cwd: Path) -> tuple[int, str, str]:
    """``loadtrace view DIRECTORY`` typed in ``cwd``: (exit code, stdout, stderr)."""
    with contextlib.chdir(cwd):
        return run(capsys, "view", directory)


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
