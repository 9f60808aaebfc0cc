"""Promise (issue 40): with the collector down, a 2-rank torchrun job says so in exactly one short line for its node
(local rank 0's), with the endpoint and the cause, not one long line per rank; rank 0's closing line says sending
failed, never "sent". The rules, unit by unit: tests/in_job/test_export_failure_said_once.py."""

from __future__ import annotations

import re
from pathlib import Path

from support.torchrun import torchrun
from support.venvs import discover

DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there
READ = """
import sys, safetensors
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
"""


def test_a_dead_collector_is_said_once_for_the_node_and_the_closing_line_is_honest(tmp_path):
    import safetensors.torch
    import torch

    ckpt = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(ckpt))
    script = tmp_path / "read.py"
    script.write_text(READ)
    env = {"LOADTRACE": "1", "LOADTRACE_QUIET": "0", "OTEL_EXPORTER_OTLP_ENDPOINT": DEAD}
    run = torchrun(discover()[0], script, [str(ckpt)], cwd=tmp_path / "run", env=env).check()
    said = [line for line in Path(run.log).read_text(errors="replace").splitlines() if "loadtrace:" in line]
    failing = [line for line in said if "export failing" in line]
    # One collector down is one problem: whichever of the spans or the metrics meets it first says it.
    assert len(failing) == 1 and re.fullmatch(
        f"loadtrace: (span|metrics) export failing: {DEAD}: Connection refused", failing[0]
    ), said
    (closing,) = [line for line in said if "loadtrace: job " in line]
    assert f"sending to {DEAD} failed (Connection refused)" in closing and " sent to" not in closing, closing
    assert "Transient error" not in run.log.read_text(errors="replace")
