"""Promise (docs/jaeger.md, issue 47): the trace a person opens in Jaeger's own UI tells the story without clicking.
Every row says its rank, in its rank's colour, a rank's rows together and the ranks in order; the findings come first,
each named by its kind with its ranks, bytes and next step; a load's figures read in words before anything else; a
healthy job draws no warning; the search list names each job by its model and world size, and a tag search finds it by
its id, model and cluster; rank 0's closing line and ``loadtrace report`` link its loads with the flagged ranks'
highlighted, each load at a readable width. ``loadtrace annotate`` does the same for a trace already in Jaeger whose
rank 0 died.

The real backends (scripts/build_backends.sh) and the real UI (../shared/jaeger-ui/build, served by that Jaeger),
driven by Debian's Chromium: a real 2-rank FSDP ``cpu_ram_efficient_loading`` job over OTLP/HTTP with files too; a
real two-node job (two torchrun launchers in UTS namespaces of their own, 2 ranks each). Jobs of many ranks:
test_jaeger_ui_at_scale.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import backends, jaeger_ui
from support.cli import run, run_json
from support.installed import file_spans, require_installed
from support.multirank import EXAMPLE_WORKER
from support.torchrun import clean_env, free_port, torchrun
from support.venvs import discover
from support.wire import WIRE_CLUSTER, wire_env

from loadtrace import semconv as sc


@dataclass
class Job:
    folder: Path  # its trace files
    job_id: str
    trace_id: str
    loads_id: str  # its loads view's trace id
    closing: str  # rank 0's closing line
    model: str  # what the trace is named after: the checkpoint's folder


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Jaeger serving the UI, the collector in front of it."""
    jaeger_ui.require_ui()
    folder = tmp_path_factory.mktemp("ui-backends")
    replayed = folder / "nothing-to-replay"
    replayed.mkdir()
    with jaeger_ui.Jaeger(folder) as jaeger:
        sets = {
            "exporters.otlp/jaeger.endpoint": jaeger.otlp_grpc,
            "receivers.otlpjsonfile.include": f"[{replayed}/**/*.jsonl]",
        }
        with backends.Collector(folder, "collector.yaml", sets) as collector:
            yield jaeger, collector


