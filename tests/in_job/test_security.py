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


@pytest.mark.parametrize(
    "text, shown",
    [
        ("http://alice:s3cret@host:8123/db", "http://***@host:8123/db"),
        ("'https://token@host/x?a=b@c'", "'https://***@host/x?a=b@c'"),  # an @ in the query is not user info
        ("http://host:1/p?q=a@b", "http://host:1/p?q=a@b"),
        ("Authorization: Bearer abc, next", "Authorization: ***, next"),
        ('{"authorization": "Basic YWxpY2U6czNjcmV0"}', '{"authorization": "***"}'),
        ("header Bearer%20tok3n-x seen", "header *** seen"),  # OTEL_EXPORTER_OTLP_HEADERS' value, URL-encoded
        ("header Bearer tok3n-x seen", "header *** seen"),  # ... and decoded
        ("team ml", "team ml"),  # a value too short to be a credential is left alone
    ],
)
def test_redact_secrets(text, shown):
    from loadtrace.semconv import redact_secrets

    env = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20tok3n-x,x-team=ml"}
    assert redact_secrets(text, env) == shown
