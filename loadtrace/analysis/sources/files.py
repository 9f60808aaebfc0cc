"""Trace sources → one neutral span model, and the state files ranks leave beside their traces.

OTLP JSON Lines files (what loadtrace writes, one ``TracesData`` per line) become plain ``Span`` records that the rest
of the analysis works on. A truncated last line (a rank killed mid-write), a corrupt line, a line that is not UTF-8
JSON or not of the OTLP shape, and a line longer than ``MAX_LINE_BYTES`` are each skipped and counted, never raised;
a file with such lines, or cut short (its last line without the newline every line of ours ends with), is named in
``damaged_files`` with the processes its readable lines speak for, so the report can mark their ranks ``partial``.
Each process's state file (``*.state``, ``loadtrace.statefile``: its exact running totals, kept by the kernel when the
process dies) is decoded the same way: one that is truncated, corrupt or foreign is skipped and counted.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from ... import semconv as sc
from ... import statefile

# One TracesData line holds one export batch; anything this long is not one of ours, and reading it whole could exhaust
# memory, so it is skipped unread.
MAX_LINE_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024

# Everything a malformed line can raise while being decoded into spans: bad JSON or encoding (ValueError, which covers
# UnicodeDecodeError), the wrong shape (TypeError, KeyError, AttributeError), absurd numbers (OverflowError), or
# nesting deeper than the interpreter allows (RecursionError).
_MALFORMED = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


class SourceError(Exception):
    """A source that cannot be read at all (missing path, no trace files, unreachable server): one line for the user."""


STATUS_ERROR = 2  # OTLP's STATUS_CODE_ERROR: a span's ``status_code`` when it failed


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int = 0

    @property
    def seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True)
class StateFile:
    """One process's state file, decoded: its last state (exact at a SIGKILL)."""

    path: str
    state: statefile.State


# A process, as its spans' resource names it (``host.name``, ``process.pid``): one trace file is one process's.
ProcessKey = tuple[Any, Any]


@dataclass(frozen=True)
class DamagedFile:
    """A trace file that lost spans: its unreadable lines, whether it was cut short (a full disk, a copy in flight, a
    rank killed mid-write), and the processes its readable lines speak for (none when no line was readable)."""

    path: str
    skipped_lines: int
    cut_short: bool
    processes: frozenset[ProcessKey]


@dataclass
class SpanSet:
    spans: list[Span] = field(default_factory=list)
    skipped_lines: int = 0
    states: list[StateFile] = field(default_factory=list)
    skipped_state_files: int = 0
    damaged_files: list[DamagedFile] = field(default_factory=list)


