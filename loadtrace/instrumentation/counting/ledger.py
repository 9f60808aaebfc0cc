"""Per-span accounting: cheap records that become span attributes when the span ends.

Hooked calls happen in many threads. Every record is one ``list.append``, atomic under the GIL and free of locks; sums
are taken once, when the span ends (attributes.py). Tensor reads, the one per-tensor record, are not here: they are
counted straight into the file's read slot in the state file (statefile.py), exact even at a SIGKILL.
"""

from __future__ import annotations


class Ledger:
    """What happened under one span: tensors materialised, conversions, casts, faults."""

    __slots__ = ("materialized", "conversions", "errors", "partial_reads", "casts")

    def __init__(self) -> None:
        self.materialized: list[tuple[str, str, int]] = []  # (call site, device type, bytes)
        self.conversions: list[tuple[tuple[str, ...], int]] = []  # (operation names, bytes produced)
        self.errors: list[str] = []  # loadtrace faults swallowed
        self.partial_reads: list[int] = []  # files: bytes of each read that returned only part of a tensor
        self.casts: list[tuple[int, int, int]] = []  # loads: (start ns, end ns, bytes) of each read tensor cast

    def add_materialized(self, site: str, device: str, nbytes: int) -> None:
        self.materialized.append((site, device, nbytes))

    def add_error(self, where: str) -> None:
        self.errors.append(where)
