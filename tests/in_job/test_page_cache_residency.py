"""Promise: each checkpoint file span says exactly how many of the file's bytes the page cache held when it was
opened, and each load how many bytes of the files it opened were cold (what storage had to deliver): 0 cached for a
file evicted with ``posix_fadvise(DONTNEED)``, all of it for a file just read, nothing (never a guess) where it cannot
be known. Both kernel paths (``cachestat``, ``mincore``) give the same exact figures."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import pytest
import safetensors
import safetensors.torch
import torch
from support.inmemory import traced
from support.pagecache import evict
from support.paths import REPO

import loadtrace
from loadtrace import semconv
from loadtrace.instrumentation.counting import memory
from loadtrace.instrumentation.hooks import safetensors as safetensors_hooks
from loadtrace.instrumentation.hooks._common import file_attributes_and_head
from loadtrace.instrumentation.tracing import spans

PAGE = os.sysconf("SC_PAGE_SIZE")


def touch_pages(path: Path, pages: list[int]) -> None:
    """Bring exactly these pages into the page cache: faults on a mapping without readahead (``MADV_RANDOM``)."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        mapped.madvise(mmap.MADV_RANDOM)
        for page in pages:
            mapped[page * PAGE]


def read_whole(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(1 << 20):
            pass


@pytest.fixture
def disk_dir(tmp_path_factory) -> Path:
    """A directory on a disk-backed file system: a tmpfs file is always resident, DONTNEED cannot evict it."""
    if not hasattr(os, "posix_fadvise") or memory.cached_bytes(__file__) is None:
        pytest.skip("page-cache residency is read on Linux only (cachestat / mincore)")
    for base in (tmp_path_factory.getbasetemp(), Path("/var/tmp"), REPO):
        folder = Path(base) / f"residency-{os.getpid()}"
        folder.mkdir(exist_ok=True)
        probe = folder / "probe"
        probe.write_bytes(b"p" * (3 * PAGE))
        evict(probe)
        if memory.cached_bytes(probe) == 0:
            probe.unlink()
            yield folder
            for item in folder.iterdir():
                item.unlink()
            folder.rmdir()
            return
        probe.unlink()
        folder.rmdir()
    pytest.skip("posix_fadvise(DONTNEED) evicts nothing in any candidate directory (tmpfs?): cold cannot be made")


@pytest.fixture(params=["cachestat", "mincore"])
def kernel_path(request, monkeypatch):
    """Each test runs through cachestat (where the kernel has it) and through the mincore fallback."""
    if request.param == "mincore":
        monkeypatch.setattr(memory, "_use_cachestat", False)
    return request.param


def test_an_evicted_file_has_nothing_cached_and_a_read_file_all_of_it(disk_dir, kernel_path):
    path = disk_dir / "data.bin"
    size = 5 * PAGE + 123  # ends inside a page: only the file's bytes of it count
    path.write_bytes(os.urandom(size))
    evict(path)
    assert memory.cached_bytes(path) == 0
    read_whole(path)
    assert memory.cached_bytes(path) == size
    evict(path)
    touch_pages(path, [2, 3, 4])  # (a partial DONTNEED may keep a large folio whole: partly cached by faults instead)
    assert memory.cached_bytes(path) == 3 * PAGE
    touch_pages(path, [5])  # the partial last page: 123 bytes of the file
    assert memory.cached_bytes(path) == 3 * PAGE + 123


def test_a_file_larger_than_one_mincore_window(disk_dir, kernel_path, monkeypatch):
    monkeypatch.setattr(memory, "_WINDOW", 4 * PAGE)  # several mappings, one vector reused
    path = disk_dir / "windows.bin"
    path.write_bytes(os.urandom(10 * PAGE + 7))
    evict(path)
    touch_pages(path, [0, 1, 2, 5, 6, 7, 8, 9, 10])  # all but pages 3 and 4, across the first window's end
    assert memory.cached_bytes(path) == 8 * PAGE + 7


def test_what_cannot_be_known_is_none(tmp_path, monkeypatch):
    assert memory.cached_bytes(tmp_path / "missing") is None
    assert memory.cached_bytes(tmp_path) is None  # a directory
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert memory.cached_bytes(empty) in (0, None)
    monkeypatch.setattr(memory, "_libc", False)  # not Linux: no libc calls at all
    assert memory.cached_bytes(__file__) is None


def test_cachestat_refused_falls_back_to_mincore(disk_dir, monkeypatch):
    """A seccomp profile answers EPERM, an old kernel ENOSYS: mincore then, for the rest of the process."""
    libc = memory._load_libc()

    class Refusing:
        def __getattr__(self, name):
            return getattr(libc, name)

        def syscall(self, *args):
            import ctypes

            ctypes.set_errno(38)  # ENOSYS
            return -1

    monkeypatch.setattr(memory, "_libc", Refusing())
    monkeypatch.setattr(memory, "_use_cachestat", True)
    path = disk_dir / "fallback.bin"
    path.write_bytes(os.urandom(3 * PAGE))
    read_whole(path)
    assert memory.cached_bytes(path) == 3 * PAGE
    assert memory._use_cachestat is False


TENSORS = {"a": torch.arange(4096, dtype=torch.float32), "b": torch.ones(1000, dtype=torch.float16)}


def test_file_and_load_spans_say_cold_and_warm_exactly(disk_dir, kernel_path):
    one, two = disk_dir / "model-1.safetensors", disk_dir / "model-2.safetensors"
    for path in (one, two):
        safetensors.torch.save_file(TENSORS, str(path))
    sizes = {str(path): path.stat().st_size for path in (one, two)}
    evict(one)
    read_whole(two)
    with traced() as t:
        with loadtrace.traced_load("cold-and-warm"):
            for path in (one, two, one):  # one opened again: it counts once, at its first open (cold)
                with safetensors.safe_open(str(path), framework="pt") as handle:
                    handle.get_tensor("a")
    files = t.spans("safetensors.open")
    cached = [
        (span.attributes["loadtrace.file.path"], span.attributes["loadtrace.file.cached_bytes_at_open"])
        for span in files
    ]
    assert cached[:2] == [(str(one), 0), (str(two), sizes[str(two)])]
    assert cached[2][0] == str(one) and cached[2][1] > 0  # what the first open read is in the cache now
    load = t.one("loadtrace.load")
    assert load.attributes["loadtrace.io.checkpoint_files"] == 2
    assert load.attributes["loadtrace.io.checkpoint_file_bytes"] == sum(sizes.values())
    assert load.attributes["loadtrace.io.checkpoint_cold_bytes"] == sizes[str(one)]


def test_torch_load_of_a_path_carries_its_residency(disk_dir):
    path = disk_dir / "state.pt"
    torch.save(TENSORS, path)
    evict(path)
    with traced() as t:
        with loadtrace.traced_load("torch"):
            torch.load(path)
    span = t.one("torch.load")
    assert span.attributes["loadtrace.file.cached_bytes_at_open"] == 0
    assert t.one("loadtrace.load").attributes["loadtrace.io.checkpoint_cold_bytes"] == path.stat().st_size


def test_without_residency_the_attributes_are_absent(disk_dir, monkeypatch):
    path = disk_dir / "model.safetensors"
    safetensors.torch.save_file(TENSORS, str(path))
    monkeypatch.setattr(memory, "_libc", False)
    with traced() as t:
        with loadtrace.traced_load("unknown"):
            with safetensors.safe_open(str(path), framework="pt") as handle:
                handle.get_tensor("b")
    assert "loadtrace.file.cached_bytes_at_open" not in t.one("safetensors.open").attributes
    tensor_bytes = sum(tensor.nbytes for tensor in TENSORS.values())
    assert t.one("safetensors.open").attributes[semconv.FILE_TENSOR_BYTES] == tensor_bytes  # the header still read
    load = t.one("loadtrace.load").attributes
    assert not {"loadtrace.io.checkpoint_files", "loadtrace.io.checkpoint_file_bytes"} & set(load)
    assert "loadtrace.io.checkpoint_cold_bytes" not in load


def test_one_open_reads_the_residency_before_the_header(disk_dir, kernel_path):
    """The safetensors hook opens a file once, reads its residency first (what the job found: the hook's own read of
    the header's length comes after it), then that length: the same cached bytes as ``cached_bytes`` gives, and the
    file's exact tensor bytes, cold and warm."""
    path = disk_dir / "model.safetensors"
    safetensors.torch.save_file(TENSORS, str(path))
    size, tensor_bytes = path.stat().st_size, sum(tensor.nbytes for tensor in TENSORS.values())
    evict(path)
    with traced() as t:
        attributes, head = file_attributes_and_head(spans.tracing(), path, 8)
        assert attributes[semconv.FILE_CACHED_BYTES_AT_OPEN] == 0 < memory.cached_bytes(path)  # then the head read
        assert attributes[semconv.FILE_SIZE] == size and safetensors_hooks.data_bytes(head, size) == tensor_bytes
        read_whole(path)
        assert file_attributes_and_head(spans.tracing(), path, 8) == (
            attributes | {semconv.FILE_CACHED_BYTES_AT_OPEN: size},
            head,
        )
        for cold in (True, False):
            if cold:
                evict(path)
            expected = memory.cached_bytes(path)
            with safetensors.safe_open(str(path), framework="pt") as handle:
                handle.get_tensor("b")
            span = t.spans("safetensors.open")[-1]
            assert span.attributes[semconv.FILE_CACHED_BYTES_AT_OPEN] == expected == (0 if cold else size)
            assert span.attributes[semconv.FILE_TENSOR_BYTES] == tensor_bytes


def test_a_file_that_is_not_regular_is_never_opened(tmp_path):
    """A FIFO's open would wait for its writer (and a read would take the job's bytes): its path and size only."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    found = []
    with traced():
        probe = threading.Thread(target=lambda: found.append(file_attributes_and_head(spans.tracing(), fifo, 8)))
        probe.daemon = True
        probe.start()
        probe.join(30)
    assert found == [({semconv.FILE_PATH: str(fifo), semconv.FILE_SIZE: 0}, b"")]
