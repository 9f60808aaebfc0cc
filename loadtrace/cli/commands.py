"""The ``loadtrace`` command (report, compare, timeline, view, jobs, rollup, ingest, top): a thin argparse shell over
``loadtrace.analysis``.

Arguments → a source (files or Jaeger) → the analysis' typed report → ``loadtrace.render``'s table or the model's
JSON on stdout. Exit status: 0, 1
when ``--fail-on-findings`` meets a warning or ``--fail-on-oom`` / ``--fail-on-uncertain`` a forecast verdict (one
line on stderr says why), 2 for bad input (one ``loadtrace: error: ...`` line on stderr, never a traceback). Imports
nothing of loadtrace's instrumentation, so it runs where torch and OTel are not installed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtrace.analysis import ingest, rollup
from loadtrace.analysis.compare import PICK_HELP, compare, pick_job
from loadtrace.analysis.forecast import DTYPE_BYTES, ForecastError, Target
from loadtrace.analysis.jobs import KEYS, GroupsReport, JobsReport, check_keys, jobs_report, jobs_report_of_tree
from loadtrace.analysis.model import to_json
from loadtrace.analysis.ranks import Job, jobs_from_spans
from loadtrace.analysis.report import report, select_jobs
from loadtrace.analysis.sources import SourceError, SpanSet, clickhouse, jaeger, read_files
from loadtrace.analysis.startup import Thresholds, job_startup
from loadtrace.analysis.timeline import timeline
from loadtrace.cli import annotate, render, render_timeline, view
from loadtrace.cli.top import DEFAULT_FOLDER_HELP, default_folder
from loadtrace.semconv import redact_secrets
from loadtrace.version import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
RECORD_HELP = """\
record a trace (every rank of an unchanged job; files go to ./loadtrace-traces/<job id>/):
  LOADTRACE=1 torchrun --nproc_per_node 8 train.py
then report it (rank 0 prints this command when the job ends):
  loadtrace report loadtrace-traces/ --latest
"""


def version() -> str:
    """The version the package's build took (``version.py``: no distribution metadata to read on every command)."""
    return __version__


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is the same one line as every other bad input."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_BAD_INPUT, f"loadtrace: error: {message} (see {self.prog} --help)\n")


