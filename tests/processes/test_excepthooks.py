"""Promise: an exception nobody catches is recorded (type and first line) in the rank's state file and as a
``loadtrace.exception`` span, through ``sys.excepthook`` and ``threading.excepthook`` chained in front of the job's own
hooks: the job's hook still runs, with the same arguments, and a recorder that fails changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from loadtrace import semconv, statefile

JOB = """
import sys, threading, loadtrace
seen = []
sys.excepthook = lambda kind, error, tb: print("job's own hook:", kind.__name__, error, flush=True)
threading.excepthook = lambda args: print("job's thread hook:", args.exc_type.__name__, flush=True)
loadtrace.instrument()
with loadtrace.traced_load("warm-up"):  # tracing is set up by the first load
    pass
thread = threading.Thread(target=lambda: (_ for _ in ()).throw(ValueError("in a thread\\nsecond line")))
thread.start()
thread.join()
raise RuntimeError("[pair.cc:598] Timed out waiting 5000ms for recv operation to complete\\nmore detail")
"""


def run(tmp_path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    env.update(LOADTRACE_DIR=str(tmp_path / "traces"), LOADTRACE_JOB_ID="job-x", LOADTRACE_QUIET="1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)  # fmt: skip


def exception_spans(tmp_path) -> list[dict]:
    found = []
    for path in (tmp_path / "traces").glob(f"*{semconv.TRACE_FILE_SUFFIX}"):
        for line in path.read_text().splitlines():
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        if span["name"] == semconv.SPAN_EXCEPTION:
                            attributes = {a["key"]: a["value"]["stringValue"] for a in span["attributes"]}
                            found.append({**attributes, "status": span["status"]})
    return found


def test_uncaught_exceptions_are_recorded_and_the_job_s_hooks_still_run(tmp_path):
    result = run(tmp_path, JOB)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr  # the job's hook printed it
    assert "job's thread hook: ValueError" in result.stdout
    assert "job's own hook: RuntimeError [pair.cc:598] Timed out waiting 5000ms" in result.stdout
    thread, main = exception_spans(tmp_path)
    assert thread == {
        semconv.EXCEPTION_TYPE: "ValueError",
        semconv.EXCEPTION_MESSAGE: "in a thread",
        "status": {"code": 2, "message": "ValueError"},
    }
    assert main[semconv.EXCEPTION_TYPE] == "RuntimeError"
    assert main[semconv.EXCEPTION_MESSAGE] == "[pair.cc:598] Timed out waiting 5000ms for recv operation to complete"
    (state_path,) = (tmp_path / "traces").glob(f"*{semconv.STATE_SUFFIX}")
    state = statefile.read(state_path)
    assert state.exception == f"RuntimeError: {main[semconv.EXCEPTION_MESSAGE]}"
    assert state.exception_ns > state.load_start_ns > 0


def test_python_s_own_traceback_still_comes_and_a_failing_recorder_changes_nothing(tmp_path):
    result = run(
        tmp_path,
        """
        import loadtrace
        from loadtrace.instrumentation.beside import excepthooks
        loadtrace.instrument()
        with loadtrace.traced_load("warm-up"):
            pass
        excepthooks.install(lambda kind, line: 1 / 0)  # a recorder that fails
        raise KeyError("gone")
        """,
    )
    assert result.returncode == 1
    assert result.stderr.rstrip().endswith("KeyError: 'gone'") and "Traceback" in result.stderr
    assert "ZeroDivisionError" not in result.stderr


def test_a_process_that_never_traced_anything_records_nothing(tmp_path):
    result = run(tmp_path, "import loadtrace\nloadtrace.instrument()\nraise SystemExit('bye')\n")
    assert result.returncode == 1 and not (tmp_path / "traces").exists()
