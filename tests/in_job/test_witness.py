"""Promise: with LOADTRACE=1 the launcher (torchrun's elastic agent, which `accelerate launch` also uses) outlives its
workers and writes one `loadtrace.rank_exit` span per dead rank into the job's trace: how it ended (signal or exit
code, and whether the OOM killer did it) and its exact last state (loadtrace/instrumentation/witness.py,
hooks/torchelastic.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cgroups import remove_cgroup
from support.span_reference import documented
from support.torchrun import torchrun
from support.venvs import REPO, discover

from loadtrace import semconv, statefile
from loadtrace.instrumentation import witness
from loadtrace.instrumentation.settings import Settings

VENVS = discover()
RANK1_ENV = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "TORCHELASTIC_RESTART_COUNT": "0",
}
DEAD_PID = 4_000_001  # above any pid_max: never a live process


# Exit status and the OOM killer ---------------------------------------------------------------------------------------


def test_oom_kill_is_read_from_v2_memory_events_and_v1_oom_control():
    assert witness.parse_oom_kill("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n") == 2
    assert witness.parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n") == 5
    assert witness.parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n") is None  # kernels before 4.13
    assert witness.parse_oom_kill("oom_kill many\n") is None
    assert witness.parse_oom_kill("") is None


def test_oom_kill_count_of_a_cgroup_directory(tmp_path):
    v2, v1, empty = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    for directory in (v2, v1, empty):
        directory.mkdir()
    (v2 / "memory.events").write_text("oom 1\noom_kill 1\n")
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    assert witness.oom_kill_count(str(v2)) == 1
    assert witness.oom_kill_count(str(v1)) == 4
    assert witness.oom_kill_count(str(empty)) is None
    assert witness.oom_kill_count(str(tmp_path / "gone")) is None
    assert witness.oom_kill_count("") is None


@pytest.mark.parametrize(
    ("exitcode", "before", "now", "verdict"),
    [
        (-9, 0, 1, True),  # SIGKILL and the counter rose: the OOM killer
        (-9, 1, 1, False),  # SIGKILL by someone else
        (-15, 0, 1, False),  # the counter rose for a sibling; this one was terminated
        (1, 0, 1, False),
        (-9, -1, 1, None),  # unreadable when the load began
        (-9, 0, None, None),  # unreadable now
    ],
)
def test_oom_verdict(exitcode, before, now, verdict):
    assert witness.oom_killed(exitcode, before, now) is verdict


def test_exit_description():
    assert witness.exit_description(-9, True) == "SIGKILL (OOM)"
    assert witness.exit_description(-9, False) == "SIGKILL"
    assert witness.exit_description(-9, None) == "SIGKILL"
    assert witness.exit_description(-15, None) == "SIGTERM"
    assert witness.exit_description(1, None) == "exit code 1"
    assert witness.exit_description(None, None) == "exited"
    assert witness.exit_signal(-200) == "signal 200"


# The worker's pointer -------------------------------------------------------------------------------------------------


def test_announce_leaves_an_owner_only_pointer_to_the_state(tmp_path, monkeypatch):
    monkeypatch.setenv(semconv.ENV_WITNESS_DIR, str(tmp_path))
    monkeypatch.chdir(tmp_path)
    witness.announce("traces/rank00001-h-1.state")
    pointer = tmp_path / str(os.getpid())
    assert pointer.read_text() == str(tmp_path / "traces" / "rank00001-h-1.state")
    assert stat.S_IMODE(pointer.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [pointer.name]  # no temporary left


def test_announce_without_a_witness_does_nothing_and_never_raises(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(semconv.ENV_WITNESS_DIR, raising=False)
    witness.announce(str(tmp_path / "s.state"))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(semconv.ENV_WITNESS_DIR, str(tmp_path / "gone"))
    witness.announce(str(tmp_path / "s.state"))  # the directory vanished: one line, no exception
    assert "cannot leave a pointer" in capsys.readouterr().err


# The launcher's side -------------------------------------------------------------------------------------------------


def test_prepare_launch_gives_every_worker_the_launch_id_and_the_witness_dir(monkeypatch):
    monkeypatch.setenv(semconv.ENV_LAUNCH_ID, "")  # unset, and restored after the test
    monkeypatch.setenv(semconv.ENV_WITNESS_DIR, "")
    launcher = witness.Witness()
    envs: dict[int, dict[str, str]] = {0: {"RANK": "0"}, 1: {"RANK": "1"}}
    launcher.prepare_launch(envs)
    launch_id, directory = os.environ[semconv.ENV_LAUNCH_ID], os.environ[semconv.ENV_WITNESS_DIR]
    try:
        assert len(launch_id) == 32 and Path(directory).is_dir()
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert all(env[semconv.ENV_LAUNCH_ID] == launch_id for env in envs.values())
        assert all(env[semconv.ENV_WITNESS_DIR] == directory for env in envs.values())
        restarted: dict[int, dict[str, str]] = {0: {"TORCHELASTIC_RESTART_COUNT": "1"}}
        launcher.prepare_launch(restarted)  # a restart: the same launch, the same directory
        assert restarted[0][semconv.ENV_LAUNCH_ID] == launch_id
        assert restarted[0][semconv.ENV_WITNESS_DIR] == directory
    finally:
        launcher._remove_dir()
    assert not Path(directory).exists()


def write_state(directory: Path, pid: int = DEAD_PID, cgroup: str = "", oom_before: int = -1) -> Path:
    """A rank-1 state as a worker killed in the middle of ``transformers.convert`` leaves it."""
    trace_file = directory / f"rank00001-h-{pid}.jsonl"
    path = directory / f"rank00001-h-{pid}.state"
    identity = {"pid": pid, "rank": 1, "local_rank": 1, "world_size": 2, "local_world_size": 2}
    texts = {
        "job_id": "job-7",
        "launch_id": "launch-abc",
        "host": "node-3",
        "trace_file": str(trace_file),
        "load": semconv.SPAN_FROM_PRETRAINED,
        "phase": semconv.SPAN_CONVERT,
        "strategy": "fsdp_cpu_ram_efficient",
        "cgroup": cgroup,
    }
    state = statefile.Writer(str(path), identity, texts)
    state.add("files_opened", 2)  # an earlier load's share, not counted
    state.new_slot().add(999)
    state.load_started()
    state["loads_open"] = 1
    state["status"] = statefile.STATUS_LOADING
    state["oom_kill_before"] = oom_before
    state["rss_peak"] = 5_000_000
    state["memory_limit"] = 8_000_000
    state["memory_limit_source"] = statefile.LIMIT_CGROUP_V1
    state["cgroup_memory_max"] = 8_000_000
    state["node_memory_total"] = 64_000_000
    state.add("files_opened", 3)
    for nbytes in (100, 200, 300):
        state.new_slot().add(nbytes)
    state.add(statefile.device_column("cpu"), 4096)
    state.add("conversions", 7)
    state.add("conversion_bytes", 700)
    state.close()
    return path


def read_lines(path: Path) -> list[tuple[dict, dict]]:
    """(resource attributes, span) of every span in an OTLP JSON Lines file; attribute values unwrapped."""

    def unwrap(attributes: list[dict]) -> dict:
        return {a["key"]: next(iter(a["value"].values())) for a in attributes}

    found = []
    for line in path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            resource = unwrap(resource_spans["resource"]["attributes"])
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    found.append((resource, {**span, "attributes": unwrap(span.get("attributes", []))}))
    return found


@pytest.fixture
def witness_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "witness"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(semconv.ENV_WITNESS_DIR, str(directory))
    monkeypatch.setenv(semconv.ENV_LAUNCH_ID, "launch-abc")
    return directory


def test_a_dead_rank_becomes_one_rank_exit_span_with_its_exact_last_state(tmp_path, witness_dir):
    traces = tmp_path / "traces"
    traces.mkdir()
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    state_path = write_state(traces, cgroup=str(cgroup), oom_before=0)
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))
    launcher = witness.Witness(Settings(exit_timeout_s=5))

    launcher.witness([witness.Death(DEAD_PID, -signal.SIGKILL, RANK1_ENV)])

    assert not (witness_dir / str(DEAD_PID)).exists(), "the pointer goes once handled"
    (written,) = traces.glob("witness-*.jsonl")
    assert written.name.endswith(f"-{os.getpid()}.jsonl")
    ((resource, span),) = read_lines(written)
    trace_id, root_id = semconv.job_trace_ids("job-7")
    assert span["name"] == semconv.SPAN_RANK_EXIT
    assert span["traceId"] == f"{trace_id:032x}" and span["parentSpanId"] == f"{root_id:016x}"
    assert span["status"] == {"code": 2, "message": "SIGKILL (OOM)"}
    state = statefile.read(state_path)
    assert int(span["startTimeUnixNano"]) == state["load_start_ns"] <= int(span["endTimeUnixNano"])
    assert resource == {
        semconv.SERVICE_NAME: "loadtrace",
        semconv.SERVICE_INSTANCE_ID: "job-7/rank-1",
        semconv.HOST_NAME: "node-3",
        semconv.PROCESS_PID: str(DEAD_PID),
        semconv.LAUNCHER: "torchrun",
        semconv.JOB_ID: "job-7",
        semconv.ATTEMPT: "0",
        semconv.LAUNCH_ID: "launch-abc",
        semconv.VERSION: resource[semconv.VERSION],
        semconv.RANK: "1",
        semconv.LOCAL_RANK: "1",
        semconv.WORLD_SIZE: "2",
        semconv.LOCAL_WORLD_SIZE: "2",
        semconv.NODE_RANK: "0",
    }
    assert span["attributes"] == {
        semconv.EXIT_SIGNAL: "SIGKILL",
        semconv.EXIT_OOM_KILLED: True,
        semconv.EXIT_SOURCE: "launcher",
        semconv.EXIT_STATUS: "loading",
        semconv.EXIT_DURING: semconv.SPAN_CONVERT,
        semconv.EXIT_LOAD: semconv.SPAN_FROM_PRETRAINED,
        semconv.STRATEGY: "fsdp_cpu_ram_efficient",
        semconv.WITNESS_PID: str(os.getpid()),
        semconv.READ_TENSORS: "3",  # this load's share only
        semconv.READ_BYTES: "600",
        semconv.FILES_OPENED: "3",
        semconv.materialized_bytes_key("cpu"): "4096",
        semconv.CONVERT_COUNT: "7",
        semconv.CONVERT_BYTES: "700",
        semconv.HOOK_ERRORS: "0",
        semconv.RSS_PEAK: "5000000",
        semconv.MEMORY_LIMIT: "8000000",
        semconv.MEMORY_LIMIT_SOURCE: "cgroup v1",
        semconv.CGROUP_MEMORY_MAX: "8000000",
        semconv.NODE_MEMORY_TOTAL: "64000000",
    }

    launcher.witness([witness.Death(DEAD_PID, -signal.SIGKILL, RANK1_ENV)])  # seen again: nothing more
    assert len(read_lines(written)) == 1


def test_every_name_the_witness_emits_is_in_the_readme_reference(tmp_path, witness_dir):
    state_path = write_state(tmp_path)
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))
    witness.Witness(Settings(exit_timeout_s=5)).witness([witness.Death(DEAD_PID, 1, RANK1_ENV)])
    ((resource, span),) = read_lines(next(tmp_path.glob("witness-*.jsonl")))
    resource_names, span_names = documented()
    assert span["name"] in span_names, "loadtrace.rank_exit is not in README.md's span table"
    assert [key for key in resource if not resource_names.fullmatch(key)] == []
    assert [key for key in span["attributes"] if not span_names[span["name"]].fullmatch(key)] == []


def test_an_exit_code_and_an_unreadable_cgroup(tmp_path, witness_dir):
    state_path = write_state(tmp_path, cgroup=str(tmp_path / "no-such-cgroup"), oom_before=0)
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))
    witness.Witness(Settings(exit_timeout_s=5)).witness([witness.Death(DEAD_PID, 1, RANK1_ENV)])
    ((_, span),) = read_lines(next(tmp_path.glob("witness-*.jsonl")))
    assert span["status"] == {"code": 2, "message": "exit code 1"}
    assert span["attributes"][semconv.EXIT_CODE] == "1"
    assert semconv.EXIT_SIGNAL not in span["attributes"]
    assert semconv.EXIT_OOM_KILLED not in span["attributes"], "unreadable: absent, not False"


def test_no_state_no_span(tmp_path, witness_dir):
    launcher = witness.Witness(Settings(exit_timeout_s=5))
    launcher.witness([witness.Death(DEAD_PID, -9, RANK1_ENV)])  # no pointer: it never created a state
    never_loaded = statefile.Writer(str(tmp_path / "idle.state"), {"pid": DEAD_PID + 1, "rank": 1}, {"job_id": "j"})
    never_loaded.close()
    (witness_dir / str(DEAD_PID + 1)).write_text(str(tmp_path / "idle.state"))
    launcher.witness([witness.Death(DEAD_PID + 1, -9, RANK1_ENV)])  # a state, but no load ever began
    (witness_dir / str(DEAD_PID + 2)).write_text(str(tmp_path / "missing.state"))
    launcher.witness([witness.Death(DEAD_PID + 2, -9, RANK1_ENV)])  # a pointer to nothing
    assert list(tmp_path.glob("witness-*.jsonl")) == []


def test_a_wrapper_script_between_launcher_and_python_is_matched_by_rank(tmp_path, witness_dir):
    """torchrun --no-python run.sh: the pid the launcher knows is the shell's; the state is the Python's."""
    state_path = write_state(tmp_path)
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))
    witness.Witness(Settings(exit_timeout_s=5)).witness([witness.Death(DEAD_PID + 5, -9, RANK1_ENV)])
    ((resource, span),) = read_lines(next(tmp_path.glob("witness-*.jsonl")))
    assert resource[semconv.PROCESS_PID] == str(DEAD_PID) and span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_rank_exits_go_over_otlp_too(tmp_path, witness_dir, monkeypatch, protocol):
    from support.wire import GrpcReceiver, HttpReceiver, wire_spans

    state_path = write_state(tmp_path)
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))
    with (HttpReceiver if protocol == "http/protobuf" else GrpcReceiver)() as receiver:
        endpoint = f"http://127.0.0.1:{receiver.port}"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)  # the exporter reads it itself
        settings = Settings(exit_timeout_s=10, otlp_endpoint=endpoint, otlp_protocol=protocol, trace_dir=str(tmp_path))
        witness.Witness(settings).witness([witness.Death(DEAD_PID, -9, RANK1_ENV)])
        (span,) = wire_spans(receiver.received.arrivals)
    trace_id, root_id = semconv.job_trace_ids("job-7")
    assert (span.name, span.trace_id, span.parent_span_id) == (
        semconv.SPAN_RANK_EXIT,
        f"{trace_id:032x}",
        f"{root_id:016x}",
    )
    assert span.resource[semconv.SERVICE_INSTANCE_ID] == "job-7/rank-1" and span.status_code == 2
    assert span.attributes[semconv.READ_BYTES] == 600 and span.attributes[semconv.EXIT_SIGNAL] == "SIGKILL"
    assert len(read_lines(next(tmp_path.glob("witness-*.jsonl")))) == 1, "and to the file, as LOADTRACE_DIR is set"


def test_a_hanging_collector_holds_the_launcher_for_at_most_the_exit_timeout(tmp_path, witness_dir, monkeypatch):
    import socket

    server = socket.socket()  # accepts connections, never answers
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    try:
        state_path = write_state(tmp_path)
        (witness_dir / str(DEAD_PID)).write_text(str(state_path))
        launcher = witness.Witness(Settings(exit_timeout_s=0.5, otlp_endpoint=endpoint, trace_dir=str(tmp_path)))
        started = time.monotonic()
        launcher.witness([witness.Death(DEAD_PID, -9, RANK1_ENV)])
        assert time.monotonic() - started < 3
        assert len(read_lines(next(tmp_path.glob("witness-*.jsonl")))) == 1, "the file is written all the same"
    finally:
        server.close()


# A real memory cgroup (v1, as root) ---------------------------------------------------------------------------------

V1_MEMORY = Path("/sys/fs/cgroup/memory")


def test_the_oom_killer_is_told_apart_in_a_real_memory_cgroup(tmp_path):
    if os.geteuid() != 0 or not (V1_MEMORY / "memory.oom_control").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    cgroup = V1_MEMORY / f"loadtrace-test-{os.getpid()}"
    try:
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(64 * 1024 * 1024))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    try:
        before = witness.oom_kill_count(str(cgroup))
        assert before is not None
        hog = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read(1); x = [bytearray(1 << 20) for _ in range(4096)]"],
            stdin=subprocess.PIPE,
        )
        (cgroup / "cgroup.procs").write_text(str(hog.pid))
        hog.communicate(b"g", timeout=60)
        now = witness.oom_kill_count(str(cgroup))
        if hog.returncode != -signal.SIGKILL:
            pytest.skip(f"this kernel did not OOM-kill in a 64 MB cgroup (exit {hog.returncode}, oom_kill {now})")
        assert witness.oom_killed(hog.returncode, before, now) is True
        assert witness.exit_description(hog.returncode, True) == "SIGKILL (OOM)"
        assert witness.oom_killed(hog.returncode, now, witness.oom_kill_count(str(cgroup))) is False
    finally:
        remove_cgroup(cgroup)


# A real torchrun -----------------------------------------------------------------------------------------------------


def worker_writes_state() -> bool:
    """Whether the installed loadtrace's workers keep and announce their own state file (issue 11's worker side)."""
    package = Path(witness.__file__).parent
    return any("announce(" in p.read_text() for p in package.rglob("*.py") if p.name != "witness.py")


def witnessed_run(checkpoint: Path, cwd: Path, traced: bool = True, oom_cgroup: Path | None = None):
    """One torchrun of the witnessed worker, with TMPDIR inside ``cwd`` (to see the witness directory go)."""
    tmp = cwd / "tmp"
    tmp.mkdir(parents=True)
    env = {"HF_DEACTIVATE_ASYNC_LOAD": "1", "TMPDIR": str(tmp), **({"LOADTRACE": "1"} if traced else {})}
    args = [str(checkpoint), "--out", str(cwd), *([] if worker_writes_state() else ["--own-state"])]
    if oom_cgroup is not None:
        args += ["--oom-cgroup", str(oom_cgroup)]
    return torchrun(VENVS[0], REPO / "tests" / "workers" / "witnessed_load.py", args, cwd=cwd, env=env, timeout_s=300)


def rank_exit_of_rank1(run) -> tuple[Path, dict, dict]:
    """(the job's trace directory, resource, span) of rank 1's ``loadtrace.rank_exit``: exactly one."""
    (job_dir,) = (run.cwd / "loadtrace-traces").iterdir()
    (witness_file,) = job_dir.glob("witness-*.jsonl")
    exits = [(r, s) for r, s in read_lines(witness_file) if s["name"] == semconv.SPAN_RANK_EXIT]
    ((resource, span),) = [(r, s) for r, s in exits if r[semconv.RANK] == "1"]
    return job_dir, resource, span


@pytest.mark.integration
@pytest.mark.skipif(not VENVS, reason="no venv with torchrun and transformers")
def test_torchrun_witnesses_a_rank_killed_in_the_middle_of_its_load(checkpoint, tmp_path):
    untraced = witnessed_run(checkpoint, tmp_path / "untraced", traced=False)
    run = witnessed_run(checkpoint, tmp_path / "traced")
    assert untraced.returncode != 0, untraced.tail()
    assert run.returncode == untraced.returncode, "the witness leaves torchrun's exit code alone\n" + run.tail()
    said = [line for line in run.log.read_text().splitlines() if "loadtrace:" in line]
    assert not [line for line in said if any(w in line for w in ("witness", "exits", "pointer"))], said

    count = json.loads((run.cwd / "count-rank1.json").read_text())  # rank 1's own count, just before the kill
    assert count["read_bytes"] > 0
    job_dir, resource, span = rank_exit_of_rank1(run)
    (state_path,) = job_dir.glob("rank00001-*.state")
    state = statefile.read(state_path)
    assert state is not None and state.totals()["read_bytes"] == count["read_bytes"]

    trace_id, root_id = semconv.job_trace_ids(job_dir.name)
    assert span["traceId"] == f"{trace_id:032x}" and span["parentSpanId"] == f"{root_id:016x}"
    assert span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"
    assert span["attributes"][semconv.EXIT_SOURCE] == "launcher"
    assert span["attributes"][semconv.READ_BYTES] == str(count["read_bytes"])
    assert span["attributes"][semconv.EXIT_DURING] == semconv.SPAN_CONVERT
    assert span["status"] == {"code": 2, "message": "SIGKILL"}
    assert resource[semconv.PROCESS_PID] == str(state["pid"])
    assert resource[semconv.LAUNCH_ID] == state.texts["launch_id"] != ""
    assert span["attributes"][semconv.WITNESS_PID] != resource[semconv.PROCESS_PID]
    assert not list((run.cwd / "tmp").glob("loadtrace-witness-*")), "the launcher removes its witness directory"
    shutil.rmtree(run.cwd / "tmp", ignore_errors=True)


@pytest.mark.integration
@pytest.mark.skipif(not VENVS, reason="no venv with torchrun and transformers")
def test_torchrun_tells_the_oom_killer_apart(checkpoint, tmp_path):
    """Rank 1 in a real memory cgroup (v1, as root) allocates until the kernel's OOM killer takes it."""
    if os.geteuid() != 0 or not (V1_MEMORY / "memory.oom_control").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    cgroup = V1_MEMORY / f"loadtrace-witness-test-{os.getpid()}"
    try:
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(256 * 1024 * 1024))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    try:
        run = witnessed_run(checkpoint, tmp_path / "oom", oom_cgroup=cgroup)
        assert run.returncode != 0, run.tail()
        assert "exitcode  : -9" in run.log.read_text(), run.tail()
        _, resource, span = rank_exit_of_rank1(run)
        assert span["attributes"][semconv.EXIT_SIGNAL] == "SIGKILL"
        assert span["attributes"][semconv.EXIT_OOM_KILLED] is True
        assert span["status"] == {"code": 2, "message": "SIGKILL (OOM)"}
    finally:
        remove_cgroup(cgroup)
