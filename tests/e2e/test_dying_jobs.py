"""Promise (issue 11): a job that dies, fails or restarts while loading still tells the whole story, end to end.

Real ``torchrun --nproc_per_node 2`` jobs of ``tests/workers/dying_load.py`` (which counts every rank's reads itself,
independently of loadtrace, under a lock so "the N-th read" is one moment), reported by the installed ``loadtrace
report`` command line:

1. teardown: rank 1 SIGKILLs itself right after its N-th read while rank 0, slowed, is still loading; torchrun
   SIGTERMs rank 0. The report has rank 1's exact bytes and tensors, how each rank ended, and torchrun sees exactly
   what it sees untraced (exit codes -9 and -15, the same job exit code).
2. the same over OTLP only (no files): rank 0's spans ended by SIGTERM and rank 1's ``loadtrace.rank_exit`` with its
   exact bytes arrive at a receiver.
3. a real OOM kill in a memory cgroup: rank 1 is told apart as OOM-killed, with its memory limit (the cgroup's); in
   the files and in what a collector received of the same kill (the first venv's job sends both ways), every span's
   parent is in the trace.
4. a rank that raises (a shard missing): the job fails as untraced (one untraced run, as in 1), and the report has a
   ``failed_load`` finding.
5. ``torchrun --max-restarts 1``: attempt 0 dies, attempt 1 loads; the report keeps the attempts apart.
6. a real job folder with a truncated and a corrupt state file: the report runs, counts them, and ranks that finished
   still look finished (the finished launch of ``support/relaunch.py``'s session job; launches with one
   ``LOADTRACE_JOB_ID`` into one folder: e2e/test_reused_job_id.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import field_facts, parents
from support.cgroups import remove_cgroup
from support.installed import file_spans, job_dir, report, report_json, require_installed, torchrun_exitcodes
from support.multirank import MODE_ENV, TRACE_ROOT
from support.pagecache import evict
from support.relaunch import relaunched
from support.torchrun import DEFAULT_TIMEOUT_S, TorchrunResult, clean_env, torchrun
from support.venvs import REPO, Venv, discover

from loadtrace import semconv as sc
from loadtrace import statefile
from loadtrace.instrumentation.counting import memory

VENVS = discover()
WORKER = REPO / "tests" / "workers" / "dying_load.py"
FSDP_ENV = MODE_ENV["fsdp"]
KILL_AFTER = 10  # rank 1 dies right after this many tensor reads
RUN_TIMEOUT_S = min(DEFAULT_TIMEOUT_S, 240)
# Shortest message torchrun logs when a worker ignored SIGTERM for 30 s and had to be SIGKILLed.
FORCED = "forcefully exiting via"


def first_venv():
    """A death is told from the state file, the launcher and the exit: the same code whatever the transformers release,
    so the current one alone. That the per-tensor hooks which fill the state file count exactly on each release is
    held on the session's jobs (e2e/test_multirank_traces.py)."""
    return [pytest.param(venv, id=venv.name) for venv in VENVS[:1]]


# Running jobs and reports ---------------------------------------------------------------------------------------------


def launch(
    venv: Venv,
    script: Path,
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    launcher_args: tuple[str, ...] = (),
    static_port: bool = True,
    timeout_s: float = RUN_TIMEOUT_S,
) -> TorchrunResult:
    """``support.torchrun.torchrun`` with launcher options, saying how each run ended (these runs are meant to fail)."""
    result = torchrun(
        venv, script, args, cwd, env, timeout_s=timeout_s, launcher_args=launcher_args, static_port=static_port
    )
    print(f"[dying] {venv.name} {cwd.name}: rc {result.returncode} in {result.seconds:.1f}s")
    return result


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def ranks_of(rep: dict[str, Any], attempt: int | None = None) -> dict[int, dict[str, Any]]:
    rows = [r for r in rep["ranks"] if attempt is None or r["attempt"] == attempt]
    by_rank = {r["rank"]: r for r in rows}
    assert len(by_rank) == len(rows), f"a rank listed twice: {[(r['rank'], r['attempt'], r['run']) for r in rows]}"
    return by_rank


def findings_of(rep: dict[str, Any], kind: str, rank: int, attempt: int | None = None) -> list[dict[str, Any]]:
    return [
        f
        for f in rep["findings"]
        if f["kind"] == kind and rank in f["ranks"] and (attempt is None or f["attempt"] == attempt)
    ]


def state_of(folder: Path, rank: int) -> statefile.State:
    paths = sorted(folder.glob(f"rank{rank:05d}-*{sc.STATE_SUFFIX}"))
    assert len(paths) == 1, f"expected one state file of rank {rank} in {folder}: {paths}"
    state = statefile.read(paths[0])
    assert state is not None, f"{paths[0]} does not decode"
    return state


# Checkpoints ---------------------------------------------------------------------------------------------------------


