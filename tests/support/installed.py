"""The installed loadtrace as a user meets it after a real job: checked to be a real install, its ``loadtrace report``
command line, and what the job left (its trace folder, its spans as written, the exit codes torchrun printed)."""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

from loadtrace import semconv

from .multirank import TRACE_ROOT
from .torchrun import TorchrunResult, clean_env
from .venvs import Venv, installed_problems, stale_files


def require_installed(venv: Venv) -> None:
    """Fail unless loadtrace is a real (non-editable) install in ``venv``; warn when the install is older than the
    tree."""
    problems = installed_problems(venv)
    assert not problems, f"loadtrace is not installed (non-editable) in {venv.root}: {problems}; {venv.install_hint()}"
    stale = stale_files(venv)
    if stale:
        warnings.warn(
            f"loadtrace installed in {venv.root} is older than the tree ({', '.join(stale[:5])}); "
            f"reinstall with: {venv.install_hint()}",
            stacklevel=2,
        )


def report(venv: Venv, path: Path, *options: str) -> tuple[int, str, str]:
    """The installed ``loadtrace report PATH OPTIONS`` as a user runs it: (exit code, stdout, stderr). Never a
    traceback, whatever the input."""
    proc = subprocess.run(
        [str(venv.bin / "loadtrace"), "report", str(path), *options],
        env=clean_env(venv, {}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), f"loadtrace report {path} exited {proc.returncode}: {proc.stderr}"
    return proc.returncode, proc.stdout, proc.stderr


def report_json(venv: Venv, path: Path) -> dict[str, Any]:
    _, out, _ = report(venv, path, "--format", "json")
    return json.loads(out)


def job_dir(run: TorchrunResult) -> Path:
    """The one job folder a run wrote under its working directory's ``loadtrace-traces``."""
    dirs = sorted(p for p in (run.cwd / TRACE_ROOT).iterdir() if p.is_dir())
    assert len(dirs) == 1, f"expected one job folder under {run.cwd / TRACE_ROOT}, found {dirs}"
    return dirs[0]


def torchrun_exitcodes(run: TorchrunResult) -> dict[int, int]:
    """Rank → exit code, from the failure summary torchrun prints when a worker failed."""
    text = run.log.read_text(errors="replace")
    found = re.findall(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", text)
    return {int(rank): int(code) for rank, code in found}


def file_spans(folder: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource attributes, span) of every span in the OTLP JSON Lines files under ``folder``, values unwrapped; not
    the job's loads view (copies of the ranks' load spans in a trace of its own, which ``loadtrace annotate`` writes
    once the job is over)."""

    def value(v: dict[str, Any]) -> Any:
        (kind, inner), *_ = v.items()
        return int(inner) if kind == "intValue" else inner

    def unwrap(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {a["key"]: value(a["value"]) for a in items}

    found = []
    for path in sorted(folder.rglob("*.jsonl")):
        for text in path.read_text(errors="replace").splitlines():
            try:
                data = json.loads(text)
            except ValueError:
                continue  # a line cut short by a kill
            for resource_spans in data.get("resourceSpans", []):
                resource = unwrap(resource_spans.get("resource", {}).get("attributes", []))
                for scope_spans in resource_spans.get("scopeSpans", []):
                    if scope_spans.get("scope", {}).get("name") == semconv.SCOPE_LOADS_VIEW:
                        continue
                    for span in scope_spans.get("spans", []):
                        found.append((resource, {**span, "attributes": unwrap(span.get("attributes", []))}))
    return found


def job_trace_spans(folder: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``file_spans`` of the jobs' own traces: not the loads view rank 0's findings came with (docs/jaeger.md)."""
    from loadtrace import semconv

    pairs = file_spans(folder)
    views = {f"{semconv.loads_trace_id(str(r[semconv.JOB_ID])):032x}" for r, _ in pairs if semconv.JOB_ID in r}
    return [(resource, span) for resource, span in pairs if span["traceId"] not in views]
