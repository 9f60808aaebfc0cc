"""``loadtrace jobs`` over a tree of many jobs generated from a real run's files (``support/jobtree.py``), over a
Jaeger search paged through a small ``/api/v3`` server, and on bad input; ``compare --fail-if-slower``.

The tree is the benchmark's (benchmarks/bench_jobs.py times 500 jobs x 8 ranks of it); here fewer jobs, checked
exactly: every job's row, each cluster's statistics, and the difference between clusters in words."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from support import loopback
from support.cli import one_line, run_json
from support.jaeger_query import NO_TRACES, parse_rfc3339_nanos
from support.jobtree import BETA_STRETCH, RANKS_PER_NODE, cluster_of, job_ids, write_tree

from loadtrace.analysis.sources import files as sources
from loadtrace.analysis.sources import jaeger, read_files
from loadtrace.cli import main

JOBS, RANKS = 30, 8
ALPHA_STARTUP = 0.119441  # the real run's slowest rank: rank 1, from its first span to the end of its load
MODEL_BYTES = 1_009_152


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_tree(tmp_path_factory.mktemp("jobs") / "tree", JOBS, RANKS)


def jobs_json(capsys, *args: str) -> dict:
    return run_json(capsys, "jobs", *args)


def fails(capsys, *args: str) -> str:
    """The one line ``loadtrace jobs`` prints on bad input, exit 2, nothing on stdout."""
    return one_line(capsys, "jobs", *args)


def test_every_job_of_the_tree_is_one_row_with_its_own_numbers(tree, capsys):
    report = jobs_json(capsys, str(tree))
    rows = report["jobs"]
    assert [row["job_id"] for row in rows] == [f"bench-{job:05d}" for job in range(JOBS)]  # oldest first
    for job, row in enumerate(rows):
        assert row["trace_id"] == job_ids(row["job_id"])[0]
        assert (row["cluster"], row["world_size"], row["model_bytes"], row["attempt"]) == (
            cluster_of(job),
            RANKS,
            MODEL_BYTES,
            None,  # the real run predates loadtrace.attempt
        )
        assert row["versions"]["transformers"] == "5.24.0" and row["versions"]["torch"] == "2.13.0+cpu"
        assert row["hosts"] == [f"bench-{job:05d}-node{node}" for node in range(RANKS // RANKS_PER_NODE)]
        stretch = BETA_STRETCH if cluster_of(job) == "beta" else 1.0
        assert row["startup_seconds"] == pytest.approx(ALPHA_STARTUP * stretch, abs=2e-6)
        assert row["slowest_rank"] == 1  # the others are copies of rank 1 too: the first of them
        assert row["findings"] == {"replicated_load": 1} and row["strategy"] == "plain"
    assert list(rows[0]) == [
        *("trace_id", "job_id", "attempt", "cluster", "start_time", "world_size", "model_bytes", "versions"),
        *("startup_seconds", "median_rank_seconds", "slowest_rank", "slowest_phase", "findings"),
        *("model", "strategy", "hosts", "storage_bytes_per_second"),
    ]
    assert [group["by"] for group in report["groups"]] == [{}] and report["groups"][0]["jobs"] == JOBS


def test_grouped_by_cluster_jobs_without_one_are_the_null_group_and_beta_is_called_slower(tree, capsys):
    report = jobs_json(capsys, str(tree), "--group-by", "cluster")
    groups = {group["by"]["cluster"]: group for group in report["groups"]}
    assert {name: group["jobs"] for name, group in groups.items()} == {"alpha": 10, "beta": 10, None: 10}
    beta = groups["beta"]["startup_seconds"]
    assert beta["p50"] == beta["p95"] == beta["max"] == pytest.approx(ALPHA_STARTUP * BETA_STRETCH, abs=2e-6)
    assert groups["alpha"]["storage_bytes_per_second"] == {"p50": None}  # warm page cache: nothing from storage
    (difference,) = report["differences"]
    assert difference.startswith("cluster beta: startup p50 2.5x alpha; ")
    assert json.dumps(report["groups"][0]["by"]) in ('{"cluster": "alpha"}', '{"cluster": "beta"}', '{"cluster": null}')
    main(["jobs", str(tree), "--group-by", "cluster"])
    table = capsys.readouterr().out
    assert "cluster=null" in table and "differences:\n  cluster beta: startup p50 2.5x alpha" in table


def test_where_keeps_the_matching_jobs_and_null_the_ones_that_say_none(tree, capsys):
    beta = jobs_json(capsys, str(tree), "--where", "cluster=beta")["jobs"]
    assert [row["job_id"] for row in beta] == [f"bench-{job:05d}" for job in range(JOBS) if cluster_of(job) == "beta"]
    none = jobs_json(capsys, str(tree), "--where", "cluster=null", "--where", "transformers=5.24.0")["jobs"]
    assert len(none) == 10 and {row["cluster"] for row in none} == {None}
    by_two = jobs_json(capsys, str(tree), "--group-by", "cluster,strategy")["groups"]
    assert {(g["by"]["cluster"], g["by"]["strategy"]) for g in by_two} == {
        ("alpha", "plain"),
        ("beta", "plain"),
        (None, "plain"),
    }


def test_bad_input_is_one_line_and_exit_2(tree, tmp_path, capsys):
    assert "unknown key 'colour'" in fails(capsys, str(tree), "--group-by", "colour")
    assert "known keys: cluster, transformers" in fails(capsys, str(tree), "--where", "colour=red")
    assert "expected KEY=VALUE" in fails(capsys, str(tree), "--where", "cluster")
    assert "no job matches --where cluster=gamma (of 30 jobs)" in fails(capsys, str(tree), "--where", "cluster=gamma")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no *.jsonl trace files" in fails(capsys, str(empty))
    assert "no such file or directory" in fails(capsys, str(tmp_path / "missing"))
    assert "--service" in fails(capsys, "--jaeger", "http://127.0.0.1:9")
    assert "needs a SOURCE" in fails(capsys)


def test_the_parallel_read_gives_the_same_spans(tree, monkeypatch):
    monkeypatch.setattr(sources, "PARALLEL_MIN_CPUS", 2)  # this machine may have only 2
    files, _ = sources.source_files(tree)
    many = sources._read_in_parallel(files)
    assert many is not None  # read by forked processes
    one = read_files(tree)
    key = lambda s: (s.trace_id, s.span_id, s.name, s.start_ns)  # noqa: E731
    assert sorted(map(key, one.spans)) == sorted(map(key, many.spans)) and len(one.spans) > 64


# Jaeger: a search paged back in time ----------------------------------------------------------------------------------


class PagedJaeger(loopback.Handler):
    """``/api/v3/traces`` the way Jaeger answers it: the traces that started in the window, most recent first, at most
    ``query.num_traces`` of them, merged into one TracesData; 404 "No traces found" when none."""

    traces: dict[str, dict] = {}  # trace id → (start, resourceSpans)
    requests: list[dict] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        PagedJaeger.requests.append(query)
        if url.path != "/api/v3/traces" or query.get("query.service_name") != "loadtrace":
            return self.reply(404, NO_TRACES)
        low, high = (parse_rfc3339_nanos(query[k]) for k in ("query.start_time_min", "query.start_time_max"))
        found = sorted(
            (start, trace) for start, trace in PagedJaeger.traces.values() if low <= start <= high
        )[::-1][: int(query["query.num_traces"])]  # fmt: skip
        if not found:
            return self.reply(404, NO_TRACES)
        merged = [rs for _, trace in found for rs in trace]
        return self.reply(200, json.dumps({"result": {"resourceSpans": merged}}).encode())


@pytest.fixture
def jaeger_server(tmp_path):
    now = time.time_ns()
    tree = write_tree(tmp_path / "tree", 7, 2, start_ns=now - 3 * 86400 * 10**9)  # 10 min apart, 3 days ago
    PagedJaeger.traces, PagedJaeger.requests = {}, []
    for file in sorted(tree.rglob("*.jsonl")):
        for text in file.read_text().splitlines():
            for rs in json.loads(text)["resourceSpans"]:
                spans = [s for ss in rs["scopeSpans"] for s in ss["spans"]]
                trace = spans[0]["traceId"]
                start = min(int(s["startTimeUnixNano"]) for s in spans)
                old_start, parts = PagedJaeger.traces.get(trace, (start, []))
                PagedJaeger.traces[trace] = (min(start, old_start), [*parts, rs])
    with loopback.Loopback(PagedJaeger) as server:
        yield server.url


def test_a_jaeger_search_is_paged_until_every_trace_is_read(jaeger_server, monkeypatch, capsys):
    monkeypatch.setattr(jaeger, "PAGE_TRACES", 3)
    rows = jobs_json(capsys, "--jaeger", jaeger_server, "--service", "loadtrace", "--since", "7d")["jobs"]
    assert [row["job_id"] for row in rows] == [f"bench-{job:05d}" for job in range(7)]
    assert all(row["world_size"] == 2 and row["model_bytes"] == MODEL_BYTES for row in rows)
    pages = [q for q in PagedJaeger.requests]
    # Pages of traces 6-4, 4-2 (4 again: a page's window ends where the page before began), 2-0, then 0 alone: fewer
    # than 3, the last page. Each trace counted once.
    assert len(pages) == 4 and {q["query.num_traces"] for q in pages} == {"3"}
    maxes = [parse_rfc3339_nanos(q["query.start_time_max"]) for q in pages]
    assert maxes == sorted(maxes, reverse=True) and len(set(maxes)) == 4
    starts = sorted(start for start, _ in PagedJaeger.traces.values())
    assert maxes[1:] == [starts[4], starts[2], starts[0]]


def test_a_jaeger_search_with_nothing_to_show_is_one_line(jaeger_server, capsys):
    assert "no traces found: service 'other'" in fails(capsys, "--jaeger", jaeger_server, "--service", "other")
    assert "no traces" in fails(capsys, "--jaeger", jaeger_server, "--service", "loadtrace", "--since", "1h")


def test_an_unreachable_jaeger_is_one_line(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert "cannot reach Jaeger" in fails(capsys, "--jaeger", f"http://127.0.0.1:{port}", "--service", "loadtrace")


# compare --fail-if-slower -------------------------------------------------------------------------------------------


def test_compare_fails_when_b_starts_slower_than_allowed(tree, capsys):
    alpha, beta = tree / "bench-00000", tree / "bench-00001"  # beta's job starts 2.5x slower
    assert main(["compare", str(alpha), str(beta), "--fail-if-slower", "20"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "B's startup 0.299 s is 150.0% slower than A's 0.119 s (more than --fail-if-slower 20%)" in err
    assert main(["compare", str(alpha), str(beta), "--fail-if-slower", "200"]) == 0
    assert main(["compare", str(beta), str(alpha), "--fail-if-slower", "0"]) == 0
    assert main(["compare", str(alpha), str(tree / "bench-00003"), "--fail-if-slower", "0"]) == 0  # the same: 0%
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as bad:
        main(["compare", str(alpha), str(beta), "--fail-if-slower", "-5"])
    assert bad.value.code == 2
