"""Promise: the report connects a rank that timed out in a collective after its own load with the rank it waited for
(``collective_timeout``), from the exception span, the state file or the launcher's word (NCCL's watchdog aborts with
SIGABRT), and names the rank that failed first; it says nothing when every rank had finished loading. Hand-built
spans and state files; tests/e2e/test_collective_timeout.py is the real gloo job."""

from __future__ import annotations

from test_analysis_dead_ranks import ROOT, SECOND, TRACE, report_of, state_file, witness_line
from test_analysis_otlp import MODEL_BYTES, T0, job_lines, line, rank_load, resource, span, write_lines

from loadtrace import semconv as sc
from loadtrace import statefile

GLOO = "Timed out waiting 5000ms for recv operation to complete"


def exception_line(rank: int, at: int, kind: str, message: str) -> str:
    attributes = {"exception__type": kind, "exception__message": message}
    return line(
        resource(rank, **{sc.PROCESS_PID: 1000 + rank}),
        [span(sc.SPAN_EXCEPTION, TRACE, at, at, parent=ROOT, **attributes)],
    )


def stopped_rank_1(tmp_path, read: int = 400_000) -> None:
    """Rank 1 stopped by the launcher's SIGTERM mid-load: its state says so (no span of the open load)."""
    state_file(
        tmp_path, 1, status=statefile.STATUS_SIGNALLED, signal=15, phase=sc.SPAN_CONVERT, load=sc.SPAN_FROM_PRETRAINED,
        reads=(27, read), files=3, load_start=T0, updated=T0 + 8 * SECOND,
    )  # fmt: skip


def test_a_gloo_timeout_names_the_rank_still_loading(tmp_path):
    lines = job_lines(TRACE, {0: rank_load(TRACE, 0, "plain", MODEL_BYTES, seconds=1.5)})
    lines.append(exception_line(0, T0 + int(6.5 * SECOND), "DistBackendError", GLOO))
    lines.append(witness_line(0, {sc.EXIT_CODE: 1, sc.EXIT_SOURCE: "launcher"}, start=T0 + 7 * SECOND))
    write_lines(tmp_path / "spans.jsonl", lines)
    stopped_rank_1(tmp_path)
    (finding,) = [f for f in report_of(tmp_path).findings if f.kind == sc.FINDING_COLLECTIVE_TIMEOUT]
    assert finding.ranks == [0] and finding.severity == "warning" and finding.bytes == 400_000
    (waited,) = finding.waiting_for
    assert (waited["rank"], waited["phase"], waited["read_bytes"]) == (1, sc.SPAN_CONVERT, 400_000)
    assert waited["load_seconds"] == 8.0 and waited["read_rate_bytes_per_s"] == 50_000.0
    assert waited["seconds_after_timeout"] == 1.5 and waited["ended"] == "SIGTERM"
    assert finding.detail.startswith(
        "rank 0 timed out in a collective 5 s after its own load ended (the process group's timeout: 5 s): "
        f"DistBackendError: {GLOO}, while rank 1 was still loading (in transformers.convert: 400,000 B (400.0 kB)"
    )
    assert finding.detail.endswith("Rank 0 failed first (DistBackendError); rank 1 was stopped after it.")
    assert finding.evidence["first_failure"]["rank"] == 0 and finding.evidence["stopped_after"] == [1]


def test_the_exception_from_the_state_file_when_its_span_was_lost(tmp_path):
    write_lines(tmp_path / "spans.jsonl", job_lines(TRACE, {0: rank_load(TRACE, 0, "plain", MODEL_BYTES)}))
    rank0 = state_file(tmp_path, 0, status=statefile.STATUS_EXITED, reads=(69, MODEL_BYTES), updated=T0 + 7 * SECOND)
    data = bytearray(rank0.read_bytes())  # the excepthook's two live fields, where the process wrote them
    offset, size = statefile.TEXT_OFFSETS["exception"]
    data[offset : offset + size] = f"RuntimeError: {GLOO}".encode().ljust(size, b"\0")
    index = statefile.LIVE_OFFSET + 8 * statefile.LIVE_FIELDS.index("exception_ns")
    data[index : index + 8] = (T0 + 6 * SECOND).to_bytes(8, "little")
    rank0.write_bytes(bytes(data))
    stopped_rank_1(tmp_path)
    (finding,) = [f for f in report_of(tmp_path).findings if f.kind == sc.FINDING_COLLECTIVE_TIMEOUT]
    assert finding.ranks == [0] and [w["rank"] for w in finding.waiting_for] == [1]


def test_the_nccl_watchdog_s_abort_counts_as_a_timeout(tmp_path):
    lines = job_lines(TRACE, {0: rank_load(TRACE, 0, "plain", MODEL_BYTES)})
    aborted = {sc.EXIT_SIGNAL: "SIGABRT", sc.EXIT_SOURCE: "launcher", sc.EXIT_STATUS: "idle"}
    lines.append(witness_line(0, aborted, start=T0 + 2 * SECOND))  # seen dead at T0 + 7 s
    write_lines(tmp_path / "spans.jsonl", lines)
    stopped_rank_1(tmp_path)
    (finding,) = [f for f in report_of(tmp_path).findings if f.kind == sc.FINDING_COLLECTIVE_TIMEOUT]
    assert finding.ranks == [0] and "SIGABRT" in finding.detail


def test_no_finding_when_every_rank_had_finished_loading(tmp_path):
    loads = {rank: rank_load(TRACE, rank, "plain", MODEL_BYTES) for rank in (0, 1)}
    lines = job_lines(TRACE, loads) + [exception_line(0, T0 + 60 * SECOND, "DistBackendError", GLOO)]
    write_lines(tmp_path / "spans.jsonl", lines)
    assert not [f for f in report_of(tmp_path).findings if f.kind == sc.FINDING_COLLECTIVE_TIMEOUT]