def make_checkpoint(out: Path, *options: str) -> dict[str, Any]:
    """``examples/make_checkpoint.py`` in the first venv; returns its summary line's numbers."""
    proc = subprocess.run(
        [str(VENVS[0].python), str(REPO / "examples" / "make_checkpoint.py"), str(out), *options],
        cwd=out.parent,
        env=clean_env(VENVS[0], {}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(r"wrote (\d+) shards, ([\d,]+) tensors, ([\d,]+) bytes", proc.stdout)
    assert match, proc.stdout
    return {"shards": int(match[1]), "tensors": int(match[2].replace(",", "")), "bytes": int(match[3].replace(",", ""))}


# Big enough that rank 1's own copies (5.24: every tensor read and kept; 5.12 FSDP: that plus a zeros_like model)
# cannot fit in OOM_LIMIT, small enough to write and load in seconds here: 6 layers x 32 experts, about 170 MB.
BIG_OPTIONS = (
    "--layers", "6", "--experts", "32", "--shard-size", "40MB",
    "--set", "hidden_size=256", "--set", "moe_intermediate_size=256", "--set", "intermediate_size=512",
    "--set", "vocab_size=8000",
)  # fmt: skip
BIG_MAX_BYTES = 200 * 1000 * 1000


@pytest.fixture(scope="session")
def big_checkpoint(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("big-checkpoint") / "ckpt"
    summary = make_checkpoint(out, *BIG_OPTIONS)
    assert summary["bytes"] <= BIG_MAX_BYTES, summary
    return out, summary


@pytest.fixture(scope="module")
def broken_checkpoint(checkpoint: Path, tmp_path_factory) -> tuple[Path, str]:
    """A copy of the default checkpoint with one shard (listed in its index) missing."""
    out = tmp_path_factory.mktemp("broken-checkpoint") / "ckpt"
    shutil.copytree(checkpoint, out)
    shards = sorted(out.glob("*.safetensors"))
    assert len(shards) == field_facts.FILES
    missing = shards[2]
    missing.unlink()
    return out, missing.name


# 1. Teardown: a SIGKILLed rank and a SIGTERMed rank, both in the middle of loading -----------------------------------


@dataclass
class Teardown:
    venv: Venv
    traced: TorchrunResult
    untraced: TorchrunResult
    folder: Path  # the traced job's trace folder
    report: dict[str, Any]
    table: str

    @property
    def out(self) -> Path:
        return self.traced.cwd / "out"

    def count(self) -> dict[str, Any]:
        """Rank 1's own count, written just before it SIGKILLed itself."""
        return load_json(self.out / "count-rank1.json")


def teardown_job(venv: Venv, checkpoint: Path, cwd: Path, traced: bool) -> TorchrunResult:
    env = {**FSDP_ENV, **({"LOADTRACE": "1"} if traced else {})}
    args = [str(checkpoint), "--out", str(cwd / "out"), "--scenario", "teardown", "--kill-after", str(KILL_AFTER)]
    return launch(venv, WORKER, args, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def untraced_teardown(checkpoint: Path, tmp_path_factory) -> TorchrunResult:
    """The teardown without loadtrace: the traced job is held to what torchrun sees of it."""
    return teardown_job(VENVS[0], checkpoint, tmp_path_factory.mktemp("teardown-untraced"), traced=False)


@pytest.fixture(scope="module", params=first_venv())
def teardown(request, checkpoint: Path, untraced_teardown: TorchrunResult, tmp_path_factory) -> Teardown:
    venv = request.param
    require_installed(venv)
    traced = teardown_job(venv, checkpoint, tmp_path_factory.mktemp(f"teardown-{venv.name}"), traced=True)
    assert (traced.cwd / "out" / "count-rank1.json").exists(), traced.tail()
    folder = job_dir(traced)
    _, table, _ = report(venv, folder)
    return Teardown(venv, traced, untraced_teardown, folder, report_json(venv, folder), table)


def test_teardown_torchrun_sees_what_it_sees_untraced(teardown: Teardown):
    for run in (teardown.untraced, teardown.traced):
        assert (run.cwd / "out" / "rank0-loading.json").exists(), f"rank 0 never started reading\n{run.tail()}"
        assert not (run.cwd / "out" / "finished-rank0.json").exists(), "rank 0 finished: it was not stopped mid-load"
        assert torchrun_exitcodes(run) == {0: -signal.SIGTERM, 1: -signal.SIGKILL}, run.tail()
        assert FORCED not in run.log.read_text(errors="replace"), f"rank 0 ignored SIGTERM for 30 s\n{run.tail()}"
    assert teardown.traced.returncode == teardown.untraced.returncode != 0


def test_teardown_dead_rank_has_its_exact_bytes(teardown: Teardown):
    count = teardown.count()
    assert count["read_tensors"] == KILL_AFTER and count["read_bytes"] > 0
    state = state_of(teardown.folder, 1)
    assert state.status == "loading" and state.pid == count["pid"]
    assert (state.totals().read_bytes, state.totals().tensors_read) == (count["read_bytes"], KILL_AFTER)

    rank1 = ranks_of(teardown.report)[1]
    assert rank1["incomplete"] is True and rank1["failed"] is None
    assert (rank1["read_bytes"], rank1["tensors_read"]) == (count["read_bytes"], count["read_tensors"]), rank1
    assert rank1["exit"]["signal"] == "SIGKILL" and rank1["exit"]["source"] == "launcher", rank1["exit"]
    assert rank1["exit"]["code"] is None and rank1["exit"]["oom_killed"] is not True


def test_teardown_stopped_rank_ends_its_spans_with_sigterm(teardown: Teardown):
    said_loading = load_json(teardown.out / "rank0-loading.json")  # rank 0's own count when it told rank 1
    rank0 = ranks_of(teardown.report)[0]
    assert rank0["exit"]["signal"] == "SIGTERM", rank0["exit"]
    assert rank0["incomplete"] is True and rank0["failed"] is None
    assert said_loading["read_bytes"] <= rank0["read_bytes"] < field_facts.BYTES, rank0
    state = state_of(teardown.folder, 0)
    assert (state.status, state.signal) == ("signalled", signal.SIGTERM)

    # Its own spans say so: the open ones were ended with ERROR and the signal's name, and flushed before it died.
    spans = [(r, s) for r, s in file_spans(teardown.folder) if r.get(sc.RANK) == 0 and s["name"] != sc.SPAN_RANK_EXIT]
    stopped = [s for _, s in spans if s["attributes"].get(sc.EXIT_SIGNAL) == "SIGTERM"]
    assert stopped, [s["name"] for _, s in spans]
    assert all(s.get("status", {}).get("code") == 2 for s in stopped), [s.get("status") for s in stopped]
    (load,) = [s for s in stopped if s["name"] == sc.SPAN_FROM_PRETRAINED]
    assert load["attributes"][sc.READ_BYTES] >= said_loading["read_bytes"] > 0


def test_teardown_every_span_has_its_parent_in_the_trace(teardown: Teardown):
    """Rank 1's startup and load were open at its SIGKILL: the witness ended them, so its finished spans (its
    init_process_group, its phases) are not orphans."""
    spans = file_spans(teardown.folder)
    assert not parents.orphans(parents.from_files(spans)), parents.orphans(parents.from_files(spans))
    ended = [s for r, s in spans if r.get(sc.RANK) == 1 and s["attributes"].get(sc.EXIT_SOURCE) == "launcher"]
    names = {s["name"] for s in ended}
    assert {sc.SPAN_RANK_EXIT, sc.SPAN_STARTUP, sc.SPAN_FROM_PRETRAINED} <= names, names
    assert all(s.get("status", {}).get("code") == 2 for s in ended), [s.get("status") for s in ended]


def test_teardown_findings_name_the_phase_and_the_bytes(teardown: Teardown):
    count = teardown.count()
    ranks = ranks_of(teardown.report)
    phase1, phase0 = ranks[1]["last_state"]["during"], ranks[0]["last_state"]["during"]
    assert {phase0, phase1} <= sc.PHASE_SPANS | sc.LOAD_SPANS, (ranks[0]["last_state"], ranks[1]["last_state"])
    (killed,) = findings_of(teardown.report, sc.FINDING_INCOMPLETE_RANK, 1)
    assert killed["severity"] == "warning"
    assert f"rank 1 was killed (SIGKILL) during {phase1} after reading {count['read_bytes']:,} B" in killed["detail"]
    (stopped,) = findings_of(teardown.report, sc.FINDING_INCOMPLETE_RANK, 0)
    sentence = f"rank 0 was stopped by SIGTERM during {phase0} after reading {ranks[0]['read_bytes']:,} B"
    assert sentence in stopped["detail"], stopped["detail"]
    assert "incomplete (SIGKILL)" in teardown.table and "incomplete (SIGTERM)" in teardown.table, teardown.table


def test_teardown_model_size_is_not_a_stopped_rank_s_partial_read(teardown: Teardown):
    """Rank 0, the loading rank, was stopped after a few reads: what it had read by then is not the model's size, and
    no rank read more than 100% of the model."""
    (trace,) = teardown.report["traces"]
    assert trace["model_bytes"] in (None, 0, field_facts.BYTES), trace["model_bytes"]
    shares = [int(p) for f in teardown.report["findings"] for p in re.findall(r"\((\d+)% of the model\)", f["detail"])]
    assert all(share <= 100 for share in shares), [f["detail"] for f in teardown.report["findings"]]


# 2. The same over OTLP only ------------------------------------------------------------------------------------------


@dataclass
class OtlpTeardown:
    run: TorchrunResult
    spans: list[Any]  # _wire.WireSpan
    arrivals: list[Any]
    rejected: list[str]
    shards: list[Path]  # the job's own copy of the checkpoint, out of the page cache when it began (where it could be)
    evicted: bool


@pytest.fixture(scope="module")
def otlp_teardown(checkpoint: Path, tmp_path_factory) -> OtlpTeardown:
    from support.wire import HttpReceiver, wire_spans

    venv = VENVS[0]
    require_installed(venv)
    cwd = tmp_path_factory.mktemp("teardown-otlp")
    checkpoint = Path(shutil.copytree(checkpoint, cwd / "checkpoint"))  # cold: its storage figures count (issue 48)
    shards = sorted(checkpoint.glob("*.safetensors"))
    for shard in shards:
        evict(shard)
    evicted = all(memory.cached_bytes(shard) == 0 for shard in shards)
    env = {
        **FSDP_ENV,
        "LOADTRACE": "1",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "TMPDIR": str(cwd / "tmp"),
    }
    (cwd / "tmp").mkdir()
    args = [str(checkpoint), "--out", str(cwd / "out"), "--scenario", "teardown", "--kill-after", str(KILL_AFTER)]
    with HttpReceiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver.port}"
        run = launch(venv, WORKER, args, cwd=cwd, env=env)
    arrivals = receiver.received.arrivals
    return OtlpTeardown(run, wire_spans(arrivals), arrivals, receiver.received.rejected, shards, evicted)


def test_otlp_teardown_writes_no_trace_files(otlp_teardown: OtlpTeardown):
    run = otlp_teardown.run
    assert run.returncode != 0 and (run.cwd / "out" / "count-rank1.json").exists(), run.tail()
    assert not (run.cwd / TRACE_ROOT).exists()
    assert not list(run.cwd.rglob("*.jsonl")), list(run.cwd.rglob("*.jsonl"))
    assert otlp_teardown.arrivals and not otlp_teardown.rejected, otlp_teardown.rejected


def test_otlp_teardown_stopped_rank_spans_arrive(otlp_teardown: OtlpTeardown):
    said_loading = load_json(otlp_teardown.run.cwd / "out" / "rank0-loading.json")
    rank0 = [s for s in otlp_teardown.spans if s.resource.get(sc.RANK) == 0 and s.name != sc.SPAN_RANK_EXIT]
    stopped = [s for s in rank0 if s.attributes.get(sc.EXIT_SIGNAL) == "SIGTERM"]
    assert stopped and all(s.status_code == 2 for s in stopped), [(s.name, s.attributes) for s in rank0]
    (load,) = [s for s in stopped if s.name == sc.SPAN_FROM_PRETRAINED]
    assert load.attributes[sc.READ_BYTES] >= said_loading["read_bytes"] > 0


def test_otlp_teardown_every_span_has_its_parent_in_the_trace(otlp_teardown: OtlpTeardown):
    found = parents.orphans(parents.from_wire(otlp_teardown.spans))
    assert not found, found
    ended = {s.name for s in otlp_teardown.spans if s.resource.get(sc.RANK) == 1 and s.attributes.get(sc.EXIT_SOURCE)}
    assert {sc.SPAN_RANK_EXIT, sc.SPAN_STARTUP, sc.SPAN_FROM_PRETRAINED} <= ended, ended


def test_otlp_teardown_dead_rank_exit_arrives_with_exact_bytes(otlp_teardown: OtlpTeardown, tmp_path):
    count = load_json(otlp_teardown.run.cwd / "out" / "count-rank1.json")
    exits = [s for s in otlp_teardown.spans if s.name == sc.SPAN_RANK_EXIT and s.resource.get(sc.RANK) == 1]
    assert len(exits) == 1, [(s.name, s.resource.get(sc.RANK)) for s in otlp_teardown.spans]
    (dead,) = exits
    assert dead.attributes[sc.EXIT_SIGNAL] == "SIGKILL" and dead.status_code == 2
    assert (dead.attributes[sc.READ_BYTES], dead.attributes[sc.READ_TENSORS]) == (
        count["read_bytes"],
        count["read_tensors"],
    )
    assert dead.resource[sc.PROCESS_PID] == count["pid"]
    rank0_traces = {s.trace_id for s in otlp_teardown.spans if s.resource.get(sc.RANK) == 0}
    assert rank0_traces == {dead.trace_id}, "the dead rank's exit is in the job's trace"

    # What a collector received reads back as the same story.
    from support.wire import traces_data_json

    (tmp_path / "received.jsonl").write_text(json.dumps(traces_data_json(otlp_teardown.arrivals)) + "\n")
    rep = report_json(VENVS[0], tmp_path / "received.jsonl")
    rank1 = ranks_of(rep)[1]
    assert rank1["read_bytes"] == count["read_bytes"] and rank1["exit"]["signal"] == "SIGKILL"
    assert ranks_of(rep)[0]["exit"]["signal"] == "SIGTERM"


def test_otlp_teardown_storage_figures_are_what_the_ranks_fetched(otlp_teardown: OtlpTeardown, tmp_path):
    """Issue 48: a killed job over OTLP said "372.5 MB from storage in 0.007 s = 52.8 GB/s" when 131.3 MB was read in
    all (the checkpoint's cold bytes at open, over its files' few open spans). Now each rank's figure is what its
    process fetched: the dead rank's up to its last reading (``loadtrace.io.storage_read_as_of``), never more than it
    had fetched by its death (its own ``/proc/self/io``, read by the worker); the node's is their sum, never more
    than entered the page cache for the checkpoint (``mincore``, read here) and what else they read."""
    if not otlp_teardown.evicted:
        pytest.skip("posix_fadvise(DONTNEED) could not evict the checkpoint here (tmpfs?): no cold job")
    count = load_json(otlp_teardown.run.cwd / "out" / "count-rank1.json")
    (dead,) = [s for s in otlp_teardown.spans if s.name == sc.SPAN_RANK_EXIT and s.resource.get(sc.RANK) == 1]
    fetched, as_of = dead.attributes[sc.IO_STORAGE_READ_BYTES], dead.attributes[sc.IO_STORAGE_READ_AS_OF]
    assert 0 <= fetched <= count["storage_read_during_load"], (fetched, count["storage_read_during_load"])
    assert as_of <= dead.end_ns
    stretches = dead.attributes[sc.IO_STORAGE_READ_INTERVALS]
    assert all(start < end <= as_of for start, end in zip(stretches[::2], stretches[1::2], strict=True)), stretches
    entered = sum(memory.cached_bytes(shard) or 0 for shard in otlp_teardown.shards)  # both ranks dead: all fetched

    from support.wire import traces_data_json

    (tmp_path / "received.jsonl").write_text(json.dumps(traces_data_json(otlp_teardown.arrivals)) + "\n")
    rep = report_json(VENVS[0], tmp_path / "received.jsonl")
    ranks = ranks_of(rep)
    assert ranks[1]["storage_read_bytes"] == fetched and ranks[1]["last_state"]["storage_read_bytes"] == fetched
    (node,) = rep["traces"][0]["startup"]["nodes"]
    assert node["storage_bytes"] == ranks[0]["storage_read_bytes"] + fetched
    assert node["storage_bytes"] <= entered + 4096 * len(otlp_teardown.shards) + 16 * 2**20, (node, entered)
    assert node["counted_to_last_reading"] == [1]
    table = report(VENVS[0], tmp_path / "received.jsonl")[1]
    (line,) = [text for text in table.splitlines() if text.startswith("Storage: ")]
    print(f"[storage] {line}; entered {entered:,} B; rank 1 by its death {count['storage_read_during_load']:,} B")
    assert "(rank 1 to its last reading, before dying)" in line and "came from storage" not in table, table


# 3. A real OOM kill in a memory cgroup -------------------------------------------------------------------------------

CGROUP_V1 = Path("/sys/fs/cgroup/memory")
OOM_LIMIT = 96 * 1024 * 1024  # rank 1's new charges only: pages it had before moving in stay where they were


def memory_cgroup(name: str, limit: int) -> tuple[Path, str]:
    """A fresh memory cgroup limited to ``limit`` bytes (v1, else v2 with the memory controller): (its directory,
    "cgroup v1" or "cgroup v2"). Skips the test where none can be made."""
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup needs root")
    if (CGROUP_V1 / "memory.limit_in_bytes").exists():
        path, version = CGROUP_V1 / name, "cgroup v1"
        limit_file = "memory.limit_in_bytes"
    else:
        root = Path("/sys/fs/cgroup")
        controllers = root / "cgroup.controllers"
        if not controllers.exists() or "memory" not in controllers.read_text().split():
            pytest.skip("no cgroup v1 memory hierarchy and no cgroup v2 memory controller")
        path, version, limit_file = root / name, "cgroup v2", "memory.max"
    try:
        path.mkdir()
        (path / limit_file).write_text(str(limit))
    except OSError as error:
        remove_cgroup(path)
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    for swap_file in ("memory.memsw.limit_in_bytes", "memory.swap.max"):  # no swapping out of the limit
        try:
            (path / swap_file).write_text(str(limit) if swap_file.endswith("bytes") else "0")
        except OSError:
            pass
    return path, version


@dataclass
class OtlpOom:
    run: TorchrunResult
    spans: list[Any]  # _wire.WireSpan
    rejected: list[str]


@dataclass
class OomRun:
    venv: Venv
    run: TorchrunResult
    cgroup: Path
    source: str  # "cgroup v1" / "cgroup v2"
    report: dict[str, Any]
    checkpoint: dict[str, Any]
    otlp: OtlpOom | None  # the first venv's: what a collector received of the same kill


def oom_job(venv: Venv, ckpt: Path, cwd: Path, env: dict[str, str], label: str) -> tuple[TorchrunResult, Path, str]:
    """The ``oom`` scenario with rank 1 in a fresh memory cgroup (skipped where none can be made): (the run, the
    cgroup, its version). Rank 1 was SIGKILLed by the kernel, not loaded."""
    cgroup, source = memory_cgroup(f"loadtrace-oom-test-{os.getpid()}-{label}", OOM_LIMIT)
    try:
        args = [str(ckpt), "--out", str(cwd / "out"), "--scenario", "oom", "--oom-cgroup", str(cgroup)]
        run = launch(venv, WORKER, args, cwd=cwd, env=env)
        oom_kills = (cgroup / "memory.oom_control").read_text() if source == "cgroup v1" else ""
    finally:
        remove_cgroup(cgroup)
    assert not (cwd / "out" / "survived-rank1.json").exists(), f"rank 1 loaded in {OOM_LIMIT:,} B: raise the model"
    assert torchrun_exitcodes(run).get(1) == -signal.SIGKILL, f"{oom_kills}\n{run.tail()}"
    return run, cgroup, source


def oom_run_in(venv: Venv, big_checkpoint, cwd: Path) -> OomRun:
    """The OOM kill over files; in the first venv over OTLP as well (``LOADTRACE_DIR`` keeps the files), to a
    receiver here: one kill, both ways out."""
    from support.wire import HttpReceiver, wire_spans

    require_installed(venv)
    ckpt, summary = big_checkpoint
    env = {**FSDP_ENV, "LOADTRACE": "1"}
    receiver = HttpReceiver() if venv == VENVS[0] else None
    if receiver is not None:
        env |= {"LOADTRACE_DIR": str(cwd / TRACE_ROOT / "oom"), "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver.port}"
    with receiver if receiver is not None else nullcontext():
        run, cgroup, source = oom_job(venv, ckpt, cwd, env, venv.name.lstrip("."))
    otlp = None
    if receiver is not None:
        otlp = OtlpOom(run, wire_spans(receiver.received.arrivals), receiver.received.rejected)
    return OomRun(venv, run, cgroup, source, report_json(venv, job_dir(run)), summary, otlp)


@pytest.fixture(scope="module")
def oom_runs(big_checkpoint, tmp_path_factory) -> Callable[[Venv], OomRun]:
    """Each venv's OOM kill, run the first time a test asks for it."""
    done: dict[Path, OomRun] = {}

    def of(venv: Venv) -> OomRun:
        if venv.root not in done:
            done[venv.root] = oom_run_in(venv, big_checkpoint, tmp_path_factory.mktemp(f"oom-{venv.name}"))
        return done[venv.root]

    return of


@pytest.fixture(params=first_venv())
def oom_run(request, oom_runs) -> OomRun:
    return oom_runs(request.param)


def test_oom_killed_rank_is_told_apart(oom_run: OomRun):
    rank1 = ranks_of(oom_run.report)[1]
    assert rank1["exit"] == {"signal": "SIGKILL", "code": None, "oom_killed": True, "source": "launcher"}, rank1
    assert rank1["incomplete"] is True and rank1["failed"] is None
    assert rank1["read_bytes"] > 0 or sum(rank1["materialized_bytes"].values()) > 0, rank1
    assert rank1["read_bytes"] <= oom_run.checkpoint["bytes"]
    rank0 = ranks_of(oom_run.report)[0]  # loaded in full before rank 1 began, then stopped while idle
    assert rank0["incomplete"] is False and rank0["read_bytes"] == oom_run.checkpoint["bytes"], rank0
    assert rank0["exit"]["oom_killed"] is not True


def test_oom_killed_rank_s_spans_all_have_their_parent_in_the_trace(oom_run: OomRun):
    found = parents.orphans(parents.from_files(file_spans(job_dir(oom_run.run))))
    assert not found, found


def test_oom_killed_rank_shows_its_cgroup_limit(oom_run: OomRun):
    rank1 = ranks_of(oom_run.report)[1]
    assert (rank1["memory_limit_bytes"], rank1["memory_limit_source"]) == (OOM_LIMIT, oom_run.source), rank1
    (finding,) = findings_of(oom_run.report, sc.FINDING_INCOMPLETE_RANK, 1)
    detail = finding["detail"]
    during, read = rank1["last_state"]["during"], rank1["read_bytes"]
    assert f"rank 1 was OOM-killed during {during} after reading {read:,} B" in detail, detail
    assert f"the memory limit was {OOM_LIMIT:,} B" in detail and f"({oom_run.source})" in detail, detail


@pytest.fixture
def otlp_oom(oom_runs) -> OtlpOom:
    """The first venv's OOM kill as a collector received it: spans, the launcher's included, sent to a receiver."""
    otlp = oom_runs(VENVS[0]).otlp
    assert otlp is not None
    return otlp


def test_otlp_oom_killed_rank_s_spans_all_have_their_parent_in_the_trace(otlp_oom: OtlpOom):
    """What a collector receives of an OOM kill: the launcher's rank_exit and the stand-ins it ended for rank 1's open
    scopes, beside the ranks' own spans; every parent link lands on a span that arrived."""
    assert otlp_oom.spans and not otlp_oom.rejected, otlp_oom.rejected
    found = parents.orphans(parents.from_wire(otlp_oom.spans))
    assert not found, found
    job = [s for s in otlp_oom.spans if s.scope[0] != sc.SCOPE_LOADS_VIEW]  # not the job's loads view (annotate)
    assert len({s.trace_id for s in job}) == 1, "one job, one trace"
    rank1 = [s for s in job if s.resource.get(sc.RANK) == 1]
    (dead,) = [s for s in rank1 if s.name == sc.SPAN_RANK_EXIT]
    assert dead.attributes[sc.EXIT_OOM_KILLED] is True and dead.attributes[sc.EXIT_SIGNAL] == "SIGKILL", dead
    ended = {s.name for s in rank1 if s.attributes.get(sc.EXIT_SOURCE) == "launcher"}
    assert {sc.SPAN_RANK_EXIT, sc.SPAN_STARTUP, sc.SPAN_FROM_PRETRAINED} <= ended, ended


# 4. A rank that raises -----------------------------------------------------------------------------------------------


@dataclass
class Failing:
    venv: Venv
    traced: TorchrunResult
    untraced: TorchrunResult
    report: dict[str, Any]
    table: str
    missing: str


def raise_job(venv: Venv, checkpoint: Path, broken: Path, cwd: Path, traced: bool) -> TorchrunResult:
    args = [str(checkpoint), "--out", str(cwd / "out"), "--scenario", "raise", "--rank1-ckpt", str(broken)]
    return launch(venv, WORKER, args, cwd=cwd, env={"LOADTRACE": "1"} if traced else {})


@pytest.fixture(scope="module")
def untraced_raise(checkpoint: Path, broken_checkpoint, tmp_path_factory) -> TorchrunResult:
    """The raising rank without loadtrace, once (as ``untraced_teardown``): the job fails as torch fails it."""
    return raise_job(VENVS[0], checkpoint, broken_checkpoint[0], tmp_path_factory.mktemp("raise-untraced"), False)


@pytest.fixture(scope="module", params=first_venv())
def failing(request, checkpoint: Path, broken_checkpoint, untraced_raise: TorchrunResult, tmp_path_factory) -> Failing:
    venv = request.param
    require_installed(venv)
    broken, missing = broken_checkpoint
    traced = raise_job(venv, checkpoint, broken, tmp_path_factory.mktemp(f"raise-{venv.name}"), True)
    folder = job_dir(traced)
    _, table, _ = report(venv, folder)
    return Failing(venv, traced, untraced_raise, report_json(venv, folder), table, missing)


def test_a_raising_rank_fails_the_job_as_untraced(failing: Failing):
    for run in (failing.traced, failing.untraced):
        assert (run.cwd / "out" / "count-rank0.json").exists(), run.tail()
        assert not (run.cwd / "out" / "survived-rank1.json").exists(), run.tail()
        assert failing.missing in run.log.read_text(errors="replace"), run.tail()
    assert failing.traced.returncode == failing.untraced.returncode != 0
    assert torchrun_exitcodes(failing.traced) == torchrun_exitcodes(failing.untraced) == {1: 1}


def test_a_raising_rank_is_a_failed_load_finding(failing: Failing):
    ranks = ranks_of(failing.report)
    failed = ranks[1]["failed"]
    assert isinstance(failed, str) and failed, ranks[1]
    assert f"{failed}: " in failing.traced.log.read_text(errors="replace"), failed  # the exception rank 1 printed
    assert ranks[1]["incomplete"] is False
    (finding,) = findings_of(failing.report, sc.FINDING_FAILED_LOAD, 1)
    assert finding["severity"] == "warning" and finding["ranks"] == [1]
    assert finding["detail"].startswith(f"rank 1's {sc.SPAN_FROM_PRETRAINED} raised {failed}"), finding["detail"]
    assert "findings: none" not in failing.table and "failed_load" in failing.table
    assert ranks[0]["failed"] is None and ranks[0]["incomplete"] is False
    assert ranks[0]["read_bytes"] == field_facts.BYTES


# 5. A restart --------------------------------------------------------------------------------------------------------


@dataclass
class Reported:
    """A job's runs and what the installed ``loadtrace report`` says of its folder, as JSON and as the table."""

    runs: list[TorchrunResult]
    folder: Path
    report: dict[str, Any]
    table: str

    @property
    def run(self) -> TorchrunResult:
        (run,) = self.runs
        return run


def reported(venv: Venv, runs: list[TorchrunResult], folder: Path) -> Reported:
    _, table, _ = report(venv, folder)
    return Reported(runs, folder, report_json(venv, folder), table)


@pytest.fixture(scope="module")
def restarted(checkpoint: Path, tmp_path_factory) -> Reported:
    venv = VENVS[0]
    require_installed(venv)
    cwd = tmp_path_factory.mktemp("restart")
    args = [str(checkpoint), "--out", str(cwd / "out"), "--scenario", "restart", "--kill-after", str(KILL_AFTER)]
    run = launch(
        venv, WORKER, args, cwd=cwd, env={"LOADTRACE": "1"}, launcher_args=("--max-restarts", "1"), static_port=False
    )
    assert run.returncode == 0, run.tail()
    return reported(venv, [run], job_dir(run))  # one run id across restarts: one job, one folder, one trace


def test_restart_keeps_the_attempts_apart(restarted: Reported):
    traces = restarted.report["traces"]
    assert sorted(t["attempt"] for t in traces) == [0, 1], traces
    assert len({t["trace_id"] for t in traces}) == 1, "one job id: both attempts are in one trace"
    assert all(t["ranks"] == [0, 1] for t in traces)
    assert {r["attempt"] for r in restarted.report["ranks"]} == {0, 1} and len(restarted.report["ranks"]) == 4
    assert "attempt 0" in restarted.table and "attempt 1" in restarted.table


def test_restart_second_attempt_equals_a_clean_run(restarted: Reported):
    out = restarted.run.cwd / "out"
    for rank, row in ranks_of(restarted.report, attempt=1).items():
        count = load_json(out / f"count-a1-rank{rank}.json")
        assert (row["read_bytes"], row["tensors_read"], row["files_opened"]) == (
            field_facts.BYTES,
            field_facts.TENSORS,
            field_facts.FILES,
        ), row
        assert (row["read_bytes"], row["tensors_read"]) == (count["read_bytes"], count["read_tensors"])
        assert row["loads"] == 1 and row["incomplete"] is False and row["failed"] is None
        assert row["exit"]["signal"] is None and row["exit"]["code"] is None
    assert not [f for f in restarted.report["findings"] if f["attempt"] == 1 and f["kind"] == "incomplete_rank"]


def test_restart_first_attempt_keeps_its_own_story(restarted: Reported):
    out = restarted.run.cwd / "out"
    first = ranks_of(restarted.report, attempt=0)
    dead = load_json(out / "count-a0-rank1.json")
    assert first[1]["incomplete"] is True and first[1]["exit"]["signal"] == "SIGKILL"
    assert (first[1]["read_bytes"], first[1]["tensors_read"]) == (dead["read_bytes"], KILL_AFTER)
    assert findings_of(restarted.report, sc.FINDING_INCOMPLETE_RANK, 1, attempt=0)
    # Rank 0 finished its load before it was stopped: its load counted once, whatever the witness repeats.
    assert (first[0]["read_bytes"], first[0]["loads"]) == (load_json(out / "count-a0-rank0.json")["read_bytes"], 1)
    assert first[0]["read_bytes"] == field_facts.BYTES


def test_restart_a_rank_waiting_in_a_collective_still_stops_at_sigterm(restarted: Reported):
    """Attempt 0's rank 0 has finished its load and waits in C++ (the store, as on a hung collective) when torchrun
    SIGTERMs it: untraced it dies at once; a Python handler of loadtrace's left installed after the load would not run
    until that call returns, and torchrun would SIGKILL the rank after 30 s."""
    log = restarted.run.log.read_text(errors="replace")
    assert "closing signal SIGTERM" in log and FORCED not in log, restarted.run.tail()


# 6. Bad input at the CLI on a real job folder ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_job(checkpoint: Path, tmp_path_factory) -> Path:
    """The folder of a real job whose two ranks loaded and finished: the session's relaunched job id's last launch
    (``support/relaunch.py``: ``elsewhere``, its ``LOADTRACE_DIR`` its own)."""
    venv = VENVS[0]
    require_installed(venv)
    launches = relaunched(venv, checkpoint, tmp_path_factory)
    assert launches.launches["elsewhere"].returncode == 0, launches.launches["elsewhere"].log[-3000:]
    return launches.elsewhere


def test_damaged_state_files_of_a_real_job_are_skipped_and_counted(finished_job: Path, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(finished_job, folder)
    states = sorted(folder.glob(f"*{sc.STATE_SUFFIX}"))
    assert len(states) >= 2, f"the finished ranks left no state files to damage: {sorted(folder.iterdir())}"
    truncated, corrupt = states[0], states[1]
    with open(truncated, "r+b") as handle:
        handle.truncate(1000)  # cut inside the header
    data = bytearray(corrupt.read_bytes())
    data[8:400] = b"\xff" * 392  # the magic survives, the numbers after it do not
    corrupt.write_bytes(bytes(data))

    venv = VENVS[0]
    code, table, err = report(venv, folder)
    assert err == "" and code == 0, err
    assert "2 corrupt, truncated or foreign state files skipped" in table, table
    rep = report_json(venv, folder)
    assert rep["skipped_state_files"] == 2
    assert len(rep["ranks"]) == 2
    for row in rep["ranks"]:
        assert row["incomplete"] is False and row["failed"] is None, row
        assert row["exit"] == {"signal": None, "code": None, "oom_killed": None, "source": None}, row
        assert row["read_bytes"] == field_facts.BYTES
    assert sc.FINDING_INCOMPLETE_RANK not in {f["kind"] for f in rep["findings"]}
