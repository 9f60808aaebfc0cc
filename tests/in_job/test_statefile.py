"""Promise: a rank's running totals are exact at the moment of a SIGKILL (loadtrace/statefile.py), counted from many
threads at once without a lock, and a file that is truncated, corrupt or foreign is refused, never misread."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from loadtrace import statefile


def _writer(path, **identity):
    return statefile.Writer(str(path), {"pid": os.getpid(), **identity}, {"job_id": "job-1", "host": "h"})


def test_counts_survive_sigkill_exactly(tmp_path):
    path = tmp_path / "rank1.state"
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        state = _writer(path, rank=1, world_size=2)
        state.load_started()
        state["status"] = statefile.STATUS_LOADING
        state.set_text("phase", "transformers.convert")
        slots = [state.new_slot() for _ in range(300)]  # crosses a chunk boundary
        for i, slot in enumerate(slots):
            slot.add(1000 + i)
        state.add("materialized_cpu", 4096)
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    found = statefile.read(path)
    assert found is not None
    assert found.rank == 1 and found.status == "loading" and found.phase == "transformers.convert"
    totals = found.totals()
    assert totals.tensors_read == 300
    assert totals.read_bytes == sum(1000 + i for i in range(300))
    assert found.materialized() == {"cpu": 4096}


def test_threads_count_without_a_lock(tmp_path):
    state = _writer(tmp_path / "s.state")
    slot = state.new_slot()

    def read_many():
        for _ in range(100_000):
            counts = slot.counts
            counts[0] += 1
            counts[1] += 3

    threads = [threading.Thread(target=read_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (slot.tensors, slot.bytes) == (400_000, 1_200_000)
    assert statefile.read(tmp_path / "s.state").totals(since_load=False).read_bytes == 1_200_000


def test_open_load_is_counted_apart_from_earlier_loads(tmp_path):
    state = _writer(tmp_path / "s.state")
    state.load_started()
    state.new_slot().add(10)
    state.add("conversions", 2)
    state.load_started()  # the second model
    state.new_slot().add(7)
    state.add("conversions", 1)
    found = statefile.read(tmp_path / "s.state")
    assert found.totals().read_bytes == 7 and found.totals().conversions == 1
    assert found.totals(since_load=False).read_bytes == 17


def test_anonymous_state_needs_no_disk():
    state = statefile.Writer(None, {"pid": 1}, {})
    state.new_slot().add(5)
    assert state["slots_used"] == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:100],  # truncated inside the header
        lambda data: b"XXXXXXXX" + data[8:],  # foreign magic
        lambda data: data[:8] + (99).to_bytes(8, "little") + data[16:],  # an unknown version
        lambda data: b"",
        lambda data: _negative(data, statefile.HEADER_BYTES + 8),  # the first slot's bytes
        lambda data: _negative(data, statefile.HEADER_BYTES + 16 * 255),  # the last slot's tensors, never handed out
        lambda data: _negative(data, 8 + 8 * statefile.INDEX["hook_errors"]),  # a counter
    ],
)
def test_damaged_files_are_refused(tmp_path, damage):
    path = tmp_path / "s.state"
    state = _writer(path)
    state.new_slot().add(5)
    path.write_bytes(damage(path.read_bytes()))
    assert statefile.read(path) is None


def _negative(data: bytes, offset: int) -> bytes:
    """A count no writer makes: -1 at ``offset``."""
    return data[:offset] + (-1).to_bytes(8, "little", signed=True) + data[offset + 8 :]


def test_a_truncated_slot_chunk_keeps_the_whole_slots(tmp_path):
    path = tmp_path / "s.state"
    state = _writer(path)
    state.new_slot().add(5)
    state.new_slot().add(6)
    data = path.read_bytes()
    path.write_bytes(data[: statefile.HEADER_BYTES + 24])  # the second slot cut in half
    found = statefile.read(path)
    assert found is not None and found.totals(since_load=False).read_bytes == 5


def test_texts_are_cut_to_their_field(tmp_path):
    state = _writer(tmp_path / "s.state")
    state.set_text("phase", "x" * 500)
    assert state.text("phase") == "x" * 95
