"""What loadtrace's spans mean: pure functions over loaded spans, no torch, transformers or OTel SDK.

sources.py / jaeger.py   files and Jaeger → ``Span`` records
ranks.py                 spans → one ``RankLoad`` per rank of each job (trace)
findings.py              ranks → duplicate work the strategy says should not happen
report.py / compare.py   the JSON-ready objects behind ``loadtrace report`` and ``loadtrace compare``
"""
