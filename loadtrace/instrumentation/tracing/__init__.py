"""Who opens and ends the scopes: the front the hooks call (``spans.Tracing``), the rank's startup span
(``startup``), the loads open in the process (``loads``), their phases (``phasing``), the stages outside loading
(``stages``), the loads no call holds open (``loose``), how a scope's span ends (``ending``), the process's exit,
forks and signals around its scopes (``lifecycle``), and the OpenTelemetry SDK they go through (``provider``, which
assembles ``exporting``'s exporters and ``beside``'s watchers).

It may import every room below it (``beside``, ``exporting``, ``counting``, the floor). Only what stands above it
imports it, through ``spans`` alone: the hooks, ``activation`` and ``loadtrace.traced_load``.
"""
