"""Promise: whatever goes wrong inside loadtrace or around it, the traced job finishes with exit 0 and bit-identical
weights, and loadtrace says what went wrong once, without a traceback: a bad setting (an unwritable LOADTRACE_DIR
included) in one line for the whole job, anything else in one line per process.

Each case is a real 2-rank torchrun load (plain mode) with LOADTRACE=1 and something broken. Troubles that cannot hide
one another share a job (bad settings that leave tracing on; the hook faults, split between the ranks), and every test
still checks its own line, the job's weights and that nothing else was said; each job runs once per module. How long
a hanging collector holds a process's exit is timed on a bare process that reads one tensor: a torchrun rank's own
exit takes seconds on 2 busy cores, and varies by more than the bound."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.full_disk import CANNOT_MOUNT, mounted_full_tmpfs
from support.troubled_jobs import REFUSALS, Collector, TroubledJob, run_troubled
from support.venvs import discover
from support.wire import PROTOCOLS

from loadtrace.analysis.sources import read_files

VENVS = discover()
JOB, PROCESS = 1, 3  # how often a line may be said: once for the job, or once per process (the launcher, two ranks)
UNWRITABLE = "/proc/loadtrace-x"  # issue 34: said nothing of the traces, and rank 0 offered `loadtrace report` on it
UNWRITABLE_LINE = (
    re.escape(f"cannot write traces to LOADTRACE_DIR={UNWRITABLE} (")
    + ".*"
    + re.escape("): this job's trace files are not being written")
)
# A file whose open failed has no proxy, so nothing counts its reads: file_open and tensor_read go to different ranks.
FAULTS_BY_RANK = {0: ("file_open", "materialize", "phase"), 1: ("tensor_read", "conversion")}
EXIT_TIMEOUT_S = 1.0  # LOADTRACE_EXIT_TIMEOUT's default
HTTP = "http/protobuf"


@dataclass(frozen=True)
class Scenario:
    env: dict[str, str]
    says: dict[str, int]  # a pattern of each line loadtrace must say → at most how often (JOB, PROCESS)
    args: tuple[str, ...] = ()
    collector: tuple[str, str] | None = None  # (protocol, behaviour) of a local OTLP endpoint
    full_disk: bool = False  # LOADTRACE_DIR on a full tmpfs, where one can be mounted


SCENARIOS = {
    "typo": Scenario({"LOADTRACE": "yse"}, {re.escape("LOADTRACE='yse'"): JOB}),  # tracing off, said once
    # Rank 0's closing line (LOADTRACE_QUIET=0) must not point at the unwritable folder: nothing else may be said.
    "dir-and-detail": Scenario(
        {"LOADTRACE_DIR": UNWRITABLE, "LOADTRACE_QUIET": "0", "LOADTRACE_DETAIL": "everything"},
        {UNWRITABLE_LINE: JOB, re.escape("LOADTRACE_DETAIL='everything'"): JOB},
    ),
    "disk-and-otel": Scenario(
        {"OTEL_RESOURCE_ATTRIBUTES": "team=ml,,=oops,%zz", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://not a url:43"},
        {"OpenTelemetry setup": PROCESS, "export failing": JOB, "cannot write traces": PROCESS},
        full_disk=True,
    ),
    "faults": Scenario(
        {},
        {"injected fault": PROCESS},
        args=tuple(arg for rank, kinds in FAULTS_BY_RANK.items() for arg in ("--faults", f"{rank}:{','.join(kinds)}")),
    ),
    **{
        f"{protocol}-{behaviour}": Scenario(
            {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol},
            {"export failing": JOB},  # once for the node, by its first rank (issue 40)
            collector=(protocol, behaviour),
        )
        for protocol, behaviour in {(protocol, "down") for protocol in PROTOCOLS} | {(HTTP, "hangs"), (HTTP, "refuses")}
    },
}


@dataclass
class Troubles:
    """Each scenario's job, run the first time a test asks for it."""

    checkpoint: Path
    workdir: Path
    jobs: dict[str, TroubledJob] = field(default_factory=dict)
    mounted: dict[str, bool] = field(default_factory=dict)

    def get(self, name: str) -> TroubledJob:
        if name not in self.jobs:
            self.jobs[name] = self._run(name, SCENARIOS[name])
        return self.jobs[name]

    def _run(self, name: str, scenario: Scenario) -> TroubledJob:
        cwd = self.workdir / name.replace("/", "-")
        cwd.mkdir(parents=True)
        env = dict(scenario.env)
        collector = Collector(scenario.collector[1]) if scenario.collector else None
        with mounted_full_tmpfs(cwd / "full", "16k") if scenario.full_disk else nullcontext() as full:
            self.mounted[name] = full is not None
            if full is not None:
                env["LOADTRACE_DIR"] = str(full)
            if collector is not None:
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
            try:
                job = run_troubled(VENVS[0], self.checkpoint, cwd, env, scenario.args)
            finally:
                if collector is not None:
                    collector.close()
        if collector is not None:
            job.answered = set(collector.answered)
        return job


