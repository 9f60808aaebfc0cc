"""Promise: traces carry no environment, no tensor contents and no credentials; paths can be redacted."""

import os
import subprocess
import sys

import pytest
import safetensors
import safetensors.torch
import torch
from support.inmemory import traced

SECRET = "s3cr3t-token-4f1c"


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "private-project" / "model.safetensors"
    path.parent.mkdir()
    safetensors.torch.save_file({"w": torch.full((4,), 7.0)}, str(path))
    return path


def test_redacted_paths_keep_a_stable_hash_and_the_basename(checkpoint):
    with traced(redact_paths=True) as t:
        for _ in range(2):
            with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
                handle.get_tensor("w")
        with pytest.raises(FileNotFoundError):
            safetensors.safe_open(str(checkpoint.parent / "missing.safetensors"), framework="pt")
    first, second, missing = (span.attributes["loadtrace.file.path"] for span in t.spans("safetensors.open"))
    assert first == second and first.endswith("/model.safetensors") and "private-project" not in first
    assert missing.endswith("/missing.safetensors") and "private-project" not in missing
    failed = t.spans("safetensors.open")[2]
    assert failed.status.description == "FileNotFoundError"
    assert all("private-project" not in str(event.attributes) for event in failed.events)


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
