"""Promise: a rank stopped by SIGTERM, SIGINT or SIGHUP while loading first ends every open span with the numbers it has
so far, status ERROR and `loadtrace.exit.signal`, and flushes them; then it does exactly what it would untraced (the
job's own handler runs, or the process dies by the signal), and a handler the job set is never replaced
(loadtrace/instrumentation/beside/termination.py, spans.Tracing).

Unit cases are real processes (a handler only runs in a real signal); the integration case is a real torchrun job whose
rank 0 torchrun SIGTERMs in the middle of its load because rank 1 failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtrace import semconv, statefile
from loadtrace.analysis.sources import read_files
from loadtrace.instrumentation.beside import termination

# A job whose load reads one safetensors file, keeps it open, then is sent ``--signal`` by ``--who`` (itself, by
# default). ``--before`` sets up the job's own handling of that signal first (or during the load with ``--during``).
JOB = r"""
import argparse, os, signal, sys, threading, time
import safetensors, safetensors.torch, torch, loadtrace

parser = argparse.ArgumentParser()
parser.add_argument("ckpt")
parser.add_argument("--signal", default="SIGTERM")
parser.add_argument("--before", choices=["none", "ignore", "handler", "default"], default="none")
parser.add_argument("--during", action="store_true", help="the job installs its handler while the load is open")
parser.add_argument("--thread", action="store_true", help="the load runs in a thread other than the main one")
args = parser.parse_args()
signo = getattr(signal, args.signal)


def job_handler(number, frame):
    print("job handler", number, flush=True)


if args.before == "ignore":
    signal.signal(signo, signal.SIG_IGN)
elif args.before == "handler":
    signal.signal(signo, job_handler)
elif args.before == "default":
    signal.signal(signo, signal.SIG_DFL)
original = signal.getsignal(signo)


def load():
    with loadtrace.traced_load("job"):
        handle = safetensors.safe_open(args.ckpt, framework="pt").__enter__()
        handle.get_tensor("w")
        handle.get_slice("v")[:]
        print("during", "ours" if signal.getsignal(signo) is not original else "theirs", flush=True)
        if args.during:
            signal.signal(signo, job_handler)
        if threading.current_thread() is threading.main_thread():
            os.kill(os.getpid(), signo)
            time.sleep(0.5)  # the signal arrives here
        handle.get_tensor("w")
        print("load goes on", flush=True)
    handle.__exit__(None, None, None)


