"""Promise: the report gives each rank's memory by kind and its real storage reads, and says per node whether the
ranks that asked for N copies of the checkpoint made storage deliver it once or N times."""

from __future__ import annotations

from test_analysis_otlp import MODEL_BYTES, line, memory_attributes, rank_load, resource, span, trace_id_of

from loadtrace.analysis import nodes
from loadtrace.analysis.model import to_json as rank_json
from loadtrace.analysis.ranks import jobs_from_spans
from loadtrace.analysis.sources import decode_line


def job_nodes(job, model):
    """The ``nodes`` entries as the report's JSON has them."""
    return rank_json(nodes.job_nodes(job, model))


M = MODEL_BYTES


def job_of(lines: list[str]):
    spans = [s for text in lines for s in decode_line(text.encode())]
    (job,) = jobs_from_spans(spans)
    return job


def node_job(storage: dict[int, int | None], hosts: dict[int, str] | None = None, reads: dict[int, int] | None = None):
    """A plain job, one rank per entry of ``storage`` (its storage_read_bytes; None leaves the attribute out)."""
    trace = trace_id_of("node-io" + repr(storage) + repr(hosts))
    lines = []
    for rank, from_storage in storage.items():
        read = (reads or {}).get(rank, M)
        memory = memory_attributes(
            100_000_000, 200_000_000, storage_read=from_storage,
            cached=None if from_storage is None else max(0, read - from_storage),
        )  # fmt: skip
        host = (hosts or {}).get(rank, "node-0")
        spans = rank_load(trace, rank, "plain", read, memory=memory)
        lines.append(line(resource(rank, world_size=len(storage), local_world_size=None, host=host), spans))
    return job_of(lines)


def test_each_rank_carries_its_memory_by_kind_and_its_io():
    trace = trace_id_of("memory-fields")
    memory = memory_attributes(
        300_000_000, 900_000_000, anon=(250_000_000, 700_000_000), file=(50_000_000, 260_000_000), after=850_000_000,
        storage_read=M // 4, cached=M - M // 4, node_total=64_000_000_000, node_available=40_000_000_000,
        cgroup_current=2_000_000_000, cgroup_max=32_000_000_000,
    )  # fmt: skip
    job = job_of([line(resource(0), rank_load(trace, 0, "plain", M, memory=memory))])
    rank = rank_json(job.ranks[0])
    assert (rank["rss_before_bytes"], rank["rss_after_bytes"], rank["peak_rss_bytes"]) == (
        300_000_000,
        850_000_000,
        900_000_000,
    )
    assert (rank["peak_rss_anon_bytes"], rank["peak_rss_file_bytes"], rank["peak_rss_shmem_bytes"]) == (
        700_000_000,
        260_000_000,
        4096,
    )
    assert (rank["storage_read_bytes"], rank["cached_bytes"]) == (M // 4, M - M // 4)
    assert (rank["node_memory_bytes"], rank["node_available_bytes"]) == (64_000_000_000, 40_000_000_000)
    assert (rank["cgroup_memory_current_bytes"], rank["cgroup_memory_max_bytes"]) == (2_000_000_000, 32_000_000_000)


def test_memory_figures_sum_over_loads_and_take_the_first_before_and_the_last_after():
    trace = trace_id_of("two-loads")
    first = rank_load(trace, 0, "plain", M, memory=memory_attributes(100, 500, after=400, storage_read=M))
    second = rank_load(
        trace, 0, "plain", M, start=int(first[0]["endTimeUnixNano"]) + 10,
        memory=memory_attributes(400, 900, after=800, storage_read=0, node_available=7, node_total=10),
    )  # fmt: skip
    rank = job_of([line(resource(0), first + second)]).ranks[0]
    assert (rank.rss_before_bytes, rank.rss_after_bytes, rank.peak_rss_bytes) == (100, 800, 900)
    # A sum is only given when every load carries the figure: the first load has no cached bytes.
    assert (rank.storage_read_bytes, rank.cached_bytes, rank.node_available_bytes) == (M, None, 7)


def test_a_peak_on_a_custom_load_span_counts_too():
    trace = trace_id_of("custom-load")
    load = span("loadtrace.load", trace, 0, 10, **memory_attributes(100, 777))
    assert job_of([line(resource(0), [load])]).ranks[0].peak_rss_bytes == 777


def test_eight_ranks_asking_for_8x_the_checkpoint_read_storage_once():
    job = node_job({rank: (M if rank == 3 else 0) for rank in range(8)})
    (node,) = job_nodes(job, M)
    assert (node["outcome"], node["readers"], node["times_asked"], node["times_read_from_storage"]) == (
        "read_once",
        8,
        8.0,
        1.0,
    )
    assert (node["read_bytes"], node["storage_read_bytes"], node["cached_bytes"]) == (8 * M, M, 7 * M)
    assert node["note"] == (
        "8 ranks on node-0 asked for 8x the checkpoint, 8,073,216 B (8.1 MB), but storage was read once"
        " (1,009,152 B (1.0 MB)): the page cache served the other 7"
    )


def test_reads_that_really_repeat_are_told_apart():
    (node,) = job_nodes(node_job({0: M, 1: M, 2: M, 3: M}), M)
    assert (node["outcome"], node["times_read_from_storage"]) == ("repeated", 4.0)
    assert "storage was read for every one of them" in node["note"]
    (node,) = job_nodes(node_job({0: M, 1: M, 2: 0, 3: 0}), M)
    assert (node["outcome"], node["times_read_from_storage"]) == ("partly_repeated", 2.0)
    assert "storage delivered 2x the checkpoint, 2,018,304 B (2.0 MB): some of it was read again" in node["note"]


def test_a_warm_page_cache_is_named_as_such():
    (node,) = job_nodes(node_job({0: 0, 1: 4096}), M)
    assert node["outcome"] == "page_cache" and "the page cache already held it" in node["note"]


def test_each_node_has_its_own_page_cache():
    job = node_job({0: M, 1: 0, 2: M, 3: 0}, hosts={0: "a", 1: "a", 2: "b", 3: "b"})
    nodes = job_nodes(job, M)
    assert [(n["host"], n["ranks"], n["outcome"]) for n in nodes] == [
        ("a", [0, 1], "read_once"),
        ("b", [2, 3], "read_once"),
    ]


def test_unknown_storage_reads_give_no_verdict():
    (node,) = job_nodes(node_job({0: M, 1: None}), M)
    assert (node["storage_read_bytes"], node["cached_bytes"], node["outcome"], node["note"]) == (None, None, None, None)
    assert node["read_bytes"] == 2 * M


def test_a_node_whose_ranks_read_nothing_has_no_note():
    (node,) = job_nodes(node_job({0: 0, 1: 0}, reads={0: 0, 1: 0}), M)
    assert (node["readers"], node["outcome"], node["note"]) == (0, None, None)
