"""Promise: the report gives each rank's memory by kind and its raw storage reads, and says per node, exactly,
whether the checkpoint was cold or warm in that node's page cache when its ranks first opened each file (from the
files' own residency at open, never from /proc/self/io, which counts library imports too)."""

from __future__ import annotations

from support.otlp_lines import (
    MODEL_BYTES,
    SHARDS,
    T0,
    line,
    memory_attributes,
    rank_load,
    resource,
    span,
    trace_id_of,
)

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


FILE_SIZE = M // SHARDS + 4096  # each of rank_load's shard spans: loadtrace.file.size
CHECKPOINT_FILES = SHARDS * FILE_SIZE


def with_residency(spans: list[dict], cached) -> list[dict]:
    """Give each ``safetensors.open`` span its ``loadtrace.file.cached_bytes_at_open``: ``cached`` for every shard,
    or per shard index (a missing index, or None, leaves the attribute out: not measured)."""
    shard = 0
    for item in spans:
        if item["name"] != "safetensors.open":
            continue
        value = cached.get(shard) if isinstance(cached, dict) else cached
        if value is not None:
            item["attributes"].append({"key": "loadtrace.file.cached_bytes_at_open", "value": {"intValue": str(value)}})
        shard += 1
    return spans


def node_job(
    storage: dict[int, int | None],
    hosts: dict[int, str] | None = None,
    reads: dict[int, int] | None = None,
    cached: dict[int, int | dict[int, int | None]] | None = None,
    starts: dict[int, int] | None = None,
):
    """A plain job, one rank per entry of ``storage`` (its storage_read_bytes; None leaves the attribute out);
    ``cached``: each rank's residency at open (``with_residency``; absent: not measured); ``starts``: when each rank's
    load began (its file spans follow)."""
    trace = trace_id_of("node-io" + repr(storage) + repr(hosts) + repr(cached) + repr(starts))
    lines = []
    for rank, from_storage in storage.items():
        read = (reads or {}).get(rank, M)
        memory = memory_attributes(
            100_000_000, 200_000_000, storage_read=from_storage,
            cached=None if from_storage is None else max(0, read - from_storage),
        )  # fmt: skip
        host = (hosts or {}).get(rank, "node-0")
        spans = rank_load(trace, rank, "plain", read, memory=memory, start=(starts or {}).get(rank, T0 + rank))
        if cached is not None and rank in cached:
            with_residency(spans, cached[rank])
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


def test_a_warm_small_checkpoint_is_warm_whatever_proc_self_io_counted():
    """The issue: /proc/self/io counted library imports during the load (here each rank's whole request and more), yet
    every shard was in the page cache when opened. The note says warm, and never blames the page cache."""
    job = node_job({0: 3 * M, 1: 3 * M}, cached={0: FILE_SIZE, 1: FILE_SIZE})
    (node,) = job_nodes(job, M)
    assert (node["outcome"], node["checkpoint_file_bytes"], node["checkpoint_cold_bytes"]) == (
        "warm",
        CHECKPOINT_FILES,
        0,
    )
    assert (node["storage_read_bytes"], node["times_read_from_storage"]) == (6 * M, 6.0)  # the raw figure stays
    assert node["note"] == (
        "2 ranks on node-0 asked for 2x the checkpoint, 2,018,304 B (2.0 MB); the checkpoint was warm on node-0: the"
        " page cache held all of its 5 checkpoint files, 1,029,630 B (1.0 MB)"
    )
    assert "did not keep" not in node["note"] and "storage" not in node["note"]


def test_a_cold_checkpoint_counts_each_file_once_at_its_first_open_on_the_node():
    """Rank 1 opened every shard first, with nothing cached; rank 0 opened them after and found them cached (what rank
    1 read): the node's checkpoint was cold, and storage delivered it once, not twice."""
    job = node_job({0: 0, 1: M}, cached={0: FILE_SIZE, 1: 0}, starts={0: T0 + 10_000_000, 1: T0})
    (node,) = job_nodes(job, M)
    assert (node["outcome"], node["checkpoint_file_bytes"], node["checkpoint_cold_bytes"]) == (
        "cold",
        CHECKPOINT_FILES,
        CHECKPOINT_FILES,
    )
    assert node["note"] == (
        "2 ranks on node-0 asked for 2x the checkpoint, 2,018,304 B (2.0 MB); the checkpoint was cold on node-0:"
        " none of its 5 checkpoint files, 1,029,630 B (1.0 MB), was in the page cache when first opened"
    )


