"""The markdown report: one function per section, each returning its lines; ``render`` joins them."""

from __future__ import annotations

from typing import Any

from .workloads import DDP_CONFIGS, SINGLE_CONFIGS, TARGETS

START_HEADERS = ["variant", "median ms", "min ms", "median paired diff vs not installed, ms", "median pair ratio"]
LOAD_HEADERS = [
    "config",
    "first s med",
    "first s min",
    "first pair ratio",
    "first min/min",
    "warm s med",
    "warm s min",
    "warm pair ratio",
    "warm min/min",
    "first CPU pair ratio",
    "warm CPU pair ratio",
    "RSS after imports MB",
    "extra (paired)",
    "load's own peak MB",
    "process peak RSS MB",
    "extra peak (paired)",
]
LOAD_LEGEND = (
    "first = the process's first load (what a job pays); warm = fastest later load in the same process. "
    "Pair ratio = that run / the `off` run of the same round, median over rounds; min/min = ratio of "
    "the minima. CPU = CPU seconds of the process (all threads; summed over ranks) during the load. "
    "RSS after imports: VmHWM once torch and transformers (and, when on, loadtrace's OTel) are "
    "imported; load's own peak: VmHWM reset before the first load, minus RSS then; process peak: "
    "VmHWM over the whole run (MB, the largest rank).\n"
)
AB_HEADERS = ["hooks", "wall s med", "wall s min", "wall pair ratio", "wall min/min", "wall paired diff ms"]
AB_HEADERS += ["CPU s med", "CPU pair ratio", "CPU min/min", "CPU paired diff ms"]
SPANS_HEADERS = ["load", "tensors", "files opened", "spans per load (max over ranks)"]
SPANS_HEADERS += ["spans in the rank's file (all its loads, + job root on rank 0)", "target per load", ""]
REPORT_HEADERS = ["median s", "min s", "of which interpreter + import (median s)", "ranks in report", "target", ""]
MICRO_HEADERS = ["call", "bare med", "bare (null) med", "bare wrapt pass-through med", "instrumented med", "bare min"]
MICRO_HEADERS += ["instrumented min", "extra ns", "wrapped vs bare", "null"]


def fmt(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.1f} %"


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


def render_header(res: dict[str, Any]) -> list[str]:
    meta = res["meta"]
    moe, many = res["checkpoints"]["moe"], res["checkpoints"]["many"]
    return [
        f"## loadtrace benchmark ({meta['when']}, {meta['cpus']} CPUs, python {meta['python']}, torch "
        f"{meta['torch']}, transformers {meta['transformers']}, mode {meta['mode']}, loadtrace at "
        f"{meta.get('commit', '?')}; load average "
        f"{meta['loadavg_start']} at start, {meta.get('loadavg_end', '?')} at end)",
        f"\nWorkloads: `{moe['spec']['name']}` {moe['tensors']:,} tensors, {len(moe['files'])} shards, "
        f"{moe['bytes'] / 1e6:.0f} MB; `{many['spec']['name']}` {many['tensors']:,} tensors, "
        f"{len(many['files'])} shards, {many['bytes'] / 1e6:.1f} MB.",
    ]


# (a) ----------------------------------------------------------------------------------------------------------------


def render_start(s: dict[str, Any]) -> list[str]:
    rows = []
    for name in ("not installed", "installed, off", "installed, LOADTRACE=1"):
        e = s[name]
        rows.append(
            [name, fmt(e["median_ms"], ".2f"), fmt(e["min_ms"], ".2f"), fmt(e["pair_diff_median_ms"], "+.2f")]
            + [fmt(e["pair_ratio_median"], ".3f"), fmt(e["max_rss_mb"], ".1f")]
        )
    up = s["unpatched_when_off"]
    off_extra = s["installed, off"]["pair_diff_median_ms"]
    ok = off_extra is not None and off_extra <= TARGETS["start_ms"] and up["ok"]
    return [
        f"\n### (a) Interpreter start, `python -c pass` ({s['pairs']} interleaved triples)\n",
        table([*START_HEADERS, "max RSS MB"], rows),
        f"\n`loadtrace.pth` processing in-process (site.addpackage): {s['pth_processing_us']['min']:.1f} µs "
        f"(min), {s['pth_processing_us']['median']:.1f} µs (median). Extra modules imported at an off start "
        f"(-X importtime): {s['extra_imports_when_off'] or 'none'}. Installed but off, nothing patched "
        f"(zeros_like/empty_like the original builtins, safe_open/from_pretrained/convert unwrapped, "
        f"loadtrace not imported): {'yes' if up['ok'] else 'NO: ' + '; '.join(up['problems'])}. "
        f"Target ≤ {TARGETS['start_ms']:g} ms: {verdict(ok)}.",
    ]