@pytest.fixture(scope="module")
def browser(stack, tmp_path_factory):
    with jaeger_ui.browser(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


def arrived(jaeger, trace_id: str, expected: int) -> Any:
    """The trace once Jaeger holds ``expected`` spans of it, and 5 s more (a late second copy would show)."""

    def whole() -> Any:
        status, answer = jaeger.trace(trace_id, raw=True)
        found = sum(len(ss["spans"]) for rs in answer.get("result", {}).get("resourceSpans", [])
                    for ss in rs["scopeSpans"]) if status == 200 else 0  # fmt: skip
        return found if found >= expected else None

    return backends.wait_for(f"{expected} spans of trace {trace_id}", whole, settle_s=5)


def spans_of(folder: Path, trace_id: str) -> int:
    return sum(1 for _, span in file_spans(folder) if span["traceId"] == trace_id)


@pytest.fixture(scope="module")
def fsdp(stack, checkpoint: Path, tmp_path_factory) -> Job:
    jaeger, collector = stack
    venv = discover()[0]
    require_installed(venv)
    cwd = tmp_path_factory.mktemp("ui-fsdp")
    job_id = f"ui-fsdp-{os.getpid()}"
    env = {
        **wire_env("fsdp", cwd / "files", collector.http, "http/protobuf"),
        "LOADTRACE_JOB_ID": job_id,
        "LOADTRACE_QUIET": "0",  # rank 0's closing line, with its link
        sc.ENV_JAEGER_URL: jaeger.url,
    }
    result = torchrun(venv, EXAMPLE_WORKER, [str(checkpoint), "--mode", "fsdp"], cwd=cwd, env=env).check()
    closing = [line for line in result.log.read_text().splitlines() if line.startswith("loadtrace: job ")]
    trace_id, loads_id = f"{sc.job_trace_ids(job_id)[0]:032x}", f"{sc.loads_trace_id(job_id):032x}"
    folder = cwd / "files"
    assert list(folder.glob("annotations-*.jsonl")), f"rank 0 wrote no findings:\n{result.tail()}"
    arrived(jaeger, trace_id, spans_of(folder, trace_id))
    arrived(jaeger, loads_id, spans_of(folder, loads_id))
    return Job(folder, job_id, trace_id, loads_id, closing[-1] if closing else "", checkpoint.name)


def test_a_healthy_job_draws_no_warning(stack, fsdp):
    jaeger, _ = stack
    for trace_id in (fsdp.trace_id, fsdp.loads_id):
        trace = jaeger_ui.ui_trace(jaeger, trace_id)
        assert not jaeger_ui.warnings(trace), jaeger_ui.warnings(trace)


def test_every_row_says_its_rank(stack, fsdp, browser, tmp_path):
    jaeger, _ = stack
    opened = jaeger_ui.open_trace(browser, jaeger.url, fsdp.trace_id)
    rows = jaeger_ui.rows(opened.page)
    opened.page.screenshot(path=str(tmp_path / "job.png"))
    assert opened.errors == []
    jaeger_ui.ranks_told_apart(rows, 2)
    assert rows[0].service == "loadtrace" and rows[0].operation == f"{fsdp.model} on 2 ranks"


def test_the_findings_come_first_named_by_their_kind(stack, fsdp, browser, capsys):
    jaeger, _ = stack
    report = run_json(capsys, "report", str(fsdp.folder))
    rows = jaeger_ui.rows(jaeger_ui.open_trace(browser, jaeger.url, fsdp.trace_id).page)
    kinds = [f["kind"] for f in report["findings"]]
    assert {"duplicate_checkpoint_read", "nonzero_rank_materialization"} <= set(kinds)
    assert [row.operation for row in rows[1 : 2 + len(kinds)]] == [sc.SPAN_FINDINGS, *kinds]
    trace = jaeger_ui.ui_trace(jaeger, fsdp.trace_id)
    spans = {s["spanID"]: s for s in trace["spans"]}
    load_of_rank1 = next(
        s for s in trace["spans"]
        if s["operationName"] == sc.SPAN_FROM_PRETRAINED and jaeger_ui.tag(trace, s, sc.RANK) == 1
    )  # fmt: skip
    for finding in report["findings"]:
        (span,) = [s for s in spans.values() if s["operationName"] == finding["kind"]]
        tags = {t["key"]: t["value"] for t in span["tags"]}
        assert tags[sc.FOUND_BYTES] == finding["bytes"] and tags[sc.FOUND_SEVERITY] == finding["severity"]
        assert tags[sc.FOUND_RANKS] == "rank 1" and finding["ranks"] == [1]
        assert tags[sc.FOUND_NEXT] == finding["next_step"] and tags[sc.ABOUT].startswith("WARNING rank 1: ")
        linked = [(r["traceID"], r["spanID"]) for r in span["references"] if r["refType"] == "FOLLOWS_FROM"]
        assert linked[0] == (fsdp.trace_id, load_of_rank1["spanID"]), "from the finding to rank 1's load"
        assert [trace for trace, _ in linked[1:]] == [fsdp.loads_id], "and to its copy in the loads view"


def test_a_load_says_its_figures_first_in_words(stack, fsdp):
    jaeger, _ = stack
    trace = jaeger_ui.ui_trace(jaeger, fsdp.trace_id)
    for load in (s for s in trace["spans"] if s["operationName"] == sc.SPAN_FROM_PRETRAINED):
        keys = [t["key"] for t in load["tags"]]
        assert keys[:5] == [sc.ABOUT, *(sc.about_key(w) for w in ("converted", "created", "held", "memory"))], keys
        assert jaeger_ui.tag(trace, load, sc.ABOUT) == "read 1.0 MB, 100 % of the model: 69 tensors from 5 files"
        assert not set(keys) & sc.DATA_KEYS, "no timestamps or JSON among the tags"
        events = [log["fields"][0] for log in load["logs"]]
        assert {"key": "event", "type": "string", "value": sc.DATA_EVENT} in events, "the values on their event"
    ranks = [span for span in trace["spans"] if trace["processes"][span["processID"]]["serviceName"] != "loadtrace"]
    assert all(any(t["key"] == sc.RANK for t in span["tags"]) for span in ranks), "the rank a span tag, every rank's"


def test_the_search_list_names_the_job_and_tags_find_it(stack, fsdp, browser):
    jaeger, _ = stack
    for key, value in ((sc.JOB_ID, fsdp.job_id), (sc.MODEL, fsdp.model), (sc.CLUSTER, WIRE_CLUSTER)):
        query = urllib.parse.urlencode({"service": "loadtrace", "tags": json.dumps({key: value}), "lookback": "1h"})
        found = {trace["traceID"] for trace in jaeger_ui.api(jaeger, f"traces?{query}")["data"]}
        assert fsdp.trace_id in found, (key, found)
    page = browser.new_page()
    query = urllib.parse.urlencode({"service": "loadtrace", "tags": json.dumps({sc.JOB_ID: fsdp.job_id})})
    page.goto(f"{jaeger.url}/search?{query}&lookback=1h", wait_until="load")
    page.wait_for_selector(".ResultItemTitle", timeout=60_000)
    titles = page.locator(".ResultItemTitle--title").all_inner_texts()
    assert any(f"loadtrace: {fsdp.model} on 2 ranks" in title for title in titles), titles


def test_the_closing_line_and_the_report_link_the_flagged_loads(stack, fsdp, browser, capsys, tmp_path):
    jaeger, _ = stack
    link = fsdp.closing.rsplit(" · ", 1)[-1]
    assert link.startswith(f"{jaeger.url}/trace/{fsdp.loads_id}?uiFind="), fsdp.closing
    code, out, _ = run(capsys, "report", "--jaeger", jaeger.url, "--trace-id", fsdp.trace_id)
    (job_link,) = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("Jaeger: ")]
    (loads_link,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("  its loads alone: ")]
    assert code == 0 and loads_link == link
    for trace_id, url in ((fsdp.trace_id, job_link), (fsdp.loads_id, loads_link)):
        find = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["uiFind"][0]
        opened = jaeger_ui.open_trace(browser, jaeger.url, trace_id, find)
        opened.page.wait_for_timeout(500)
        trace = jaeger_ui.ui_trace(jaeger, trace_id)
        loads = {
            s["spanID"]: jaeger_ui.tag(trace, s, sc.RANK)
            for s in trace["spans"]
            if s["operationName"] == sc.SPAN_FROM_PRETRAINED
        }
        assert [loads.get(key) for key in jaeger_ui.matching(opened.page)] == [1], "rank 1's load alone"  # the flagged
    # Its loads at a readable width: each rank's load a tenth of the timeline or more (how far apart the ranks loaded
    # decides how much more), against a sliver behind the imports in the job's trace
    opened = jaeger_ui.open_trace(browser, jaeger.url, fsdp.loads_id)
    widths = [row.width for row in jaeger_ui.rows(opened.page) if row.operation == sc.SPAN_FROM_PRETRAINED]
    job_widths = [
        row.width
        for row in jaeger_ui.rows(jaeger_ui.open_trace(browser, jaeger.url, fsdp.trace_id).page)
        if row.operation == sc.SPAN_FROM_PRETRAINED
    ]
    opened.page.screenshot(path=str(tmp_path / "loads.png"))
    print(f"[jaeger ui] loads' widths: {widths} in the loads view, {job_widths} in the job's trace")
    assert len(widths) == 2 and min(widths) >= 0.1 and 5 * max(job_widths) < min(widths), (widths, job_widths)


