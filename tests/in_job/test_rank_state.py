"""Promise: every process that loads keeps its exact running totals and what it is doing in a state file (statefile.py)
that the kernel keeps if it dies: tensors and bytes counted into per-file read slots (the same numbers the spans
carry), its status, load and phase, its memory limit from the load's start, which attempt of which launch it is, and
why its load failed; a process that finished says so. The per-tensor path costs no more than the list append it
replaced (see the module docstring of loadtrace/instrumentation/hooks/safetensors.py)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
import safetensors
import safetensors.torch
import torch
from support.inmemory import traced
from support.paths import WORKERS

import loadtrace
from loadtrace import semconv, statefile
from loadtrace.instrumentation import context, settings
from loadtrace.instrumentation.counting import attributes, memory
from loadtrace.instrumentation.tracing import spans

sys.path.insert(0, str(WORKERS))

from count_load import Counter  # noqa: E402  (an independent count, knowing nothing of loadtrace)


def state() -> statefile.Writer:
    tracing = spans.tracing()
    assert tracing is not None and tracing.state is not None
    return tracing.state


def test_slot_counts_equal_an_independent_count_on_a_real_load(tiny_checkpoint):
    """transformers reads from a thread pool: every file's slot and the load's totals equal a count made outside."""
    from transformers import AutoModelForCausalLM

    path, summary = tiny_checkpoint
    with traced() as t:
        with Counter() as counts:
            AutoModelForCausalLM.from_pretrained(path)
        totals = statefile.read(state().path) if state().path else None
        load = t.one(semconv.SPAN_FROM_PRETRAINED)
        files = t.spans(semconv.SPAN_SAFETENSORS_OPEN)
    counted = counts.as_dict()
    by_file = {os.path.basename(f.attributes[semconv.FILE_PATH]): f.attributes for f in files}
    assert by_file and set(by_file) == set(counted["files"])
    for name, entry in counted["files"].items():
        assert (by_file[name][semconv.READ_TENSORS], by_file[name][semconv.READ_BYTES]) == (
            entry["tensors"],
            entry["bytes"],
        )
    assert load.attributes[semconv.READ_TENSORS] == counted["read_tensors"] == summary["tensors"]
    assert load.attributes[semconv.READ_BYTES] == counted["read_bytes"] == summary["bytes"]
    assert totals is not None, "the in-memory tests still keep a state file (in the temporary directory)"
    assert totals.totals().read_bytes == summary["bytes"] and totals.totals().files_opened == len(files)
    assert totals.totals().conversions == t.one(semconv.SPAN_CONVERT).attributes[semconv.CONVERT_COUNT]


def test_a_slot_is_exact_when_threads_count_into_it_at_once():
    """The statefile's claim, checked: ``+=`` on the mapped slot loses nothing under the GIL (a lock without one)."""
    writer = statefile.Writer(None, {}, {})
    slot = writer.new_slot()
    reference: list[int] = []

    def count(nbytes: int) -> None:
        counts = slot.counts
        for _ in range(20_000):
            counts[0] += 1
            counts[1] += nbytes
            reference.append(nbytes)

    threads = [threading.Thread(target=count, args=(n,)) for n in range(1, 9)]
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    assert (slot.tensors, slot.bytes) == (len(reference), sum(reference))


def test_every_way_of_reading_counts_into_its_file(tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"a": torch.ones(16), "b": torch.zeros(4, 4, dtype=torch.float16)}, str(path))
    torch.save(
        {"x": torch.ones(8), "nested": [torch.zeros(2), {"y": torch.ones(3, dtype=torch.int64)}]}, tmp_path / "p"
    )
    with traced() as t:
        with loadtrace.traced_load("all"):
            with safetensors.safe_open(str(path), framework="pt") as f:
                f.get_tensor("a")
                f.get_slice("b")[:2]
            with safetensors.safe_open(str(path), framework="pt") as f:
                f.get_tensors()
            torch.load(tmp_path / "p")
            safetensors.torch.load(path.read_bytes())
    reads = [
        (s.name, s.attributes[semconv.READ_TENSORS], s.attributes[semconv.READ_BYTES])
        for s in t.spans()
        if s.name != semconv.SPAN_STARTUP
    ]
    assert reads[:4] == [
        (semconv.SPAN_SAFETENSORS_OPEN, 2, 64 + 16),
        (semconv.SPAN_SAFETENSORS_OPEN, 2, 64 + 32),
        (semconv.SPAN_TORCH_LOAD, 3, 32 + 8 + 24),
        (semconv.SPAN_SAFETENSORS_LOAD, 2, 64 + 32),
    ]
    (load,) = [s for s in t.spans() if s.name == semconv.SPAN_LOAD]
    assert load.attributes[semconv.READ_TENSORS] == 9 and load.attributes[semconv.READ_BYTES] == 80 + 96 + 64 + 96
    # Files opened, each once however often: w.safetensors (opened twice, and read whole for safetensors.torch.load,
    # which knows the file its bytes came from) and p.
    assert load.attributes[semconv.FILES_OPENED] == 2