# (b) ----------------------------------------------------------------------------------------------------------------


def load_row(label: str, e: dict[str, Any]) -> list[str]:
    first, warm_, peak = e["first"], e["warm"], e["peak_mb"]
    return [
        label,
        *(fmt(first["median"]), fmt(first["min"]), pct(first["pair_ratio_median"]), pct(first["ratio_of_minima"])),
        *(fmt(warm_["median"]), fmt(warm_["min"]), pct(warm_["pair_ratio_median"]), pct(warm_["ratio_of_minima"])),
        pct(e["first_cpu"]["pair_ratio_median"]),
        pct(e["warm_cpu"]["pair_ratio_median"]),
        fmt(e["import_mb"]["median"], ".1f"),
        fmt(e["import_mb"]["pair_diff_median"], "+.1f"),
        fmt(e["load_peak_mb"]["median"], ".0f"),
        fmt(peak["median"], ".0f"),
        fmt(peak["pair_diff_median"], "+.1f"),
    ]


def render_single_notes(sm: dict[str, Any]) -> list[str]:
    out = []
    if "torch.profiler" in sm:
        prof = sm["torch.profiler"]["profiler_inner"]
        out.append(
            f"\n`torch.profiler` rows time the whole `with profile(...)` block (enter, load, stop and its "
            f"post-processing); the load alone inside it (first load): median {fmt(prof['median'])} s, "
            f"pair ratio {pct(prof['pair_ratio_median'])}."
        )
    if "OTLP http" in sm:
        out.append(f"OTLP receiver got {sm['OTLP http']['otlp_spans']} spans per run.")
    return out


def render_default_vs_off(sm: dict[str, Any]) -> str:
    on, null, off = sm["LOADTRACE=1"], sm["off (null)"], sm["off"]
    extra_rss = (on["import_mb"]["pair_diff_median"] or 0.0) + max(
        0.0, on["load_peak_mb"]["median"] - off["load_peak_mb"]["median"]
    )

    def pair(name: str) -> str:
        return f"{pct(on[name]['pair_ratio_median'])} ({pct(null[name]['pair_ratio_median'])})"

    return (
        f"\nDefault detail vs off, pair ratios (null in brackets): wall first {pair('first')}, wall warm "
        f"{pair('warm')}, CPU first {pair('first_cpu')}, CPU warm {pair('warm_cpu')}. Memory: "
        f"{fmt(on['import_mb']['pair_diff_median'], '+.1f')} MB resident after imports (null "
        f"{fmt(null['import_mb']['pair_diff_median'], '+.1f')} MB), the load's own peak "
        f"{fmt(on['load_peak_mb']['median'], '.0f')} vs {fmt(off['load_peak_mb']['median'], '.0f')} MB "
        f"(medians; it is bimodal run to run, ~900 or ~1,014 MB, traced or not), so extra peak per rank "
        f"{fmt(extra_rss, '+.1f')} MB: target ≤ {TARGETS['rss_mb']:g} MB {verdict(extra_rss <= TARGETS['rss_mb'])}."
    )