@pytest.fixture(scope="module")
def troubles(checkpoint: Path, tmp_path_factory) -> Troubles:
    return Troubles(checkpoint, tmp_path_factory.mktemp("troubles"))


@pytest.fixture(scope="module")
def baseline(jobs) -> dict[int, str]:
    """Digests of the same load without loadtrace (the session's untraced plain job: the same weights digest)."""
    job = jobs.get(VENVS[0], "plain", traced=False)
    return {rank: digest["sha256"] for rank, digest in job.digests.items()}


def assert_unharmed(job: TroubledJob, baseline: dict[int, str], says: dict[str, int], line: str) -> None:
    """Exit 0, the untraced job's weights, no traceback; ``line`` said at least once and at most as often as allowed,
    and every line said is one of the scenario's."""
    assert job.run.returncode == 0, job.log[-3000:]
    assert job.digests == baseline, "weights must be bit-identical to the untraced job"
    assert "Traceback" not in job.log, job.log[-3000:]
    unexpected = [said for said in job.said if sum(bool(re.search(p, said)) for p in says) != 1]
    assert not unexpected, f"said besides (or matching several of) {list(says)}: {unexpected}"
    times = sum(bool(re.search(line, said)) for said in job.said)
    assert 1 <= times <= says[line], f"{line!r} said {times} times (at most {says[line]}): {job.said}"


@pytest.mark.parametrize(
    "scenario, line",
    [
        ("typo", re.escape("LOADTRACE='yse'")),  # issue 34: said 3 times in a 2-rank job
        ("dir-and-detail", re.escape("LOADTRACE_DETAIL='everything'")),
        ("dir-and-detail", UNWRITABLE_LINE),
        ("disk-and-otel", "OpenTelemetry setup"),
        ("disk-and-otel", "export failing"),
    ],
    ids=["unknown-LOADTRACE", "bad-detail", "unwritable-dir", "bad-resource-attributes", "unparsable-endpoint"],
)
def test_bad_settings(troubles, baseline, scenario, line):
    job = troubles.get(scenario)
    says = dict(SCENARIOS[scenario].says)
    if SCENARIOS[scenario].full_disk and not troubles.mounted[scenario]:
        del says["cannot write traces"]
    assert_unharmed(job, baseline, says, line)


def test_full_disk(troubles, baseline):
    job = troubles.get("disk-and-otel")
    if not troubles.mounted["disk-and-otel"]:
        pytest.skip(CANNOT_MOUNT)
    assert_unharmed(job, baseline, SCENARIOS["disk-and-otel"].says, "cannot write traces")