def test_report_from_jaeger_is_the_report_over_files(stack, fsdp, capsys):
    jaeger, _ = stack
    files = run_json(capsys, "report", str(fsdp.folder))
    got = run_json(capsys, "report", "--jaeger", jaeger.url, "--trace-id", fsdp.trace_id)
    assert (got["ranks"], got["findings"], got["traces"]) == (files["ranks"], files["findings"], files["traces"])


@pytest.fixture(scope="module")
def two_nodes(stack, checkpoint: Path, tmp_path_factory) -> tuple[str, Path]:
    """A healthy two-node job: two torchrun launchers, each in a UTS namespace of its own (its own host name: what
    Jaeger tells hosts apart by), static rendezvous, 2 ranks each, every rank sending OTLP and writing its node's
    files into a folder of the node's own. (its trace id, its files' root)"""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    jaeger, collector = stack
    venv = discover()[0]
    require_installed(venv)
    cwd, port = tmp_path_factory.mktemp("ui-two-nodes"), free_port()
    job_id = f"ui-two-nodes-{os.getpid()}"
    launchers = []
    for node in (0, 1):
        env = clean_env(venv, {
            "LOADTRACE": "1",
            "LOADTRACE_JOB_ID": job_id,
            "LOADTRACE_DIR": str(cwd / f"node{node}"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.http,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "LOADTRACE_EXIT_TIMEOUT": "10",
        })  # fmt: skip
        torchrun_ = [
            str(venv.torchrun),
            *("--nnodes", "2", "--nproc_per_node", "2", "--node_rank", str(node)),
            *("--master_addr", "127.0.0.1", "--master_port", str(port)),
            *(str(EXAMPLE_WORKER), str(checkpoint), "--mode", "plain"),
        ]
        with (cwd / f"node{node}.log").open("w") as log:
            launchers.append(
                subprocess.Popen(
                    ["unshare", "-u", "sh", "-c", f'hostname node{node} && exec "$@"', "sh", *torchrun_],
                    cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )
            )  # fmt: skip
    try:
        codes = [launcher.wait(timeout=300) for launcher in launchers]
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
    logs = [(cwd / f"node{node}.log").read_text(errors="replace")[-3000:] for node in (0, 1)]
    assert codes == [0, 0], "\n".join(logs)
    trace_id = f"{sc.job_trace_ids(job_id)[0]:032x}"
    arrived(jaeger, trace_id, spans_of(cwd, trace_id))
    return trace_id, cwd


def test_two_nodes_draw_no_warning_and_every_rank_has_its_row(stack, two_nodes, browser):
    jaeger, _ = stack
    trace_id, _ = two_nodes
    trace = jaeger_ui.ui_trace(jaeger, trace_id)
    assert not jaeger_ui.warnings(trace), jaeger_ui.warnings(trace)
    hosts = {jaeger_ui.tag(trace, span, sc.HOST_NAME) for span in trace["spans"]} - {None}
    assert hosts == {"node0", "node1"}
    jaeger_ui.ranks_told_apart(jaeger_ui.rows(jaeger_ui.open_trace(browser, jaeger.url, trace_id).page), 4)