def render_loads(res: dict[str, Any], key: str, title: str, configs: list[str]) -> list[str]:
    sm = res[key]["summary"]
    out = [
        f"\n### (b) `from_pretrained` wall time, {title}: {res[key]['rounds']} interleaved rounds, fresh process per "
        f"run, {res[key]['loads']} loads per process\n",
        LOAD_LEGEND,
        table(LOAD_HEADERS, [load_row(label, sm[label]) for label in configs]),
    ]
    if key == "single":
        out += render_single_notes(sm)
    return [*out, render_default_vs_off(sm)]


def account_rows(acc: dict[str, Any]) -> list[list[str]]:
    """Where the accounted time goes, ms per load, the total and the progress-file writes."""
    c = acc["counts"]
    rows = [[name, fmt(value / 1e6, ".2f")] for name, value in acc["breakdown_ns"].items()]
    rows.append(["**total per load, as run**", f"**{acc['total_ms']:.2f}**"])
    if acc.get("progress_ms"):
        state = (
            "none were written: the monitor gave up because the trace directory did not exist yet"
            if acc.get("progress_broken")
            else "on the monitor thread, not the loading thread: not in the total"
        )
        what = f"progress-file writes, {c.get('progress_writes', 0)} per load ({state})"
        rows.append([what, fmt(acc["progress_ms"], ".2f")])
    return rows


def account_share(total: float, base: dict[str, Any]) -> str:
    """The accounted total as a share of the ``off`` loads of (b), and the verdict."""
    parts = []
    for what, (key, stat) in (
        ("warm load, median", ("warm", "median")),
        ("warm load, fastest", ("warm", "min")),
        ("first load, median", ("first", "median")),
    ):
        seconds = base[key][stat]
        if seconds:
            parts.append(f"{total / (seconds * 1000) * 100:.2f} % of the off {what} ({seconds:.3f} s)")
    ok = total / (base["warm"]["min"] * 1000) <= TARGETS["load_ratio"] - 1
    return (
        "\nThat is " + "; ".join(parts) + f". Target ≤ {(TARGETS['load_ratio'] - 1) * 100:g} %: "
        f"{verdict(ok)} (judged on the fastest warm load, the strictest)."
    )


def render_account(res: dict[str, Any]) -> list[str]:
    acc = res["account"]
    c = acc["counts"]
    costs = [
        [name, fmt(value / 1000, ".2f") if isinstance(value, float) else value]
        for name, value in acc["costs_ns"].items()
    ]
    out = [
        "\n### (b) Overhead accounting, default detail: per-call cost (best of many blocks) x calls per load\n",
        f"Events per load, from the load's own spans: {c['tensors_read']:,} tensors read, {c['files']} files, "
        f"{c['spans']} spans, {c['phase_entries']} phase entries, {c['conversions']} conversions, "
        f"{c['materialized']} zeros_like/empty_like, {c.get('monitor_samples', 0):.0f} monitor samples "
        f"(a {c['load_wall_s']:.2f} s warm load).\n",
        table(["per-call cost", "µs"], costs),
        "",
        table(["where", "ms per load"], account_rows(acc)),
    ]
    if "single" in res:
        out.append(account_share(acc["total_ms"], res["single"]["summary"]["off"]))
    return out


def render_ab(ab: dict[str, Any]) -> list[str]:
    rows = []
    for label in ("off", "off (null)", "on"):
        wall, cpu = ab[label], ab[label + " cpu"]
        rows.append(
            [label, fmt(wall["median"]), fmt(wall["min"]), pct(wall["pair_ratio_median"])]
            + [pct(wall["ratio_of_minima"]), fmt(wall["pair_diff_median_ms"], "+.1f"), fmt(cpu["median"])]
            + [pct(cpu["pair_ratio_median"]), pct(cpu["ratio_of_minima"]), fmt(cpu["pair_diff_median_ms"], "+.1f")]
        )
    return [
        f"\n### (b) In one process: warm loads with loadtrace's hooks removed / installed between loads "
        f"({ab['triples']} rotating triples off / on / off)\n",
        "The tightest pairing available (same process, same imports, same allocator state); it measures "
        "the steady per-load cost of the hooks and spans, not the one-time cost of the first traced load.\n",
        table(AB_HEADERS, rows),
    ]