# Each command's line in ``loadtrace --help``, and the description atop its own ``--help`` (None: that line).
COMMAND_HELP: dict[str, tuple[str, str | None]] = {
    "report": ("per-rank table and findings for one or more jobs", None),
    "compare": (
        "two jobs side by side, per phase and rank, and every load parameter that differs",
        "Two jobs side by side: per phase and rank, time, bytes, memory and I/O; then every recorded load parameter "
        "that differs (dtype, device map, strategy, world size, checkpoint, library versions, ...). A and B may be the "
        "same folder: pick each side's job with --a-job / --b-job.",
    ),
    "timeline": (
        "one job as a picture: a lane per rank, its phases as bars (an HTML page, or Chrome trace JSON)",
        "One job as a timeline: a lane per rank, grouped by node, every span a bar with its bytes; killed, failed and "
        "slow ranks and the report's findings marked; hover a bar for its attributes. The HTML page is one "
        "self-contained file (it loads nothing from the network); --format chrome writes trace-event JSON for "
        "Perfetto (ui.perfetto.dev) or chrome://tracing.",
    ),
    "view": (
        "print the commands that show DIR's trace files in Jaeger (Docker, or the built binaries), from any folder",
        "Print the Docker Compose command that replays every *.jsonl under DIR into a local Jaeger (an OpenTelemetry "
        "Collector in front of Jaeger v2, docker-compose.yml), with DIR as an absolute path, so it runs from any "
        "folder. Where Docker is absent (no docker on PATH, or no daemon it could reach), the commands that start the "
        "same two programs as binaries on this host instead (scripts/build_backends.sh builds them), every port "
        "named. Its output is a shell script (pipe it to sh).",
    ),
    "jobs": (
        "one row per job of many (a folder tree, a Jaeger search), grouped, with the differences in words",
        "One row per job: start time, job id, cluster, world size, model bytes, library versions, startup seconds "
        "(slowest rank), median rank, slowest rank and phase, findings by kind; then statistics per group "
        "(--group-by) and the largest differences between groups.",
    ),
    "rollup": (
        "compute each ended job's jobs row once, into a table beside ClickHouse's otel_traces (for a fleet)",
        "Compute the jobs row of every job of --clickhouse URL whose spans stopped arriving --quiet ago, once, and "
        "keep it in <table>_loadtrace_jobs beside the spans (with <table>_loadtrace_traces, an index the server "
        "keeps; in a chDB directory both in database default_loadtrace, opened without the span table); "
        "`loadtrace jobs --clickhouse URL` then reads those rows instead of every span. Run it every few "
        "minutes (the fleet profile does); a job that gains spans later is computed again.",
    ),
    "ingest": (
        "put a folder's trace and state files into ClickHouse's otel_traces table (as the collector would have)",
        "Write every span of FOLDER's *.jsonl files (the launcher's witness files included) and every *.state file "
        "into --clickhouse URL's otel_traces table, by the collector-contrib clickhouseexporter's own mapping; the "
        "table is created where missing. What the table holds already is not written again: a second run adds "
        "nothing, a job that gained spans since gains only those. Then jobs, report, compare, timeline and rollup "
        "--clickhouse answer for those jobs as they do for FOLDER.",
    ),
    "annotate": (
        "write a job's findings into its trace in Jaeger, near its top, and its loads in a trace of their own",
        "Write the report's findings into the job's own trace (near its top, each a span named by its kind, linking to "
        "its ranks' loads), the trace's root and rank groups where rank 0 never wrote them (it died), and the job's "
        "loads alone in a trace of their own, where each rank's load is not a sliver behind its imports. Rank 0 does "
        "this at the end of a job over the files it sees; run it for a job it could not see whole (nodes without "
        "shared storage) or that died: from the job's folder, or --jaeger URL --trace-id ID, sending with --otlp URL "
        "(else OTEL_EXPORTER_OTLP_ENDPOINT). Prints the Jaeger links when --jaeger or LOADTRACE_JAEGER_URL is set.",
    ),
    "top": (
        "watch a load while it happens: every rank's phase, bytes, rate, ETA and memory, refreshed each second",
        "A live view of the state files under DIR (one node's ranks, or every node's on a shared filesystem): status, "
        "phase, files, bytes read of the bytes expected, rate, ETA, seconds since the last progress, RSS and peak "
        "against the memory limit; marks the slowest rank, a stuck one (no progress for 30 s) and one whose memory "
        "trend reaches its limit before its load can end (oom_ahead). q or Ctrl-C leaves.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="loadtrace",
        description="Analyse loadtrace spans: per-rank load work and duplicate work.",
        epilog=RECORD_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add_command in (
        _add_report_command,
        _add_compare_command,
        _add_timeline_command,
        _add_view_command,
        _add_jobs_command,
        _add_rollup_command,
        _add_ingest_command,
        _add_top_command,
        _add_annotate_command,
    ):
        add_command(commands)
    return parser


def _command(commands: Any, name: str, run: Any) -> argparse.ArgumentParser:
    """One subcommand's parser, with its texts from ``COMMAND_HELP``; it runs ``run(args)``."""
    help_, description = COMMAND_HELP[name]
    parser = commands.add_parser(name, help=help_, description=description)
    parser.set_defaults(run=run)
    return parser


def _add_report_command(commands: Any) -> None:
    report_ = _command(commands, "report", run_report)
    report_.add_argument(
        "source",
        nargs="?",
        help=f"a .jsonl or .state file, or a directory of them (not with --jaeger); {DEFAULT_FOLDER_HELP}",
    )
    _add_jaeger_options(report_, line=True)
    report_.add_argument("--job", metavar="ID", help=f"report one job of SOURCE: {PICK_HELP}")
    report_.add_argument(
        "--latest",
        action="store_true",
        help="report only the job that started last: one attempt and run (with --job ID: of that job's; with "
        "--jaeger: of --service, default loadtrace)",
    )
    report_.add_argument("--trace-id", help="with --jaeger: the job's trace id")
    report_.add_argument("--service", help="with --jaeger: search this service's traces")
    report_.add_argument(
        "--since", default="1h", help="with --service: how far back to search (30m, 1h, 2d; default 1h)"
    )
    report_.add_argument(
        "--wide", action="store_true", help="every column (files, tensors, conversions too), wider than 120 columns"
    )
    _add_ranks_option(report_)
    report_.add_argument("--fail-on-findings", action="store_true", help="exit 1 when a warning-level finding exists")
    _add_threshold_options(report_)
    _add_forecast_options(report_)


def _add_forecast_options(report_: argparse.ArgumentParser) -> None:
    forecast = report_.add_argument_group(
        "forecast", "scale this (small) job's measured memory to a target model and say whether a node will hold it"
    )
    forecast.add_argument(
        "--forecast-model-bytes", type=byte_size, metavar="BYTES", help="the target model's bytes: 54e9, 54GB, 50GiB"
    )
    forecast.add_argument(
        "--forecast-params", type=count, metavar="N", help="or its parameter count (7e9, 7B) with --forecast-dtype"
    )
    forecast.add_argument("--forecast-dtype", choices=tuple(DTYPE_BYTES), help="with --forecast-params")
    forecast.add_argument(
        "--ranks-per-node", type=positive_int, metavar="N", help="ranks on one node (default: as in the measured job)"
    )
    forecast.add_argument(
        "--forecast-world-size",
        type=positive_int,
        metavar="N",
        help="ranks in the target job (default: the measured world size, or --ranks-per-node when larger)",
    )
    forecast.add_argument(
        "--node-memory-bytes",
        type=byte_size,
        metavar="BYTES",
        help="the target node's memory (default: the measured node's MemTotal, or its cgroup limit when lower)",
    )
    forecast.add_argument("--fail-on-oom", action="store_true", help="exit 1 when the forecast's verdict is oom")
    forecast.add_argument(
        "--fail-on-uncertain",
        action="store_true",
        help="exit 1 when the verdict is oom or uncertain (the node's memory inside the range) or unknown",
    )


def _add_compare_command(commands: Any) -> None:
    compare_ = _command(commands, "compare", run_compare)
    compare_.add_argument("a", metavar="A", help="a .jsonl file or directory, or a trace id with --jaeger")
    compare_.add_argument("b", metavar="B", help="the same for the other job (may be the same as A)")
    for side in ("a", "b"):
        compare_.add_argument(
            f"--{side}-job",
            metavar="ID",
            help=f"which job of {side.upper()} when it holds several: {PICK_HELP} (ID@ATTEMPT.RUN for a rerun)",
        )
    _add_jaeger_options(compare_)
    compare_.add_argument(
        "--fail-if-slower",
        type=non_negative_float,
        metavar="PCT",
        help="exit 1 when B's startup (its slowest rank) is more than PCT percent slower than A's (for CI)",
    )
    compare_.add_argument(
        "--wide", action="store_true", help="the table in exact bytes, not human sizes (as --format json has them)"
    )
    _add_ranks_option(compare_)


def _add_ranks_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ranks",
        choices=("alike", "all"),
        default="alike",
        help="alike: ranks that behaved alike share a row, outliers each have their own (default); all: a row per "
        "rank. --format json always lists every rank",
    )


def _add_timeline_command(commands: Any) -> None:
    timeline_ = _command(commands, "timeline", run_timeline)
    timeline_.add_argument(
        "source", nargs="?", help=f"a .jsonl or .state file, or a directory of them; {DEFAULT_FOLDER_HELP}"
    )
    _add_clickhouse_options(timeline_)
    timeline_.add_argument("--job", metavar="ID", help=f"which job when SOURCE holds several: {PICK_HELP}")
    timeline_.add_argument("--latest", action="store_true", help="the job that started last")
    timeline_.add_argument(
        "-o", "--output", metavar="FILE", help="where to write it (default: <job id>.html or .trace.json; - for stdout)"
    )
    timeline_.add_argument(
        "--format",
        choices=("html", "chrome"),
        default="html",
        help="html: a page for any browser (default); chrome: Chrome trace-event JSON",
    )


def _add_view_command(commands: Any) -> None:
    parser = _command(commands, "view", run_view)
    parser.add_argument("dir", metavar="DIR", help="a folder of trace files: loadtrace-traces/, or one job's folder")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--docker", action="store_true", help="the Docker Compose command, whether or not Docker is here")
    how.add_argument(
        "--binaries", action="store_true", help="the built Jaeger and collector binaries, whether or not Docker is here"
    )
    parser.add_argument(
        "--port-offset",
        type=int,
        default=0,
        metavar="N",
        help="binaries: every port N higher (4318 becomes 4318+N), beside another user's backends on this host",
    )
    parser.add_argument(
        "--jaeger-ui",
        metavar="DIR",
        default=os.environ.get(view.JAEGER_UI) or None,
        help="binaries: a built jaeger-ui (the folder of its index.html) for Jaeger to serve; Jaeger built from its Go "
        "module has none (default: $LOADTRACE_JAEGER_UI)",
    )


def _add_top_command(commands: Any) -> None:
    top = _command(commands, "top", run_top)
    top.add_argument("dir", nargs="?", metavar="DIR", help=DEFAULT_FOLDER_HELP)
    top.add_argument("--once", action="store_true", help="print one snapshot and exit (for scripts)")
    top.add_argument(
        "--format", choices=("table", "json"), default="table", help='with --once: json prints {"ranks": [...]}'
    )


def run_top(args: argparse.Namespace) -> int:
    from loadtrace.cli import top  # curses only for this command

    return top.run(args.dir, args.once, args.format)


def _add_jobs_command(commands: Any) -> None:
    jobs_ = _command(commands, "jobs", run_jobs)
    jobs_.add_argument("source", nargs="?", help="a folder tree of many jobs' .jsonl files (not with --jaeger)")
    _add_jaeger_options(jobs_)
    jobs_.add_argument("--service", help="with --jaeger: search this service's traces")
    jobs_.add_argument(
        "--since", default="7d", help="with --jaeger or --clickhouse: how far back to search (30m, 1h, 7d; default 7d)"
    )
    keys = ", ".join(KEYS)
    jobs_.add_argument(
        "--where", action="append", default=[], metavar="KEY=VALUE", help=f"keep jobs whose KEY is VALUE ({keys})"
    )
    jobs_.add_argument("--group-by", metavar="KEY[,KEY]", help=f"group statistics by these keys ({keys})")
    jobs_.add_argument(
        "--groups-only",
        action="store_true",
        help="print the groups and their differences, not the rows (with --clickhouse and a rollup, computed in the "
        "server)",
    )
    _add_threshold_options(jobs_)


def _add_rollup_command(commands: Any) -> None:
    rollup_ = _command(commands, "rollup", run_rollup)
    _add_clickhouse_options(rollup_)
    rollup_.add_argument("--since", default="7d", help="roll up the jobs that began this far back (default 7d)")
    rollup_.add_argument(
        "--quiet", default="5m", help="a job whose last span ended this long ago has ended (default 5m)"
    )
    _add_threshold_options(rollup_)


def _add_ingest_command(commands: Any) -> None:
    ingest_ = _command(commands, "ingest", run_ingest)
    ingest_.add_argument("folder", metavar="FOLDER", help="a folder of trace files: loadtrace-traces/, or one job's")
    _add_clickhouse_options(ingest_)


def _add_annotate_command(commands: Any) -> None:
    annotate_ = _command(commands, "annotate", run_annotate)
    annotate.add_arguments(annotate_)


def run_annotate(args: argparse.Namespace) -> int:
    return annotate.run(args, default_folder())


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def run_ingest(args: argparse.Namespace) -> int:
    if args.clickhouse is None:
        raise SourceError("ingest needs --clickhouse URL (http(s)://HOST:8123[/DATABASE] or chdb:PATH)")
    done = ingest.ingest(args.folder, args.clickhouse, args.clickhouse_table)
    skipped = [
        f"{_counted(count, 'unreadable ' + what)} skipped"
        for count, what in ((done.skipped_lines, "line"), (done.skipped_state_files, "state file"))
        if count
    ]
    print(
        f"loadtrace ingest: {_counted(done.spans, 'span')} and {_counted(done.states, 'state file')} of "
        f"{_counted(len(done.traces), 'trace')} written into {done.table}{' (created)' if done.created else ''}; "
        f"{done.present} {'was' if done.present == 1 else 'were'} there already"
        + "".join(f"; {text}" for text in skipped)
    )
    return EXIT_OK


def run_rollup(args: argparse.Namespace) -> int:
    if args.clickhouse is None:
        raise SourceError("rollup needs --clickhouse URL (http(s)://HOST:8123[/DATABASE] or chdb:PATH)")
    since, quiet = jaeger.parse_duration(args.since), jaeger.parse_duration(args.quiet)
    done = rollup.roll_up_url(args.clickhouse, args.clickhouse_table, thresholds(args), since, quiet)
    print(
        f"loadtrace rollup: {done.jobs} jobs of {done.traces} traces rolled up into {done.table}; "
        f"{done.waiting} traces still active (a span ended in the last {args.quiet})"
    )
    return EXIT_OK


# Flag values: a bad one is argparse's one-line error, exit 2.

_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
_BYTE_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50})
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_NUMBER = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d+))?\s*([a-z]*)\s*", re.IGNORECASE)


