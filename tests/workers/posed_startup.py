"""Test worker: a one-process job whose startup takes about S seconds, sent over OTLP like any job's.

    python tests/workers/posed_startup.py S

Sleeps S seconds (what a rank waits for before its load: a rendezvous, an image pull), then turns loadtrace on as a
job that calls ``loadtrace.instrument()`` does and loads under ``traced_load``: that load ends the startup, which runs
from the process's start. The settings (``LOADTRACE_CLUSTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``LOADTRACE_DIR``) come
from the environment.
"""

from __future__ import annotations

import sys
import time

import loadtrace

time.sleep(float(sys.argv[1]))
loadtrace.instrument()
with loadtrace.traced_load("posed"):
    pass
