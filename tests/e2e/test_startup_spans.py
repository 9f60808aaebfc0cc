"""Promise: a rank's whole startup is traced, not only ``from_pretrained``: one ``loadtrace.startup`` span per rank from
the process's start, holding the rendezvous (``torch.init_process_group``: the wait for the other ranks), the loads,
and the strategy's preparation: accelerate's ``prepare`` with FSDP2's broadcast of rank 0's weights (the exact bytes
each rank sent and received), or ``deepspeed.initialize`` with ZeRO-3's ``zero.Init`` and ``GatheredParameters``
aggregated per load. A rank stopped before its startup is over still writes it; a faulty hook leaves the job as it
would run untraced.

Every case is a real ``torchrun --nproc_per_node 2`` job (gloo on CPU) of ``tests/workers/startup_job.py``, which
keeps its own account (times around ``init_process_group``, the state dict's bytes, the deepspeed contexts it entered,
a digest of the prepared weights) to check loadtrace's numbers against.

FSDP2 on this CPU machine: accelerate's ``AcceleratorState`` selects ``DistributedType.FSDP`` only for accelerator
types (MULTI_GPU and the like, never MULTI_CPU), and its FSDP plugin refuses to build without an accelerator device,
so ``accelerate launch --use_fsdp`` runs each rank as ``DistributedType.NO`` here. The worker therefore sets the
state's distributed type and FSDP2 plugin (``cpu_ram_efficient_loading``) itself after ``Accelerator(cpu=True)``;
from ``Accelerator.prepare(model, optimizer)`` on, everything is accelerate's and torch's own code (``_prepare_fsdp2``,
``fsdp2_prepare_model``, ``fully_shard``, ``fsdp2_load_full_state_dict``'s gloo broadcasts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.torchrun import TorchrunResult, torchrun
from support.venvs import REPO, discover

from loadtrace import semconv
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.report import build_report
from loadtrace.analysis.sources import Span, read_files
from loadtrace.analysis.startup import phase_spans, window
from loadtrace.startup_split import STARTUP_PHASES, split

VENVS = discover()

WORKER = REPO / "tests" / "workers" / "startup_job.py"

LATE_S = 3.0


class Job:
    def __init__(self, result: TorchrunResult, out: Path):
        self.result = result
        self.out = out

    def record(self, rank: int) -> dict:
        return json.loads((self.out / f"startup-rank{rank}.json").read_text())

    def spans(self, rank: int) -> list[Span]:
        root = self.result.cwd / "loadtrace-traces"
        return [s for s in read_files(root).spans if s.resource.get(semconv.RANK) == rank]

    def all_spans(self) -> list[Span]:
        return read_files(self.result.cwd / "loadtrace-traces").spans


def run(checkpoint: Path, cwd: Path, mode: str, *args: str, traced: bool = True, detail: str | None = None) -> Job:
    out = cwd / "out"
    result = torchrun(
        VENVS[0],
        WORKER,
        [str(checkpoint), "--mode", mode, "--out", str(out), *args],
        cwd=cwd,
        env=({"LOADTRACE": "1"} | ({"LOADTRACE_DETAIL": detail} if detail else {})) if traced else {},
    )
    return Job(result, out)


@pytest.fixture(scope="module")
def fsdp2(checkpoint, tmp_path_factory) -> Job:
    job = run(checkpoint, tmp_path_factory.mktemp("fsdp2"), "fsdp2")
    job.result.check()
    return job


@pytest.fixture(scope="module")
def zero3(checkpoint, tmp_path_factory) -> Job:
    job = run(checkpoint, tmp_path_factory.mktemp("zero3"), "zero3")
    job.result.check()
    return job


@pytest.fixture(scope="module")
def late(checkpoint, tmp_path_factory) -> Job:
    """A plain job whose rank 1 joins ``LATE_S`` late, at ``LOADTRACE_DETAIL=tensor``: reads have spans, so files have
    an ``open`` phase."""
    args = ("--late-rank", "1", "--late-s", str(LATE_S))
    job = run(checkpoint, tmp_path_factory.mktemp("late"), "plain", *args, detail="tensor")
    job.result.check()
    return job


def one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def ancestors(span: Span, spans: list[Span]) -> list[str]:
    by_id = {s.span_id: s for s in spans}
    names = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        names.append(span.name)
    return names


def assert_startup_holds_the_rank(job: Job, rank: int) -> Span:
    """One startup span, a child of the rank's group under the job's root, in the job's trace; every startup phase
    and load below it."""
    spans = job.spans(rank)
    startup = one(spans, semconv.SPAN_STARTUP)
    job_id = startup.resource[semconv.JOB_ID]
    trace_id = semconv.job_trace_ids(job_id)[0]
    assert {s.trace_id for s in spans} == {format(trace_id, "032x")}
    assert startup.parent_span_id == format(semconv.rank_group_id(job_id, rank), "016x")
    held = [s for s in spans if s.name in semconv.STARTUP_PHASE_SPANS | semconv.LOAD_SPANS]
    assert held
    for span in held:
        assert semconv.SPAN_STARTUP in ancestors(span, spans), (span.name, ancestors(span, spans))
        assert startup.start_ns <= span.start_ns and span.end_ns <= startup.end_ns, span.name
    assert startup.attributes[semconv.STARTUP_START] == semconv.STARTUP_START_PROCESS
    assert startup.start_ns < job.record(rank)["init_called_ns"]  # from the process's start, before the rendezvous
    assert startup.attributes[semconv.RSS_PEAK] >= startup.attributes[semconv.RSS_AFTER] > 0
    return startup


def test_fsdp2_prepare_and_its_broadcast_are_phases_with_the_exact_bytes(fsdp2):
    records = [fsdp2.record(rank) for rank in (0, 1)]
    assert records[0]["digest"] == records[1]["digest"], "rank 1 got rank 0's weights"
    expected = records[0]["state_dict_bytes"]
    assert expected == records[1]["state_dict_bytes"] > 0
    for rank in (0, 1):
        spans = fsdp2.spans(rank)
        startup = assert_startup_holds_the_rank(fsdp2, rank)
        prepare = one(spans, semconv.SPAN_ACCELERATE_PREPARE)
        broadcast = one(spans, semconv.SPAN_FSDP2_LOAD_FULL_STATE_DICT)
        load = one(spans, semconv.SPAN_FROM_PRETRAINED)
        assert prepare.parent_span_id == startup.span_id == load.parent_span_id
        assert broadcast.parent_span_id == prepare.span_id
        assert load.end_ns <= prepare.start_ns <= broadcast.start_ns <= broadcast.end_ns <= prepare.end_ns
        assert prepare.attributes[semconv.ACCELERATE_DISTRIBUTED_TYPE] == "FSDP"
        assert prepare.attributes[semconv.ACCELERATE_FSDP_VERSION] == 2
        sent = broadcast.attributes[semconv.BROADCAST_BYTES_SENT]
        received = broadcast.attributes[semconv.BROADCAST_BYTES_RECEIVED]
        assert (sent, received) == ((expected, 0) if rank == 0 else (0, expected)), broadcast.attributes
        assert broadcast.attributes[semconv.BROADCAST_TENSORS] == records[rank]["state_dict_tensors"]
        assert load.attributes[semconv.STRATEGY] == semconv.STRATEGY_FSDP_CPU_RAM_EFFICIENT
        # The preparation ended the startup.
        assert startup.attributes[semconv.STARTUP_END] == semconv.STARTUP_END_PREPARATION
        assert 0 <= startup.end_ns - prepare.end_ns < 500_000_000
        rendezvous = one(spans, semconv.SPAN_INIT_PROCESS_GROUP)
        assert rendezvous.attributes[semconv.RENDEZVOUS_BACKEND] == "gloo"
        assert rendezvous.end_ns <= load.start_ns


def test_zero3_initialisation_is_a_phase_of_the_startup(zero3):
    for rank in (0, 1):
        record = zero3.record(rank)
        assert record["initialized"] == "DeepSpeedEngine"
        spans = zero3.spans(rank)
        startup = assert_startup_holds_the_rank(zero3, rank)
        load = one(spans, semconv.SPAN_FROM_PRETRAINED)
        initialize = one(spans, semconv.SPAN_DEEPSPEED_INITIALIZE)
        assert load.attributes[semconv.STRATEGY] == semconv.STRATEGY_ZERO3
        assert initialize.parent_span_id == startup.span_id
        assert load.end_ns <= initialize.start_ns
        assert startup.attributes[semconv.STARTUP_END] == semconv.STARTUP_END_PREPARATION
        assert 0 <= startup.end_ns - initialize.end_ns < 500_000_000
        # zero.Init and GatheredParameters: one span each per load, counting every context this rank entered.
        zero_init = one(spans, semconv.SPAN_ZERO_INIT)
        gathered = one(spans, semconv.SPAN_GATHERED_PARAMETERS)
        assert zero_init.attributes[semconv.CALLS] == record["zero_init_contexts"] == 1
        assert gathered.attributes[semconv.CALLS] == record["gathered_contexts"] > 1
        for phase in (zero_init, gathered):
            assert semconv.SPAN_FROM_PRETRAINED in ancestors(phase, spans)
            assert load.start_ns <= phase.start_ns <= phase.end_ns <= load.end_ns


def test_a_late_rank_makes_the_others_wait_in_the_rendezvous(late):
    punctual, tardy = late.record(0), late.record(1)
    waits = {}
    for rank, record in ((0, punctual), (1, tardy)):
        rendezvous = one(late.spans(rank), semconv.SPAN_INIT_PROCESS_GROUP)
        # The span is the call, as the worker's own clock saw it from outside.
        assert record["init_called_ns"] <= rendezvous.start_ns <= rendezvous.end_ns <= record["init_returned_ns"]
        assert (record["init_returned_ns"] - record["init_called_ns"]) - (rendezvous.end_ns - rendezvous.start_ns) < (
            200_000_000
        )
        waits[rank] = rendezvous
    # Rank 0 could not return before rank 1 came in: it waited for it, and far longer than rank 1 did.
    assert waits[0].end_ns >= tardy["init_called_ns"]
    assert waits[0].seconds >= (tardy["init_called_ns"] - punctual["init_called_ns"]) / 1e9 > LATE_S / 2
    assert waits[1].seconds < waits[0].seconds


def test_without_a_preparation_the_startup_ends_with_the_load(late):
    for rank in (0, 1):
        spans = late.spans(rank)
        startup = assert_startup_holds_the_rank(late, rank)
        load = one(spans, semconv.SPAN_FROM_PRETRAINED)
        assert load.attributes[semconv.STRATEGY] == semconv.STRATEGY_PLAIN
        assert startup.attributes[semconv.STARTUP_END] == semconv.STARTUP_END_LOAD
        assert 0 <= startup.end_ns - load.end_ns < 500_000_000
        assert not [s for s in spans if s.name in {semconv.SPAN_ACCELERATE_PREPARE, semconv.SPAN_DEEPSPEED_INITIALIZE}]


def test_a_training_job_made_its_optimizer_after_the_startup_and_keeps_the_training_advice(late):
    """Issue 49: the worker makes its optimizer after the load, when the startup span has ended: a
    ``loadtrace.training_sign`` span says so, and the plain replicas are told the training strategies."""
    for rank in (0, 1):
        spans = late.spans(rank)
        startup = one(spans, semconv.SPAN_STARTUP)
        assert startup.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_INFERENCE  # nothing seen by then
        sign = one(spans, semconv.SPAN_TRAINING_SIGN)
        assert sign.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_TRAINING and sign.start_ns >= startup.end_ns
        assert list(sign.attributes[semconv.WORKLOAD_EVIDENCE]) == ["optimizer SGD"]
    report = build_report(read_files(late.result.cwd / "loadtrace-traces"))
    assert {rank["workload"] for rank in report["ranks"]} == {semconv.WORKLOAD_TRAINING}
    (replicated,) = [f for f in report["findings"] if f["kind"] == semconv.FINDING_REPLICATED_LOAD]
    assert "use FSDP with cpu_ram_efficient_loading or ZeRO-3" in replicated["next_step"]


def test_a_rank_stopped_before_its_preparation_still_writes_its_startup(checkpoint, tmp_path):
    """Rank 1 is SIGTERMed between its load and the FSDP2 preparation its strategy awaits (it sends the signal itself),
    rank 0 by torchrun while it waits: both still write their startup, ended then with the signal."""
    job = run(checkpoint, tmp_path, "fsdp2", "--stop-rank", "1")
    assert job.result.returncode != 0
    for rank in (0, 1):
        spans = job.spans(rank)
        startup = one(spans, semconv.SPAN_STARTUP)
        load = one(spans, semconv.SPAN_FROM_PRETRAINED)
        assert semconv.EXIT_SIGNAL not in load.attributes, "the load had ended"
        assert startup.attributes[semconv.EXIT_SIGNAL] == "SIGTERM" and startup.status_code == 2
        assert startup.attributes[semconv.STARTUP_END] == "SIGTERM"
        assert load.parent_span_id == startup.span_id and startup.end_ns >= load.end_ns
        assert not [s for s in spans if s.name == semconv.SPAN_ACCELERATE_PREPARE]
    assert_each_startup_carries_the_reports_split(job)


def assert_each_startup_carries_the_reports_split(job: Job) -> None:
    """Each rank's startup span carries the split ``loadtrace report`` computes from the rank's spans, to the ns."""
    checked = 0
    for found in jobs_from_spans(job.all_spans()):
        for rank in found.ranks:
            startups = [s for s in rank.spans if s.name == semconv.SPAN_STARTUP]
            if not startups:
                continue
            (startup,) = startups
            measured = window(rank)
            assert measured is not None and measured[1] == "startup span"
            expected = split(measured[0], phase_spans(rank.spans))
            carried = startup.attributes[semconv.STARTUP_PHASE_NS]
            assert carried == [expected[phase] for phase in STARTUP_PHASES], (rank.rank, carried, expected)
            assert sum(carried) == startup.end_ns - startup.start_ns
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("case", ["fsdp2", "zero3", "late"])
def test_each_rank_carries_its_startup_split_as_the_report_computes_it(case, request):
    """The store's one startup row per rank (ClickHouse, the fleet dashboard) holds the report's split: the same
    definition (``loadtrace/startup_split.py``) over the same spans, with rendezvous, broadcasts, ZeRO-3's phases, a
    late rank's wait and per-tensor reads (the late job's)."""
    job = request.getfixturevalue(case)
    assert_each_startup_carries_the_reports_split(job)
    if case == "late":
        spans = job.all_spans()
        assert any(s.name == semconv.SPAN_SAFETENSORS_READ for s in spans)
        opens = [s.attributes[semconv.STARTUP_PHASE_NS][0] for s in spans if s.name == semconv.SPAN_STARTUP]
        assert all(ns > 0 for ns in opens), opens


def test_a_faulty_startup_hook_leaves_the_job_as_untraced(checkpoint, tmp_path, fsdp2):
    """loadtrace's startup-phase code raises (in every rendezvous and preparation hook): the job prepares the same
    weights as untraced and exits 0, and each rank says so once."""
    untraced = run(checkpoint, tmp_path / "untraced", "fsdp2", traced=False)
    faulty = run(checkpoint, tmp_path / "faulty", "fsdp2", "--fault", "stage")
    untraced.result.check()
    faulty.result.check()
    digests = {job.record(rank)["digest"] for job in (untraced, faulty, fsdp2) for rank in (0, 1)}
    assert len(digests) == 1, "the same prepared weights on every rank, traced, untraced and faulty"
    log = faulty.result.log.read_text(errors="replace")
    assert log.count("loadtrace: hook") == 2, log[-3000:]  # once per rank
    assert "Traceback" not in log
    spans = faulty.all_spans()
    assert not [s for s in spans if s.name in semconv.STARTUP_PHASE_SPANS]
    assert [s for s in spans if s.name == semconv.SPAN_FROM_PRETRAINED]  # the rest is traced


# A rank stopped in the middle of its preparation: one process, accelerate's prepare of a model whose ``to()`` (which
# prepare_model calls to place it) sends this process SIGTERM and waits to be stopped.
STOPPED_IN_PREPARE = r"""
import os, signal, time, torch
from accelerate import Accelerator