def test_per_tensor_detail_counts_the_same(tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"a": torch.ones(16), "b": torch.zeros(8)}, str(path))
    with traced(detail="tensor") as t:
        with safetensors.safe_open(str(path), framework="pt") as f:
            f.get_tensor("a")
            f.get_slice("b")[:]
    file = t.one(semconv.SPAN_SAFETENSORS_OPEN)
    assert (file.attributes[semconv.READ_TENSORS], file.attributes[semconv.READ_BYTES]) == (2, 96)
    assert [s.attributes[semconv.READ_BYTES] for s in t.spans(semconv.SPAN_SAFETENSORS_READ)] == [64, 32]


def test_the_state_follows_loads_and_phases(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    path, _ = tiny_checkpoint
    seen: dict[str, object] = {}
    with traced():
        import transformers.modeling_utils as modeling_utils

        original = modeling_utils.PreTrainedModel._move_missing_keys_from_meta_to_device

        def look(self, *args, **kwargs):
            current = state()
            seen.update(
                status=current["status"],
                loads_open=current["loads_open"],
                phase=current.text("phase"),
                load=current.text("load"),
                strategy=current.text("strategy"),
            )
            return original(self, *args, **kwargs)

        with loadtrace.traced_load("outer"):
            modeling_utils.PreTrainedModel._move_missing_keys_from_meta_to_device = look
            try:
                AutoModelForCausalLM.from_pretrained(path)
            finally:
                modeling_utils.PreTrainedModel._move_missing_keys_from_meta_to_device = original
            assert state().text("phase") == semconv.SPAN_LOAD and state()["loads_open"] == 1
        after = state()
        assert after["status"] == statefile.STATUS_IDLE and after["loads_open"] == 0 and after.text("phase") == ""
        assert after.text("load") == semconv.SPAN_LOAD, "the last outermost load, whose totals the state keeps"
    assert seen == {
        "status": statefile.STATUS_LOADING,
        "loads_open": 2,
        "phase": semconv.SPAN_FROM_PRETRAINED,  # look() stands in for a hooked method: no phase of its own is open
        "load": semconv.SPAN_LOAD,
        "strategy": semconv.STRATEGY_PLAIN,
    }


def test_materialisation_and_faults_are_counted_in_the_state():
    with traced():
        with loadtrace.traced_load("m"):
            torch.zeros_like(torch.ones(10), device="cpu")
            torch.empty_like(torch.ones(4), device="meta")
            spans.tracing().record_fault("test")
        totals = statefile.read(state().path).totals() if state().path else None
    assert totals is not None
    assert (totals.materialized_cpu, totals.materialized_meta, totals.hook_errors) == (40, 16, 1)


def test_a_failed_load_says_why_and_the_exception_goes_on_unchanged(tmp_path):
    from transformers import Qwen3MoeForCausalLM

    raised = ValueError("mine")
    with traced() as t:
        with pytest.raises(ValueError) as caught:
            with loadtrace.traced_load("custom"):
                raise raised
        assert caught.value is raised
        assert state().text("failure") == "ValueError"
        with pytest.raises(OSError):
            Qwen3MoeForCausalLM.from_pretrained(tmp_path / "no-such-checkpoint")
        failure = state().text("failure")
        assert state()["status"] == statefile.STATUS_IDLE
    custom, pretrained = t.spans(semconv.SPAN_LOAD)[0], t.one(semconv.SPAN_FROM_PRETRAINED)
    assert custom.attributes[semconv.ERROR_TYPE] == "ValueError" and custom.status.status_code.name == "ERROR"
    assert pretrained.attributes[semconv.ERROR_TYPE] == failure != ""
    assert pretrained.status.status_code.name == "ERROR"


def test_a_load_that_succeeds_carries_no_error_type(tmp_path):
    with traced() as t:
        with loadtrace.traced_load("fine"):
            pass
    assert semconv.ERROR_TYPE not in t.one(semconv.SPAN_LOAD).attributes


def test_attempt_and_launch_id_come_through_settings():
    assert settings.from_env({}).attempt == 0 and settings.from_env({}).launch_id is None
    assert settings.from_env({"TORCHELASTIC_RESTART_COUNT": "2", "SLURM_RESTART_COUNT": "5"}).attempt == 2
    assert settings.from_env({"SLURM_RESTART_COUNT": "5"}).attempt == 5
    assert settings.from_env({semconv.ENV_LAUNCH_ID: "abc"}).launch_id == "abc"
    job = context.Job("j")
    resource = context.resource_attributes(job, None, "v", attempt=3, launch_id="abc")
    assert resource[semconv.ATTEMPT] == 3 and resource[semconv.LAUNCH_ID] == "abc"
    assert semconv.LAUNCH_ID not in context.resource_attributes(job, None, "v")


def test_a_bad_restart_count_is_said_once_and_taken_as_zero(capsys):
    assert settings.from_env({"TORCHELASTIC_RESTART_COUNT": "many"}).attempt == 0
    assert "TORCHELASTIC_RESTART_COUNT='many' is not a count" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("found", "limit"),
    [
        (memory.Limits(node_total=100, cgroup_max=40, cgroup_version=1), (40, "cgroup v1")),
        (memory.Limits(node_total=100, cgroup_max=40, cgroup_version=2), (40, "cgroup v2")),
        (memory.Limits(node_total=100, cgroup_max=400, cgroup_version=2), (100, "node")),
        (memory.Limits(node_total=100, cgroup_max=None, cgroup_version=1), (100, "node")),
        (memory.Limits(), (0, None)),
    ],
)
def test_the_memory_limit_is_the_lower_of_cgroup_and_node(found, limit):
    bytes_, source = found.limit
    assert (bytes_, statefile.LIMIT_SOURCES[source]) == limit
    expected = {semconv.MEMORY_LIMIT: limit[0], semconv.MEMORY_LIMIT_SOURCE: limit[1]} if limit[0] else {}
    assert attributes.memory_limit(found) == expected


