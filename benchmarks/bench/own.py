"""loadtrace's own time on the loading thread per load, metered inside real warm loads.

Whole-load timings on a shared 2-core machine scatter by ±100 ms, far more than the few ms to resolve. So this part
times only loadtrace's code, with the loading thread's CPU clock (``time.thread_time_ns``, which other jobs' CPU is not
in), at the points where it runs on that thread:

- every hook's handler and its ``done``: the hook engine's one wrapper (``instrumentation/hooks/registry.py``
  ``_wrapper``) is replaced before any hook is installed by one that times both, exclusive of the wrapped original;
  hooks are told apart by ``Hook.name``, whatever they are;
- the tracing's methods called from outside any hook (``spans.Tracing`` and the collaborators it owns: the file
  proxy ending its file's span when transformers closes the file);
- nested loadtrace code (a tracing method inside a handler, a hooked call inside ``done``) counts once, in the
  outermost piece;
- inside those pieces, the parts exact figures and a killed rank's spans need (``meter_parts``: OpenTelemetry's span
  calls, writing each span, each file's residency, the memory readings) are timed apart, each less the parts nested
  in it: what the cost cannot go below without giving one of them up.

Not in it: the per-tensor path (``_materialize_copy(get_slice(name), ...)``: the slice proxies and the hook on
transformers' per-tensor call) and the hook on ``WeightRenaming.convert`` (every key no converter takes: a dense
model's every tensor), timed apart wrapper and all (``slices.slice_cost_us``): a hook's wrapper is a frame the meter
cannot see, wrapt's or the plain function that stands in for these two since issue 50. They are ``APART``, not
metered here; the path is added to the per-tensor figure. Nor the monitor thread, which runs beside the loading
thread: its CPU per load is its own line (``time.pthread_getcpuclockid``). Every metered interval also holds about one
clock read; that bias (calls x the mean empty interval, measured here) is subtracted and stated.

``HF_DEACTIVATE_ASYNC_LOAD=1``: transformers reads every tensor on the loading thread, so all of it is there.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from types import FunctionType
from typing import Any

from .common import best_ns, clean_env, line_through, min_median, quiet_transformers, run_worker
from .slices import slice_cost_us

OUTSIDE = " (outside hooks)"
DONE = " done"
# Timed apart, wrapper and all (``slices.py``): not metered in the loads, whatever stands in for them.
APART = ("transformers.core_model_loading._materialize_copy", "transformers.core_model_loading.WeightRenaming.convert")


class Meter:
    """Thread CPU ns and calls per label, on the loading thread only; other threads' calls pass through, counted."""

    def __init__(self) -> None:
        self.spent: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.other_threads = 0
        self.parts: dict[str, int] = {}
        self.part_calls: dict[str, int] = {}
        self.loading = threading.get_ident()
        self._inside = False  # in a metered piece of loadtrace code already (loading thread only)
        self._nested: list[int] = []  # per timed part being run: the time of the parts nested in it so far

    def reset(self) -> None:
        self.spent, self.calls, self.other_threads = {}, {}, 0
        self.parts, self.part_calls = {}, {}

    def timed(self, label: str, function: Any) -> Any:
        clock = time.thread_time_ns

        def run(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.loading:
                self.other_threads += 1
                return function(*args, **kwargs)
            if self._inside:  # counted in the outer piece
                return function(*args, **kwargs)
            self._inside = True
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = clock() - started
                self._inside = False
                self.spent[label] = self.spent.get(label, 0) + elapsed
                self.calls[label] = self.calls.get(label, 0) + 1

        return run

    def part(self, label: str, function: Any) -> Any:
        """What ``function`` takes of the metered pieces it runs in, less the parts nested in it: where their time
        goes. Outside a metered piece (the job's own spans, if any) it is not timed."""
        clock = time.thread_time_ns

        def run(*args: Any, **kwargs: Any) -> Any:
            if not self._inside or threading.get_ident() != self.loading:
                return function(*args, **kwargs)
            nested = self._nested
            nested.append(0)
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = clock() - started
                inner = nested.pop()
                if nested:
                    nested[-1] += elapsed
                self.parts[label] = self.parts.get(label, 0) + elapsed - inner
                self.part_calls[label] = self.part_calls.get(label, 0) + 1

        return run

    def wrapper_factory(self, original: Any) -> Any:
        """A replacement for the hook engine's wrapper factory: the same wrapper, around a hook whose handler and
        ``done`` are timed."""
        import dataclasses

        meter = self

        class TimedCall:
            __slots__ = ("done",)

            def __init__(self, done: Any):
                self.done = done

        def metered(hook: Any) -> Any:
            if hook.name in APART:
                return original(hook)
            timed_handler = meter.timed(hook.name, hook.handler)

            def handler(instance: Any, args: tuple, kwargs: dict) -> Any:
                call = timed_handler(instance, args, kwargs)
                return None if call is None else TimedCall(meter.timed(hook.name + DONE, call.done))

            return original(dataclasses.replace(hook, handler=handler))

        return metered

    def meter_methods(self, cls: type) -> list[str]:
        """Time every plain function of ``cls`` and its bases (loadtrace's own classes) when called outside a hook."""
        names = []
        for base in reversed(cls.__mro__[:-1]):
            for name, value in vars(base).items():
                if isinstance(value, FunctionType) and not name.startswith("__"):
                    setattr(cls, name, self.timed(f"{cls.__name__}.{name}{OUTSIDE}", value))
                    names.append(name)
        return names


SPANS = "OpenTelemetry's span calls: start, attributes, end"
EXPORT = "writing each span as it ends (OTLP JSON, one write)"
RESIDENCY = "page-cache residency of each file at open (cachestat)"
READINGS = "memory readings (/proc, cgroup)"
PARTS = (SPANS, EXPORT, RESIDENCY, READINGS)


def meter_parts(meter: Meter) -> None:
    """The costs kept for exactness and for the dying rank's spans, timed inside the metered pieces: OpenTelemetry's
    span calls (the SDK's methods, so every caller) and, apart, loadtrace's writing of each span as it ends; the
    residency of files; the memory readings (at the names the loading thread's code calls them by)."""
    from opentelemetry.sdk import trace as sdk_trace

    from loadtrace.instrumentation.counting import attributes, readings, statemirror
    from loadtrace.instrumentation.exporting import export
    from loadtrace.instrumentation.tracing import lifecycle, loads, spans, startup

    for cls, name in (
        (sdk_trace.Tracer, "start_span"),
        (sdk_trace.Span, "set_attributes"),
        (sdk_trace.Span, "set_attribute"),
        (sdk_trace.Span, "end"),
    ):
        setattr(cls, name, meter.part(SPANS, getattr(cls, name)))
    export.WriteAsItEnds.on_end = meter.part(EXPORT, export.WriteAsItEnds.on_end)  # type: ignore[method-assign]
    spans.cached_bytes_of = meter.part(RESIDENCY, spans.cached_bytes_of)  # the hooks call it through the front
    called = (
        *((module, "process_memory") for module in (spans, readings, startup, lifecycle)),
        (loads, "limits"),
        (attributes, "limits"),
        (statemirror, "oom_kill_count"),
    )
    for module, name in called:
        setattr(module, name, meter.part(READINGS, getattr(module, name)))


def monitor_clock() -> int | None:
    """The CPU clock of loadtrace's monitor thread (started by the first load), or None."""
    for thread in threading.enumerate():
        if thread.name == "loadtrace-monitor" and thread.ident is not None:
            try:
                return time.pthread_getcpuclockid(thread.ident)
            except (AttributeError, OSError):
                return None
    return None


def clock_bias_ns(n: int = 200_000) -> dict[str, float]:
    """``empty``: the mean of ``t = thread_time_ns(); thread_time_ns() - t`` (what a metered interval holds besides
    the code in it); ``pair``: the best per-iteration cost of two reads (what each metered call adds to the load)."""
    clock = time.thread_time_ns
    total = 0
    for _ in range(n):
        started = clock()
        total += clock() - started

    def pairs(count: int) -> None:
        for _ in range(count):
            clock()
            clock()

    return {"empty_ns": total / n, "pair_ns": best_ns(pairs, 20_000)}


def install_meter() -> Meter:
    """A meter in the hook engine, before loadtrace instruments anything: every hook wrapper is made by one factory,
    when a hook is installed or a while-loading hook put in place."""
    from loadtrace.instrumentation import activation
    from loadtrace.instrumentation.hooks import registry as hook_registry

    assert not activation.registry().active, "start this worker without LOADTRACE: the meter goes in first"
    meter = Meter()
    factory = getattr(hook_registry, "_wrapper", None)
    assert factory is not None, (
        "loadtrace.instrumentation.hooks.registry._wrapper (the hook wrapper factory) is gone: update the meter"
    )
    hook_registry._wrapper = meter.wrapper_factory(factory)
    return meter


def metered_load(meter: Meter, load: Any, ckpt: str, monitor: int | None) -> dict[str, Any]:
    """One warm load: what the meter found, the monitor thread's CPU, the loading thread's CPU and the wall time."""
    import gc

    gc.collect()
    meter.reset()
    m0 = time.clock_gettime_ns(monitor) if monitor is not None else 0
    c0, w0 = time.thread_time_ns(), time.perf_counter()
    model = load(ckpt)
    wall, thread_ns = time.perf_counter() - w0, time.thread_time_ns() - c0
    m1 = time.clock_gettime_ns(monitor) if monitor is not None else 0
    del model
    return {
        "ckpt": ckpt,
        "spent_ns": meter.spent,
        "calls": meter.calls,
        "parts_ns": meter.parts,
        "part_calls": meter.part_calls,
        "other_threads": meter.other_threads,
        "monitor_ns": m1 - m0 if monitor is not None else None,
        "thread_ns": thread_ns,
        "wall_s": wall,
    }


def cmd_own(argv: list[str]) -> dict[str, Any]:
    """Worker (LOADTRACE unset: it instruments itself once the meter is in): ``_own OUT ROUNDS CKPT...``."""
    from loadtrace.instrumentation.tracing import spans

    rounds, ckpts = int(argv[0]), argv[1:]
    meter = install_meter()
    from transformers import AutoModelForCausalLM

    import loadtrace

    quiet_transformers()
    loadtrace.instrument()
    load = AutoModelForCausalLM.from_pretrained
    for ckpt in ckpts:  # imports, the provider, the first span, the monitor thread: once per process, not here
        load(ckpt)
    tracing = spans.tracing()
    assert tracing is not None
    # The front and the collaborators it owns (a call from one into another counts once, in the outer one).
    owners = (tracing, tracing.state_file, tracing.readings, tracing.startup, tracing.loads, tracing.ends)
    outside = [name for owner in (*owners, tracing.lifecycle) for name in meter.meter_methods(type(owner))]
    meter_parts(meter)
    monitor = monitor_clock()
    rows = []
    for r in range(rounds):
        for ckpt in ckpts[r % len(ckpts) :] + ckpts[: r % len(ckpts)]:
            rows.append(metered_load(meter, load, ckpt, monitor))
    return {"rows": rows, "bias": clock_bias_ns(), "outside_methods": outside}


def net_ms(rows: list[dict[str, Any]], spent: str, calls: str, label: str, empty_ns: float) -> dict[str, float]:
    """A label's ms per load (min and median over loads) less the clock bias, and its calls per load (median)."""
    ms = [(row[spent].get(label, 0) - empty_ns * row[calls].get(label, 0)) / 1e6 for row in rows]
    return {**min_median(ms), "calls": statistics.median(row[calls].get(label, 0) for row in rows)}


def summarize_size(rows: list[dict[str, Any]], empty_ns: float, pair_ns: float) -> dict[str, Any]:
    """One checkpoint's loads: per label and in total, ms per load (min and median over loads), less the clock bias
    (and in the total, the two clock reads each timed part adds to the piece it is in); the timed parts apart."""
    labels = sorted({label for row in rows for label in row["spent_ns"]})
    per_label = {label: net_ms(rows, "spent_ns", "calls", label, empty_ns) for label in labels}
    parts = {label: net_ms(rows, "parts_ns", "part_calls", label, empty_ns) for label in PARTS}
    calls = [sum(row["calls"].values()) for row in rows]
    part_calls = [sum(row["part_calls"].values()) for row in rows]
    raw = [sum(row["spent_ns"].values()) / 1e6 for row in rows]
    total = [r - (empty_ns * c + pair_ns * p) / 1e6 for r, c, p in zip(raw, calls, part_calls, strict=True)]
    monitor = [row["monitor_ns"] / 1e6 for row in rows if row["monitor_ns"] is not None]
    return {
        "loads": len(rows),
        "labels": dict(sorted(per_label.items(), key=lambda item: -item[1]["median"])),
        "parts": parts,
        "total_ms": min_median(total),
        "raw_total_ms": min_median(raw),
        "calls": statistics.median(calls),
        "bias_ms": statistics.median(calls) * empty_ns / 1e6,
        "other_thread_calls": max(row["other_threads"] for row in rows),
        "monitor_ms": min_median(monitor) if monitor else None,
        "thread_s": min_median([row["thread_ns"] / 1e9 for row in rows]),
        # Contention inflates a thread's CPU clock too (from 0.56 to 0.84 s for the same load here): the share of the
        # load's own thread CPU moves less than the ms.
        "share_pct": min_median([t / (row["thread_ns"] / 1e6) * 100 for t, row in zip(total, rows, strict=True)]),
        "wall_s": min_median([row["wall_s"] for row in rows]),
    }


def bench_own(ckpts: list[tuple[Path, int, int]], rounds: int, work: Path) -> dict[str, Any]:
    """``ckpts``: (directory, tensors, files) of two checkpoints; ``rounds`` warm loads of each, alternating."""
    env = clean_env(LOADTRACE_DIR=str(work / "traces" / "own"), HF_DEACTIVATE_ASYNC_LOAD="1")
    found = run_worker("_own", [rounds, *(c for c, _, _ in ckpts)], env, work)
    bias = found["bias"]
    sizes = []
    for ckpt, tensors, files in ckpts:
        mine = [row for row in found["rows"] if row["ckpt"] == str(ckpt)]
        sizes.append({"tensors": tensors, "files": files, **summarize_size(mine, bias["empty_ns"], bias["pair_ns"])})
    result: dict[str, Any] = {"rounds": rounds, "sizes": sizes, "bias": bias, "outside": found["outside_methods"]}
    small, large = sorted(sizes, key=lambda entry: entry["tensors"])
    result["slice_us"] = slice_cost_us()
    for stat in ("min", "median"):
        line = line_through((small["tensors"], small["total_ms"][stat]), (large["tensors"], large["total_ms"][stat]))
        slope = line.pop("per_tensor_us")
        line |= {"metered_per_tensor_us": slope, "per_tensor_us": slope + result["slice_us"]["path_extra"]}
        result[f"fit_{stat}"] = line
    return result
