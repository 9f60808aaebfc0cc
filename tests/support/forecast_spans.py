"""A rank's load spans with the memory readings a forecast is made from, built by hand."""

from __future__ import annotations

from support.otlp_lines import memory_attributes, rank_load

M = 1_000_000  # measured model bytes


BEFORE = 100_000_000  # fixed: RSS before the load


FILE_BEFORE = 20_000_000


FSDP = "fsdp_cpu_ram_efficient"


def rank_spans(trace: str, rank: int, strategy: str, read: int, growth: int, *, file_growth: int = 0, held: int = M,
               created: int = 0, node_total: int | None = 64_000_000_000, cgroup_max: int | None = None):  # fmt: skip
    memory = memory_attributes(
        BEFORE, BEFORE + growth,
        anon=(BEFORE - FILE_BEFORE, BEFORE - FILE_BEFORE + growth - file_growth),
        file=(FILE_BEFORE, FILE_BEFORE + file_growth), node_total=node_total, cgroup_max=cgroup_max,
    )  # fmt: skip
    return rank_load(
        trace, rank, strategy, read, held={"cpu": held}, materialized={"cpu": created} if created else None,
        memory=memory,
    )  # fmt: skip