try:
    if args.thread:
        worker = threading.Thread(target=load)
        worker.start()
        worker.join()
    else:
        load()
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
after = signal.getsignal(signo)
print("after", "original" if after is original else "job" if after is job_handler else repr(after), flush=True)
"""


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    import safetensors.torch
    import torch

    path = tmp_path_factory.mktemp("ckpt") / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16), "v": torch.zeros(4, 4)}, str(path))
    return path


def _as_from_a_terminal() -> None:
    """The job starts with the termination signals at their default, as from a terminal: a suite run in the
    background (``cmd &`` in a script) has SIGINT ignored, which the job would inherit and, untraced too, obey."""
    for name in termination.SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def run_job(tmp_path: Path, ckpt: Path, *args: str) -> tuple[subprocess.CompletedProcess, list, statefile.State]:
    traces = tmp_path / "traces"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(LOADTRACE="1", LOADTRACE_DIR=str(traces), LOADTRACE_EXIT_TIMEOUT="5")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    result = subprocess.run(
        [sys.executable, str(script), str(ckpt), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_as_from_a_terminal,
    )
    (state_path,) = traces.glob(f"*{semconv.STATE_SUFFIX}")
    state = statefile.read(state_path)
    assert state is not None
    return result, read_files(traces).spans, state


def by_name(spans: list) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def assert_ended_by(spans: list, name: str, tensors: int = 2, nbytes: int = 128) -> None:
    """The load and its open file, each ended once by the signal, with the numbers read so far."""
    spans = by_name(spans)
    (load,) = spans[semconv.SPAN_LOAD]
    (file,) = spans[semconv.SPAN_SAFETENSORS_OPEN]
    for span in (load, file):
        assert span.attributes[semconv.EXIT_SIGNAL] == name
        assert span.status_code == 2  # ERROR
        assert span.attributes[semconv.READ_TENSORS] == tensors and span.attributes[semconv.READ_BYTES] == nbytes
    assert load.attributes[semconv.FILES_OPENED] == 1
    assert load.attributes[semconv.RSS_PEAK] > 0, "memory attributes as usual"


def test_default_action_spans_ended_then_death_by_the_signal(tmp_path, ckpt):
    result, spans, state = run_job(tmp_path, ckpt)
    assert result.returncode == -signal.SIGTERM, result.stderr  # what a launcher sees: the same as untraced
    assert "during ours" in result.stdout and "load goes on" not in result.stdout
    assert_ended_by(spans, "SIGTERM")
    assert state.status == "signalled" and state.signal == signal.SIGTERM
    assert state.totals().read_bytes == 128 and state.phase == semconv.SPAN_LOAD
    assert "loadtrace:" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["SIGHUP", "SIGINT"])
def test_sighup_and_sigint_the_same(tmp_path, ckpt, name):
    result, spans, state = run_job(tmp_path, ckpt, "--signal", name, "--before", "default")
    assert result.returncode == -getattr(signal, name), result.stderr
    assert_ended_by(spans, name)
    assert state.status == "signalled"


def test_sigint_raises_keyboardinterrupt_as_untraced_and_spans_end_once(tmp_path, ckpt):
    result, spans, state = run_job(tmp_path, ckpt, "--signal", "SIGINT")
    assert result.returncode == 0, result.stderr
    assert "KeyboardInterrupt" in result.stdout and "load goes on" not in result.stdout
    assert_ended_by(spans, "SIGINT")  # exactly one load span and one file span: the unwinding ended nothing twice
    assert "loadtrace:" not in result.stderr, result.stderr  # no "span already ended" warnings either
    assert "after original" in result.stdout
    assert state.status == "signalled" and state.signal == signal.SIGINT, "its load was stopped by the signal"


def test_the_jobs_own_handler_is_called_and_the_load_goes_on(tmp_path, ckpt):
    result, spans, state = run_job(tmp_path, ckpt, "--before", "handler")
    assert result.returncode == 0, result.stderr
    assert f"job handler {int(signal.SIGTERM)}" in result.stdout and "load goes on" in result.stdout
    assert_ended_by(spans, "SIGTERM")  # ended once, at the signal, with what it had read then
    assert "after original" in result.stdout, "the job's handler is back in place after the load"
    assert state.status == "exited", "it went on and finished: it must not look dead"
    assert state.totals().read_bytes == 128 + 64, "the state keeps counting after the signal"


def test_an_ignored_signal_stays_ignored(tmp_path, ckpt):
    result, spans, state = run_job(tmp_path, ckpt, "--before", "ignore")
    assert result.returncode == 0, result.stderr
    assert "during theirs" in result.stdout and "load goes on" in result.stdout
    (load,) = by_name(spans)[semconv.SPAN_LOAD]
    assert semconv.EXIT_SIGNAL not in load.attributes and load.status_code == 0
    assert state.status == "exited" and state.signal == 0


def test_a_handler_the_job_installs_during_the_load_is_kept(tmp_path, ckpt):
    result, spans, _ = run_job(tmp_path, ckpt, "--during")
    assert result.returncode == 0, result.stderr
    assert f"job handler {int(signal.SIGTERM)}" in result.stdout and "after job" in result.stdout
    (load,) = by_name(spans)[semconv.SPAN_LOAD]
    assert semconv.EXIT_SIGNAL not in load.attributes  # the job's handler, not ours, was in place


def test_no_handler_from_a_thread_other_than_the_main_one(tmp_path, ckpt):
    result, spans, state = run_job(tmp_path, ckpt, "--thread")
    assert result.returncode == 0, result.stderr
    assert "during theirs" in result.stdout and "after original" in result.stdout
    assert state.status == "exited"


def test_handlers_are_in_place_only_while_loading():
    from support.inmemory import traced

    import loadtrace

    before, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with traced():
        assert signal.getsignal(signal.SIGTERM) is before
        with loadtrace.traced_load("x"):
            assert signal.getsignal(signal.SIGTERM) is not before
            with loadtrace.traced_load("nested"):
                pass
            assert signal.getsignal(signal.SIGTERM) is not before, "until the outermost load closes"
        assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGINT) is before_int


# Rank 0 of a 2-rank job whose rank 1 never shows: at its exit it waits for it (summary.PEER_WAIT_S) before it says the
# job's closing line, and is SIGTERMed then, as torchrun SIGTERMs the other ranks the moment one fails.
AT_EXIT = r"""
import sys, safetensors
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
print("exiting", flush=True)
"""


@pytest.mark.parametrize("before", ["default", "handler"])
def test_a_sigterm_while_rank_0_says_the_closing_line_waits_for_it_then_meets_the_jobs_disposition(
    tmp_path, ckpt, before
):
    """The line is said whole, then the signal meets what the job had: the default action (death by SIGTERM, as
    untraced) or the job's own handler (called once; here it exits 3)."""
    script = tmp_path / "job.py"
    handler = (
        "import signal, os\nsignal.signal(signal.SIGTERM, lambda *a: (print('job handler', flush=True), os._exit(3)))\n"
    )
    script.write_text((handler if before == "handler" else "") + AT_EXIT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(LOADTRACE="1", LOADTRACE_DIR=str(tmp_path / "traces"), LOADTRACE_QUIET="0", LOADTRACE_JOB_ID="held")
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ckpt)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    assert proc.stdout.readline() == "exiting\n"
    time.sleep(0.5)  # inside its exit work: the wait for rank 1 lasts seconds
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    said = [line for line in err.splitlines() if line.startswith("loadtrace: job held")]
    assert len(said) == 1 and "1 of 2 ranks here, 0 findings → loadtrace report " in said[0], err
    assert proc.returncode == (-signal.SIGTERM if before == "default" else 3), (proc.returncode, out, err)
    assert out.count("job handler") == (before == "handler")
