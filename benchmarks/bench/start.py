"""(a) Interpreter start, ``python -c pass``: a shadow venv *without* loadtrace vs one *with* it installed but off (and,
for information, on); ``-X importtime`` of both; the in-process cost of processing ``loadtrace.pth``; and a check
that, installed but off, nothing is imported or patched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from .common import PY, clean_env, is_wrapped, log, output, worker
from .stats import med, summarize_starts

VARIANTS = ("not installed", "installed, off", "installed, LOADTRACE=1")
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
PROBE = (
    "import sys, importlib.util as u; "
    "print(sys.prefix, u.find_spec('loadtrace') is not None, u.find_spec('torch') is not None)"
)
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a child would report its parent's peak.
RSS_PROBE = "print([line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')][0])"
# The exact extra work of an off start: site processing loadtrace.pth (open, read, exec one line), in-process.
PTH_TIMING = """import site, time, os
d = {site_dir!r}
n = 2000
best = []
for _ in range(7):
    t = time.perf_counter()
    for _ in range(n): site.addpackage(d, 'loadtrace.pth', set())
    best.append((time.perf_counter() - t) / n)
print(min(best) * 1e6, sorted(best)[3] * 1e6)
"""


def shadow_venv(dest: Path, with_loadtrace: bool) -> Path:
    """A venv whose site-packages holds symlinks to every entry of this venv's, with or without loadtrace's files.

    Both shadows are built the same way (symlinks, same base interpreter), so the only difference between them is
    loadtrace: its ``.pth``, its package and its dist-info."""
    site = Path(sysconfig.get_paths()["purelib"])
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "bin").mkdir(parents=True)
    target = dest / SITE
    target.mkdir(parents=True)
    (dest / "bin" / "python").symlink_to(os.path.realpath(PY))
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    lines = [line for line in cfg.read_text().splitlines() if not line.startswith("command")]
    (dest / "pyvenv.cfg").write_text("\n".join(lines) + "\n")
    for entry in site.iterdir():
        is_loadtrace = entry.name in ("loadtrace.pth", "loadtrace") or entry.name.startswith("loadtrace-")
        if is_loadtrace and not with_loadtrace:
            continue
        (target / entry.name).symlink_to(entry)
    return dest / "bin" / "python"


def cmd_unpatched(argv: list[str]) -> int:
    """Worker: installed but off, nothing of loadtrace imported, every hooked name the original object."""
    import safetensors
    import torch
    import transformers.core_model_loading as cml
    import transformers.modeling_utils as mu

    problems = []
    if "loadtrace" in sys.modules or "loadtrace._activate" in sys.modules:
        problems.append("loadtrace imported")
    if torch.zeros_like is not torch._C._VariableFunctions.zeros_like:
        problems.append("torch.zeros_like is not the original")
    if torch.empty_like is not torch._C._VariableFunctions.empty_like:
        problems.append("torch.empty_like is not the original")
    for name, obj in [
        ("safetensors.safe_open", safetensors.safe_open),
        ("torch.load", torch.load),
        ("modeling_utils.safe_open", mu.safe_open),
        ("PreTrainedModel.from_pretrained", mu.PreTrainedModel.__dict__["from_pretrained"]),
        ("convert_and_load_state_dict_in_model", cml.convert_and_load_state_dict_in_model),
    ]:
        if is_wrapped(obj):
            problems.append(f"{name} is wrapped")
    print(json.dumps({"ok": not problems, "problems": problems, "modules": len(sys.modules)}))
    return 0


def variants(work: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    """variant → (python, environment), after checking that the shadows differ only by loadtrace."""
    without = shadow_venv(work / "venv-without-loadtrace", False)
    with_ = shadow_venv(work / "venv-with-loadtrace", True)
    found = {
        "not installed": (without, clean_env()),
        "installed, off": (with_, clean_env()),
        "installed, LOADTRACE=1": (with_, clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces-start"))),
    }
    for name, (python, env) in found.items():
        log(f"start probe [{name}]: {output([str(python), '-c', PROBE], env).strip()}")
    return found


def time_starts(found: dict[str, tuple[Path, dict[str, str]]], pairs: int) -> dict[str, list[float]]:
    """Seconds of ``python -c pass`` per variant, in interleaved triples of alternating order."""
    names = list(found)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(3):  # warm the file system cache for all three
        for name in names:
            subprocess.run([str(found[name][0]), "-c", "pass"], env=found[name][1], check=True)
    for i in range(pairs):
        for name in names if i % 2 == 0 else names[::-1]:
            python, env = found[name]
            t0 = time.perf_counter()
            subprocess.run([str(python), "-c", "pass"], env=env, check=True)
            times[name].append(time.perf_counter() - t0)
    return times


def max_rss_mb(python: Path, env: dict[str, str]) -> float | None:
    return med([int(output([str(python), "-c", RSS_PROBE], env)) / 1024 for _ in range(3)])


def imported(python: Path) -> set[str]:
    """The modules ``-X importtime`` says a bare start imports."""
    err = subprocess.run(
        [str(python), "-X", "importtime", "-c", "pass"], env=clean_env(), capture_output=True, text=True, check=True
    ).stderr
    return {line.split("|")[-1].strip() for line in err.splitlines() if line.startswith("import time:")} - {"package"}


def bench_start(work: Path, pairs: int) -> dict[str, Any]:
    found = variants(work)
    times = time_starts(found, pairs)
    result: dict[str, Any] = {"pairs": pairs}
    for name, entry in summarize_starts(times, times["not installed"]).items():
        result[name] = {**entry, "max_rss_mb": max_rss_mb(*found[name])}
    without, with_ = found["not installed"][0], found["installed, off"][0]
    # -X importtime: what an off start imports that a start without loadtrace does not (should be nothing).
    result["extra_imports_when_off"] = sorted(imported(with_) - imported(without))
    code = PTH_TIMING.format(site_dir=str(with_.parent.parent / SITE))
    out = output([str(with_), "-c", code], clean_env()).split()
    result["pth_processing_us"] = {"min": float(out[0]), "median": float(out[1])}
    check = output(worker("_unpatched"), clean_env())
    result["unpatched_when_off"] = json.loads(check.strip().splitlines()[-1])
    return result