def rfc3339_nanos(unix_ns: int) -> str | None:
    """OTLP nanoseconds → RFC 3339 with nanoseconds, UTC (what Jaeger's ``query.start_time_min`` / ``_max`` want).

    None for a time no calendar can show (a corrupt span's timestamp must not break a report).
    """
    seconds, nanos = divmod(unix_ns, 1_000_000_000)
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"
    except (OverflowError, ValueError, OSError):
        return None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _integer(value: Any) -> int:
    """OTLP JSON writes 64-bit integers as decimal strings; plain JSON numbers are accepted too."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return int(value)


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected an array, got {type(value).__name__}")
    return value


def any_value(value: dict[str, Any]) -> Any:
    """Decode an OTLP JSON ``AnyValue``; a value of the wrong type raises (the line is then skipped)."""
    value = _object(value)
    if "stringValue" in value:
        return _string(value["stringValue"])
    if "intValue" in value:
        return _integer(value["intValue"])
    if "doubleValue" in value:
        number = value["doubleValue"]
        if isinstance(number, bool) or not isinstance(number, (int, float, str)):
            raise TypeError("doubleValue is not a number")
        return float(number)
    if "boolValue" in value:
        if not isinstance(value["boolValue"], bool):
            raise TypeError("boolValue is not a boolean")
        return value["boolValue"]
    if "arrayValue" in value:
        return [any_value(v) for v in _array(_object(value["arrayValue"]).get("values", []))]
    if "kvlistValue" in value:
        return key_values(_object(value["kvlistValue"]).get("values", []))
    if "bytesValue" in value:
        return _string(value["bytesValue"])
    return None


def _int_array(array: Any) -> list[int] | None:
    """An ``arrayValue`` of plain ``intValue`` strings (a startup's import times and carried split) decoded inline;
    None for anything else, which the checked path then decodes."""
    values = array.get("values") if type(array) is dict and len(array) == 1 else None
    if type(values) is not list:
        return None
    numbers = []
    for item in values:
        if type(item) is dict and len(item) == 1 and type(number := item.get("intValue")) is str and number.isdigit():
            numbers.append(int(number))
        else:
            return None
    return numbers


def key_values(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in _array(items):
        # The common cases inline (most of the time reading a large job or tree goes here); the rest, and anything
        # malformed, through the checked path.
        if type(item) is dict and type(key := item.get("key")) is str and type(value := item.get("value")) is dict:
            if len(value) == 1:
                if type(text := value.get("stringValue")) is str:
                    result[key] = text
                    continue
                if type(number := value.get("intValue")) is str and number.isdigit():
                    result[key] = int(number)
                    continue
                if "arrayValue" in value and (numbers := _int_array(value["arrayValue"])) is not None:
                    result[key] = numbers
                    continue
        result[_string(_object(item)["key"])] = any_value(item.get("value", {}))
    return result


def span_attributes(raw: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes, with those its ``DATA_EVENT`` carries (the values for machines: semconv)."""
    attributes = key_values(raw.get("attributes", []))
    for event in _array(raw.get("events", [])):
        if type(event) is dict and event.get("name") == sc.DATA_EVENT:
            attributes.update(key_values(event.get("attributes", [])))
    return attributes


class ResourceCache:
    """The last resource decoded: the lines of one process's file repeat the same resource, decoded once (its spans
    then share one dict, as the spans of one line always did). ``text`` and ``value``: the last line's resource as
    JSON text and parsed (``parse_line``)."""

    def __init__(self) -> None:
        self.raw: Any = None
        self.decoded: dict[str, Any] = {}
        self.text: str | None = None
        self.value: Any = None

    def decode(self, raw: Any) -> dict[str, Any]:
        if raw is None or (raw is not self.raw and raw != self.raw):
            self.decoded, self.raw = key_values(raw if raw is not None else []), raw
        return self.decoded


# How loadtrace's own lines begin: one resource, then its spans.
_HEAD = '{"resourceSpans":[{"resource":'
_HEAD_BYTES = _HEAD.encode()
_DECODER = json.JSONDecoder()


def parse_line(line: bytes, cache: ResourceCache | None = None) -> Any:
    """``json.loads(line)``, the same result, quicker for the lines of one process's file: each repeats the
    resource (most of a line's bytes), which is parsed once and reused while the next lines begin with the same text.
    Anything unusual (other layouts, a second ``"resource"`` or a ``"result"`` key, malformed text) goes through
    ``json.loads`` whole, so a line parses, or fails, exactly as it would there."""
    if cache is None or not line.startswith(_HEAD_BYTES):
        return json.loads(line)
    try:
        text = line.decode("utf-8", "surrogatepass")  # what json.loads does with UTF-8 bytes
        start = len(_HEAD)
        if cache.text is None or not text.startswith(cache.text, start):
            value, end = _DECODER.raw_decode(text, start)
            if not isinstance(value, dict):  # an object ends where its text ends; other values may not
                return json.loads(line)
            cache.text, cache.value = text[start:end], value
        rest = text[start + len(cache.text) :]
        if '"resource"' in rest or '"result"' in rest:
            return json.loads(line)
        data = json.loads(_HEAD + "0" + rest)
        data["resourceSpans"][0]["resource"] = cache.value
        return data
    except ValueError:
        return json.loads(line)


def spans_from_traces_data(data: dict[str, Any], cache: ResourceCache | None = None) -> Iterator[Span]:
    """Spans of one OTLP ``TracesData`` JSON object (a file line, or Jaeger's ``result``)."""
    for resource_spans in _array(_object(data).get("resourceSpans", [])):
        raw_resource = _object(_object(resource_spans).get("resource", {})).get("attributes", [])
        resource = cache.decode(raw_resource) if cache is not None else key_values(raw_resource)
        for scope_spans in _array(resource_spans.get("scopeSpans", [])):
            scope = _object(scope_spans).get("scope")
            if type(scope) is dict and scope.get("name") in sc.NOT_MEASURED_SCOPES:
                continue  # the job's structure, its findings and its loads view: laid out for a person, not measured
            for raw in _array(_object(scope_spans).get("spans", [])):
                raw = _object(raw)
                trace_id, span_id = raw.get("traceId", ""), raw.get("spanId", "")
                parent_id, name = raw.get("parentSpanId", ""), raw.get("name", "")
                if not (type(trace_id) is type(span_id) is type(parent_id) is type(name) is str):
                    trace_id, span_id, parent_id, name = map(_string, (trace_id, span_id, parent_id, name))
                start, end = raw.get("startTimeUnixNano", 0), raw.get("endTimeUnixNano", 0)
                status = raw.get("status", {})
                yield Span(
                    trace_id,
                    span_id,
                    parent_id,
                    name,
                    start_ns=int(start) if type(start) is str and start.isdigit() else _integer(start),
                    end_ns=int(end) if type(end) is str and end.isdigit() else _integer(end),
                    attributes=span_attributes(raw),
                    resource=resource,
                    status_code=0 if type(status) is dict and not status else _integer(_object(status).get("code", 0)),
                )


def decode_line(line: bytes, cache: ResourceCache | None = None) -> list[Span] | None:
    """The spans of one JSON line, or None when the line is not a well-formed ``TracesData``.

    A saved Jaeger response line (``{"result": TracesData}``) is accepted as well.
    """
    try:
        data = _object(parse_line(line, cache))
        if "result" in data:
            data = data["result"]
        return list(spans_from_traces_data(data, cache))
    except _MALFORMED:
        return None


def _lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """Lines of a binary file, each at most MAX_LINE_BYTES; a longer line is consumed in chunks and yielded as None."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):
                line = handle.readline(_CHUNK)
            yield None
            continue
        yield line


def traces_data(handle: BinaryIO) -> Iterator[dict[str, Any] | None]:
    """Each non-blank line's ``TracesData`` object where ``read_stream`` takes its spans (a saved Jaeger answer's
    ``result``), None where it skips the line: what ``loadtrace ingest`` writes is what the file reader reads."""
    cache = ResourceCache()
    for line in _lines(handle):
        if line is not None and not line.strip():
            continue
        try:
            if line is None:
                raise ValueError("a line over MAX_LINE_BYTES")
            data = _object(parse_line(line, cache))
            data = _object(data["result"]) if "result" in data else data
            for _ in spans_from_traces_data(data, cache):
                pass
        except _MALFORMED:
            yield None
            continue
        yield data


def read_stream(handle: BinaryIO, into: SpanSet) -> bool:
    """The stream's spans into ``into``, its unreadable lines counted; whether its last line ends without a newline."""
    cache = ResourceCache()
    cut_short = False
    for line in _lines(handle):
        if line is not None:
            cut_short = not line.endswith(b"\n")
            if not line.strip():
                continue
        spans = decode_line(line, cache) if line is not None else None
        if spans is None:
            into.skipped_lines += 1
        else:
            into.spans.extend(spans)
    return cut_short


