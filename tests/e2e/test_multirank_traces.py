"""Promise: with only ``LOADTRACE=1`` set, every rank of a real two-rank job (plain, FSDP cpu_ram_efficient, ZeRO-3)
lands in ONE trace, tagged with its rank, and its bytes equal what the rank really did.

"Really did" is counted by the test worker itself (``tests/workers/count_load.py``), independently of loadtrace, and
must reproduce the per-version facts of ``field-facts.md`` (``tests/support/field_facts.py``).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from support import field_facts
from support.installed import job_trace_spans
from support.multirank import STRATEGY, WORLD_SIZE, Job, cases, read_spans
from support.venvs import discover

VENVS = discover()
CASES = cases(VENVS)


@pytest.fixture(params=CASES, ids=[f"{venv.id}-{mode}" for venv, mode in CASES])
def job(request, jobs) -> Job:
    venv, mode = request.param
    return jobs.get(venv, mode, traced=True)


def only(spans, name):
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"expected one {name!r} span, found {len(found)}: {[s.attributes for s in found]}"
    return found[0]


def materialized(count: dict, device: str) -> int:
    return count["materialized"].get(device, {}).get("bytes", 0)


def test_independent_counts_reproduce_field_facts(job: Job):
    """The yardstick first: the worker's own count matches the measured per-version behaviour."""
    for rank in range(WORLD_SIZE):
        want = field_facts.expected(job.venv.release, job.mode, rank)
        if want is None:
            pytest.skip(f"no field facts for transformers {job.venv.transformers}")
        assert field_facts.observed(job.counts[rank]) == want, f"{job.label} rank {rank}"


def test_every_rank_writes_its_own_file_into_one_trace(job: Job):
    spans = job.spans()
    assert spans.skipped_lines == 0
    files = job.trace_files()
    assert len({f.parent for f in files}) == 1, f"trace files in more than one job directory: {files}"
    assert files[0].parent.parent == job.trace_root, "files belong in ./loadtrace-traces/<job id>/"
    ranks_per_file = {}
    for file in files:
        if not file.name.startswith("annotations-"):  # rank 0's findings, beside (docs/jaeger.md)
            ranks_per_file[file.name] = {s.resource.get("loadtrace.rank") for s in read_spans(file).spans}
    assert sorted(ranks_per_file.values(), key=str) == [{0}, {1}], f"one file per rank: {ranks_per_file}"
    assert len(files) == 3 and files[0].name.startswith("annotations-"), files
    assert {s.trace_id for s in spans.spans} and len({s.trace_id for s in spans.spans}) == 1, (
        f"trace ids: {Counter(s.trace_id for s in spans.spans)}"
    )


def test_resource_says_which_rank(job: Job):
    by_rank = job.spans_by_rank()
    assert set(by_rank) == {0, 1}, f"ranks present: {set(by_rank)}"
    instance_ids, pids, job_ids = set(), set(), set()
    for rank, spans in by_rank.items():
        resources = {tuple(sorted(s.resource.items())) for s in spans}
        assert len(resources) == 1, f"rank {rank}: more than one resource"
        resource = spans[0].resource
        assert resource["loadtrace.rank"] == rank
        assert resource["loadtrace.local_rank"] == rank
        assert resource["loadtrace.world_size"] == WORLD_SIZE
        assert resource["loadtrace.local_world_size"] == WORLD_SIZE
        # Every mode runs under torchrun; the FSDP jobs carry accelerate's settings, which name no launcher (issue 40).
        assert resource["loadtrace.launcher"] == "torchrun"
        assert resource["process.pid"] == job.counts[rank]["pid"]
        assert resource.get("host.name")
        instance_ids.add(resource["service.instance.id"])
        pids.add(resource["process.pid"])
        job_ids.add(resource["loadtrace.job.id"])
    assert len(instance_ids) == WORLD_SIZE, f"service.instance.id must differ per rank: {instance_ids}"
    assert len(job_ids) == 1, f"ranks disagree on the job id: {job_ids}"
    assert job_ids.pop() not in ("", "none", "None"), "torchrun's placeholder run id is not a job id"