def test_the_coldest_open_counts_whichever_span_started_first():
    """Seen under load (3 pytest workers on 2 cores): rank 1 started its span of each shard first, lost the CPU
    before it looked at the page cache, and found the 32 KiB rank 0 had read of each meanwhile; rank 0 found each
    cold. Storage delivered the whole checkpoint: the node is cold, not partly cold."""
    header = 32_768
    job = node_job({0: M, 1: M}, cached={0: 0, 1: header}, starts={0: T0 + 10_000, 1: T0})
    (node,) = job_nodes(job, M)
    assert (node["outcome"], node["checkpoint_cold_bytes"]) == ("cold", CHECKPOINT_FILES)
    # And a file the page cache lost between two opens: the open that found it cold is what storage delivered.
    job = node_job({0: 0, 1: M}, cached={0: FILE_SIZE, 1: 0}, starts={0: T0, 1: T0 + 10_000_000})
    assert job_nodes(job, M)[0]["outcome"] == "cold"


def test_a_partly_cached_checkpoint_gives_the_exact_cold_bytes():
    cold = {0: 0, 1: FILE_SIZE - 4096, 2: FILE_SIZE, 3: 1000, 4: FILE_SIZE}  # shard index → cached at open
    job = node_job({0: M, 1: M}, cached={0: cold, 1: FILE_SIZE}, starts={0: T0, 1: T0 + 10_000_000})
    (node,) = job_nodes(job, M)
    expected = FILE_SIZE + 4096 + (FILE_SIZE - 1000)  # 414,948
    assert (node["outcome"], node["checkpoint_cold_bytes"]) == ("partly_cold", expected)
    assert node["note"].endswith(
        "the checkpoint was partly cold on node-0: 414,948 B (414.9 kB) of its 5 checkpoint files,"
        " 1,029,630 B (1.0 MB), was not in the page cache when first opened"
    )


def test_each_node_has_its_own_page_cache():
    job = node_job(
        {0: M, 1: 0, 2: M, 3: 0},
        hosts={0: "a", 1: "a", 2: "b", 3: "b"},
        cached={0: 0, 1: FILE_SIZE, 2: FILE_SIZE, 3: FILE_SIZE},
    )
    nodes = job_nodes(job, M)
    assert [(n["host"], n["ranks"], n["outcome"], n["checkpoint_cold_bytes"]) for n in nodes] == [
        ("a", [0, 1], "cold", CHECKPOINT_FILES),
        ("b", [2, 3], "warm", 0),
    ]


def test_one_file_not_measured_gives_no_verdict():
    """One shard of one rank without its residency (mincore refused): no partial sum, no cold or warm."""
    job = node_job({0: M, 1: M}, cached={0: 0, 1: {0: 0, 1: 0, 2: None, 3: 0, 4: 0}}, starts={0: T0 + 1, 1: T0})
    (node,) = job_nodes(job, M)
    assert (node["outcome"], node["checkpoint_file_bytes"], node["checkpoint_cold_bytes"]) == (None, None, None)
    assert node["note"] == (
        "2 ranks on node-0 asked for 2x the checkpoint, 2,018,304 B (2.0 MB); whether the page cache held the"
        " checkpoint was not measured"
    )


def test_storage_reads_alone_give_no_verdict():
    """Spans without residency (an older loadtrace, not Linux): whatever /proc/self/io said, nothing about the cache."""
    for storage in ({0: M, 1: M, 2: M, 3: M}, {0: M, 1: 0}, {0: 0, 1: 4096}, {0: M, 1: None}):
        (node,) = job_nodes(node_job(storage), M)
        assert node["outcome"] is None and node["note"].endswith(
            "whether the page cache held the checkpoint was not measured"
        )
        assert "page cache did not keep" not in node["note"] and "read once" not in node["note"]
    (node,) = job_nodes(node_job({0: M, 1: None}), M)
    assert (node["storage_read_bytes"], node["cached_bytes"], node["read_bytes"]) == (None, None, 2 * M)


def test_a_node_whose_ranks_read_nothing_has_no_note():
    (node,) = job_nodes(node_job({0: 0, 1: 0}, reads={0: 0, 1: 0}, cached={0: 0, 1: 0}), M)
    assert (node["readers"], node["note"]) == (0, None)
    assert node["checkpoint_cold_bytes"] == CHECKPOINT_FILES  # the files were opened cold, just never read
