"""Promise: with ``LOADTRACE=1``, a process that never loads (the launcher, a DataLoader worker, a tokenizer pool, any
helper) pays almost nothing: no OpenTelemetry, no hook machinery until a hooked library is imported, no files, threads,
signal handlers or exit handlers until the first span; the first span of any kind sets everything up, from any
thread, without a fork in the meantime inheriting a half-done import (loadtrace/instrumentation/activation.py)."""

import json
import os
import subprocess
import sys

from loadtrace import _activate  # noqa: F401 - _activate does nothing here: LOADTRACE is unset in tests
from loadtrace.instrumentation import settings  # noqa: F401


def run(code: str, loadtrace: str | None = "1", timeout: int = 120, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    if loadtrace is not None:
        env["LOADTRACE"] = loadtrace
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd="/"
    )


def output(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


MODULES = "import sys, json; print(json.dumps(sorted(sys.modules)))"


def test_a_bare_interpreter_imports_three_small_modules_of_ours_and_nothing_else():
    untraced = set(output(run(MODULES, loadtrace=None)))
    traced = set(output(run(MODULES)))
    assert traced - untraced == {
        "loadtrace",
        "loadtrace._activate",
        "loadtrace.instrumentation",
        "loadtrace.instrumentation.activation",
        "__future__",
    }


NEVER_LOADS = """
import atexit, json, signal, sys, threading, torch
torch.zeros_like(torch.ones(2))
print(json.dumps({
    "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
    "threads": sorted(t.name for t in threading.enumerate()),
    "atexit": atexit._ncallbacks(),
    "handlers": [str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)],
    "hooked": type(sys.modules["torch"].load).__name__,
    "loader": type(torch.__loader__).__name__ + " " + type(torch.__spec__.loader).__name__,
    "finders": [type(f).__name__ for f in sys.meta_path],
}))
"""


def test_importing_torch_hooks_it_and_sets_up_nothing_else(tmp_path):
    untraced = output(run(NEVER_LOADS, loadtrace=None))
    result = run(NEVER_LOADS, LOADTRACE_DIR=str(tmp_path / "traces"))
    traced = output(result)
    assert result.stderr == ""
    assert traced["otel"] == []
    assert traced["hooked"] == "HookWrapper" and untraced["hooked"] != "HookWrapper"
    for same in ("threads", "atexit", "handlers", "loader"):
        assert traced[same] == untraced[same], same
    # One-shot activation; the watcher stays only as the startup's import clock (a name check per new import) until
    # a startup ends, which this process never has.
    assert traced["finders"].count("_Watcher") <= 1
    assert not (tmp_path / "traces").exists()
    assert not list(tmp_path.iterdir())


FIRST_SPAN_OF_ANY_KIND = """
import json, sys, safetensors, safetensors.torch, torch
from loadtrace.instrumentation.tracing import spans
safetensors.torch.save_file({"w": torch.ones(4)}, sys.argv[1] if len(sys.argv) > 1 else "/tmp/unused")
before = "opentelemetry.sdk.trace" in sys.modules
tracing = spans.tracing()
phase, token = tracing.enter_phase("loadtrace.test.phase")  # a span that is no load (issue 14's kind)
tracing.exit_phase(phase, token, None)
print(json.dumps({"before": before, "after": "opentelemetry.sdk.trace" in sys.modules,
                  "state": tracing.state is not None, "recording": phase.recording}))
"""


def test_the_first_span_of_any_kind_sets_up_the_sdk(tmp_path):
    got = output(run(FIRST_SPAN_OF_ANY_KIND, LOADTRACE_DIR=str(tmp_path)))
    assert got == {"before": False, "after": True, "state": True, "recording": True}
    assert [p.suffix for p in sorted(tmp_path.iterdir())] == [".jsonl", ".state"]


# A thread opens the first span (importing the SDK, ~0.1-0.3 s) while the main thread forks again and again; each child
# then imports the SDK itself. A fork in the middle of that import would leave the child waiting forever on the
# module's import lock, held by a thread it does not have.
FORK_RACE = r"""
import os, sys, threading, time, torch
import loadtrace
from loadtrace.instrumentation.tracing import spans

started = threading.Event()
def first_span():
    started.set()
    with loadtrace.traced_load("first"):
        pass
thread = threading.Thread(target=first_span)
children = []
thread.start()
started.wait()
deadline = time.monotonic() + 2.0
while thread.is_alive() or len(children) < 3:
    pid = os.fork()
    if pid == 0:
        import opentelemetry.sdk.trace, opentelemetry.sdk.resources  # the parent's thread may have been importing them
        with loadtrace.traced_load("child"):
            pass
        os._exit(0)
    children.append(pid)
    if time.monotonic() > deadline:
        break
thread.join()
hung = 0
for pid in children:
    for _ in range(300):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, status
            break
        time.sleep(0.1)
    else:
        hung += 1
        os.kill(pid, 9)
        os.waitpid(pid, 0)
print(len(children), "children", hung, "hung", flush=True)
"""


def test_a_fork_while_the_first_span_imports_the_sdk_does_not_hang_the_child(tmp_path):
    result = run(FORK_RACE, LOADTRACE_DIR=str(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr
    count, _, hung, _ = result.stdout.split()
    assert int(count) >= 3 and hung == "0", result.stdout
