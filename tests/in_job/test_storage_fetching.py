"""Promise (issue 48): a load says what its process fetched from storage and when those bytes moved.

``counting/fetching.py`` turns readings of ``/proc/self/io`` ``read_bytes`` (the load's start and end, the monitor's
samples between) into the stretches in which the count rose, continued while a thread still waits on storage (the
kernel counts a read when it asks the disk, not when the bytes arrive). Here with readings made up, then on a real
process: what its kernel counted against its load span, and the state file a rank that dies leaves to its launcher's
witness, whose span carries the same figures.
"""

from __future__ import annotations

import dataclasses
import os

from support.inmemory import traced

import loadtrace
from loadtrace import semconv as sc
from loadtrace import statefile
from loadtrace.instrumentation.beside import witness
from loadtrace.instrumentation.counting.fetching import MAX_INTERVALS, Fetching
from loadtrace.instrumentation.counting.memory import Memory, process_memory, waiting_on_storage
from loadtrace.startup_split import pairs


def at(ns: int, read: int) -> Memory:
    return Memory(storage_read=read, at_ns=ns)


def test_stretches_are_where_the_count_rose_joined_and_clipped_to_a_load():
    seen = []
    fetching = Fetching(at(0, 100), lambda *change: seen.append(change))
    for ns, read in ((10, 100), (20, 200), (30, 300), (40, 300), (50, 400)):
        fetching.sample(at(ns, read))
    fetching.sample(at(35, 250))  # taken before the last one applied: already in it
    assert fetching.intervals == [(10, 30), (40, 50)]
    assert fetching.between(15, 45) == [(15, 30), (40, 45)]
    assert seen[0] == (100, 100, 0, []) and seen[-1] == (100, 400, 50, [(10, 30), (40, 50)])


def test_a_run_goes_on_while_a_thread_still_waits_for_what_it_asked_but_a_wait_alone_starts_none():
    fetching = Fetching(at(0, 0))
    fetching.sample(at(10, 0), waiting=lambda: True)  # a thread in D state, nothing asked of the disk: not fetching
    fetching.sample(at(20, 8 << 20), waiting=lambda: True)  # 8 MB asked at once (readahead)
    fetching.sample(at(30, 8 << 20), waiting=lambda: True)  # still arriving
    fetching.sample(at(40, 8 << 20), waiting=lambda: False)  # arrived
    fetching.sample(at(50, 8 << 20), waiting=lambda: True)  # a later wait, on something else
    assert fetching.intervals == [(10, 30)]


def test_past_its_most_the_shortest_gaps_close():
    """A rise at every other reading, 65 stretches: at most 64 kept, covering every one (time only grows)."""
    fetching = Fetching(at(0, 0))
    for step in range(1, 2 * MAX_INTERVALS + 3):
        fetching.sample(at(10 * step + step % 3, step * (step % 2)))
    kept = fetching.intervals
    assert len(kept) <= MAX_INTERVALS and kept == sorted(kept) and all(s < e for s, e in kept)
    assert (kept[0][0], kept[-1][1]) == (0, 10 * 129)


def test_the_process_is_not_waiting_on_storage_while_it_runs_this():
    assert waiting_on_storage() is False  # this thread runs; the others of a test process wait on locks (S), not D


def test_a_real_load_carries_its_own_count_and_its_stretches(tmp_path):
    path = tmp_path / "model.safetensors"
    import safetensors.torch
    import torch

    safetensors.torch.save_file({"w": torch.ones(1 << 16)}, str(path))
    before = process_memory().storage_read
    with traced() as t:
        with loadtrace.traced_load("model"):
            with safetensors.safe_open(str(path), "pt") as handle:
                handle.get_tensor("w")
    after = process_memory().storage_read
    load = t.one(sc.SPAN_LOAD)
    assert 0 <= load.attributes[sc.IO_STORAGE_READ_BYTES] <= after - before
    stretches = pairs(load.attributes[sc.IO_STORAGE_READ_INTERVALS])
    assert stretches is not None and all(load.start_time <= s < e <= load.end_time for s, e in stretches)
    assert bool(stretches) == (load.attributes[sc.IO_STORAGE_READ_BYTES] > 0)


def test_a_dead_rank_s_state_tells_its_witness_what_it_had_fetched_by_its_last_reading(tmp_path):
    path = tmp_path / "rank00001-h-1.state"
    writer = statefile.Writer(str(path), {"pid": os.getpid(), "rank": 1}, {})
    writer.load_started()
    fetching = Fetching(at(1_000, 5_000), writer.fetched)
    fetching.sample(at(2_000, 9_000))
    fetching.sample(at(3_000, 12_000))
    writer.close()
    state = statefile.read(path)
    assert state is not None
    assert (state.storage_read_load_start, state.storage_read_now, state.storage_sampled_ns) == (5_000, 12_000, 3_000)
    assert state.storage_intervals == [(1_000, 3_000)]
    attributes = witness.span_attributes(state, -9, None, 1)
    assert attributes[sc.IO_STORAGE_READ_BYTES] == 7_000
    assert attributes[sc.IO_STORAGE_READ_INTERVALS] == [1_000, 3_000]
    assert attributes[sc.IO_STORAGE_READ_AS_OF] == 3_000
    # A state an older loadtrace wrote (zeros there): nothing said, never a made-up 0.
    older = witness.span_attributes(dataclasses.replace(state, storage_sampled_ns=0), -9, None, 1)
    assert not {sc.IO_STORAGE_READ_BYTES, sc.IO_STORAGE_READ_INTERVALS, sc.IO_STORAGE_READ_AS_OF} & set(older)
