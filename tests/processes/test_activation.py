"""LOADTRACE=1 turns tracing on in any Python process, through the installed loadtrace.pth; unset means untouched."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

PROBE = """
import sys, torch, wrapt
import safetensors, transformers.modeling_utils as mu
print("loaded", "loadtrace" in sys.modules)
original = torch.zeros_like is torch._C._VariableFunctions.zeros_like
wrapped = isinstance(torch.zeros_like, wrapt.FunctionWrapper)
print("zeros_like", "wrapped" if wrapped else ("original" if original else "other"))
print("safe_open", "wrapped" if isinstance(mu.safe_open, wrapt.FunctionWrapper) else "original")
if "loadtrace" in sys.modules:
    import loadtrace
    with loadtrace.traced_load("probe"):
        print("zeros_like_loading", "wrapped" if isinstance(torch.zeros_like, wrapt.FunctionWrapper) else "original")
"""


def run(env_extra: dict, code: str = PROBE) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, away from the source tree (``-c`` would import it instead of the wheel)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd="/")


def facts(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_installed_from_a_wheel_not_from_the_source_tree():
    import loadtrace

    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / "loadtrace.pth").is_file()
    assert Path(loadtrace.__file__).resolve().is_relative_to(site.resolve()), (
        "tests must exercise the installed package"
    )


def test_off_imports_nothing_and_patches_nothing():
    """One spelling of off, set (unset: the untraced jobs of e2e/; every spelling: in_job/test_activation_spellings.py
    runs the .pth line itself on each)."""
    got = facts(run({"LOADTRACE": "0"}))
    assert got == {"loaded": "False", "zeros_like": "original", "safe_open": "original"}


def test_on_hooks_before_first_use(tmp_path):
    got = facts(run({"LOADTRACE": "1", "LOADTRACE_DIR": str(tmp_path)}))  # the probe's load: its spans go there
    # zeros_like is hooked only while a load is open: training calls it constantly.
    assert got == {"loaded": "True", "zeros_like": "original", "safe_open": "wrapped", "zeros_like_loading": "wrapped"}


# A process that starts another, as a launcher starts its ranks.
LAUNCHER = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
BAD = "loadtrace: LOADTRACE='{}' is not one of 1/true/yes/on or 0/false/no/off; taken as off"


def test_an_unknown_value_is_said_once_for_the_job_and_taken_as_off():
    """A launcher that loadtrace runs in says it; its child inherits ``LOADTRACE_SAID`` and does not."""
    result = run({"LOADTRACE": "maybe"}, f"{PROBE}\n{LAUNCHER}")
    off = {"zeros_like": "original", "safe_open": "original", "zeros_like_loading": "original"}  # traced_load: a no-op
    assert facts(result) == {"loaded": "True", **off}  # loadtrace imported, only to say it
    assert [line for line in result.stderr.splitlines() if line.startswith("loadtrace:")] == [BAD.format("maybe")]


@pytest.mark.parametrize(
    "rank, lines",
    [
        ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, 1),  # no launcher of ours: rank 0, once
        ({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, 0),  # ... and never another rank
    ],
    ids=["rank-0", "rank-1"],
)
def test_a_bad_setting_is_said_once_per_job(rank, lines):
    """Issue 34: ``LOADTRACE=yse`` was said by every process of a 2-rank job, 3 times. Said at interpreter start,
    before any hooked import."""
    result = run({"LOADTRACE": "yse", **rank}, LAUNCHER)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("loadtrace:")]
    assert said == [BAD.format("yse")] * lines
