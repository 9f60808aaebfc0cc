"""Promise: traces carry no environment, no tensor contents and no credentials (a real traced process with a
secret in its environment and its OTLP headers; redacted paths: in_job/test_security.py)."""

import os
import subprocess
import sys

import pytest
from support.checkpoints import private_checkpoint

SECRET = "s3cr3t-token-4f1c"


@pytest.fixture
def checkpoint(tmp_path):
    return private_checkpoint(tmp_path)


def test_traces_hold_no_environment_no_headers_no_tensor_values(checkpoint, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(
        LOADTRACE="1",
        LOADTRACE_DIR=str(tmp_path / "traces"),
        API_TOKEN=SECRET,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {SECRET}",
    )
    code = (
        f"import safetensors\nwith safetensors.safe_open({str(checkpoint)!r}, framework='pt') as f: f.get_tensor('w')"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stderr
    (trace_file,) = (tmp_path / "traces").glob("*.jsonl")
    text = trace_file.read_text()
    assert SECRET not in text and "API_TOKEN" not in text
    assert "7.0" not in text  # the tensor's values never leave the process


# No secret in any line we print (issue 34) ---------------------------------------------------------------------------

PASSWORD = "s3cret"


def loadtrace_cli(*args: str) -> subprocess.CompletedProcess:
    """The installed command in a process of its own: the driver's logging reaches stderr there as it does for users
    (under pytest, its log capture would take it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    command = [sys.executable, "-m", "loadtrace", *args]
    return subprocess.run(  # cwd: away from the source tree, which `-m` would import instead of the installed wheel
        command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd="/"
    )


def test_a_clickhouse_password_is_never_printed_and_the_driver_adds_no_line():
    pytest.importorskip("clickhouse_connect")
    done = loadtrace_cli("jobs", "--clickhouse", f"http://alice:{PASSWORD}@127.0.0.1:1")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("loadtrace: error: cannot reach ClickHouse at http://***@127.0.0.1:1: "), done.stderr
    assert PASSWORD not in done.stderr and "alice" not in done.stderr
    bad = loadtrace_cli("jobs", "--clickhouse", f"ftp://alice:{PASSWORD}@127.0.0.1/x")  # refused before any driver
    assert bad.returncode == 2 and PASSWORD not in bad.stderr and "ftp://***@127.0.0.1/x" in bad.stderr, bad.stderr


def test_a_jaeger_url_with_user_info_is_never_printed():
    done = loadtrace_cli("report", "--jaeger", f"http://alice:{PASSWORD}@127.0.0.1:1", "--latest")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot reach Jaeger at http://***@127.0.0.1:1/" in done.stderr and PASSWORD not in done.stderr


def test_in_the_job_no_line_shows_the_endpoints_user_info_or_a_header_value(checkpoint):
    """Rank 0 over OTLP only: its closing line names the endpoint; OpenTelemetry's own warning about a malformed
    header quotes the header (``Authorization Bearer ...`` without ``=``); the export to a closed port fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(
        LOADTRACE="1",
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://alice:{PASSWORD}@127.0.0.1:9",
        OTEL_EXPORTER_OTLP_HEADERS=f"Authorization Bearer {SECRET}",
    )
    code = (
        f"import safetensors\nwith safetensors.safe_open({str(checkpoint)!r}, framework='pt') as f: f.get_tensor('w')"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    said = result.stderr.splitlines()
    assert any("sending to http://***@127.0.0.1:9 failed" in line for line in said), said  # rank 0's line
    assert any("Header format invalid" in line for line in said), said  # OpenTelemetry's warning, still said
    assert not [line for line in said if PASSWORD in line or SECRET in line or "alice" in line], said