def this_process_cgroup(monkeypatch, folder: Path, version: int, files: dict[str, str]) -> str:
    """A cgroup directory of ``version`` holding ``files``, taken as this process's."""
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    monkeypatch.setattr(memory, "_cgroup_dir", lambda: (str(folder), version))
    monkeypatch.setattr(memory, "_cgroup_files", None)  # found once per process: here, once per directory
    return str(folder)


def test_cgroup_version_and_directory_are_learnt(tmp_path, monkeypatch):
    v2 = this_process_cgroup(
        monkeypatch,
        tmp_path / "v2",
        2,
        {"memory.current": "10\n", "memory.max": "1000\n", "memory.events": "oom 0\noom_kill 3\n"},
    )
    found = memory.limits()
    assert (found.cgroup_version, found.cgroup_dir, found.cgroup_max) == (2, v2, 1000)
    assert memory.oom_kill_count(found.cgroup_dir) == 3
    # v1's "unlimited" is a number near 2**63
    this_process_cgroup(
        monkeypatch, tmp_path / "v1", 1, {"memory.usage_in_bytes": "10\n", "memory.limit_in_bytes": str(1 << 62)}
    )
    found = memory.limits()
    assert (found.cgroup_version, found.cgroup_max, found.limit[1]) == (1, None, statefile.LIMIT_NODE)


def test_the_limit_is_on_the_load_span_and_in_the_state_from_its_start(tmp_path, monkeypatch):
    v1 = {
        "memory.usage_in_bytes": "10\n",
        "memory.limit_in_bytes": "4096\n",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n",
    }
    cgroup = this_process_cgroup(monkeypatch, tmp_path / "cg", 1, v1)
    with traced() as t:
        with loadtrace.traced_load("limited"):
            current = state()
            assert (current["memory_limit"], current["memory_limit_source"]) == (4096, statefile.LIMIT_CGROUP_V1)
            assert current["cgroup_memory_max"] == 4096 and current["node_memory_total"] > 0
            assert current.text("cgroup") == cgroup and current["oom_kill_before"] == 7
    load = t.one(semconv.SPAN_LOAD)
    assert load.attributes[semconv.MEMORY_LIMIT] == 4096
    assert load.attributes[semconv.MEMORY_LIMIT_SOURCE] == "cgroup v1"
