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
