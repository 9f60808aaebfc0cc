"""Promise (issue 40): a rank that died is measured by what saw it die, and never misleads about the others.

- Its startup is the one the launcher's witness gives it (the startup span the witness ended at its death,
  witness_scopes.py), never the shorter stretch its few finished spans cover.
- A dead or incomplete rank is never among "the other ranks" a survivor is judged against (``slow_rank``'s median).
- Every figure of a rank comes from one place: a finding says the numbers its row shows.

Hand-built spans, state files and witness lines (support/dead_rank_jobs.py), as the instrumentation writes them.
"""

from __future__ import annotations

from pathlib import Path

from support.dead_rank_jobs import ROOT, SECOND, TRACE, report_of, state_file, witness_line
from support.otlp_lines import MODEL_BYTES, T0, job_lines, line, rank_load, resource, span, write_lines

from loadtrace import semconv as sc
from loadtrace import statefile
from loadtrace.cli.render import report_table, size

KILLED = {sc.EXIT_SIGNAL: "SIGKILL", sc.EXIT_SOURCE: sc.EXIT_SOURCE_LAUNCHER, sc.EXIT_STATUS: "loading"}


def startup_span(rank: int, seconds: float, start: int = T0, **attrs) -> dict:
    return span(sc.SPAN_STARTUP, TRACE, start, start + int(seconds * SECOND), parent=ROOT, **attrs)


def alive(rank: int, seconds: float, world_size: int) -> list[dict]:
    """A rank that started in ``seconds`` and finished its load inside its startup."""
    return [startup_span(rank, seconds), *rank_load(TRACE, rank, "plain", MODEL_BYTES, start=T0 + SECOND // 10)]


def test_a_killed_rank_has_the_startup_its_witness_gave_it_and_judges_nobody(tmp_path: Path):
    """The issue's job: rank 1 SIGKILLed mid-load after 4.213 s; its only finished span (init_process_group) lasted
    0.02 s. Its startup is the witness's 4.213 s, and rank 0 (4.23 s) is not slow against it: it has no other."""
    (lines,) = [job_lines(TRACE, {0: alive(0, 4.23, 2)})]
    write_lines(tmp_path / "rank00000-node-0-1000.jsonl", lines)
    finished = span(sc.SPAN_INIT_PROCESS_GROUP, TRACE, T0, T0 + 20_000_000, parent=ROOT)
    write_lines(tmp_path / "rank00001-node-0-1001.jsonl", [line(resource(1), [finished])])
    ended = startup_span(1, 4.213, **{key.replace(".", "__"): value for key, value in KILLED.items()})
    witness = witness_line(1, KILLED, start=T0 + 4213 * SECOND // 1000)
    write_lines(tmp_path / "witness-node-0-999.jsonl", [witness, line(resource(1), [ended])])
    result = report_of(tmp_path)
    (trace,) = result.traces
    assert trace.startup is not None
    by_rank = {r.rank: r for r in trace.startup.ranks}
    assert by_rank[1].seconds == 4.213 and by_rank[1].measured_from == "startup span"
    assert [f.kind for f in result.findings] == [sc.FINDING_INCOMPLETE_RANK], result.findings
    # Of the ranks judged (rank 0 alone): the job's startup and median are rank 0's, never the dead rank's.
    assert (trace.startup.slowest_rank, trace.startup.seconds, trace.startup.median_rank_seconds) == (0, 4.23, 4.23)


def test_dead_ranks_are_never_the_others_a_survivor_is_judged_against(tmp_path: Path):
    """Ranks 0 and 1 started in 4.0 and 4.2 s; ranks 2 and 3 died 0.02 s in, with no witness (state files only). The
    median of the others for rank 1 is rank 0's 4.0 s, not a dead rank's 0.02 s: nobody is slow."""
    lines = job_lines(TRACE, {0: alive(0, 4.0, 4), 1: alive(1, 4.2, 4)}, world_size=4)
    for rank in (2, 3):
        short = span(sc.SPAN_INIT_PROCESS_GROUP, TRACE, T0, T0 + 20_000_000, parent=ROOT)
        lines.append(line(resource(rank, world_size=4), [short]))
        state_file(tmp_path, rank, status=statefile.STATUS_LOADING, load=sc.SPAN_FROM_PRETRAINED, phase=sc.SPAN_CONVERT)
    write_lines(tmp_path / "job.jsonl", lines)
    result = report_of(tmp_path)
    assert {r.rank for r in result.ranks if r.incomplete} == {2, 3}
    assert sc.FINDING_SLOW_RANK not in {f.kind for f in result.findings}, [f.detail for f in result.findings]
    (trace,) = result.traces
    assert trace.startup is not None and trace.startup.median_rank_seconds == 4.1


def test_a_stopped_ranks_finding_says_the_figures_its_row_shows(tmp_path: Path):
    """Rank 0 stopped by SIGTERM mid-load: its handler ended the load span (468.8 MB read, 1.8 GB peak); its state
    file, written a moment apart, says 469.3 MB and 1.6 GB. The row and the finding both say the rank's figures."""
    load = rank_load(TRACE, 0, "plain", 468_800_000, peak_rss=1_800_000_000)
    load[0]["status"] = {"code": 2, "message": "SIGTERM"}
    load[0]["attributes"].append({"key": sc.EXIT_SIGNAL, "value": {"stringValue": "SIGTERM"}})
    write_lines(tmp_path / "rank00000-node-0-1000.jsonl", job_lines(TRACE, {0: load}, world_size=1))
    state_file(
        tmp_path, 0, status=statefile.STATUS_SIGNALLED, signal=15, load=sc.SPAN_FROM_PRETRAINED,
        phase=sc.SPAN_CONVERT, reads=(33, 469_300_000), files=5, rss_peak=1_600_000_000, strategy="plain",
    )  # fmt: skip
    result = report_of(tmp_path)
    (rank,) = result.ranks
    assert rank.incomplete and (rank.read_bytes, rank.peak_rss_bytes) == (468_800_000, 1_800_000_000)
    (finding,) = [f for f in result.findings if f.kind == sc.FINDING_INCOMPLETE_RANK]
    assert "after reading 468,800,000 B (468.8 MB)" in finding.detail, finding.detail
    assert "peak RSS 1,800,000,000 B (1.8 GB)" in finding.detail, finding.detail
    table = report_table(result)
    assert "469.3 MB" not in table and "1.6 GB" not in table, table
    assert size(rank.read_bytes) in table.split("findings")[0] and "after reading 468.8 MB" in table