def process_key(resource: dict[str, Any]) -> ProcessKey:
    return resource.get(sc.HOST_NAME), resource.get(sc.PROCESS_PID)


def _walk(root: Path, suffixes: tuple[str, ...]) -> list[list[Path]]:
    """Per suffix, the regular files under ``root`` whose name ends with it, sorted (symlinked directories are not
    followed; an unreadable one is skipped, as ``os.walk`` does). One walk for all suffixes, each entry's type from the
    directory listing: a walk per suffix and a stat per file cost 0.2 s at 4,096 ranks."""
    found: list[list[Path]] = [[] for _ in suffixes]
    pending = [os.fspath(root)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                        continue
                    for index, suffix in enumerate(suffixes):
                        if entry.name.endswith(suffix) and entry.is_file():
                            found[index].append(Path(entry.path))
        except OSError:
            continue
    return [sorted(paths) for paths in found]


def source_files(path: str | os.PathLike[str]) -> tuple[list[Path], list[Path]]:
    """(trace files, state files) of a source: a ``.jsonl`` file and the state file beside it, a ``.state`` file, or
    every ``*.jsonl`` and ``*.state`` under a directory (a directory of state files alone will do: spans sent over
    OTLP, or ranks killed before they finished a span)."""
    root = Path(path)
    if not root.exists():
        raise SourceError(f"{root}: no such file or directory")
    if not root.is_dir():
        if not root.is_file():  # a FIFO or a device could stream forever
            raise SourceError(f"{root}: not a regular file or directory")
        if root.name.endswith(sc.STATE_SUFFIX):
            return [], [root]
        beside = root.with_name(root.name.removesuffix(sc.TRACE_FILE_SUFFIX) + sc.STATE_SUFFIX)
        return [root], [beside] if beside != root and beside.is_file() else []
    files, states = _walk(root, (sc.TRACE_FILE_SUFFIX, sc.STATE_SUFFIX))
    if not files and not states:
        raise SourceError(f"{root}: no *.jsonl trace files or *.state files in this directory")
    return files, states


def trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The file itself, or every ``*.jsonl`` file under a directory (symlinked directories are not followed)."""
    files, _ = source_files(path)
    if not files:
        raise SourceError(f"{path}: no *.jsonl trace files in this directory")
    return files


# ``read_files(..., parallel=True)``: below this many files one process is quicker than starting others.
PARALLEL_MIN_FILES = 64
PARALLEL_MIN_CPUS = 4


def _read_trace_files(files: list[Path]) -> SpanSet:
    result = SpanSet()
    for file in files:
        spans, skipped = len(result.spans), result.skipped_lines
        try:
            with open(file, "rb") as handle:
                cut_short = read_stream(handle, result)
        except OSError as error:
            raise SourceError(f"{file}: {error.strerror or error}") from None
        if cut_short or result.skipped_lines > skipped:
            processes = frozenset(process_key(span.resource) for span in result.spans[spans:])
            result.damaged_files.append(DamagedFile(str(file), result.skipped_lines - skipped, cut_short, processes))
    return result


def _read_in_parallel(files: list[Path]) -> SpanSet | None:
    """The files decoded by one forked process per CPU (decoding JSON is most of reading a tree of many jobs); None
    where processes cannot be started (no fork, no CPUs to spare, a sandbox refusing them): read them here then."""
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 16)
    # Handing the spans back costs about a quarter of decoding them: on fewer than 4 CPUs nothing is gained.
    if (
        workers < PARALLEL_MIN_CPUS
        or len(files) < PARALLEL_MIN_FILES
        or "fork" not in multiprocessing.get_all_start_methods()
    ):
        return None
    chunks = [files[i::workers] for i in range(workers)]
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_read_trace_files, chunks)
    except SourceError:
        raise
    except (OSError, multiprocessing.ProcessError):
        return None
    result = SpanSet()
    for part in parts:
        result.spans.extend(part.spans)
        result.skipped_lines += part.skipped_lines
        result.damaged_files.extend(part.damaged_files)
    return result


def read_files(path: str | os.PathLike[str], parallel: bool = False) -> SpanSet:
    """Every span in a JSON Lines file, or in all ``*.jsonl`` files under a directory, and the state files beside
    them (a truncated, corrupt or foreign state file is skipped and counted in ``skipped_state_files``).
    ``parallel``: decode a large tree's files in one process per CPU (``loadtrace jobs``); the same spans result."""
    files, states = source_files(path)
    return read_sources(files, states, parallel)


def read_sources(files: list[Path], states: list[Path], parallel: bool = False) -> SpanSet:
    """``read_files`` of these trace and state files."""
    result = (_read_in_parallel(files) if parallel else None) or _read_trace_files(files)
    for path_ in states:
        state = statefile.read(path_, owners=statefile.owned_by(path_))
        if state is None:
            result.skipped_state_files += 1
        else:
            result.states.append(StateFile(str(path_), state))
    return result
