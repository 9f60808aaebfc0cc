"""Promise (issue 40): a failing export is said once per node, by the process that speaks for it (local rank 0, a
launcher, a plain process; never a forked child), in one short line with the endpoint and the cause; rank 0's
closing line never says "sent" when sending failed. Real ranks against a dead endpoint:
tests/e2e/test_dead_collector_said_once.py."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from loadtrace import semconv
from loadtrace.instrumentation import _log, settings
from loadtrace.instrumentation.exporting import export, summary

DEAD = "http://127.0.0.1:9"
HTTP_REFUSED = (
    "Transient error HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /v1/traces (Caused "
    "by NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new connection: [Errno "
    '111] Connection refused")) encountered while exporting spans batch, retrying in 0.87s.'
)


@pytest.mark.parametrize(
    "message, expected",
    [
        (HTTP_REFUSED, "Connection refused"),
        (
            "Transient error StatusCode.UNAVAILABLE encountered while exporting traces to 127.0.0.1:9, retrying in "
            "0.81s. Error details: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: Failed "
            "to connect to remote host: Connection refused",
            "UNAVAILABLE: Connection refused",
        ),
        ("Failed to export spans batch code: 503, reason: Service Unavailable", "HTTP 503 Service Unavailable"),
        ("HTTPConnectionPool(host='h', port=1): Read timed out. (read timeout=9.9)", "no answer (timed out)"),
        ("Failed to export spans batch due to timeout, max retries or shutdown.", None),  # what, not why
        ("x" * 500, "x" * 119 + "…"),
    ],
)
def test_the_cause_in_an_exporters_line_short(message, expected):
    assert export.cause(message) == expected


@pytest.fixture
def fresh(monkeypatch, capsys):
    """Nothing said yet in this process or its job; the spans' endpoint is the dead one."""
    monkeypatch.setattr(_log, "_said", set())
    monkeypatch.setattr(export, "failures", export.Failures())
    export.failures.configure(settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": DEAD}))
    capsys.readouterr()
    return monkeypatch


@pytest.mark.parametrize("local_rank, says", [("0", True), ("1", False), ("7", False), (None, True)])
def test_said_by_the_node_first_rank_only_once_short(fresh, capsys, local_rank, says):
    for name, value in {"RANK": local_rank, "LOCAL_RANK": local_rank, "WORLD_SIZE": "8"}.items():
        if value is None:
            fresh.delenv(name, raising=False)
        else:
            fresh.setenv(name, value)
    for _ in range(3):  # every retry of every batch, spans and metrics
        export.failures.met("export", export.cause(HTTP_REFUSED))
        export.failures.met("metrics-export", export.cause(HTTP_REFUSED))
    said = capsys.readouterr().err.splitlines()
    assert said == ([f"loadtrace: span export failing: {DEAD}: Connection refused"] if says else [])
    assert export.failures.cause() == "Connection refused", "known to every rank, said by one"


def test_a_forked_child_leaves_it_to_its_parent(fresh, capsys):
    fresh.setenv("LOCAL_RANK", "0")
    export.failures.forked = True
    export.failures.met("export", "Connection refused")
    assert capsys.readouterr().err == ""


class Refusing(SpanExporter):
    def __init__(self, answers):
        self.answers = list(answers)

    def export(self, spans):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def shutdown(self):
        pass


def test_a_delivery_knows_whether_every_batch_arrived(fresh):
    fresh.setenv("LOCAL_RANK", "1")
    ok = export.Delivery(Refusing([SpanExportResult.SUCCESS, SpanExportResult.SUCCESS]))
    assert [ok.export([]), ok.export([])] == [SpanExportResult.SUCCESS] * 2 and ok.failure() is None
    export.failures.met("export", "Connection refused")  # what the SDK logged on its way to giving up
    lost = export.Delivery(Refusing([SpanExportResult.SUCCESS, SpanExportResult.FAILURE]))
    lost.export([]), lost.export([])
    assert lost.failure() == "Connection refused"
    raising = export.Delivery(Refusing([RuntimeError("boom")]))
    assert raising.export([]) is SpanExportResult.FAILURE, "never raises into the SDK's thread or the job"
    slow = export.Delivery(Refusing([]))
    slow.gave_up = True
    assert slow.failure() == "Connection refused"


def test_rank_0s_closing_line_says_sent_only_when_it_was():
    trace_id = format(semconv.job_trace_ids("job-7")[0], "032x")
    failed = summary.line("job-7", None, DEAD, local_world_size=2, failure="Connection refused")
    assert failed == (
        f"loadtrace: job job-7, trace {trace_id}: sending to {DEAD} failed (Connection refused); set LOADTRACE_DIR "
        "to keep trace files as well"
    )
    assert " sent to" not in failed
    assert " sent to " in summary.line("job-7", None, DEAD, local_world_size=2)