# (c), (d), (e) ------------------------------------------------------------------------------------------------------


def render_spans(res: dict[str, Any]) -> list[str]:
    rows = []
    for entry in res["spans"]:
        limit = entry["files"] + TARGETS["spans_over_files"]
        rows.append(
            [entry["what"], f"{entry['tensors']:,}", str(entry["files"]), str(entry["max_spans_per_load"])]
            + [str(entry["max_rank_file_spans"]), f"≤ {limit}", verdict(entry["max_spans_per_load"] <= limit)]
        )
    out = ["\n### (c) Spans per rank at default detail\n", table(SPANS_HEADERS, rows)]
    if res.get("tensor_detail_spans"):
        out.append(
            f"\nFor comparison, `LOADTRACE_DETAIL=tensor` on the {res['checkpoints']['moe']['tensors']:,}-tensor "
            f"load: {res['tensor_detail_spans']} spans per load."
        )
    return out


def render_report(r: dict[str, Any], many: dict[str, Any]) -> list[str]:
    how = (
        "`loadtrace report DIR --format json` (the CLI, a fresh process each time)"
        if r["how"] == "cli"
        else "`loadtrace.analysis.sources.read_files` (the CLI was not ready)"
    )
    row = [fmt(r["median_s"]), fmt(r["min_s"]), fmt(r["import_only_median_s"]), str(r.get("ranks_in_report", "-"))]
    row += [f"≤ {TARGETS['report_s']:g} s", verdict(r["median_s"] <= TARGETS["report_s"])]
    return [
        f"\n### (d) {how} over {r['files']} rank files ({r['bytes'] / 1e6:.2f} MB) of the "
        f"{many['tensors']:,}-tensor load\n",
        table(REPORT_HEADERS, [row]),
    ]


def micro_row(e: dict[str, Any]) -> list[str]:
    bare, null, wrapped = e["bare"], e["bare (null)"], e["wrapped"]
    return [
        f"torch.{e['function']} ({e['numel']:,} floats)",
        *(fmt(bare["median_ns"], ".0f"), fmt(null["median_ns"], ".0f")),
        *(fmt(e["wrapt pass-through"]["median_ns"], ".0f"), fmt(wrapped["median_ns"], ".0f")),
        *(fmt(bare["min_ns"], ".0f"), fmt(wrapped["min_ns"], ".0f")),
        fmt(wrapped["median_ns"] - bare["median_ns"], "+.0f"),
        pct(wrapped["median_ns"] / bare["median_ns"]),
        pct(null["median_ns"] / bare["median_ns"]),
    ]


def render_micro(micro: list[dict[str, Any]]) -> list[str]:
    return [
        "\n### (e) Outside a load: bare vs wrapped (ns per call, interleaved blocks)\n",
        "With loadtrace instrumented, outside a load `torch.zeros_like` / `empty_like` are the bare builtins "
        "(hooked only while a load is open), so the last columns measure the same object as the first.\n",
        table(MICRO_HEADERS, [micro_row(e) for e in micro]),
    ]


# issue 16: processes that never load, the fixed / per-tensor fit, the dying-rank state -----------------------------


def render_never(never: dict[str, Any]) -> list[str]:
    out = [
        f"\n### Processes that never load: `LOADTRACE=1` vs unset ({never['rounds']} interleaved rounds, fresh process "
        "each)\n",
        "Extra = that arm minus `off` (min of N, median beside); `off (null)` is `off` run again: the noise.\n",
    ]
    rows = []
    for title, arms in never.items():
        if title in ("rounds", "import_us"):
            continue
        for arm, e in arms.items():
            rows.append(
                [
                    f"`{title}`",
                    arm,
                    fmt(e["min_ms"], ".1f"),
                    fmt(e["median_ms"], ".1f"),
                    fmt(e["extra_min_ms"], "+.1f"),
                    fmt(e["extra_median_ms"], "+.1f"),
                    fmt(e["min_rss_mb"], ".1f"),
                    fmt(e["extra_min_rss_mb"], "+.2f"),
                    fmt(e["extra_median_rss_mb"], "+.2f"),
                ]
            )
    headers = ["process", "arm", "min ms", "median ms", "extra min ms", "extra median ms"]
    headers += ["peak RSS MB (min)", "extra peak MB (min)", "extra peak MB (median)"]
    exact = (
        f"\nMeasured inside the process (`-X importtime`, min of {never['rounds']}): all that `loadtrace.pth` imports "
        f"with `LOADTRACE=1` takes {never['import_us'] / 1e3:.2f} ms."
        if "import_us" in never
        else ""
    )
    return [*out, table(headers, rows), exact]


