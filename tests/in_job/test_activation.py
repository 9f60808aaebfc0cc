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


@pytest.mark.parametrize("value", [None, "0", "false", "off", ""])
def test_off_imports_nothing_and_patches_nothing(value):
    got = facts(run({} if value is None else {"LOADTRACE": value}))
    assert got == {"loaded": "False", "zeros_like": "original", "safe_open": "original"}


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_on_hooks_before_first_use(value):
    got = facts(run({"LOADTRACE": value}))
    # zeros_like is hooked only while a load is open: training calls it constantly.
    assert got == {"loaded": "True", "zeros_like": "original", "safe_open": "wrapped", "zeros_like_loading": "wrapped"}


def test_otel_sdk_disabled_wins():
    got = facts(run({"LOADTRACE": "1", "OTEL_SDK_DISABLED": "true"}))
    assert got == {"loaded": "False", "zeros_like": "original", "safe_open": "original"}


def test_an_unknown_value_is_said_once_and_taken_as_off():
    result = run({"LOADTRACE": "maybe"})
    got = facts(result)
    assert got["zeros_like"] == "original"
    lines = [line for line in result.stderr.splitlines() if line.startswith("loadtrace:")]
    assert len(lines) == 1 and "LOADTRACE='maybe'" in lines[0]


def test_a_process_that_loads_nothing_writes_nothing(tmp_path):
    result = run(
        {"LOADTRACE": "1", "LOADTRACE_DIR": str(tmp_path / "traces")}, "import torch; torch.zeros_like(torch.ones(2))"
    )
    assert result.returncode == 0 and result.stderr == ""
    assert not (tmp_path / "traces").exists()
