"""safetensors reads are counted exactly, on one span per file, whichever thread reads."""

import gc
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import safetensors
import safetensors.torch
import torch
from support.inmemory import traced

import loadtrace
from loadtrace import semconv
from loadtrace.instrumentation.hooks import safetensors as safetensors_hooks

TENSORS = {
    "a": torch.arange(12, dtype=torch.float32).reshape(3, 4),  # 48 B
    "b": torch.ones(5, dtype=torch.float16),  # 10 B
    "c": torch.zeros(2, 3, 7, dtype=torch.int64),  # 336 B
}


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file(TENSORS, str(path))
    return path


def test_get_tensor_counts_exact_bytes_on_the_file_span(checkpoint):
    with traced() as t:
        with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
            a = handle.get_tensor("a")
            c = handle.get_tensor("c")
    span = t.one("safetensors.open")
    assert span.attributes["loadtrace.read.tensors"] == 2
    assert span.attributes["loadtrace.read.bytes"] == a.nbytes + c.nbytes == 48 + 336
    assert span.attributes["loadtrace.file.tensors"] == 3
    assert span.attributes["loadtrace.file.size"] == checkpoint.stat().st_size
    assert span.attributes["loadtrace.file.path"] == str(checkpoint)
    assert torch.equal(a, TENSORS["a"]) and torch.equal(c, TENSORS["c"])


def test_slices_count_the_bytes_actually_indexed(checkpoint):
    with traced() as t:
        with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
            whole = handle.get_slice("a")[...]
            rows = handle.get_slice("c")[0:1]
            assert handle.get_slice("b").get_shape() == [5]  # metadata only: no bytes read
    span = t.one("safetensors.open")
    assert span.attributes["loadtrace.read.tensors"] == 2
    assert span.attributes["loadtrace.read.bytes"] == whole.nbytes + rows.nbytes == 48 + 168


def test_load_file_and_load_bytes(checkpoint):
    with traced() as t:
        from_file = safetensors.torch.load_file(str(checkpoint))
        from_bytes = safetensors.torch.load(checkpoint.read_bytes())
    total = sum(x.nbytes for x in TENSORS.values())
    assert t.one("safetensors.open").attributes["loadtrace.read.bytes"] == total
    assert t.one("safetensors.load").attributes["loadtrace.read.bytes"] == total
    assert t.one("safetensors.load").attributes["loadtrace.read.tensors"] == 3
    for name, tensor in TENSORS.items():
        assert torch.equal(from_file[name], tensor) and torch.equal(from_bytes[name], tensor)


def test_reads_in_worker_threads_go_to_the_file_and_load_that_opened_them(checkpoint):
    with traced() as t:
        with loadtrace.traced_load("threads"):
            handle = safetensors.safe_open(str(checkpoint), framework="pt")
            slices = [handle.get_slice(name) for name in TENSORS]
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda s: s[...], slices))
    load = t.one("loadtrace.load")
    file = t.one("safetensors.open")
    total = sum(x.nbytes for x in TENSORS.values())
    assert file.attributes["loadtrace.read.bytes"] == load.attributes["loadtrace.read.bytes"] == total
    assert load.attributes["loadtrace.files.opened"] == 1
    assert file.parent.span_id == load.context.span_id  # ended with the load, never an orphan
    assert all(s.parent is not None for s in t.spans())


def test_tensor_detail_adds_one_child_span_per_read(checkpoint):
    with traced(detail="tensor") as t:
        with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
            for name in TENSORS:
                handle.get_tensor(name)
    file = t.one("safetensors.open")
    reads = t.spans("safetensors.read")
    assert sorted(r.attributes["loadtrace.tensor.name"] for r in reads) == sorted(TENSORS)
    assert all(r.parent.span_id == file.context.span_id for r in reads)
    assert sum(r.attributes["loadtrace.read.bytes"] for r in reads) == file.attributes["loadtrace.read.bytes"]


def test_the_proxy_is_transparent(checkpoint):
    with traced():
        handle = safetensors.safe_open(str(checkpoint), framework="pt")
        assert isinstance(handle, type(safetensors.safe_open.__wrapped__(str(checkpoint), framework="pt")))
        assert sorted(handle.keys()) == sorted(TENSORS)
        assert handle.metadata() == {"format": "pt"} or handle.metadata() is None or isinstance(handle.metadata(), dict)


def test_a_slice_answers_like_the_librarys(checkpoint):
    library = safetensors.safe_open(str(checkpoint), framework="pt")  # not traced yet
    plain = library.get_slice("c")
    with pytest.raises(Exception) as missing:
        library.get_slice("no_such_tensor")
    with traced() as t:
        with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
            piece = handle.get_slice("c")
            assert isinstance(piece, type(plain)) and not isinstance(piece, torch.Tensor)
            assert (piece.get_shape(), piece.get_dtype()) == (plain.get_shape(), plain.get_dtype())
            assert hasattr(piece, "get_dtype") and not hasattr(piece, "no_such_attribute")
            assert torch.equal(piece[...], plain[...]) and torch.equal(piece[1:, :2], plain[1:, :2])
            with pytest.raises(missing.type, match=str(missing.value)):
                handle.get_slice("no_such_tensor")
    span = t.one("safetensors.open")
    assert span.attributes["loadtrace.read.tensors"] == 2
    assert span.attributes["loadtrace.read.bytes"] == 336 + 1 * 2 * 7 * 8  # c[1:, :2]: a (1, 2, 7) int64 part
    assert span.attributes[semconv.READ_PARTIAL_TENSORS] == 1
    assert span.attributes[semconv.READ_PARTIAL_BYTES] == 1 * 2 * 7 * 8