def ci_text(ci: list[float] | None) -> str:
    return "" if not ci else f" [{ci[0]:+.0f}, {ci[1]:+.0f}]"


def render_fit(fit: dict[str, Any]) -> list[str]:
    rows = []
    for e in fit["sizes"]:
        for unit, what in (("wall", "wall"), ("thread", "loading thread CPU"), ("cpu", "process CPU")):
            rows.append(
                [
                    f"{e['tensors']:,} tensors, {e['files']} files",
                    what,
                    str(e["rounds"]),
                    fmt(e[f"{unit}_off_median_s"], ".3f"),
                    f"{e[f'{unit}_on_median_ms']:+.1f}{ci_text(e.get(f'{unit}_on_ci_ms'))}",
                    f"{e[f'{unit}_null_median_ms']:+.1f}{ci_text(e.get(f'{unit}_null_ci_ms'))}",
                    f"{e[f'{unit}_on_min_ms']:+.1f}",
                    f"{e[f'{unit}_null_min_ms']:+.1f}",
                ]
            )
    headers = ["checkpoint", "measure", "rounds", "off s (median)", "on - off ms, median pair [95 % interval]"]
    headers += ["null: off again - off ms, median pair [95 % interval]", "min on - min off ms", "min null - min off ms"]
    fits = [
        f"{name}: {fit[key]['fixed_ms']:+.2f} ms per load + {fit[key]['per_tensor_us']:+.3f} µs per tensor"
        for key, name in (
            ("wall_median", "wall, median pairs"),
            ("thread_median", "loading thread CPU, median pairs"),
            ("thread_min", "loading thread CPU, minima"),
            ("cpu_median", "process CPU, median pairs"),
        )
    ]
    settle = (
        " Before each timed load, an untimed one of the same checkpoint with the same arm: each arm in its steady "
        "state, whatever a load leaves behind for the next counted for the arm that leaves it."
        if fit.get("settle")
        else ""
    )
    faults = "; ".join(
        f"{e['tensors']:,} tensors: " + ", ".join(f"{arm} {n:,.0f}" for arm, n in e["faults_median"].items())
        for e in fit["sizes"]
        if "faults_median" in e
    )
    return [
        "\n### Default detail, whole loads: hooks off / on / off again (warm loads in one process, a bound)\n",
        "What is measured: the same warm loads timed whole, loadtrace's hooks removed (`off`), installed (`on`) and "
        "removed again (`off (null)`: the same as `off`, so its difference is the noise) between loads, the three in "
        f"all 6 orders in turn, so that each follows each other equally often.{settle} Per round the difference to "
        "`off`; the median over rounds with a distribution-free 95 % interval (order statistics). A fair pairing puts "
        "the null's interval around 0. Whole loads here scatter by ±100 ms and more (other jobs' CPU, even in a "
        "thread's clock), so this only bounds the cost; the metered figure above is the cost.\n",
        table(headers, rows),
        (f"\nMinor page faults per load (median): {faults}. " if faults else "\n")
        + "Fit through the two sizes (noise-dominated, for the record): "
        + "; ".join(fits)
        + ". "
        f"Once per process, the first span sets up OpenTelemetry (import and provider): {fit['first_span_ms']:.1f} ms "
        "(min of 5 processes that imported torch and transformers). "
        f"`get_slice(name)[...]` per tensor: {fit['slice_us']['bare']:.2f} µs bare, {fit['slice_us']['traced']:.2f} µs "
        f"through loadtrace's proxies (the best of 600 blocks of each arm), "
        f"**{fit['slice_us']['extra']:+.2f} µs** (the median of the rounds' differences, thread CPU time).",
    ]