class Size(int):
    """A flag's number, remembering how the user wrote it (``54e9``) for the forecast's basis."""

    text: str

    def __new__(cls, value: int, text: str) -> Size:
        size = super().__new__(cls, value)
        size.text = text
        return size


def _scaled(text: str, units: dict[str, int], what: str) -> Size:
    match = _NUMBER.fullmatch(text)
    unit = match.group(3).lower() if match else None
    if match is None or unit not in units:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    exponent = int(match.group(2) or 0)
    if abs(exponent) > 30:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range")
    value = float(match.group(1)) * 10.0**exponent * units[unit]
    if not math.isfinite(value) or value >= 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range")
    if round(value) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size")
    return Size(round(value), text.strip())


def byte_size(text: str) -> Size:
    """``54e9``, ``54000000000``, ``54GB``, ``50GiB`` → bytes."""
    return _scaled(text, _BYTE_UNITS, "a byte count (54e9, 54GB, 50GiB)")


def count(text: str) -> Size:
    """``7e9``, ``7B``, ``7000M`` → a count."""
    return _scaled(text, _COUNT_UNITS, "a count (7e9, 7B, 7000M)")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative number")
    return value


def _add_threshold_options(parser: argparse.ArgumentParser) -> None:
    """The startup findings' thresholds (docs/report.md, Startup)."""
    group = parser.add_argument_group("startup findings' thresholds")
    defaults = Thresholds()
    for flag, dest, help_ in (
        ("--slow-rank-ratio", "slow_rank_ratio", "slow_rank: at least this many times the other ranks' median"),
        ("--slow-rank-seconds", "slow_rank_seconds", "slow_rank: and at least this many seconds behind it"),
        ("--slow-storage-ratio", "slow_storage_ratio", "slow_storage: under this share of the job's median node"),
        ("--rendezvous-wait-seconds", "rendezvous_wait_seconds", "rendezvous_wait: waited longer than this"),
    ):
        default = getattr(defaults, dest)
        group.add_argument(
            flag,
            dest=dest,
            type=non_negative_float,
            default=default,
            metavar="N",
            help=f"{help_} (default {default:g})",
        )


