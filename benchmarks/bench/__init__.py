"""The parts of ``benchmarks/bench_load.py``, one module per part of what it measures.

    common.py     paths, the clean environment, running and timing workers, logging
    stats.py      medians, minima, paired ratios: every figure the report shows is computed here
    workloads.py  the two checkpoints (built once, cached) and the targets
    traces.py     reading our own OTLP JSON Lines files; a local OTLP/HTTP receiver
    start.py      (a) interpreter start: shadow venvs, ``-X importtime``, ``loadtrace.pth``, nothing patched when off
    loads.py      (b) fresh-process loads, 1 rank and torchrun 2 ranks, interleaved rounds
    account.py    (b) overhead accounting: per-event cost x events per load
    ab.py         (b) warm loads in one process, hooks removed / installed between them
    spans.py      (c) spans per rank
    report64.py   (d) ``loadtrace report`` over 64 ranks' files
    micro.py      (e) zeros_like / empty_like outside a load
    cost.py       issue 16: processes that never load, whole loads hooks off / on / off (fit), the dying-rank state
    own.py        issue 16: loadtrace's own time on the loading thread per load, metered inside real loads (own)
    render.py     the markdown report, one function per section

Each part has ``bench_*`` (run by the orchestrator, in this process) and, where it needs a fresh process, a ``cmd_*``
worker that ``bench_load.py`` dispatches to by its internal subcommand (``_load``, ``_ab``, ...).
"""
