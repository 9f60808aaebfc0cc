"""The markdown report: every section is a title, a text saying what is measured, one table and notes, rendered by
``section``; the functions below only build each section's rows and words."""

from __future__ import annotations

from typing import Any

from .own import PARTS
from .workloads import TARGETS


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else f"{value:{spec}}"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def section(title: str, intro: str, headers: list[str], rows: list[list[str]], *notes: str) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [f"\n### {title}\n", *([intro + "\n"] if intro else []), "\n".join(lines), *notes]


def render_header(res: dict[str, Any]) -> list[str]:
    meta = res["meta"]
    moe, many = res["checkpoints"]["moe"], res["checkpoints"]["many"]
    return [
        f"## loadtrace benchmark ({meta['when']}, {meta['cpus']} CPUs, python {meta['python']}, torch "
        f"{meta['torch']}, transformers {meta['transformers']}, mode {meta['mode']}, loadtrace at {meta['commit']}; "
        f"load average {meta['loadavg_start']} at start, {meta.get('loadavg_end', '?')} at end)",
        f"\nWorkloads: `{moe['spec']['name']}` {moe['tensors']:,} tensors, {len(moe['files'])} shards, "
        f"{moe['bytes'] / 1e6:.0f} MB; `{many['spec']['name']}` {many['tensors']:,} tensors, "
        f"{len(many['files'])} shards, {many['bytes'] / 1e6:.1f} MB.",
    ]


def render_never(never: dict[str, Any]) -> list[str]:
    columns = {"min_ms": ".1f", "median_ms": ".1f", "extra_min_ms": "+.1f", "extra_median_ms": "+.1f"}
    columns |= {"min_rss_mb": ".1f", "extra_min_rss_mb": "+.2f", "extra_median_rss_mb": "+.2f"}
    rows = [
        [f"`{title}`", arm, *(fmt(e[key], spec) for key, spec in columns.items())]
        for title, arms in never["programs"].items()
        for arm, e in arms.items()
    ]
    headers = ["process", "arm", "min ms", "median ms", "extra min ms", "extra median ms", "peak RSS MB (min)"]
    headers += ["extra peak MB (min)", "extra peak MB (median)"]
    return section(
        f"Processes that never load: `LOADTRACE=1` vs unset ({never['rounds']} interleaved rounds, fresh process each)",
        "Extra = that arm minus `off` (min of N, median beside); `off (null)` is `off` run again: the noise.",
        headers,
        rows,
        f"\nMeasured inside the process (`-X importtime`, min of {never['rounds']}): all that `loadtrace.pth` imports "
        f"with `LOADTRACE=1` takes {never['import_us'] / 1e3:.2f} ms.",
    )


def size_row(name: str, sizes: list[dict[str, Any]], figures: Any) -> list[str]:
    """A row of the ``own`` table: ``name``, then (calls, min, median) per size from ``figures(size)`` (None: -)."""
    row = [name]
    for e in sizes:
        found = figures(e)
        row += ["-"] * 3 if found is None else found
    return row


def cells(found: dict[str, float] | None, with_calls: bool = False) -> list[str] | None:
    """(calls, min, median) of a figure, the calls left blank unless asked for; None where there is no figure."""
    if found is None:
        return None
    return [f"{found['calls']:g}" if with_calls else "", fmt(found["min"]), fmt(found["median"])]


def own_rows(own: dict[str, Any]) -> list[list[str]]:
    """One row per hook point (and tracing method called outside hooks), the sizes side by side: calls, min, median;
    then the total, its parts, and the figures that put it in scale."""
    sizes, pair_ns = own["sizes"], own["bias"]["pair_ns"]
    labels = list(dict.fromkeys(label for e in sizes for label in e["labels"]))
    rows = [size_row(f"`{label}`", sizes, lambda e, k=label: cells(e["labels"].get(k), True)) for label in labels]
    total = ["**total, loading thread**"]
    for e in sizes:
        total += [f"{e['calls']:g}", f"**{e['total_ms']['min']:.2f}**", f"**{e['total_ms']['median']:.2f}**"]
    rows.append(total)
    rows += [size_row(f"of which: {p}", sizes, lambda e, p=p: cells(e["parts"][p], True)) for p in PARTS]
    scale = [
        ("clock-read bias, subtracted above (calls x mean empty interval)", lambda e: ["", fmt(e["bias_ms"]), ""]),
        (
            "the meter's own clock reads (2 per metered call: they slow the load, not in the figures)",
            lambda e: ["", fmt(e["calls"] * pair_ns / 1e6), ""],
        ),
        ("monitor thread CPU (beside the loading thread, not in the total)", lambda e: cells(e["monitor_ms"])),
        (
            "the whole load, loading thread CPU (for scale)",
            lambda e: ["", fmt(e["thread_s"]["min"] * 1e3, ".0f"), fmt(e["thread_s"]["median"] * 1e3, ".0f")],
        ),
        ("the total as a share of the load's loading thread CPU, %", lambda e: cells(e.get("share_pct"))),
    ]
    return rows + [size_row(name, sizes, figures) for name, figures in scale]