def thresholds(args: argparse.Namespace) -> Thresholds:
    return Thresholds(
        slow_rank_ratio=args.slow_rank_ratio,
        slow_rank_seconds=args.slow_rank_seconds,
        slow_storage_ratio=args.slow_storage_ratio,
        rendezvous_wait_seconds=args.rendezvous_wait_seconds,
    )


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def forecast_target(args: argparse.Namespace) -> Target | None:
    """The forecast the flags ask for, None when none; a contradiction raises ``ForecastError`` (exit 2)."""
    model, params, dtype = args.forecast_model_bytes, args.forecast_params, args.forecast_dtype
    if model is not None and params is not None:
        raise ForecastError("give either --forecast-model-bytes or --forecast-params, not both")
    if params is not None and dtype is None:
        raise ForecastError(f"--forecast-params needs --forecast-dtype ({'|'.join(DTYPE_BYTES)})")
    if dtype is not None and params is None:
        raise ForecastError("--forecast-dtype goes with --forecast-params")
    if model is None and params is None:
        extra = [
            flag
            for flag, value in (
                ("--ranks-per-node", args.ranks_per_node),
                ("--forecast-world-size", args.forecast_world_size),
                ("--node-memory-bytes", args.node_memory_bytes),
                ("--fail-on-oom", args.fail_on_oom or None),
                ("--fail-on-uncertain", args.fail_on_uncertain or None),
            )
            if value is not None
        ]
        if extra:
            raise ForecastError(f"{extra[0]} goes with --forecast-model-bytes or --forecast-params")
        return None
    if args.ranks_per_node and args.forecast_world_size and args.forecast_world_size < args.ranks_per_node:
        raise ForecastError(
            f"--forecast-world-size {args.forecast_world_size} is smaller than --ranks-per-node {args.ranks_per_node}"
        )
    if params is not None:
        model = params * DTYPE_BYTES[dtype]
        given = f"{params.text} = {int(params):,} parameters x {dtype} ({DTYPE_BYTES[dtype]} B)"
    else:
        given = f"--forecast-model-bytes {model.text}"
    return Target(
        model_bytes=int(model),
        ranks_per_node=args.ranks_per_node,
        world_size=args.forecast_world_size,
        node_memory_bytes=None if args.node_memory_bytes is None else int(args.node_memory_bytes),
        given_as=given,
    )


