"""The parts of ``benchmarks/bench_load.py``, one module per part of what it measures.

    common.py     paths, the clean environment, running workers, timing and the statistics every part uses
    workloads.py  the two checkpoints (built once, cached) and the targets
    never.py      processes that never load, ``LOADTRACE=1`` vs unset
    own.py        loadtrace's own time on the loading thread per load, metered inside real loads
    slices.py     the per-tensor path (slice proxies, transformers' per-tensor hooks), timed apart (used by own and
                  fit) and counted in instructions under callgrind (the ``instructions`` part)
    fit.py        whole loads, hooks off / on / off in one process (a bound)
    state.py      the dying-rank state and the termination handlers per load
    render.py     the markdown report: one section renderer, each part's rows and words

Each part has ``bench_*`` (run by the orchestrator, in this process) and, where it needs a fresh process, a ``cmd_*``
worker that ``bench_load.py`` dispatches to by its internal subcommand (``_own``, ``_fit``, ...).
"""