def own_rows(own: dict[str, Any]) -> list[list[str]]:
    """One row per hook point (and tracing method called outside hooks), the sizes side by side: calls, min, median."""
    sizes = own["sizes"]
    labels = list(dict.fromkeys(label for e in sizes for label in e["labels"]))
    rows = []
    for label in labels:
        row = [f"`{label}`"]
        for e in sizes:
            found = e["labels"].get(label)
            row += (
                ["-"] * 3
                if found is None
                else [f"{found['calls']:g}", fmt(found["min"], ".2f"), fmt(found["median"], ".2f")]
            )
        rows.append(row)
    total = ["**total, loading thread**"]
    for e in sizes:
        total += [f"{e['calls']:g}", f"**{e['total_ms']['min']:.2f}**", f"**{e['total_ms']['median']:.2f}**"]
    bias = ["clock-read bias, subtracted above (calls x mean empty interval)"]
    for e in sizes:
        bias += ["", fmt(e["bias_ms"], ".2f"), ""]
    reads = ["the meter's own clock reads (2 per metered call: they slow the load, not in the figures)"]
    for e in sizes:
        reads += ["", fmt(e["calls"] * own["bias"]["pair_ns"] / 1e6, ".2f"), ""]
    monitor = ["monitor thread CPU (beside the loading thread, not in the total)"]
    for e in sizes:
        m = e["monitor_ms"]
        monitor += ["", "-", "-"] if m is None else ["", fmt(m["min"], ".2f"), fmt(m["median"], ".2f")]
    thread = ["the whole load, loading thread CPU (for scale)"]
    for e in sizes:
        thread += ["", fmt(e["thread_s"]["min"] * 1e3, ".0f"), fmt(e["thread_s"]["median"] * 1e3, ".0f")]
    share = ["the total as a share of the load's loading thread CPU, %"]
    for e in sizes:
        found = e.get("share_pct")
        share += ["", "-", "-"] if found is None else ["", fmt(found["min"], ".2f"), fmt(found["median"], ".2f")]
    parts = []
    for label in sizes[0].get("parts", {}):
        row = [f"of which: {label}"]
        for e in sizes:
            found = e["parts"][label]
            row += [f"{found['calls']:g}", fmt(found["min"], ".2f"), fmt(found["median"], ".2f")]
        parts.append(row)
    return [*rows, total, *parts, bias, reads, monitor, thread, share]


