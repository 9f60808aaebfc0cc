"""What loadtrace's spans mean: pure functions over loaded spans, no torch, transformers or OTel SDK.

Of the rest of loadtrace, only ``semconv`` (the span vocabulary the instrumentation writes) and ``statefile`` (the
format of the state files it leaves, standard library only) are imported here.

sources.py / jaeger.py   files and Jaeger → ``Span`` records (and the state files ranks leave beside them)
processes.py             spans and state files → processes → each trace's attempts, never summed
ranks.py                 processes → one ``RankLoad`` per rank of each ``Job`` (attempt of a trace): spans, plus how a
                         dead rank ended and its last known totals; the job's model size, loading rank
findings.py / nodes.py   ranks → duplicate work the strategy says should not happen; each node's I/O
forecast.py              one measured job → its memory at a target model size
report.py / compare.py   the ``Report`` behind ``loadtrace report`` and the ``Comparison`` behind ``loadtrace compare``
model.py                 those records as typed dataclasses, and ``to_json``: the one place they become JSON
units.py                 byte counts as people read them (findings' sentences, ``loadtrace.render``'s tables)
"""
