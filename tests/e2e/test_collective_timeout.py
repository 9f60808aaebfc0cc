"""Promise: when skew kills a job (a rank that finished loading times out in its first collective while another is
still loading), the report says so: which rank timed out and how long after its own load, which rank it waited for and
how far that rank had got, which failed first, and what to do. Reproduced as field-facts.md has it: gloo with a 5 s
process-group timeout, rank 1 sleeping 0.3 s before each tensor inside ``from_pretrained``."""

from __future__ import annotations

from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv, statefile
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files

VENVS = discover()
CHECKPOINT_TENSOR_BYTES = 1_009_152


def test_a_gloo_timeout_while_rank_1_loads_names_rank_1(checkpoint, tmp_path):
    traces = tmp_path / "traces"
    result = torchrun(
        VENVS[0],
        REPO / "tests" / "workers" / "slow_load.py",
        [str(checkpoint), "--pg-timeout", "5", "--delay", "0.3"],
        cwd=tmp_path,
        env={"LOADTRACE": "1", "HF_DEACTIVATE_ASYNC_LOAD": "1", "LOADTRACE_DIR": str(traces)},
        timeout_s=300,
    )
    assert result.returncode != 0, "rank 0's barrier times out: the job fails"
    assert "Timed out" in result.log.read_text(errors="replace"), result.tail()

    (rank0_state,) = traces.glob(f"rank00000-*{semconv.STATE_SUFFIX}")
    state = statefile.read(rank0_state)
    assert state.exception_ns > 0 and "Timed out" in state.exception, state.exception

    report = build_report(read_files(traces))
    (finding,) = [f for f in report["findings"] if f["kind"] == semconv.FINDING_COLLECTIVE_TIMEOUT]
    assert finding["ranks"] == [0] and finding["severity"] == "warning"
    (waited,) = finding["waiting_for"]
    assert waited["rank"] == 1 and waited["phase"] in (semconv.SPAN_CONVERT, semconv.SPAN_FROM_PRETRAINED)
    assert 0 < waited["read_bytes"] < CHECKPOINT_TENSOR_BYTES and waited["expected_bytes"] == CHECKPOINT_TENSOR_BYTES
    assert waited["read_rate_bytes_per_s"] > 0 and waited["ended"] == "SIGTERM"
    ranks = {rank["rank"]: rank for rank in report["ranks"]}
    assert waited["read_bytes"] == ranks[1]["last_state"]["read_bytes"], "the bytes it had got, exact"
    evidence = finding["evidence"]
    assert evidence["first_failure"]["rank"] == 0 and evidence["stopped_after"] == [1]
    (timed_out,) = evidence["per_rank"]
    assert timed_out["rank"] == 0 and timed_out["seconds_after_load"] >= 4.5  # the 5 s timeout, from its barrier
    detail = finding["detail"]
    assert "rank 0 timed out in a collective" in detail and "the process group's timeout: 5 s" in detail
    assert "rank 1 was still loading" in detail and f"of {CHECKPOINT_TENSOR_BYTES:,} B" in detail
    assert "Rank 0 failed first" in detail and "rank 1 was stopped after it" in detail
    assert "timeout" in finding["next_step"] and "storage" in finding["next_step"]
