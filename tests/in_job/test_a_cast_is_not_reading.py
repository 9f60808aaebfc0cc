"""Promise (issue 40): a bf16 checkpoint loaded as float32 casts every tensor as transformers materialises it, inside
its file's span: that time is told as its own (``loadtrace.cast.*`` on the load, ``convert`` in the startup split) and
taken out of ``read`` by construction: the read instants are the files' instants less the casts'. And (issue 48) the
storage figure of such a load, cold, is what the process fetched, over the stretches it moved in, whichever phase
touched the pages (the cast does, on a mapped file): never the cold bytes over the files' open time."""

from __future__ import annotations

import json

import pytest
import torch
from support.inmemory import traced
from support.otlp_reference import otlp_json_via_protobuf
from support.pagecache import evict

from loadtrace import semconv as sc
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import read_files
from loadtrace.analysis.startup import node_startup
from loadtrace.instrumentation.counting import memory
from loadtrace.startup_split import PhaseSpan, cast_intervals, length, overlap, pairs, phase_intervals, subtract, union


def save(path, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(path, max_shard_size="100KB")
    return sum(p.numel() for p in model.state_dict().values())


def load(path, dtype):
    from transformers import AutoModelForCausalLM

    with traced() as t:
        AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return t


def phase_spans(spans):
    return [
        PhaseSpan(
            s.name, s.start_time, s.end_time, s.context.span_id, s.parent.span_id if s.parent else None, s.attributes
        )
        for s in spans
    ]


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
    path = tmp_path_factory.mktemp("bf16")
    return path, save(path, torch.bfloat16)


def test_a_bf16_checkpoint_loaded_as_float32_counts_every_cast(bf16):
    path, elements = bf16
    t = load(path, torch.float32)
    attributes = t.one("transformers.from_pretrained").attributes
    assert attributes[sc.CAST_COUNT] == attributes[sc.READ_TENSORS] and attributes[sc.CAST_BYTES] == 4 * elements
    assert attributes[sc.READ_BYTES] == 2 * elements  # what was read is the file's bf16


def test_the_read_phase_holds_no_cast_instant_and_convert_holds_them_all(bf16):
    path, _ = bf16
    spans = phase_spans(load(path, torch.float32).spans())
    casts = cast_intervals(spans)
    files = union([(s.start_ns, s.end_ns) for s in spans if s.name in sc.FILE_SPANS])
    assert casts and overlap(casts, files) == length(casts)  # the casts ran inside the files' spans
    phases = phase_intervals(spans)
    assert overlap(phases["read"], casts) == 0 and overlap(phases["convert"], casts) == length(casts)
    assert phases["read"] == subtract(files, casts)


def test_a_cold_cast_load_says_what_it_fetched_and_when(bf16, tmp_path):
    """The checkpoint's pages evicted first: the load's storage figure is at least what entered the page cache for the
    checkpoint (``cached_bytes`` after less before, the kernel's own count, read here independently), less than a page
    per file and what else the process read beyond it; its stretches lie within the load and hold its casts."""
    path, _ = bf16
    shards = sorted(path.glob("*.safetensors"))
    for shard in shards:
        evict(shard)
    before = [memory.cached_bytes(shard) for shard in shards]
    if None in before or any(before):
        pytest.skip(f"posix_fadvise(DONTNEED) cannot evict files under {path} (tmpfs?), or residency is unknown here")
    t = load(path, torch.float32)
    entered = sum(memory.cached_bytes(shard) or 0 for shard in shards)
    trace = tmp_path / "rank00000-here-1.jsonl"
    trace.write_text(json.dumps(otlp_json_via_protobuf(t.spans())) + "\n")
    found = read_files(str(tmp_path))
    (job,) = jobs_from_spans(found.spans, found.states)
    node = node_startup(None, job.ranks)
    load_span = t.one("transformers.from_pretrained")
    fetched = load_span.attributes[sc.IO_STORAGE_READ_BYTES]
    assert entered > 0 and entered <= fetched < entered + 4096 * len(shards) + 8 * 2**20, (entered, fetched)
    stretches = pairs(load_span.attributes[sc.IO_STORAGE_READ_INTERVALS])
    assert stretches and union(stretches) == stretches
    assert load_span.start_time <= stretches[0][0] and stretches[-1][1] <= load_span.end_time
    casts = cast_intervals(phase_spans(t.spans()))
    # The pages came in while transformers cast them (on a busy machine a cast also waits for a core, not only for
    # the disk, so the stretches need not cover every cast whole).
    assert length(casts) > 0 and overlap(stretches, casts) > 0
    assert (node.checkpoint, node.storage_bytes) == ("cold", fetched)
    assert node.fetch_seconds == round(length(stretches) / 1e9, 6)


def test_a_load_that_keeps_the_checkpoints_dtype_casts_nothing(bf16):
    path, _ = bf16
    attributes = load(path, torch.bfloat16).one("transformers.from_pretrained").attributes
    assert sc.CAST_COUNT not in attributes and sc.CAST_INTERVALS not in attributes
