"""Per-span accounting: cheap counters that become span attributes when the span ends.

Hooked calls happen in many threads (transformers reads tensors in a thread pool). Every record is one
``list.append``, atomic under the GIL and free of locks; sums are taken once, when the span ends.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

MAX_SITES = 10


class Ledger:
    """What happened under one span: tensors read, tensors materialised, conversions, faults."""

    __slots__ = ("reads", "materialized", "conversions", "errors")

    def __init__(self) -> None:
        self.reads: list[int] = []  # bytes of each tensor read (a load's own; its files keep theirs)
        self.materialized: list[tuple[str, str, int]] = []  # (call site, device type, bytes)
        self.conversions: list[tuple[tuple[str, ...], int]] = []  # (operation names, bytes produced)
        self.errors: list[str] = []  # loadtrace faults swallowed

    def add_read(self, nbytes: int) -> None:
        self.reads.append(nbytes)

    def add_materialized(self, site: str, device: str, nbytes: int) -> None:
        self.materialized.append((site, device, nbytes))

    def add_conversion(self, operations: tuple[str, ...], nbytes: int) -> None:
        self.conversions.append((operations, nbytes))

    def add_error(self, where: str) -> None:
        self.errors.append(where)

    # Span attributes ---------------------------------------------------------------------------------------------

    def read_attributes(self, *more: Ledger) -> dict[str, Any]:
        """Tensors and bytes read, here and in ``more`` ledgers (a load's files)."""
        tensors = len(self.reads) + sum(len(other.reads) for other in more)
        nbytes = sum(self.reads) + sum(sum(other.reads) for other in more)
        return {"loadtrace.read.tensors": tensors, "loadtrace.read.bytes": nbytes}

    def load_attributes(self, files: list[Ledger]) -> dict[str, Any]:
        """The totals on a load span (``transformers.from_pretrained`` or ``loadtrace.load``), with its files' reads."""
        attributes = self.read_attributes(*files)
        attributes["loadtrace.files.opened"] = len(files)
        attributes["loadtrace.hook_errors"] = len(self.errors)
        attributes.update(self.materialized_attributes())
        if self.conversions:
            attributes.update(self.conversion_attributes())
        return attributes

    def materialized_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {"loadtrace.materialized.calls": len(self.materialized)}
        by_device: Counter[str] = Counter()
        by_site: Counter[str] = Counter()
        for site, device, nbytes in self.materialized:
            by_device[device] += nbytes
            by_site[f"{site} {device}"] += nbytes
        for device, nbytes in by_device.items():
            attributes[f"loadtrace.materialized.bytes.{device}"] = nbytes
        if by_site:
            top = by_site.most_common(MAX_SITES)
            attributes["loadtrace.materialized.sites"] = [site for site, _ in top]
            attributes["loadtrace.materialized.site_bytes"] = [nbytes for _, nbytes in top]
        return attributes

    def conversion_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "loadtrace.convert.count": len(self.conversions),
            "loadtrace.convert.bytes": sum(nbytes for _, nbytes in self.conversions),
        }
        counts: Counter[str] = Counter()
        op_bytes: Counter[str] = Counter()
        for operations, nbytes in self.conversions:
            for op in operations:
                counts[op] += 1
                op_bytes[op] += nbytes
        for op, count in counts.items():
            attributes[f"loadtrace.convert.op.{op}.count"] = count
            attributes[f"loadtrace.convert.op.{op}.bytes"] = op_bytes[op]
        return attributes
