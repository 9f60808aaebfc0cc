"""Promise: a rank SIGKILLed in the middle of loading (the OOM killer's signal) leaves every span it finished and its
exact last state on disk (its state file, statefile.py), and `loadtrace report` says which phase it died in and how
many bytes it had read by then, to the byte."""

from __future__ import annotations

import json

from support.killed_rank import killed_rank_job
from support.venvs import discover

from loadtrace import semconv, statefile
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import read_files

VENVS = discover()


def test_report_names_the_phase_a_killed_rank_died_in(checkpoint, tmp_path_factory):
    """The session's killed-rank job (support/killed_rank.py), whose witness test_witness_of_real_jobs.py reads."""
    result = killed_rank_job(VENVS[0], checkpoint, tmp_path_factory)
    assert result.returncode != 0, "rank 1 was killed, so the job fails"
    count = json.loads((result.cwd / "count-rank1.json").read_text())  # rank 1's own count, the instant before the kill
    assert count["read_bytes"] > 0

    (job_dir,) = (result.cwd / "loadtrace-traces").iterdir()
    (killed,) = job_dir.glob(f"rank00001-*{semconv.STATE_SUFFIX}")
    state = statefile.read(killed)
    assert state is not None and state.status == "loading", "the killed rank's last state stays, as it was"
    assert state.phase == semconv.SPAN_CONVERT and state.load == semconv.SPAN_FROM_PRETRAINED
    assert state.totals().read_bytes == count["read_bytes"], "exact at the moment of death, not a lagging snapshot"
    assert state.totals().tensors_read == count["read_tensors"]
    (finished,) = job_dir.glob(f"rank00000-*{semconv.STATE_SUFFIX}")
    assert statefile.read(finished).status in ("idle", "exited"), "a rank that finished its load never looks dead"

    report = build_report(read_files(job_dir))
    ranks = {rank["rank"]: rank for rank in report["ranks"]}
    assert ranks[0]["incomplete"] is False and ranks[0]["read_bytes"] == 1_009_152
    assert ranks[1]["incomplete"] is True
    last = ranks[1]["last_state"]
    assert last["source"] == "state file" and last["status"] == "loading"
    assert last["during"] == semconv.SPAN_CONVERT and last["load"] == semconv.SPAN_FROM_PRETRAINED
    assert last["read_bytes"] == count["read_bytes"]
    assert last["tensors_read"] == count["read_tensors"]
    (finding,) = [f for f in report["findings"] if f["kind"] == semconv.FINDING_INCOMPLETE_RANK]
    assert finding["ranks"] == [1] and finding["severity"] == "warning"
    assert (
        f"rank 1 was killed (SIGKILL) during {semconv.SPAN_CONVERT} after reading {count['read_bytes']:,} B"
        in (finding["detail"])
    )
    assert ranks[1]["read_bytes"] == count["read_bytes"], "the row and the finding say the same figure (issue 40)"
    # Its startup is the one the launcher's witness ended at its death, never its few finished spans' (issue 40); dead,
    # it judges nobody: rank 0 is not slow against it.
    (ended,) = [
        s
        for s in read_files(job_dir).spans
        if s.name == semconv.SPAN_STARTUP
        and s.resource.get(semconv.RANK) == 1
        and s.attributes.get(semconv.EXIT_SOURCE) == semconv.EXIT_SOURCE_LAUNCHER
    ]
    (startup,) = [r for r in report["traces"][0]["startup"]["ranks"] if r["rank"] == 1]
    assert startup["seconds"] == round((ended.end_ns - ended.start_ns) / 1e9, 6)
    assert semconv.FINDING_SLOW_RANK not in {f["kind"] for f in report["findings"]}