def test_a_slice_forwards_what_the_librarys_has_without_a_getattr(checkpoint, monkeypatch):
    """A ``__getattr__`` on the slice would slow every attribute read on it (Python 3.11): the library slice type's
    other public attributes are forwarded instead, once per process, from the first file with a tensor, whose names
    then go to the job's first ``keys()`` as the library gives them (no second listing)."""

    class LaterSlice:  # a later safetensors' slice, with a method of its own
        def get_offsets(self):
            return (8, 64)

    class LaterFile:
        def keys(self):
            return ["x"]

        def get_slice(self, name):
            return LaterSlice()

    assert "__getattr__" not in vars(safetensors_hooks.CountingSlice)
    monkeypatch.setattr(safetensors_hooks.CountingSlice, "forwarding", None)
    with traced():
        with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
            assert safetensors_hooks.CountingSlice.forwarding is type(handle.__wrapped__.get_slice("a"))
            assert handle.keys() == sorted(TENSORS) and handle.keys() == sorted(TENSORS)
    monkeypatch.setattr(safetensors_hooks.CountingSlice, "forwarding", None)
    assert safetensors_hooks.forward_slices(LaterFile(), None) == ["x"]
    try:
        slot = types.SimpleNamespace(counts=[0, 0])
        piece = safetensors_hooks.counting_get_slice(LaterFile().get_slice, slot, None, None)("x")
        assert piece.get_offsets() == (8, 64) and safetensors_hooks.CountingSlice.forwarding is LaterSlice
    finally:
        del safetensors_hooks.CountingSlice.get_offsets


def test_a_dropped_handle_ends_its_span_at_once(checkpoint):
    """Nothing of the proxy's (its own ``get_slice`` included) refers back to it: the job dropping the handle ends
    the file's span then, not at some later garbage collection."""
    with traced() as t:
        with loadtrace.traced_load("drop"):
            handle = safetensors.safe_open(str(checkpoint), framework="pt")
            piece = handle.get_slice("a")
            gc.disable()
            try:
                del handle
                assert [s.name for s in t.spans()] == ["safetensors.open"]
            finally:
                gc.enable()
            piece[...]  # a slice outliving its handle still reads, and still counts into its file
    assert t.one("safetensors.open").attributes["loadtrace.read.tensors"] == 0  # ended before the read
    assert t.one("loadtrace.load").attributes["loadtrace.read.bytes"] == 48


def test_without_a_gil_reads_count_under_the_files_lock(checkpoint, monkeypatch):
    """Free-threaded Python: the slot's ``+=`` is no longer indivisible, so the proxies count under a lock."""
    monkeypatch.setattr(safetensors_hooks, "_gil_enabled", lambda: False)
    with traced() as t:
        with safetensors.safe_open(str(checkpoint), framework="pt") as handle:
            assert type(handle) is safetensors_hooks.LockedSafeOpen
            slices = [handle.get_slice(name) for name in TENSORS for _ in range(50)]
            assert all(type(piece) is safetensors_hooks.LockedCountingSlice for piece in slices)
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda piece: piece[...], slices))
            handle.get_tensor("b")
            handle.get_tensors()
    span = t.one("safetensors.open")
    total = sum(x.nbytes for x in TENSORS.values())
    assert span.attributes["loadtrace.read.tensors"] == 50 * 3 + 1 + 3
    assert span.attributes["loadtrace.read.bytes"] == 50 * total + 10 + total


@pytest.mark.parametrize("detail", ["default", "tensor"])
@pytest.mark.parametrize("framework", ["pt", "np"])
def test_every_framework_counts_reads_by_their_own_size(checkpoint, framework, detail):
    """safetensors hands out torch tensors or numpy arrays (the frameworks it offers without extra packages): a read
    through either counts its own bytes, whole or sliced, with no hook fault, at either detail."""
    with traced(detail=detail) as t:
        with safetensors.safe_open(str(checkpoint), framework=framework) as handle:
            whole = handle.get_tensor("a")
            rows = handle.get_slice("c")[1:2]
            part = handle.get_slice("a")[1:3]
    span = t.one("safetensors.open")
    assert span.attributes["loadtrace.read.tensors"] == 3
    assert span.attributes["loadtrace.read.bytes"] == whole.nbytes + rows.nbytes + part.nbytes == 48 + 168 + 32
    assert (span.attributes["loadtrace.read.partial_tensors"], span.attributes["loadtrace.read.partial_bytes"]) == (
        2,
        168 + 32,
    )
    assert type(part).__module__.split(".")[0] == ("torch" if framework == "pt" else "numpy")
    assert "loadtrace.hook_errors" not in span.attributes
