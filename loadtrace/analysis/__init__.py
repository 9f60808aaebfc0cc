"""What loadtrace's spans mean: pure functions over loaded spans, no torch, transformers or OTel SDK.

Of the rest of loadtrace, only ``semconv`` (the span vocabulary the instrumentation writes) is imported here.

sources.py / jaeger.py   files and Jaeger → ``Span`` records (and killed ranks' progress snapshots)
ranks.py                 spans → one ``RankLoad`` per rank of each ``Job`` (trace); the job's model size, loading rank
findings.py / nodes.py   ranks → duplicate work the strategy says should not happen; each node's I/O
forecast.py              one measured job → its memory at a target model size
report.py / compare.py   the ``Report`` behind ``loadtrace report`` and the ``Comparison`` behind ``loadtrace compare``
model.py                 those records as typed dataclasses, and ``to_json``: the one place they become JSON
units.py                 byte counts as people read them (findings' sentences, ``loadtrace.render``'s tables)
"""
