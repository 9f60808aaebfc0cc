"""(b) Overhead accounting: what loadtrace adds to one load at default detail, as (cost of each kind of event, best of
many blocks) x (how often it happens in one load, read from the load's own spans).

Timing a whole 0.6 s load cannot resolve 2 % on a shared 2-core machine; per-event minima can, and they say where the
cost is. Events are driven through loadtrace's public entry points where there is one (``traced_load``, the hooked
``safetensors.safe_open``); the rest uses internals defensively: an item whose API moved is reported as missing and
left out of the total. The ``_account`` worker runs with ``LOADTRACE=1``."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import best_ns, clean_env, run_checked, worker

# The per-call costs, in the order the report lists them.
SCOPE = "a load or phase scope: span, export, memory readings (per scope)"
SCOPE_EXPORT = "  of which: exporting that span (file exporter)"
PROGRESS = "progress-file write, directory present (per write)"
FILE = "a file: safetensors.open span + export (per file)"
GET_SLICE = "get_slice proxy (per tensor)"
INDEX = "slice[...] counting (per tensor)"
CONVERSION = "WeightConverter/WeightRenaming hook (per conversion)"
MATERIALIZE = "zeros_like/empty_like inside a load (per call)"
EXTRAS = "from_pretrained extras: strategy, held bytes of the model (per load)"
SAMPLE = "memory sample by the monitor thread (per sample)"


@dataclass
class Account:
    """What the measures share: the load's counts, its model, loadtrace's tracing state, one shard."""

    ckpt: str
    model: Any
    counts: dict[str, Any]
    tracing: Any
    installed: Any
    shard: str
    costs: dict[str, float | str] = field(default_factory=dict)
    progress_broken: list[bool] = field(default_factory=list)
    bare: Any = None  # an un-hooked safe_open handle of ``shard``
    traced: Any = None  # a hooked one, inside a load
    expert: str = ""  # an expert tensor's name in it

    def item(self, name: str, measure: Callable[[Account], float]) -> None:
        try:
            self.costs[name] = measure(self)
        except Exception as error:  # an internal API that moved: say so, measure the rest
            self.costs[name] = f"n/a ({type(error).__name__}: {error})"

    def number(self, key: str) -> float:
        value = self.costs.get(key)
        return value if isinstance(value, float) else 0.0


# The load whose spans give the counts -------------------------------------------------------------------------------


def appended_spans(trace_dir: Path, sizes: dict[Path, int]) -> list[dict[str, Any]]:
    """The spans written to the trace files after they had ``sizes``."""
    spans: list[dict[str, Any]] = []
    for file in trace_dir.glob("*.jsonl"):
        with open(file, "rb") as handle:
            handle.seek(sizes.get(file, 0))
            for line in handle.read().decode().splitlines():
                if line.strip():
                    spans += [
                        span
                        for rs in json.loads(line)["resourceSpans"]
                        for ss in rs["scopeSpans"]
                        for span in ss["spans"]
                    ]
    return spans


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values()), None) for a in span.get("attributes", [])}


def event_counts(spans: list[dict[str, Any]], load_wall: float) -> dict[str, Any]:
    load_attrs = attrs(next(span for span in spans if span["name"] == "transformers.from_pretrained"))
    phases = [
        span
        for span in spans
        if span["name"].startswith("transformers.") and span["name"] != "transformers.from_pretrained"
    ]
    return {
        "spans": len(spans),
        "tensors_read": int(load_attrs.get("loadtrace.read.tensors", 0)),
        "files": int(load_attrs.get("loadtrace.files.opened", 0)),
        "phase_entries": sum(int(attrs(span).get("loadtrace.calls", 1)) for span in phases),
        "conversions": int(load_attrs.get("loadtrace.convert.count", 0)),
        "materialized": int(load_attrs.get("loadtrace.materialized.calls", 0)),
        "load_wall_s": load_wall,
    }


def counted_load(ckpt: str, trace_dir: Path) -> tuple[Any, dict[str, Any]]:
    """(model, event counts) of a warm load, after a cold one that is not counted."""
    import gc

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt)  # cold
    del model
    gc.collect()
    sizes = {file: file.stat().st_size for file in trace_dir.glob("*.jsonl")}
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(ckpt)  # the load whose spans give the counts
    load_wall = time.perf_counter() - t0
    return model, event_counts(appended_spans(trace_dir, sizes), load_wall)


# loadtrace's internals, where either layout has them ---------------------------------------------------------------


def sdk_of(tracing: Any) -> Any:
    """The OTel SDK TracerProvider loadtrace built: ``Tracing.provider._sdk`` since ``loadtrace/provider.py`` (issue
    10; since issue 16 ``Tracing._provider`` is that Provider, made at the first span); before, the SDK itself."""
    provider = tracing.provider
    return provider._sdk if hasattr(provider, "_sdk") else provider


def monitor_of(tracing: Any) -> Any:
    """``Tracing.monitor``, or ``Tracing.provider.monitor`` since ``loadtrace/provider.py``."""
    return tracing.monitor if hasattr(tracing, "monitor") else tracing.provider.monitor


# Scopes, files, progress --------------------------------------------------------------------------------------------


def empty_loads(n: int) -> None:
    import loadtrace

    for _ in range(n):
        with loadtrace.traced_load("bench"):
            pass


def empty_load(acct: Account) -> float:
    """A whole traced load with nothing in it: its span (export included), memory readings, progress file."""
    return best_ns(empty_loads, 50, 7)


def one_span_export(acct: Account) -> float:
    """Exporting one load span again, through every exporter that has ``export``."""
    exporter_cost = []
    for processor in sdk_of(acct.tracing)._active_span_processor._span_processors:
        exporter = getattr(processor, "span_exporter", None)
        if exporter is not None and hasattr(exporter, "export"):
            captured: list[Any] = []
            original = exporter.export
            exporter.export = lambda spans, keep=captured, real=original: (keep.extend(spans), real(spans))[1]
            empty_loads(1)
            exporter.export = original
            span = captured[-1]

            def export_only(n: int, exporter=exporter, span=span) -> None:
                for _ in range(n):
                    exporter.export([span])

            exporter_cost.append(best_ns(export_only, 50, 7))
    return sum(exporter_cost)


def progress_write(acct: Account) -> float:
    """One ``<trace file>.progress.json`` write, measured with its directory present (the monitor gives up for good
    when the first load starts before the trace directory exists)."""
    import loadtrace
    from loadtrace.instrumentation import monitor as monitor_module

    counts = acct.counts
    if not hasattr(monitor_module, "PROGRESS_INTERVAL_S"):  # since issue 11: no progress file, a state file instead
        counts["progress_writes"] = 0
        return 0.0
    counts["progress_writes"] = 2 * (1 + counts["phase_entries"]) + int(
        counts["load_wall_s"] / monitor_module.PROGRESS_INTERVAL_S
    )
    with loadtrace.traced_load("bench"):
        monitor = monitor_of(acct.tracing)
        acct.progress_broken.append(bool(monitor._broken))
        os.makedirs(os.path.dirname(monitor.progress_path), exist_ok=True)
        monitor._broken = False

        def run(n: int) -> None:
            for _ in range(n):
                monitor._write_progress()

        cost = best_ns(run, 50, 7)
        monitor._broken = acct.progress_broken[0]
        return cost


def open_close(acct: Account) -> float:
    """One file through the hooked safe_open inside a load, less the same open without the hook and the load."""
    import safetensors

    import loadtrace

    bare_open = acct.installed["safetensors.safe_open"].original

    def run_bare(n: int) -> None:
        for _ in range(n):
            with bare_open(acct.shard, framework="pt", device="cpu"):
                pass

    def run_in_load(n: int) -> None:
        with loadtrace.traced_load("bench"):
            for _ in range(n):
                with safetensors.safe_open(acct.shard, framework="pt", device="cpu"):
                    pass

    per_load = best_ns(empty_loads, 20, 5)
    return best_ns(run_in_load, 50, 7) - per_load / 50 - best_ns(run_bare, 50, 7)


# Per tensor, per conversion, per materialisation (inside one open load) ---------------------------------------------


def extra_ns(traced: Callable[[], Any], bare: Callable[[], Any], n: int, reps: int = 9) -> float:
    """ns per call that ``traced()`` costs beyond ``bare()``."""

    def loop(fn: Callable[[], Any]) -> Callable[[int], None]:
        def run(count: int) -> None:
            for _ in range(count):
                fn()

        return run

    return best_ns(loop(traced), n, reps) - best_ns(loop(bare), n, reps)


def get_slice(acct: Account) -> float:
    traced, bare, expert = acct.traced, acct.bare, acct.expert
    return extra_ns(lambda: traced.get_slice(expert), lambda: bare.get_slice(expert), 20000, 15)


def index(acct: Account) -> float:
    """The counting around a read, isolated from the read: the same proxy classes around a stand-in whose [...]
    returns at once (timing a real 14 µs read twice and subtracting is noise at this size)."""
    sample = acct.bare.get_slice(acct.expert)[...]

    class StandIn:
        def get_slice(self, name: str) -> StandIn:
            return self

        def __getitem__(self, key: Any) -> Any:
            return sample

    stand_in = StandIn()
    traced = acct.traced
    proxy = type(traced)(stand_in, traced._self_scope, acct.tracing)  # TracedSafeOpen(wrapped, scope, tracing)
    traced_slice = proxy.get_slice(acct.expert)
    return extra_ns(lambda: traced_slice[...], lambda: stand_in[...], 20000, 15)


def conversion(acct: Account) -> float:
    import torch

    from loadtrace.instrumentation.hooks import transformers as hooks_transformers

    class Converter:
        operations = [type("MergeModulelist", (), {})(), type("Concatenate", (), {})()]

    produced = {"a": [torch.empty(4), torch.empty(4)]}
    converter = Converter()

    def run(n: int) -> None:
        for _ in range(n):
            hooks_transformers.weight_conversion(converter, (), {}).done(produced, None)

    return best_ns(run, 5000)


def zeros_like_in_load(acct: Account) -> float:
    import torch

    x = torch.empty(16)
    bare_z = torch._C._VariableFunctions.zeros_like
    return extra_ns(lambda: torch.zeros_like(x), lambda: bare_z(x), 2000)


def in_one_load(acct: Account) -> None:
    """The per-tensor, per-conversion and per-materialisation measures, inside one open load."""
    import safetensors

    scope, token = acct.tracing.start_load("loadtrace.load", {"loadtrace.load.name": "account"})
    try:
        acct.bare = acct.installed["safetensors.safe_open"].original(acct.shard, framework="pt", device="cpu")
        acct.traced = safetensors.safe_open(acct.shard, framework="pt", device="cpu")
        acct.expert = next(k for k in acct.bare.keys() if "experts" in k)
        acct.item(GET_SLICE, get_slice)
        acct.item(INDEX, index)
        acct.item(CONVERSION, conversion)
        acct.item(MATERIALIZE, zeros_like_in_load)
    finally:
        acct.tracing.end_load(scope, token, {}, None)


# Per load, and off the loading thread -------------------------------------------------------------------------------


def held(acct: Account) -> float:
    from loadtrace.instrumentation.hooks import transformers as hooks_transformers

    def run(n: int) -> None:
        for _ in range(n):
            hooks_transformers.strategy()
            hooks_transformers.held_bytes(acct.model, False)

    return best_ns(run, 50, 7)


def sample(acct: Account) -> float:
    from loadtrace.instrumentation import monitor
    from loadtrace.instrumentation.memory import process_memory

    acct.counts["monitor_samples"] = acct.counts["load_wall_s"] / monitor.SAMPLE_INTERVAL_S

    def run(n: int) -> None:
        for _ in range(n):
            process_memory()

    return best_ns(run, 200, 7)


def breakdown(acct: Account) -> dict[str, float]:
    """ns per load, by where it goes: each cost x how often it happens in one load."""
    counts, number = acct.counts, acct.number
    return {
        "per tensor: get_slice proxy + counting read": counts["tensors_read"] * (number(GET_SLICE) + number(INDEX)),
        "per file: span + export": counts["files"] * number(FILE),
        "per load / phase entry: span, export, memory readings": (1 + counts["phase_entries"]) * number(SCOPE),
        "conversion hooks": counts["conversions"] * number(CONVERSION),
        "materialisations": counts["materialized"] * number(MATERIALIZE),
        "from_pretrained extras (strategy, held bytes)": number(EXTRAS),
        "monitor thread memory samples": counts.get("monitor_samples", 0) * number(SAMPLE),
    }


def measure(acct: Account) -> dict[str, Any]:
    acct.item(SCOPE, empty_load)
    acct.item(SCOPE_EXPORT, one_span_export)
    acct.item(PROGRESS, progress_write)
    acct.item(FILE, open_close)
    in_one_load(acct)
    acct.item(EXTRAS, held)
    acct.item(SAMPLE, sample)
    parts = breakdown(acct)
    return {
        "counts": acct.counts,
        "costs_ns": acct.costs,
        "breakdown_ns": parts,
        "total_ms": sum(parts.values()) / 1e6,
        "progress_ms": acct.counts.get("progress_writes", 0) * acct.number(PROGRESS) / 1e6,
        "progress_broken": acct.progress_broken[0] if acct.progress_broken else None,
    }


def cmd_account(argv: list[str]) -> int:
    """Worker (``LOADTRACE=1``): ``_account CKPT OUT TRACE_DIR``."""
    from transformers.utils import logging as hf_logging

    from loadtrace.instrumentation import spans as lt_spans
    from loadtrace.instrumentor import registry

    hf_logging.disable_progress_bar()
    ckpt, out, trace_dir = argv[0], argv[1], Path(argv[2])
    model, counts = counted_load(ckpt, trace_dir)
    shard = str(sorted(Path(ckpt).glob("*.safetensors"))[0])
    acct = Account(ckpt, model, counts, lt_spans.tracing(), registry().installed, shard)
    Path(out).write_text(json.dumps(measure(acct)))
    return 0


def bench_account(ckpt: Path, work: Path) -> dict[str, Any]:
    out = work / "results" / "account.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    trace_dir = work / "traces" / "account"
    shutil.rmtree(trace_dir, ignore_errors=True)
    env = clean_env(LOADTRACE="1", LOADTRACE_DIR=str(trace_dir))
    command = worker("_account", ckpt, out, trace_dir)
    run_checked(command, env, 900, work / "results" / "account.log", cwd=work)
    return json.loads(out.read_text())
