"""Trace files are OTLP JSON Lines as the spec writes them, owner-only, and never a reason for the job to fail."""

import json
import os
import stat
import subprocess
import sys

import safetensors.torch
import torch

CODE = """
import safetensors, safetensors.torch, sys
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
print("job finished")
"""


def run(tmp_path, **env_extra):
    ckpt = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(ckpt))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update({"LOADTRACE": "1", **env_extra})
    return subprocess.run(
        [sys.executable, "-c", CODE, str(ckpt)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )


def test_default_directory_and_otlp_json_shape(tmp_path):
    result = run(tmp_path, LOADTRACE_JOB_ID="job-1")
    assert result.returncode == 0, result.stderr
    (file,) = (tmp_path / "loadtrace-traces" / "job-1").glob("*.jsonl")
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    # One line per span as it ends: the file's, the load its read made (outside any load of the job's: loose.py) as
    # it ends at exit, then the process's startup, which the load hung from.
    names = [data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] for data in lines]
    assert names == ["safetensors.open", "loadtrace.load", "loadtrace.startup"]
    data = lines[0]
    resource_spans = data["resourceSpans"][0]
    span = resource_spans["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
    assert len(span["spanId"]) == 16 and len(span["parentSpanId"]) == 16
    assert span["kind"] == 1 and span["startTimeUnixNano"].isdigit()
    attributes = {a["key"]: a["value"] for a in span["attributes"]}
    assert attributes["loadtrace.read.bytes"] == {"intValue": "64"}
    resource = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
    assert resource["loadtrace.job.id"] == {"stringValue": "job-1"}


def test_unwritable_directory_is_said_once_and_the_job_goes_on(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = run(tmp_path, LOADTRACE_DIR=str(blocker / "traces"))
    assert result.returncode == 0 and "job finished" in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loadtrace: cannot write traces to")


def test_otel_service_name_and_resource_attributes_are_honoured(tmp_path):
    result = run(
        tmp_path,
        LOADTRACE_DIR=str(tmp_path / "t"),
        OTEL_SERVICE_NAME="pretrain-7b",
        OTEL_RESOURCE_ATTRIBUTES="team=ml-infra,deployment.environment=prod",
    )
    assert result.returncode == 0, result.stderr
    (file,) = (tmp_path / "t").glob("*.jsonl")
    resource = json.loads(file.read_text().splitlines()[0])["resourceSpans"][0]["resource"]["attributes"]
    values = {a["key"]: next(iter(a["value"].values())) for a in resource}
    assert values["service.name"] == "pretrain-7b"
    assert values["team"] == "ml-infra" and values["deployment.environment"] == "prod"
    assert values["process.pid"] and values["host.name"] and values["service.instance.id"]
