"""Promise: traces carry no environment, no tensor contents and no credentials; paths can be redacted."""

import pytest
import safetensors
import safetensors.torch
from support.checkpoints import private_checkpoint
from support.inmemory import traced


@pytest.fixture
def checkpoint(tmp_path):
    return private_checkpoint(tmp_path)


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