def render_own(own: dict[str, Any]) -> list[str]:
    sizes = own["sizes"]
    headers = ["where loadtrace's code runs (ms per load)"]
    for e in sizes:
        headers += [f"calls, {e['tensors']:,} tensors", "min ms", "median ms"]
    fit, fit_med, sl = own["fit_min"], own["fit_median"], own["slice_us"]
    ok = fit["fixed_ms"] <= TARGETS["fixed_ms"] and fit["per_tensor_us"] <= TARGETS["per_tensor_us"]
    others = max(e["other_thread_calls"] for e in sizes)
    return [
        f"\n### Default detail: loadtrace's own time on the loading thread per load ({own['rounds']} warm loads of "
        "each checkpoint, alternating, in one process)\n",
        "What is measured: inside real warm `from_pretrained` loads (`HF_DEACTIVATE_ASYNC_LOAD=1`, every tensor read "
        "on the loading thread), the loading thread's CPU time (`time.thread_time_ns`) spent in loadtrace's code "
        "around each hooked call: the hook's handler before the call and its `done` after it, never the call itself; "
        "and the tracing's methods when something outside a hook calls them (the file proxy ending its file's span). "
        "Code nested in another metered piece counts once. Other jobs' CPU is not in a thread's clock, so this holds "
        "still where whole loads scatter by ±100 ms. Min and median over the loads; every figure less the clock-read "
        f"bias ({own['bias']['empty_ns']:.0f} ns per metered call; the meter's two reads cost "
        f"{own['bias']['pair_ns']:.0f} ns, which slow the load but are not in the figures). Hooked calls on other "
        f"threads, not metered: {others}.\n",
        table(headers, own_rows(own)),
        "\nThe `of which` rows time, inside the metered pieces, the costs kept for exact figures and for a killed "
        "rank's spans: OpenTelemetry's span calls (the SDK's `start_span`, `set_attribute(s)` and `end`), apart from "
        "loadtrace's writing of each span as it ends (inside `end`); the page-cache residency of each file before the "
        "library reads it; and the memory readings that are the load's baselines. The two clock reads each of them "
        "adds are taken off the total.\n",
        f"\nFit of the totals through the two sizes: **{fit['fixed_ms']:.2f} ms per load + "
        f"{fit['metered_per_tensor_us']:.3f} µs per tensor** (minima; medians {fit_med['fixed_ms']:.2f} ms + "
        f"{fit_med['metered_per_tensor_us']:.3f} µs). Not in it: the slice proxies' work per tensor "
        f"(`get_slice(name)[...]`, {sl['bare']:.2f} µs bare and {sl['traced']:.2f} µs through loadtrace at best, "
        f"**{sl['extra']:+.2f} µs** more as the median of 600 rounds of blocks of 200 reads, timed apart in thread "
        "CPU, the garbage collector's share included). So per tensor "
        f"{fit['metered_per_tensor_us']:.3f} + {sl['extra']:.2f} = **{fit['per_tensor_us']:.2f} µs** (metered slope "
        f"+ slice extra). Targets ≤ {TARGETS['fixed_ms']:g} ms per load and ≤ {TARGETS['per_tensor_us']:g} µs per "
        f"tensor: {verdict(ok)}. The monitor thread's CPU is background work beside the load (it reads memory), "
        "stated apart.",
        *(
            []
            if "floor_extra" not in sl
            else [
                "\n\nThe floor of any per-tensor counting in Python, in the same rounds: a slice whose `__getitem__` "
                "only passes the read on, made by a per-file closure as loadtrace makes its own, costs "
                f"**{sl['floor_extra']:+.2f} µs** per tensor over the bare read (best block {sl['floor']:.2f} µs) "
                "before it counts anything."
            ]
        ),
    ]


def render_state(state: dict[str, Any]) -> list[str]:
    rows = [
        [name, str(count), fmt(state["costs_ns"][name] / 1e3, ".2f"), fmt(state["per_load_us"][name], ".1f")]
        for name, count in state["counts"].items()
    ]
    total = sum(state["per_load_us"].values())
    return [
        "\n### The state kept for a dying rank and the termination handlers, per load (3,219-tensor load)\n",
        table(["operation", "per load", "µs each (best block)", "µs per load"], rows),
        f"\nTotal {total:.0f} µs per load. The tensor and byte counts themselves are the read slots' `+=` "
        "(in the per-tensor cost above).",
    ]


def render(res: dict[str, Any]) -> str:
    out = render_header(res)
    if "never" in res:
        out += render_never(res["never"])
    if "own" in res:
        out += render_own(res["own"])
    if "fit" in res:
        out += render_fit(res["fit"])
    if "state" in res:
        out += render_state(res["state"])
    if "start" in res:
        out += render_start(res["start"])
    for key, title, configs in (
        ("single", "1 rank", SINGLE_CONFIGS),
        ("ddp", "torchrun --nproc_per_node 2 (gloo), the slower rank", DDP_CONFIGS),
    ):
        if key in res:
            out += render_loads(res, key, title, configs)
    if "account" in res:
        out += render_account(res)
    if "ab" in res:
        out += render_ab(res["ab"])
    if "spans" in res:
        out += render_spans(res)
    if "report" in res:
        out += render_report(res["report"], res["checkpoints"]["many"])
    if "micro" in res:
        out += render_micro(res["micro"])
    return "\n".join(out)