def _add_clickhouse_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clickhouse",
        metavar="URL",
        help="read the collector's otel_traces table: http(s)://HOST:8123[/DATABASE] (pip install "
        "clickhouse-connect) or chdb:PATH (a chDB database directory)",
    )
    parser.add_argument(
        "--clickhouse-table",
        default=clickhouse.DEFAULT_TABLE,
        metavar="NAME",
        help="with --clickhouse (default %(default)s)",
    )


def _add_jaeger_options(parser: argparse.ArgumentParser, line: bool = False) -> None:
    _add_clickhouse_options(parser)
    parser.add_argument("--jaeger", metavar="URL", help="read from Jaeger's query API (http://HOST:16686)")
    parser.add_argument(
        "--format",
        choices=("table", "json", "line") if line else ("table", "json"),
        default="table",
        help="table: for people, sizes rounded (default); json: every number exact, for scripts"
        + ("; line: ranks, findings and the ranks that stand out, in one line (rank 0's at the end of a job)" * line),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return args.run(args)
    except (SourceError, ForecastError) as error:
        print(f"loadtrace: error: {redact_secrets(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # `loadtrace report ... | head`: the reader left; say nothing, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


# Sources


def _spans_from_jaeger(url: str) -> SpanSet:
    spans = jaeger.fetch(url)
    if not spans.spans:
        raise SourceError(f"no traces found ({url})")
    return spans


def _spans_from_path(path: str, parallel: bool = False) -> SpanSet:
    spans = read_files(path, parallel)
    if not spans.spans and not spans.states:
        states = f" and {spans.skipped_state_files} unreadable state files" if spans.skipped_state_files else ""
        raise SourceError(f"{path}: no spans found ({spans.skipped_lines} unreadable lines{states} skipped)")
    return spans


def _source_or_default(args: argparse.Namespace) -> str:
    """The SOURCE given, else the default folder (one line where it is not there)."""
    if args.source is not None:
        return str(args.source)
    folder = default_folder()
    if not os.path.exists(folder):
        raise SourceError(
            f"{folder}: no such folder; give a SOURCE (a .jsonl file or directory; {DEFAULT_FOLDER_HELP})"
            " or --jaeger URL"
        )
    return folder


def _report_source(args: argparse.Namespace) -> SpanSet:
    if args.clickhouse is not None:
        return _clickhouse_job(args, args.source is not None or args.jaeger is not None)
    if args.jaeger is None:
        if args.trace_id or args.service:
            raise SourceError("--trace-id and --service go with --jaeger")
        return _spans_from_path(_source_or_default(args))
    if args.source is not None:
        raise SourceError("give either a SOURCE path or --jaeger, not both")
    if args.latest and not args.trace_id and not args.service:
        args.service = "loadtrace"  # loadtrace's own service name, unless OTEL_SERVICE_NAME changed it
    if bool(args.trace_id) == bool(args.service):
        raise SourceError("with --jaeger, give either --trace-id ID or --service NAME [--since 1h]")
    if args.trace_id:
        return _spans_from_jaeger(jaeger.trace_url(args.jaeger, args.trace_id))
    # Paged as `jobs` reads it: Jaeger 2.12's memory storage answers a search without query.num_traces with HTTP 500.
    return jaeger.search_all(args.jaeger, args.service, jaeger.parse_duration(args.since))


def _clickhouse_job(args: argparse.Namespace, other_source: bool) -> SpanSet:
    """``--clickhouse URL --job ID``: only that job's spans."""
    if other_source:
        raise SourceError("give one source: a SOURCE path, --jaeger or --clickhouse")
    if not args.job:
        raise SourceError("with --clickhouse, give --job ID (a job id, a trace id or a unique prefix of either)")
    return clickhouse.read_job(args.clickhouse, args.clickhouse_table, args.job)


def _compare_jobs(source: str, args: argparse.Namespace) -> tuple[list[Job], int]:
    if args.clickhouse is not None:
        if args.jaeger is not None:
            raise SourceError("give either --jaeger or --clickhouse, not both")
        spans = clickhouse.read_job(args.clickhouse, args.clickhouse_table, source, "A/B")
        return jobs_from_spans(spans.spans, spans.states), spans.skipped_lines
    spans = _spans_from_jaeger(jaeger.trace_url(args.jaeger, source)) if args.jaeger else _spans_from_path(source)
    return jobs_from_spans(spans.spans, spans.states, spans.damaged_files), spans.skipped_lines


# Commands


def run_report(args: argparse.Namespace) -> int:
    target = forecast_target(args)  # flags first: a contradiction needs no source read
    source = args.source or args.jaeger or args.clickhouse or default_folder()
    result = report(_report_source(args), target, thresholds(args), pick=args.job, latest=args.latest, source=source)
    if args.format == "json":
        print(json.dumps(to_json(result), indent=2))
    elif args.format == "line":
        print("\n".join(render.report_lines(result)))
    else:
        print(render.report_table(result, args.wide, every_rank=args.ranks == "all"))
        url = annotate.jaeger_url(args.jaeger)
        if url is not None:
            print("\n".join(annotate.jaeger_links(result, url)))
    if result.forecast is not None and _fails(result.forecast.verdict, args):
        verdict = result.forecast.verdict or "unknown"
        unknown = "the node's memory is unknown; give --node-memory-bytes"
        why = render.verdict_text(result.forecast) if result.forecast.verdict else unknown
        flag = "--fail-on-oom" if verdict == "oom" and args.fail_on_oom else "--fail-on-uncertain"
        print(f"loadtrace: forecast verdict {verdict} ({flag}): {why}", file=sys.stderr)
        return EXIT_FINDINGS
    return EXIT_FINDINGS if args.fail_on_findings and result.has_warnings else EXIT_OK


def _fails(verdict: str | None, args: argparse.Namespace) -> bool:
    """Whether ``--fail-on-oom`` / ``--fail-on-uncertain`` make this verdict a failure."""
    if verdict == "oom":
        return bool(args.fail_on_oom or args.fail_on_uncertain)
    return verdict != "ok" and bool(args.fail_on_uncertain)


def run_jobs(args: argparse.Namespace) -> int:
    group_by = [key.strip() for key in args.group_by.split(",")] if args.group_by is not None else []
    check_keys(args.where, group_by)  # a bad key before anything is read
    result: JobsReport | GroupsReport | None
    if args.clickhouse is not None:
        if args.source is not None or args.jaeger is not None or args.service:
            raise SourceError("with --clickhouse, give no SOURCE, --jaeger or --service")
        since = jaeger.parse_duration(args.since)
        result = rollup.jobs_of_clickhouse(
            args.clickhouse, args.clickhouse_table, since, args.where, group_by, thresholds(args), args.groups_only
        )
    elif args.jaeger is None:
        if args.source is None:
            raise SourceError("jobs needs a SOURCE (a folder of .jsonl files) or --jaeger URL --service NAME")
        if args.service:
            raise SourceError("--service goes with --jaeger")
        # A tree of job folders: each CPU reads whole folders and hands back their rows; else one process reads all.
        result = jobs_report_of_tree(args.source, args.where, group_by, thresholds(args))
        if result is None:
            spans = _spans_from_path(args.source, parallel=True)
            result = jobs_report(spans, args.where, group_by, thresholds(args))
    else:
        if args.source is not None:
            raise SourceError("give either a SOURCE path or --jaeger, not both")
        if not args.service:
            raise SourceError("with --jaeger, give --service NAME [--since 7d]")
        spans = jaeger.search_all(args.jaeger, args.service, jaeger.parse_duration(args.since))
        result = jobs_report(spans, args.where, group_by, thresholds(args))
    if args.groups_only and isinstance(result, JobsReport):
        result = GroupsReport.of(result)
    text = render.groups_table(result) if isinstance(result, GroupsReport) else render.jobs_table(result)
    print(json.dumps(to_json(result), indent=2) if args.format == "json" else text)
    return EXIT_OK


def run_compare(args: argparse.Namespace) -> int:
    jobs_a, skipped_a = _compare_jobs(args.a, args)
    jobs_b, skipped_b = (jobs_a, skipped_a) if args.b == args.a else _compare_jobs(args.b, args)  # read once
    both = "--b-job" if args.b == args.a and args.a_job is None and args.b_job is None else None
    job_a = pick_job(jobs_a, args.a_job, args.a, "--a-job", both)
    job_b = pick_job(jobs_b, args.b_job, args.b, "--b-job")
    result = compare(job_a, job_b, args.a, args.b, skipped_a, skipped_b)
    every_rank = args.ranks == "all"
    text = render.compare_table(result, args.wide, every_rank) if args.format == "table" else None
    print(json.dumps(to_json(result), indent=2) if text is None else text)
    if args.fail_if_slower is None:
        return EXIT_OK
    return slower_verdict(job_a, job_b, args.fail_if_slower)


def slower_verdict(job_a: Job, job_b: Job, percent: float) -> int:
    """``--fail-if-slower``: exit 1 (and one line why) when B's startup is more than ``percent`` slower than A's."""
    startup_a, startup_b = job_startup(job_a), job_startup(job_b)
    a = startup_a.seconds if startup_a is not None else None
    b = startup_b.seconds if startup_b is not None else None
    if not a or b is None:
        side = "A" if not a else "B"
        raise SourceError(f"--fail-if-slower: {side}'s startup is not known (no load or startup span)")
    slower = 100 * (b - a) / a
    if slower > percent:
        print(
            f"loadtrace: B's startup {b:.3f} s is {slower:.1f}% slower than A's {a:.3f} s"
            f" (more than --fail-if-slower {percent:g}%)",
            file=sys.stderr,
        )
        return EXIT_FINDINGS
    return EXIT_OK


def run_timeline(args: argparse.Namespace) -> int:
    if args.clickhouse is not None:
        spans, where = _clickhouse_job(args, args.source is not None), args.clickhouse
    else:
        if args.job is not None and args.latest:
            raise SourceError("give either --job ID or --latest, not both")
        where = _source_or_default(args)
        spans = _spans_from_path(where)
    jobs = jobs_from_spans(spans.spans, spans.states, spans.damaged_files)
    job = pick_job(select_jobs(jobs, None, True, where) if args.latest else jobs, args.job, where, "--job")
    picture = timeline(job)
    if args.format == "chrome":
        trace = render_timeline.chrome_trace(picture)
        text, suffix = json.dumps(trace, separators=(",", ":"), allow_nan=False), ".trace.json"
    else:
        text, suffix = render_timeline.html_page(picture), ".html"
    if args.output == "-":
        print(text)
        return EXIT_OK
    path = args.output or (job.job_id or job.trace_id).replace(os.sep, "_") + suffix
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise SourceError(f"{path}: {error.strerror or error}") from None
    lanes, nodes = len(picture.lanes), len(picture.nodes)
    print(f"wrote {path}: {lanes} rank{'s' * (lanes != 1)} on {nodes} node{'s' * (nodes != 1)}")
    return EXIT_OK


def compose_file() -> Path:
    """The docker-compose.yml shipped in the wheel (``loadtrace/_compose/``), else the repository's (a source tree)."""
    package = Path(__file__).resolve().parents[1]  # loadtrace/ (this file is loadtrace/cli/commands.py)
    shipped = package / "_compose" / "docker-compose.yml"
    return shipped if shipped.is_file() else package.parent / "docker-compose.yml"


def run_view(args: argparse.Namespace) -> int:
    """With Docker, its Compose command; without, the built binaries' (cli/view.py)."""
    folder = os.path.abspath(args.dir)
    if not os.path.isdir(folder):
        raise SourceError(f"{args.dir}: not a directory of trace files")
    compose = compose_file()
    if not compose.is_file():
        raise SourceError(f"docker-compose.yml not found (looked for {compose}); reinstall loadtrace")
    if not 0 <= args.port_offset <= 60000 - view.Ports().ui:
        raise SourceError(f"--port-offset {args.port_offset}: a port would fall outside 1-65535")
    if args.docker or (not args.binaries and view.docker_usable()):
        lines = view.compose_lines(folder, compose)
    else:
        found = view.binaries()
        ports = view.Ports().moved(args.port_offset)
        ui = Path(args.jaeger_ui).absolute() if args.jaeger_ui else None
        if ui is not None and not (ui / "index.html").is_file():
            raise SourceError(f"--jaeger-ui {args.jaeger_ui}: no index.html there (a built jaeger-ui's folder)")
        lines = view.binaries_script(folder, found, compose.parent / "exporters", view.run_dir(), ports, ui)
    print("\n".join(lines))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