OWN_INTRO = (
    "What is measured: inside real warm `from_pretrained` loads (`HF_DEACTIVATE_ASYNC_LOAD=1`, every tensor read "
    "on the loading thread), the loading thread's CPU time (`time.thread_time_ns`) spent in loadtrace's code "
    "around each hooked call: the hook's handler before the call and its `done` after it, never the call itself; "
    "and the tracing's methods when something outside a hook calls them (the file proxy ending its file's span). "
    "Code nested in another metered piece counts once. Other jobs' CPU is not in a thread's clock, so this holds "
    "still where whole loads scatter by ±100 ms. Min and median over the loads; every figure less the clock-read "
    "bias ({empty:.0f} ns per metered call; the meter's two reads cost {pair:.0f} ns, which slow the load but are not "
    "in the figures; an inline function's call, {inline}). Hooked calls on other threads, not metered: {others}. "
    "The hook on `_materialize_copy` is not metered here: it is in the per-tensor path, timed apart (below)."
)
OWN_PARTS = (
    "\nThe `of which` rows time, inside the metered pieces, the costs kept for exact figures and for a killed "
    "rank's spans: OpenTelemetry's span calls (the SDK's `start_span`, `set_attribute(s)` and `end`), apart from "
    "loadtrace's writing of each span as it ends (inside `end`); the page-cache residency of each file before the "
    "library reads it; and the memory readings that are the load's baselines. The two clock reads each of them "
    "adds are taken off the total.\n"
)


def own_fit(own: dict[str, Any]) -> str:
    fit, fit_med, sl = own["fit_min"], own["fit_median"], own["slice_us"]
    fixed_ok, tensor_ok = fit["fixed_ms"] <= TARGETS["fixed_ms"], fit["per_tensor_us"] <= TARGETS["per_tensor_us"]
    return (
        f"\nFit of the totals through the two sizes: **{fit['fixed_ms']:.2f} ms per load + "
        f"{fit['metered_per_tensor_us']:.3f} µs per tensor** (minima; medians {fit_med['fixed_ms']:.2f} ms + "
        f"{fit_med['metered_per_tensor_us']:.3f} µs). Not in it: the per-tensor path in the job's own calls, timed "
        "apart in thread CPU (600 rounds of blocks of 200 reads, the garbage collector's share included): "
        f"transformers' `_materialize_copy(get_slice(name), ...)`, {sl['path_bare']:.2f} µs bare and "
        f"{sl['path_traced']:.2f} µs through loadtrace at best, **{sl['path_extra']:+.2f} µs** more as the median of "
        f"the rounds (the slice proxies alone, `get_slice(name)[...]`: {sl['extra']:+.2f} µs; the hook on "
        "`_materialize_copy`, its wrapper included, the rest). So per tensor "
        f"{fit['metered_per_tensor_us']:.3f} + {sl['path_extra']:.2f} = **{fit['per_tensor_us']:.2f} µs** (metered "
        f"slope + path extra). Targets ≤ {TARGETS['fixed_ms']:g} ms per load: {verdict(fixed_ok)}; ≤ "
        f"{TARGETS['per_tensor_us']:g} µs per tensor: {verdict(tensor_ok)}. The monitor thread's CPU is background "
        "work beside the load (it reads memory), stated apart.\n\n\nThe floor of any per-tensor counting in "
        "Python, in the same rounds: a slice whose `__getitem__` only passes the read on, made by a per-file closure "
        f"as loadtrace makes its own, costs **{sl['floor_extra']:+.2f} µs** per tensor over the bare read (best "
        f"block {sl['floor']:.2f} µs), **{sl['path_floor_extra']:+.2f} µs** on transformers' path, before it "
        "counts anything."
    )