def test_one_root_and_no_orphans(job: Job):
    """As written, the job's structure included (the analysis reads it past): one root, rank 0's, named after the
    model and the world size; every other span's parent in the files."""
    spans = job_trace_spans(job.trace_root)
    ids = {span["spanId"] for _, span in spans}
    (root,) = [(resource, span) for resource, span in spans if not span.get("parentSpanId")]
    assert root[1]["name"].endswith(f" on {WORLD_SIZE} ranks") and root[0]["service.name"] == "loadtrace", root
    orphans = [
        (s["name"], r.get("loadtrace.rank")) for r, s in spans if s.get("parentSpanId", root[1]["spanId"]) not in ids
    ]
    assert not orphans, f"spans whose parent is in no file: {orphans}"


def test_from_pretrained_totals_equal_independent_count(job: Job, checkpoint: Path):
    for rank, spans in job.spans_by_rank().items():
        count = job.counts[rank]
        load = only(spans, "transformers.from_pretrained")
        a = load.attributes
        where = f"{job.label} rank {rank} transformers.from_pretrained"
        assert a.get("loadtrace.strategy") == STRATEGY[job.mode], where
        assert a.get("loadtrace.model.class") == "Qwen3MoeForCausalLM", where
        assert a.get("loadtrace.checkpoint") == str(checkpoint), where
        assert a.get("loadtrace.files.opened") == count["opens"], where
        assert (a.get("loadtrace.read.tensors"), a.get("loadtrace.read.bytes")) == (
            count["read_tensors"],
            count["read_bytes"],
        ), where
        assert a.get("loadtrace.materialized.bytes.cpu", 0) == materialized(count, "cpu"), where
        assert a.get("loadtrace.materialized.calls", 0) == sum(d["calls"] for d in count["materialized"].values()), (
            where
        )
        assert a.get("loadtrace.hook_errors", 0) == 0, where
        # Every ``WeightConverter.convert`` on the rank, ZeRO-3's path included (renames are counted apart).
        converted = (
            a.get("loadtrace.convert.count", 0) - a.get("loadtrace.convert.op.Rename.count", 0),
            a.get("loadtrace.convert.bytes", 0) - a.get("loadtrace.convert.op.Rename.bytes", 0),
        )
        assert converted == (count["conversions"], count["conversion_bytes"]), where
        for key in ("loadtrace.rss.before", "loadtrace.rss.after", "loadtrace.rss.peak"):
            assert isinstance(a.get(key), int) and a[key] > 0, f"{where}: {key}={a.get(key)!r}"
        assert a["loadtrace.rss.peak"] >= max(a["loadtrace.rss.before"], a["loadtrace.rss.after"]), where
        assert a.get("loadtrace.model.held_bytes.cpu") == count["held_bytes"]["cpu"], where  # ZeRO-3: the partition


def test_file_spans_equal_independent_count_per_file(job: Job, checkpoint: Path):
    for rank, spans in job.spans_by_rank().items():
        count = job.counts[rank]
        files = [s for s in spans if s.name == "safetensors.open"]
        where = f"{job.label} rank {rank} safetensors.open"
        assert len(files) == count["opens"], where
        assert sum(s.attributes.get("loadtrace.read.bytes", 0) for s in files) == count["read_bytes"], where
        assert sum(s.attributes.get("loadtrace.read.tensors", 0) for s in files) == count["read_tensors"], where
        seen = Counter()
        for span in files:
            path = Path(span.attributes["loadtrace.file.path"])
            name = path.name
            seen[name] += 1
            assert path.resolve().parent == checkpoint.resolve(), f"{where}: {path}"
            assert span.attributes.get("loadtrace.file.size") == os.path.getsize(checkpoint / name), f"{where} {name}"
            assert span.attributes.get("loadtrace.file.tensors") == header_tensors(checkpoint / name), f"{where} {name}"
        assert dict(seen) == {name: f["opens"] for name, f in count["files"].items()}, where
        by_file = Counter()
        for span in files:
            name = Path(span.attributes["loadtrace.file.path"]).name
            by_file[name, "bytes"] += span.attributes.get("loadtrace.read.bytes", 0)
            by_file[name, "tensors"] += span.attributes.get("loadtrace.read.tensors", 0)
        for name, f in count["files"].items():
            assert (by_file[name, "tensors"], by_file[name, "bytes"]) == (f["tensors"], f["bytes"]), f"{where} {name}"
        load = only(spans, "transformers.from_pretrained")
        for span in files:
            assert is_descendant(span, load, spans), f"{where}: not under this rank's from_pretrained"