class Stops(torch.nn.Linear):
    def to(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

accelerator = Accelerator(cpu=True)
accelerator.prepare(torch.utils.data.DataLoader(list(range(4))))  # no model: not startup
accelerator.prepare(Stops(4, 4))
"""


def test_a_rank_stopped_while_preparing_ends_the_preparation_and_its_startup(tmp_path):
    import subprocess

    from support.torchrun import clean_env

    script = tmp_path / "job.py"
    script.write_text(STOPPED_IN_PREPARE)
    env = clean_env(VENVS[0], {"LOADTRACE": "1", "LOADTRACE_DIR": str(tmp_path / "traces")})
    proc = subprocess.run(
        [str(VENVS[0].python), str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -15, proc.stdout + proc.stderr  # died by the signal, as untraced
    spans = read_files(tmp_path / "traces").spans
    prepare = one(spans, semconv.SPAN_ACCELERATE_PREPARE)  # one: the data loader's prepare is not startup
    startup = one(spans, semconv.SPAN_STARTUP)
    assert prepare.parent_span_id == startup.span_id
    for span in (prepare, startup):
        assert span.attributes[semconv.EXIT_SIGNAL] == "SIGTERM" and span.status_code == 2, span.attributes
    assert prepare.attributes[semconv.ACCELERATE_DISTRIBUTED_TYPE] == "NO"
    assert startup.attributes[semconv.STARTUP_END] == "SIGTERM"
    assert startup.start_ns < prepare.start_ns <= prepare.end_ns <= startup.end_ns
