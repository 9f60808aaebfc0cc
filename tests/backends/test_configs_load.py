"""Promise: every config in exporters/ loads in the collector release docker-compose.yml pins, built with exactly the
components they name (``validate``: every component known, every key accepted, every pipeline wired), and
exporters/jaeger.yaml in Jaeger v2. The ClickHouse exporter is built and its configs load; no ClickHouse server runs."""

from __future__ import annotations

import subprocess

import pytest
from support import backends

# What the configs take from the environment, where they have no default.
ENV = {"LOADTRACE_CENTRAL_COLLECTOR": "127.0.0.1:4317", "LOADTRACE_CLICKHOUSE_PASSWORD": "secret"}


@pytest.fixture(autouse=True)
def built():
    backends.require()


# Each collector config alone, and the fleet's without ClickHouse (its overlay merged over it, as docs/fleet.md says).
CONFIGS = [
    *sorted(p.name for p in backends.EXPORTERS.glob("collector*.yaml")),
    "collector-fleet.yaml+fleet-without-clickhouse.yaml",
]


@pytest.mark.parametrize("config", CONFIGS)
def test_collector_config_loads(config):
    check = subprocess.run(
        [str(backends.COLLECTOR), "validate", *(f"--config={backends.EXPORTERS / c}" for c in config.split("+"))],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **ENV},
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_jaeger_config_loads():
    check = subprocess.run(
        [str(backends.JAEGER), "validate", f"--config={backends.EXPORTERS / 'jaeger.yaml'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_collector_holds_exactly_what_the_configs_name():
    listed = subprocess.run([str(backends.COLLECTOR), "components"], capture_output=True, text=True, timeout=60)
    names = {line.split("name:")[1].strip() for line in listed.stdout.splitlines() if "name:" in line}
    assert names == {
        *("otlp", "otlpjsonfile", "memory_limiter", "batch", "groupbytrace", "filter", "deltatocumulative"),
        *("nop", "debug", "prometheus", "clickhouse", "health_check"),
    }, names