# Down, in each protocol; hanging and refusing (an HTTP status is an http/protobuf answer) in one: the job goes on the
# same whatever the protocol of a collector that answers late or not at all, and how long a hanging one holds a
# process's exit is timed in each protocol on a bare process (below).
@pytest.mark.parametrize(
    "protocol, behaviour",
    [(protocol, "down") for protocol in PROTOCOLS] + [(HTTP, "hangs"), (HTTP, "refuses-500"), (HTTP, "refuses-400")],
)
def test_collector_trouble(troubles, baseline, behaviour, protocol):
    name = f"{protocol}-{behaviour.split('-')[0]}"
    job = troubles.get(name)
    assert_unharmed(job, baseline, SCENARIOS[name].says, "export failing")
    if behaviour.startswith("refuses"):  # one job, each rank's spans refused with its own status
        status = int(behaviour.split("-")[1])
        assert status in REFUSALS.values() and status in job.answered, job.answered


@pytest.mark.parametrize("fault", ["file_open", "tensor_read", "materialize", "phase", "conversion"])
def test_a_failing_hook_lets_the_call_through_and_is_counted(troubles, baseline, fault):
    job = troubles.get("faults")
    assert_unharmed(job, baseline, SCENARIOS["faults"].says, "injected fault")
    (rank,) = [rank for rank, kinds in FAULTS_BY_RANK.items() if fault in kinds]
    faults = job.worker_json(f"faults-rank{rank}.json")
    assert faults["injected"] == list(FAULTS_BY_RANK[rank]), faults
    assert faults["fired"].get(fault, 0) >= 1, f"the {fault} hook never ran into its fault: {faults}"
    loads = {
        s.resource["loadtrace.rank"]: s
        for s in read_files(job.run.cwd / "loadtrace-traces").spans
        if s.name == "transformers.from_pretrained"
    }
    assert sorted(loads) == [0, 1]
    # Every raise of every fault the rank took is counted once on its load: none lost, none added.
    assert loads[rank].attributes["loadtrace.hook_errors"] == sum(faults["fired"].values()), faults


EXIT_PROBE = """
import sys, time, safetensors
with safetensors.safe_open(sys.argv[1], framework="pt") as f:
    f.get_tensor("w")
print(open("/proc/self/schedstat").read().split()[:2], time.time(), flush=True)
"""


def schedstat(path: str) -> tuple[float, float]:
    """A thread's seconds on a CPU and waiting for one (``/proc/PID/schedstat``, in ns)."""
    on_cpu, runnable = open(path).read().split()[:2]
    return int(on_cpu) / 1e9, int(runnable) / 1e9


def exit_wait(checkpoint: Path, env_extra: dict[str, str]) -> float:
    """Seconds a process's main thread waited, from its last line to its end, neither running nor ready to run: what
    a hanging collector would add (joins, timeouts). Its time on a CPU and waiting for one is left out, which on 2 cores
    busy with other work (other xdist workers' jobs) grows the wall time by more than the bound. The exited process is
    read before it is reaped (``waitid(WNOWAIT)``: ``/proc/PID`` stays)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_"))}
    proc = subprocess.Popen(
        [sys.executable, "-c", EXIT_PROBE, str(checkpoint)],
        env={**env, **env_extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        ended = time.time()
        on_cpu, runnable = schedstat(f"/proc/{proc.pid}/schedstat")
    finally:
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    (before_on_cpu, before_runnable, printed) = re.findall(r"[\d.]+", line)
    wall = ended - float(printed)
    return wall - (on_cpu - int(before_on_cpu) / 1e9) - (runnable - int(before_runnable) / 1e9)


@pytest.fixture(scope="module")
def probe_checkpoint(tmp_path_factory) -> Path:
    import safetensors.torch
    import torch

    path = tmp_path_factory.mktemp("exit-probe") / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(16)}, str(path))
    return path


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_hanging_collector_holds_exit_for_at_most_the_exit_timeout(probe_checkpoint, protocol):
    """A collector that accepts and never answers: the process's exit waits at most LOADTRACE_EXIT_TIMEOUT (1 s) more
    than an untraced one's, from its last line to its end (``exit_wait``)."""
    untraced = exit_wait(probe_checkpoint, {})
    with Collector("hangs") as collector:
        env = {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}
        traced = exit_wait(probe_checkpoint, {"LOADTRACE": "1", **env})
    assert traced - untraced <= EXIT_TIMEOUT_S + 0.5, (traced, untraced)  # plus the exit's own I/O