def render_own(own: dict[str, Any]) -> list[str]:
    sizes, bias = own["sizes"], own["bias"]
    headers = ["where loadtrace's code runs (ms per load)"]
    for e in sizes:
        headers += [f"calls, {e['tensors']:,} tensors", "min ms", "median ms"]
    others = max(e["other_thread_calls"] for e in sizes)
    return section(
        f"Default detail: loadtrace's own time on the loading thread per load ({own['rounds']} warm loads of each "
        "checkpoint, alternating, in one process)",
        OWN_INTRO.format(
            empty=bias["empty_ns"],
            pair=bias["pair_ns"],
            others=others,
            inline=f"{bias['inline_ns']:.0f} ns as measured on a dummy" if "inline_ns" in bias else "none here",
        ),
        headers,
        own_rows(own),
        OWN_PARTS,
        own_fit(own),
    )


def interval(ci: list[float] | None) -> str:
    return "" if not ci else f" [{ci[0]:+.0f}, {ci[1]:+.0f}]"


FIT_INTRO = (
    "What is measured: the same warm loads timed whole, loadtrace's hooks removed (`off`), installed (`on`) and "
    "removed again (`off (null)`: the same as `off`, so its difference is the noise) between loads, the three in "
    "all 6 orders in turn, so that each follows each other equally often.{settle} Per round the difference to "
    "`off`; the median over rounds with a distribution-free 95 % interval (order statistics). A fair pairing puts "
    "the null's interval around 0. Whole loads here scatter by ±100 ms and more (other jobs' CPU, even in a "
    "thread's clock), so this only bounds the cost; the metered figure above is the cost."
)
SETTLE = (
    " Before each timed load, an untimed one of the same checkpoint with the same arm: each arm in its steady "
    "state, whatever a load leaves behind for the next counted for the arm that leaves it."
)
FIT_LINES = {
    "wall_median": "wall, median pairs",
    "thread_median": "loading thread CPU, median pairs",
    "thread_min": "loading thread CPU, minima",
    "cpu_median": "process CPU, median pairs",
}


def fit_notes(fit: dict[str, Any]) -> str:
    faults = "; ".join(
        f"{e['tensors']:,} tensors: " + ", ".join(f"{arm} {n:,.0f}" for arm, n in e["faults_median"].items())
        for e in fit["sizes"]
    )
    lines = "; ".join(
        f"{name}: {fit[key]['fixed_ms']:+.2f} ms per load + {fit[key]['per_tensor_us']:+.3f} µs per tensor"
        for key, name in FIT_LINES.items()
    )
    sl = fit["slice_us"]
    return (
        f"\nMinor page faults per load (median): {faults}. Fit through the two sizes (noise-dominated, for the "
        f"record): {lines}. Once per process, the first span sets up OpenTelemetry (import and provider): "
        f"{fit['first_span_ms']:.1f} ms (min of 5 processes that imported torch and transformers). "
        f"`get_slice(name)[...]` per tensor: {sl['bare']:.2f} µs bare, {sl['traced']:.2f} µs through loadtrace's "
        f"proxies (the best of 600 blocks of each arm), **{sl['extra']:+.2f} µs** (the median of the rounds' "
        "differences, thread CPU time); transformers' per-tensor path through them "
        f"(`_materialize_copy(get_slice(name), ...)`): **{sl['path_extra']:+.2f} µs**."
    )


AB_HEADERS = ["checkpoint", "measure", "rounds", "off s (median)", "on - off ms, median pair [95 % interval]"]
AB_HEADERS += ["null: off again - off ms, median pair [95 % interval]", "min on - min off ms", "min null - min off ms"]


def ab_rows(sizes: list[dict[str, Any]]) -> list[list[str]]:
    """``size_figures`` entries: per checkpoint and measure, off's median, on - off and null - off."""
    return [
        [f"{e['tensors']:,} tensors, {e['files']} files", what, str(e["rounds"]), fmt(e[f"{unit}_off_median_s"], ".3f")]
        + [f"{e[f'{unit}_{arm}_median_ms']:+.1f}{interval(e[f'{unit}_{arm}_ci_ms'])}" for arm in ("on", "null")]
        + [f"{e[f'{unit}_{arm}_min_ms']:+.1f}" for arm in ("on", "null")]
        for e in sizes
        for unit, what in (("wall", "wall"), ("thread", "loading thread CPU"), ("cpu", "process CPU"))
    ]


