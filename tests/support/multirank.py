"""Two-rank jobs (``torchrun --nproc_per_node 2``, gloo on CPU) of the test worker, run once per session and shared.

A ``Job`` is one torchrun of ``tests/workers/count_load.py`` (or of ``examples/load.py``) in one venv and mode, with
``LOADTRACE=1`` or without; it keeps the worker's per-rank independent counts and the spans loadtrace wrote under the
job's working directory (the default ``./loadtrace-traces/<job id>/``).
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .shared import once
from .torchrun import TorchrunResult, torchrun
from .venvs import REPO, Venv, installed_problems, stale_files

COUNT_WORKER = REPO / "tests" / "workers" / "count_load.py"
EXAMPLE_WORKER = REPO / "examples" / "load.py"
WORLD_SIZE = 2
MODES = ("plain", "fsdp", "zero3")
# What the launcher (accelerate launch with an FSDP config, cpu_ram_efficient_loading: true) puts in the environment.
MODE_ENV = {
    "plain": {},
    "fsdp": {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"},
    "zero3": {},
}
STRATEGY = {"plain": "plain", "fsdp": "fsdp_cpu_ram_efficient", "zero3": "zero3"}
TRACE_ROOT = "loadtrace-traces"


def cases(venvs: list[Venv]) -> list[tuple[Venv, str]]:
    """The (venv, mode) jobs the multi-rank tests assert on: every mode in the first venv (the current release); in
    the others, the modes whose loads differ by release (the seed reports' FSDP and ZeRO-3 paths). A plain load is
    the same reads in every release: run once, it proves what a second run would."""
    return [(venv, mode) for venv in venvs for mode in MODES if venv is venvs[0] or mode != "plain"]


def read_spans(path: Path) -> Any:
    """``loadtrace.analysis.sources.read_files(path)`` (a ``SpanSet``): from the importable package, else straight from
    the source file."""
    try:
        from loadtrace.analysis.sources import read_files
    except ImportError:
        spec = importlib.util.spec_from_file_location(
            "_loadtrace_sources", REPO / "loadtrace" / "analysis" / "sources.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        read_files = module.read_files
    return read_files(path)


@dataclass
class Job:
    venv: Venv
    mode: str
    traced: bool
    script: Path
    run: TorchrunResult
    counts: dict[int, dict[str, Any]] = field(default_factory=dict)
    digests: dict[int, dict[str, Any]] = field(default_factory=dict)
    _spans: Any = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"{self.venv.id} {self.mode} {'LOADTRACE=1' if self.traced else 'untraced'} ({self.script.name})"

    @property
    def trace_root(self) -> Path:
        return self.run.cwd / TRACE_ROOT

    def trace_files(self) -> list[Path]:
        return sorted(self.trace_root.rglob("*.jsonl")) if self.trace_root.exists() else []

    def spans(self):
        """Every span loadtrace wrote for this job (a ``SpanSet``), read once."""
        if self._spans is None:
            self._spans = read_spans(self.trace_root)
        return self._spans

    def spans_by_rank(self) -> dict[int, list[Any]]:
        by_rank: dict[int, list[Any]] = defaultdict(list)
        for span in self.spans().spans:
            by_rank[span.resource.get("loadtrace.rank")].append(span)
        return dict(by_rank)


class Jobs:
    """Runs each (venv, mode, traced, script) job at most once per test session, whatever the xdist workers."""

    def __init__(self, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.checkpoint = checkpoint
        self.tmp_path_factory = tmp_path_factory
        self._checked_install: dict[str, list[str]] = {}

    def require_installed(self, venv: Venv) -> None:
        """Fail unless loadtrace is a real, non-editable install in ``venv`` (warn when it is older than the tree)."""
        key = str(venv.root)
        if key not in self._checked_install:
            self._checked_install[key] = installed_problems(venv)
            stale = stale_files(venv)
            if stale:
                warnings.warn(
                    f"loadtrace installed in {venv.root} differs from the working tree in {', '.join(stale[:8])}"
                    f"{' ...' if len(stale) > 8 else ''}; reinstall with: {venv.install_hint()}",
                    stacklevel=2,
                )
        problems = self._checked_install[key]
        if problems:
            raise AssertionError(
                f"loadtrace is not installed (non-editable) in {venv.root}: {'; '.join(problems)}.\n"
                f"Install it with: {venv.install_hint()}"
            )

    def get(self, venv: Venv, mode: str, traced: bool, script: Path = COUNT_WORKER) -> Job:
        key = ("multirank", str(venv.root), str(self.checkpoint), mode, traced, script.name)
        job = once(self.tmp_path_factory, key, lambda: self._run(venv, mode, traced, script))
        job.run.check()
        return job

    def _run(self, venv: Venv, mode: str, traced: bool, script: Path) -> Job:
        self.require_installed(venv)
        # The checkpoint's folder in the name: the same worker and mode also run on other checkpoints (seed 2's).
        name = f"{self.checkpoint.name}-{venv.name}-{mode}-{'traced' if traced else 'untraced'}-{script.stem}"
        cwd = self.tmp_path_factory.mktemp(name, numbered=False)
        out = cwd / "out"
        env = dict(MODE_ENV[mode])
        if traced:
            env["LOADTRACE"] = "1"
        run = torchrun(venv, script, [str(self.checkpoint), "--mode", mode, "--out", str(out)], cwd=cwd, env=env)
        job = Job(venv=venv, mode=mode, traced=traced, script=script, run=run)
        print(f"[multirank] {job.label}: rc {run.returncode} in {run.seconds:.1f}s, cwd {cwd}")
        if run.returncode == 0:
            for rank in range(WORLD_SIZE):
                count = out / f"count-rank{rank}.json"
                if count.exists():
                    job.counts[rank] = json.loads(count.read_text())
                    job.digests[rank] = job.counts[rank]["digest"]
                digest = out / f"digest-rank{rank}.json"
                if digest.exists():
                    job.digests[rank] = json.loads(digest.read_text())
        return job
