"""docker-compose.yml is valid as Docker Compose reads it, laptop setup and fleet profile: Debian's docker-compose
validates it without an engine (``config -q``); the structural checks are fleet/test_compose_config.py's and
fleet/test_fleet_config.py's."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support.paths import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"


def test_docker_compose_validates_the_file():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip(
            "docker-compose is not installed (Debian/Ubuntu: apt-get install -y docker-compose); "
            "the structural checks below still run"
        )
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr or result.stdout


def test_docker_compose_validates_the_fleet_profile():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (Debian/Ubuntu: apt-get install -y docker-compose)")
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "--profile", "fleet", "config", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr or result.stdout
