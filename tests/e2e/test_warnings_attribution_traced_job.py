"""Promise: a guest does not move warnings. A ``warnings.warn(..., stacklevel=N)`` raised inside a hooked call names the
same file, line and module traced and untraced (so ``module=`` filters keep matching), through the hook wrapper, the
while-loading wrappers and the safetensors proxies; tracebacks still show our frames with their source."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.torchrun import clean_env
from support.venvs import discover

TP_PLAN = """
import json, re, sys, warnings
from transformers import AutoModelForCausalLM
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    AutoModelForCausalLM.from_pretrained(sys.argv[1], tp_plan="auto")
found = [(w.filename, w.lineno, w.category.__name__) for w in caught if "tp_plan" in str(w.message)]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    warnings.filterwarnings("error", category=FutureWarning, module=re.escape("transformers.models.auto.auto_factory"))
    try:
        AutoModelForCausalLM.from_pretrained(sys.argv[1], tp_plan="auto")
        matched = False
    except FutureWarning:
        matched = True
print("RESULT " + json.dumps({"warnings": found, "module_filter_matched": matched}))
"""


def test_a_deprecation_warning_inside_from_pretrained_is_attributed_the_same_traced(checkpoint, tmp_path):
    found = discover()
    if not found:
        pytest.skip("no venv with torchrun and transformers (see tests/support/venvs.py)")
    venv = found[0]
    script = tmp_path / "tp_plan.py"
    script.write_text(TP_PLAN)
    results = {}
    for traced in (False, True):
        env = {"LOADTRACE": "1", "LOADTRACE_DIR": str(tmp_path / "traces")} if traced else {}
        proc = subprocess.run(
            [str(venv.python), str(script), str(checkpoint)],
            cwd=tmp_path,
            env=clean_env(venv, env),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        results[traced] = json.loads(line[len("RESULT ") :])
    assert results[True] == results[False]
    ((filename, _, category),) = results[False]["warnings"]
    assert filename.endswith("auto_factory.py") and category == "FutureWarning"
    assert results[True]["module_filter_matched"]
    assert list((tmp_path / "traces").rglob("*.jsonl"))  # it really was traced
