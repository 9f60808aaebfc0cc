"""``progress``: what a load pays for the progress metrics (issue 25). In ONE process (``LOADTRACE=1``, an OTLP
endpoint: a sink process counting the metrics exports), warm loads with the metrics exporting every 0.1 s (``on``: 100x
the default rate) and with none (``off``, ``off (null)``), in fit's 6 orders. The metrics never run on the loading
thread, so under the GIL they can take from it at most the SDK reader thread's CPU time: measured exactly per load."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from .common import PY, clean_env, quiet_transformers, run_worker
from .fit import ORDERS, size_figures, timed_load

INTERVAL_S = 0.1
READER_THREAD = "OtelPeriodicExportingMetricReader"  # the SDK's name for its collecting thread
# An OTLP/HTTP sink: every POST answered 200 (an empty body is an empty Export*ServiceResponse), an "m" appended to
# COUNTS per metrics export: what went on the wire.
SINK = """
import sys, http.server as h
counts = open(sys.argv[1], "a", buffering=1)
class Sink(h.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        counts.write("m\\n" if self.path.endswith("/v1/metrics") else "")
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    log_message = lambda *args: None
server = h.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def reader_cpu_s() -> float:  # the metrics reader thread(s) alive now: 0 when none runs
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        for t in threading.enumerate()
        if t.name == READER_THREAD and t.ident is not None and t.is_alive()
    )


def set_metrics(on: bool) -> None:
    """Start or stop this process's progress metrics between loads. Reaches into the provider's ``Progress``: a
    benchmark's switch, which a job never needs (it sets ``LOADTRACE_PROGRESS_INTERVAL`` once)."""
    from loadtrace.instrumentation.tracing import spans

    provider = spans.tracing().provider  # type: ignore[union-attr]
    progress, settings = provider.progress, provider.settings
    if on and progress._metrics is None:
        progress._settings = settings
        progress._start_metrics(provider.state)
    elif not on and progress._metrics is not None:
        progress.shutdown(1.0)
        progress._settings = dataclasses.replace(settings, progress_interval_s=0)


def cmd_progress(argv: list[str]) -> list[dict[str, Any]]:
    """Worker (``LOADTRACE=1``, the sink's endpoint): ``_progress OUT ROUNDS COUNTS CKPT``."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    rounds, counts, ckpt = int(argv[0]), Path(argv[1]), argv[2]
    load = AutoModelForCausalLM.from_pretrained
    load(ckpt)  # imports, the tracer, the first span, the metrics SDK's import: once per process, not measured here
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        row: dict[str, Any] = {}
        for arm in ORDERS[r % len(ORDERS)]:
            set_metrics(arm == "on")
            cpu, exports = reader_cpu_s(), counts.read_text().count("m")
            timed_load(load, ckpt, arm, row)
            row[arm + " reader"] = reader_cpu_s() - cpu
            row[arm + " exports"] = counts.read_text().count("m") - exports
        rows.append(row)
    set_metrics(False)
    return rows


def bench_progress(size: tuple[Path, int, int], rounds: int, work: Path) -> dict[str, Any]:
    ckpt, tensors, files = size
    counts = work / "results" / "progress-exports.txt"
    counts.parent.mkdir(parents=True, exist_ok=True)
    counts.write_text("")
    sink = subprocess.Popen([PY, "-c", SINK, str(counts)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(sink.stdout.readline())  # type: ignore[union-attr]
        env = clean_env(LOADTRACE="1", LOADTRACE_DIR=str(work / "traces" / "progress"), HF_DEACTIVATE_ASYNC_LOAD="1")
        env |= {
            "LOADTRACE_PROGRESS_INTERVAL": str(INTERVAL_S),
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        }
        rows = run_worker("_progress", [rounds, counts, ckpt], env, work)
    finally:
        sink.kill()
        sink.wait()
    result = size_figures(rows, tensors, files)
    exports = sum(row["on exports"] for row in rows)
    result |= {"interval_s": INTERVAL_S, "exports_per_load": exports / len(rows)}
    result["reader_ms"] = [row["on reader"] * 1e3 for row in rows]
    result["reader_us_per_export"] = sum(row["on reader"] for row in rows) / max(exports, 1) * 1e6
    result["exports_off"] = sum(row["off exports"] + row["off (null) exports"] for row in rows)
    return result
