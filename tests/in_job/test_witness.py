"""Promise: with LOADTRACE=1 the launcher (torchrun's elastic agent, which `accelerate launch` also uses) outlives its
workers and writes one `loadtrace.rank_exit` span per dead rank into the job's trace: how it ended (signal or exit
code, and whether the OOM killer did it) and its exact last state (loadtrace/instrumentation/beside/witness.py,
hooks/torchelastic.py)."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest
from support.otlp_files import read_lines
from support.span_reference import documented
from support.witnessing import DEAD_PID, RANK1_ENV

from loadtrace import semconv, statefile
from loadtrace.instrumentation.beside import witness
from loadtrace.instrumentation.settings import Settings


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
    trace_id = semconv.job_trace_ids("job-7")[0]
    group = semconv.rank_group_id("job-7", 1)  # under rank 1's group, as its own spans
    assert span["name"] == semconv.SPAN_RANK_EXIT
    assert span["traceId"] == f"{trace_id:032x}" and span["parentSpanId"] == f"{group:016x}"
    assert span["status"] == {"code": 2, "message": "SIGKILL (OOM)"}
    state = statefile.read(state_path)
    assert int(span["startTimeUnixNano"]) == state.load_start_ns <= int(span["endTimeUnixNano"])
    assert resource == {
        semconv.SERVICE_NAME: "loadtrace rank 1",
        semconv.SERVICE_NAMESPACE: "loadtrace",
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
        semconv.RANK: "1",
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


def test_every_name_the_witness_emits_is_in_the_span_reference(tmp_path, witness_dir):
    state_path = write_state(tmp_path)
    (witness_dir / str(DEAD_PID)).write_text(str(state_path))
    witness.Witness(Settings(exit_timeout_s=5)).witness([witness.Death(DEAD_PID, 1, RANK1_ENV)])
    ((resource, span),) = read_lines(next(tmp_path.glob("witness-*.jsonl")))
    resource_names, span_names = documented()
    assert span["name"] in span_names, "loadtrace.rank_exit is not in docs/reference.md's span table"
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
    trace_id, group = semconv.job_trace_ids("job-7")[0], semconv.rank_group_id("job-7", 1)
    assert (span.name, span.trace_id, span.parent_span_id) == (
        semconv.SPAN_RANK_EXIT,
        f"{trace_id:032x}",
        f"{group:016x}",
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