def test_phase_spans_count_the_calls(job: Job):
    names = {
        "load_state_dict": "transformers.load_state_dict",
        "convert_and_load_state_dict_in_model": "transformers.convert",
        "_load_state_dict_into_zero3_model": "transformers.zero3_load",
    }
    for rank, spans in job.spans_by_rank().items():
        phases = job.counts[rank]["phases"]
        for phase, span_name in names.items():
            found = [s for s in spans if s.name == span_name]
            where = f"{job.label} rank {rank} {span_name}"
            if phases.get(phase, 0) == 0:
                assert not found, where
            else:
                assert len(found) == 1, f"{where}: one span per load, found {len(found)}"
                assert found[0].attributes.get("loadtrace.calls") == phases[phase], where


def test_span_count_stays_within_budget(job: Job):
    for rank, spans in job.spans_by_rank().items():
        budget = job.counts[rank]["opens"] + 20
        assert len(spans) <= budget, f"{job.label} rank {rank}: {Counter(s.name for s in spans)}"


def test_loadtrace_shows_the_field_facts(job: Job):
    """The per-version findings, read from loadtrace's own attributes (rank 1 is where the versions differ)."""
    spans = job.spans_by_rank()[1]
    a = only(spans, "transformers.from_pretrained").attributes
    release, mode = job.venv.release, job.mode
    if (release, mode) == ("5.12", "fsdp"):
        assert a.get("loadtrace.materialized.bytes.cpu") == field_facts.MODEL_BYTES  # zeros_like: a whole model
        assert a.get("loadtrace.read.bytes") == field_facts.BYTES
    elif (release, mode) == ("5.24", "fsdp"):
        assert a.get("loadtrace.materialized.bytes.cpu") == field_facts.BUFFER_BYTES  # buffers only ...
        assert a.get("loadtrace.read.bytes") == field_facts.BYTES  # ... but it still reads everything
        assert a.get("loadtrace.model.held_bytes.cpu") == field_facts.MODEL_BYTES  # ... and keeps it
    elif (release, mode) == ("5.12", "zero3"):
        assert a.get("loadtrace.read.bytes") == field_facts.BYTES  # reads all, keeps nothing
    elif (release, mode) == ("5.24", "zero3"):
        assert a.get("loadtrace.read.bytes", 0) == 0  # get_slice on meta: nothing read
        assert a.get("loadtrace.files.opened") == field_facts.FILES
    elif mode == "plain":
        assert a.get("loadtrace.read.bytes") == field_facts.BYTES
    else:
        pytest.skip(f"no field facts for transformers {job.venv.transformers}")


def test_separate_jobs_get_separate_traces(jobs):
    """torchrun without --rdzv-id sets TORCHELASTIC_RUN_ID=none for every job: still one trace per job."""
    trace_ids = {}
    for venv, mode in CASES:
        job = jobs.get(venv, mode, traced=True)
        trace_ids[job.label] = {s.trace_id for s in job.spans().spans}
    flat = [tid for ids in trace_ids.values() for tid in ids]
    assert len(flat) == len(set(flat)) == len(CASES), trace_ids


def header_tensors(path: Path) -> int:
    import json

    with open(path, "rb") as handle:
        header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
    return len([k for k in header if k != "__metadata__"])


def is_descendant(span, ancestor, spans) -> bool:
    by_id = {s.span_id: s for s in spans}
    current = span
    while current.parent_span_id:
        if current.parent_span_id == ancestor.span_id:
            return True
        current = by_id.get(current.parent_span_id)
        if current is None:
            return False
    return False
