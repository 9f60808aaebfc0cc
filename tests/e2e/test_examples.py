"""Promise (examples/README.md): each example reproduces its reported problem under ``torchrun --nproc_per_node 2`` on
CPU, and ``loadtrace report`` shows it, with the findings each transformers release really produces.

Every example runs as the README says: ``LOADTRACE=1 torchrun --nproc_per_node 2 examples/<script>.py CKPT`` in a
fresh working directory, then ``loadtrace report loadtrace-traces/`` (the installed package's, in this process; the
console command itself: processes/test_console_commands.py). Each (venv, example) runs once.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import field_facts
from support.torchrun import TorchrunResult, torchrun
from support.venvs import REPO, Venv, discover, installed_problems

from loadtrace.cli import main

VENVS = discover()
EXAMPLES = {
    "fsdp2": REPO / "examples" / "fsdp2_cpu_ram_efficient_loading.py",
    "zero3": REPO / "examples" / "zero3_duplicate_reads.py",
}
CASES = [(venv, example) for venv in VENVS for example in EXAMPLES]
MODE = {"fsdp2": "fsdp", "zero3": "zero3"}  # the example → the load.py mode it reproduces (field_facts.FINDINGS)


@dataclass
class ExampleRun:
    venv: Venv
    example: str
    run: TorchrunResult
    report: dict
    report_exit: int

    @property
    def label(self) -> str:
        return f"{self.venv.id} {EXAMPLES[self.example].name}"

    def printed(self, pattern: str) -> dict[int, re.Match]:
        """The script's own ``rank R/2 ...`` lines matching ``pattern``, by rank."""
        return printed(self.run, pattern)

    def rank(self, number: int) -> dict:
        (found,) = [r for r in self.report["ranks"] if r["rank"] == number]
        return found


def printed(run: TorchrunResult, pattern: str) -> dict[int, re.Match]:
    """``rank R/2 <pattern>`` as the ranks printed it, by rank; two ranks' prints can share a line of the log."""
    log = run.log.read_text(errors="replace")
    return {int(m.group(1)): m for m in re.finditer(rf"rank (\d+)/2 {pattern}", log)}


@pytest.fixture(scope="module", params=CASES, ids=[f"{venv.id}-{example}" for venv, example in CASES])
def example(request, checkpoint: Path, tmp_path_factory) -> ExampleRun:
    venv, name = request.param
    problems = installed_problems(venv)
    assert not problems, f"loadtrace is not installed (non-editable) in {venv.root}: {problems}"
    cwd = tmp_path_factory.mktemp(f"example-{venv.name}-{name}")
    run = torchrun(venv, EXAMPLES[name], [str(checkpoint)], cwd=cwd, env={"LOADTRACE": "1"})
    print(f"[examples] {venv.id} {name}: rc {run.returncode} in {run.seconds:.1f}s, cwd {cwd}")
    run.check()
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["report", str(cwd / "loadtrace-traces"), "--format", "json", "--fail-on-findings"])
    assert code in (0, 1) and err.getvalue() == "", f"loadtrace report: {code}\n{err.getvalue()}"
    return ExampleRun(venv, name, run, json.loads(out.getvalue()), code)


def test_the_example_runs_and_reports_one_job_of_two_ranks(example: ExampleRun):
    assert example.report["skipped_lines"] == 0 and len(example.report["traces"]) == 1, example.report["traces"]
    assert sorted(r["rank"] for r in example.report["ranks"]) == [0, 1]
    strategy = {"fsdp2": "fsdp_cpu_ram_efficient", "zero3": "zero3"}[example.example]
    assert {r["strategy"] for r in example.report["ranks"]} == {strategy}
    assert example.rank(0)["read_bytes"] == field_facts.BYTES  # the loading rank reads the checkpoint
    if example.example == "fsdp2":
        sharded = example.printed(r"after FSDP2 sharding holds: ([\d,]+) B on cpu")
        assert sorted(sharded) == [0, 1] and len({m.group(2) for m in sharded.values()}) == 1, example.run.tail()
        assert int(sharded[1].group(2).replace(",", "")) < field_facts.MODEL_BYTES  # each rank keeps its shard
        assert sorted(example.printed(r"forward ok")) == [0, 1], example.run.tail()
    else:
        digests = example.printed(r"gathered \d+ tensors, [\d,]+ B, sha256 ([0-9a-f]{16})")
        assert sorted(digests) == [0, 1] and len({m.group(2) for m in digests.values()}) == 1, example.run.tail()


def test_the_report_shows_what_this_release_does(example: ExampleRun):
    facts = field_facts.FINDINGS.get((example.venv.release, MODE[example.example]))
    if facts is None:
        pytest.skip(f"no field facts for transformers {example.venv.transformers}")
    expected = {kind for kind, _ in facts}
    findings = example.report["findings"]
    assert {f["kind"] for f in findings} == expected, [f["detail"] for f in findings]
    assert all(f["ranks"] == [1] and f["severity"] == "warning" for f in findings), findings
    assert example.report_exit == (1 if expected else 0)
    rank1 = example.rank(1)
    if example.example == "fsdp2":
        # 5.12: the second model comes from zeros_like; later: from the read path, kept as parameters.
        created = field_facts.MODEL_BYTES if example.venv.release == "5.12" else field_facts.BUFFER_BYTES
        assert rank1["materialized_bytes"].get("cpu") == created
        # No test code in the process: each call site is transformers' own line (the first frame outside torch).
        sites = rank1["materialized_sites"]
        assert sites and all(s["site"].startswith("modeling_utils.py:") and s["site"].endswith(" cpu") for s in sites)
        assert sum(s["bytes"] for s in sites) == created
        assert rank1["held_bytes"].get("cpu") == field_facts.MODEL_BYTES
        assert rank1["read_bytes"] == field_facts.BYTES
    else:
        assert rank1["read_bytes"] == (field_facts.BYTES if example.venv.release == "5.12" else 0)
        assert rank1["files_opened"] == field_facts.FILES
        # It converts on both releases; on 5.24 only meta tensors: no bytes.
        assert rank1["conversions"] == field_facts.CONVERSIONS
        assert rank1["conversion_bytes"] == (field_facts.CONVERSION_BYTES if example.venv.release == "5.12" else 0)
