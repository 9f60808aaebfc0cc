"""Promise: every process that loads keeps its exact running totals and what it is doing in a state file (statefile.py)
that the kernel keeps if it dies: tensors and bytes counted into per-file read slots (the same numbers the spans
carry), its status, load and phase, its memory limit from the load's start, which attempt of which launch it is, and
why its load failed; a process that finished says so. The per-tensor path costs no more than the list append it
replaced (see the module docstring of loadtrace/instrumentation/hooks/safetensors.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors
import safetensors.torch
import torch
from support.full_disk import full_tmpfs
from support.paths import WORKERS

from loadtrace import semconv, statefile
from loadtrace.analysis.sources import read_files

sys.path.insert(0, str(WORKERS))


LOAD_ONE = r"""
import sys, safetensors, loadtrace
with loadtrace.traced_load("one"):
    with safetensors.safe_open(sys.argv[1], framework="pt") as f:
        f.get_tensor("w")
print("done", flush=True)
"""


def run_traced(tmp_path: Path, env: dict[str, str], script: str = LOAD_ONE) -> subprocess.CompletedProcess:

    ckpt = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(ckpt))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "TORCHELASTIC", "SLURM"))}
    clean.update(LOADTRACE="1", TMPDIR=str(tmp_path / "tmp"), **env)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", script, str(ckpt)], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=120
    )


def test_a_process_that_finished_says_so_and_names_its_attempt_and_launch(tmp_path):
    witness_dir = tmp_path / "witness"
    witness_dir.mkdir(mode=0o700)
    env = {
        "LOADTRACE_DIR": str(tmp_path / "traces"),
        "TORCHELASTIC_RESTART_COUNT": "2",
        semconv.ENV_LAUNCH_ID: "launch-1",
        semconv.ENV_WITNESS_DIR: str(witness_dir),
    }
    result = run_traced(tmp_path, env)
    assert result.returncode == 0 and "loadtrace:" not in result.stderr, result.stderr
    (path,) = (tmp_path / "traces").glob(f"*{semconv.STATE_SUFFIX}")
    found = statefile.read(path)
    assert found is not None and found.status == "exited"
    assert found.attempt == 2 and found.launch_id == "launch-1" and found.pid > 0
    assert found.trace_file == str(path.with_suffix(semconv.TRACE_FILE_SUFFIX))
    assert found.trace_id == format(semconv.job_trace_ids(found.job_id)[0], "032x")
    totals = found.totals()
    assert (totals.tensors_read, totals.read_bytes, totals.files_opened) == (1, 64, 1)
    (pointer,) = witness_dir.iterdir()  # announced to the witnessing launcher
    assert pointer.name == str(found.pid) and pointer.read_text() == str(path)
    (span,) = [s for s in read_files(tmp_path / "traces").spans if s.name == semconv.SPAN_LOAD]
    assert span.resource[semconv.ATTEMPT] == 2 and span.resource[semconv.LAUNCH_ID] == "launch-1"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_spans_only_over_otlp_keep_the_state_in_a_private_temporary_directory(tmp_path):
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "LOADTRACE_JOB_ID": "job/one",
        "LOADTRACE_EXIT_TIMEOUT": "0.2",
    }
    result = run_traced(tmp_path, env)
    assert result.returncode == 0, result.stderr
    base = tmp_path / "tmp" / f"loadtrace-{os.getuid()}"
    (path,) = base.glob(f"job_one/*{semconv.STATE_SUFFIX}")
    assert oct(base.stat().st_mode & 0o777) == oct(0o700)
    found = statefile.read(path)
    assert found is not None and found.status == "exited" and found.trace_file == ""
    assert found.job_id == "job/one" and found.totals().read_bytes == 64
    assert not (tmp_path / "loadtrace-traces").exists()


def test_an_unwritable_trace_dir_costs_one_line_and_the_job_runs_the_same(tmp_path):
    result = run_traced(tmp_path, {"LOADTRACE_DIR": "/dev/null/traces"})
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("loadtrace:")]
    assert len(said) == 1 and "cannot write traces" in said[0], said


def test_a_temporary_directory_someone_else_made_is_not_used(tmp_path):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / f"loadtrace-{os.getuid()}").symlink_to(tmp_path)
    result = run_traced(
        tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "LOADTRACE_EXIT_TIMEOUT": "0.2"}
    )
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    assert "cannot keep this process's state file" in result.stderr
    assert not list(tmp_path.glob(f"*/*{semconv.STATE_SUFFIX}"))


FORKS = r"""
import os, sys, safetensors, loadtrace
from loadtrace.instrumentation.tracing import spans
with loadtrace.traced_load("parent"):
    f = safetensors.safe_open(sys.argv[1], framework="pt")
    f.get_tensor("w")
    piece = f.get_slice("w")
    pid = os.fork()
    if pid == 0:
        for _ in range(5):
            f.get_tensor("w")  # a handle inherited from the parent: not the parent's reads
            f.get_slice("w")[...]
            piece[...]  # nor a slice it made
        os._exit(0)
    os.waitpid(pid, 0)
    print("parent", spans.tracing().state.path, flush=True)
"""


def test_a_forked_child_reading_an_inherited_handle_leaves_the_parents_state_alone(tmp_path):
    result = run_traced(tmp_path, {"LOADTRACE_DIR": str(tmp_path / "traces")}, FORKS)
    assert result.returncode == 0, result.stderr
    path = result.stdout.split()[-1]
    found = statefile.read(path)
    assert found is not None and found.totals().tensors_read == 1 and found.totals().read_bytes == 64


def test_a_full_disk_is_an_error_not_a_sigbus(tmp_path):
    """A page of the state file is reserved before it is mapped: a full filesystem cannot kill the job later."""
    with full_tmpfs(tmp_path / "full", "8k") as full:
        with pytest.raises(OSError):
            statefile.Writer(str(full / "s.state"), {}, {})
        result = run_traced(tmp_path, {"LOADTRACE_DIR": str(full)})
        assert result.returncode == 0 and "done" in result.stdout, result.stderr
