"""Promise (issue 49): weights read with no load around them (a bare ``safe_open``, ``load_file``,
``safetensors.torch.load(f.read())``, ``torch.load``) make a load of their own, from the first read to the last,
whatever the thread; a burst of reads after an idle gap is another load; an ``open()`` of a ``.safetensors`` file
whose bytes are never loaded is no load (tracing/loose.py)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import safetensors
import safetensors.torch
import torch
from support.inmemory import traced

import loadtrace
from loadtrace import semconv as sc

IDLE_S = 0.2


@pytest.fixture
def files(tmp_path):
    paths = []
    for index in range(4):
        path = tmp_path / f"model-{index}.safetensors"
        safetensors.torch.save_file({f"w{index}": torch.ones(16, 16)}, str(path))  # 1,024 B each
        paths.append(str(path))
    return paths


def loose_loads(t):
    return [s for s in t.spans(sc.SPAN_LOAD) if s.attributes.get(sc.LOAD_NAME) == sc.LOAD_NAME_READS]


def wait_for_loads(t, count: int) -> list:
    deadline = time.monotonic() + 5
    while len(loose_loads(t)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return loose_loads(t)


def test_a_thread_pool_of_load_file_is_one_load_ending_at_its_last_file(files):
    with traced(load_idle_s=IDLE_S) as t:
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(safetensors.torch.load_file, files))
        (load,) = wait_for_loads(t, 1)
    opened = t.spans(sc.SPAN_SAFETENSORS_OPEN)
    assert len(opened) == 4 and {s.parent.span_id for s in opened} == {load.context.span_id}
    assert load.attributes[sc.READ_BYTES] == sum(t.nbytes for r in results for t in r.values()) == 4096
    assert load.attributes[sc.FILES_OPENED] == 4
    assert load.start_time <= min(s.start_time for s in opened) and load.end_time == max(s.end_time for s in opened)


def test_reads_after_an_idle_gap_are_a_load_of_their_own(files):
    with traced(load_idle_s=IDLE_S) as t:
        safetensors.torch.load_file(files[0])
        time.sleep(IDLE_S * 3)
        with safetensors.safe_open(files[1], framework="pt") as handle:
            handle.get_tensor("w1")
        first, second = wait_for_loads(t, 2)
    assert first.end_time < second.start_time
    assert first.attributes[sc.READ_BYTES] == second.attributes[sc.READ_BYTES] == 1024


def test_bytes_loaded_from_a_file_name_it_and_what_the_page_cache_held(files):
    with traced(load_idle_s=IDLE_S) as t:
        with open(files[2], "rb") as handle:
            tensors = safetensors.torch.load(handle.read())
        (load,) = wait_for_loads(t, 1)
    span = t.one(sc.SPAN_SAFETENSORS_LOAD)
    assert span.attributes[sc.FILE_PATH] == files[2]
    assert isinstance(span.attributes[sc.FILE_CACHED_BYTES_AT_OPEN], int)
    assert span.attributes[sc.READ_BYTES] == tensors["w2"].nbytes and span.parent.span_id == load.context.span_id
    assert span.start_time >= load.start_time


def test_bytes_from_elsewhere_stay_bytes_and_an_unloaded_open_is_no_load(files):
    with traced(load_idle_s=IDLE_S) as t:
        with open(files[3], "rb") as handle:
            handle.read(8)  # a header read, a hash: no weights loaded
        data = safetensors.torch.save({"x": torch.zeros(4)})
        safetensors.torch.load(data)  # bytes made in memory: no file
        (load,) = wait_for_loads(t, 1)
    span = t.one(sc.SPAN_SAFETENSORS_LOAD)
    assert sc.FILE_PATH not in span.attributes and load.attributes[sc.FILES_OPENED] == 1
    del handle


def test_a_load_the_job_opens_ends_the_reads_before_it(files):
    with traced(load_idle_s=60) as t:
        safetensors.torch.load_file(files[0])
        with loadtrace.traced_load("mine"):
            safetensors.torch.load_file(files[1])
        (loose,) = loose_loads(t)
        mine = [s for s in t.spans(sc.SPAN_LOAD) if s.attributes.get(sc.LOAD_NAME) == "mine"]
    assert loose.end_time <= mine[0].start_time and loose.attributes[sc.READ_BYTES] == 1024


def test_an_open_loose_load_ends_at_uninstrument(files):
    with traced(load_idle_s=60) as t:
        safetensors.torch.load_file(files[0])
        assert not loose_loads(t)
    (load,) = loose_loads(t)
    assert load.attributes[sc.READ_BYTES] == 1024