def render_fit(fit: dict[str, Any]) -> list[str]:
    return section(
        "Default detail, whole loads: hooks off / on / off again (warm loads in one process, a bound)",
        FIT_INTRO.format(settle=SETTLE if fit["settle"] else ""),
        AB_HEADERS,
        ab_rows(fit["sizes"]),
        fit_notes(fit),
    )


def render_state(state: dict[str, Any]) -> list[str]:
    rows = [
        [name, str(count), fmt(state["costs_ns"][name] / 1e3), fmt(state["per_load_us"][name], ".1f")]
        for name, count in state["counts"].items()
    ]
    return section(
        "The state kept for a dying rank and the termination handlers, per load (3,219-tensor load)",
        "",
        ["operation", "per load", "µs each (best block)", "µs per load"],
        rows,
        f"\nTotal {sum(state['per_load_us'].values()):.0f} µs per load. The tensor and byte counts themselves are "
        "the read slots' `+=` (in the per-tensor cost above).",
    )


PROGRESS_INTRO = (
    "What is measured: warm loads in one process with an OTLP endpoint (a sink that answers every request), the "
    "progress metrics exporting every {interval:g} s (`on`: 100x the default rate) or not at all (`off`, and `off "
    "(null)`), the three in all 6 orders in turn. The metrics run on the SDK's reader thread, never on the loading "
    "thread; under the GIL they can take from it at most that thread's CPU time, measured exactly (notes)."
)


def render_progress(progress: dict[str, Any]) -> list[str]:
    reader = progress["reader_ms"]
    return section(
        "Progress metrics over OTLP: loads with them and without (warm loads in one process, a bound)",
        PROGRESS_INTRO.format(interval=progress["interval_s"]),
        AB_HEADERS,
        ab_rows([progress]),
        f"\nThe metrics reader thread's CPU while a load ran: **{sorted(reader)[len(reader) // 2]:.2f} ms** per load "
        f"(max {max(reader):.2f}), {progress['exports_per_load']:.1f} exports per load on the wire, "
        f"**{progress['reader_us_per_export']:.0f} µs per export** (collect and send); exports during loads without "
        f"metrics: {progress['exports_off']}. At the default 10 s interval: one export per 10 s of loading.",
    )


INSTRUCTION_ARMS = {
    "bare": "`get_slice(name)[...]`, the library's own",
    "floor": "the same through a slice that only passes the read on (the floor of Python-level interception)",
    "traced": "the same through loadtrace's slice proxies",
    "path_bare": '`_materialize_copy(get_slice(name), "cpu", torch.float32)`, transformers\' own over bare slices',
    "path_floor": "the same over the floor's slices",
    "path_traced": "the same through loadtrace's hook, over its slices: a tensor of a default-detail load",
    "copy_bare": "the same copying to `meta` (as a load onto a device copies), transformers' own",
    "copy_traced": "the same through loadtrace's hook, which times each copy",
    "rename_bare": "`WeightRenaming.convert` of a kept key, transformers' own",
    "rename_traced": "the same through loadtrace's hook",
}
INSTRUCTION_BASES = {"floor": "bare", "traced": "bare", "path_floor": "path_bare", "path_traced": "path_bare"}
INSTRUCTION_BASES["copy_traced"] = "copy_bare"
INSTRUCTION_BASES["rename_traced"] = "rename_bare"


def render_instructions(found: dict[str, float] | None) -> list[str]:
    if found is None:
        return ["\n### Instructions per tensor (callgrind)\n", "valgrind is not installed here: not measured."]
    rows = [
        [
            text,
            f"{found[arm]:,.0f}",
            f"{found[arm] - found[INSTRUCTION_BASES[arm]]:+,.0f}" if arm in INSTRUCTION_BASES else "",
        ]
        for arm, text in INSTRUCTION_ARMS.items()
    ]
    return section(
        "Instructions per tensor on the loading thread (valgrind's callgrind; the machine's load does not move them)",
        "The loops of the per-tensor path's timing (2,000 reads each of a 256-byte tensor), each between the counts "
        "zeroed and dumped, in one process, instrumentation on from just before them.",
        ["per tensor", "instructions", "over its bare arm"],
        rows,
    )


RENDERERS = {
    "never": render_never,
    "own": render_own,
    "fit": render_fit,
    "instructions": render_instructions,
    "state": render_state,
    "progress": render_progress,
}


def render(res: dict[str, Any]) -> str:
    out = render_header(res)
    for part, render_part in RENDERERS.items():
        if part in res:
            out += render_part(res[part])
    return "\n".join(out)
