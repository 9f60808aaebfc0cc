"""Reading span attributes: typed, and forgiving of a hand-edited or foreign span (a bad value is absent, never an
error). Both the rank records and the findings read spans through these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..startup_split import whole_int
from .sources import Span

# The device of empty weights: bytes there occupy no memory.
META = "meta"


def int_attr(attributes: dict[str, Any], key: str) -> int:
    """An integer attribute, 0 when absent or not an integer (a hand-edited or foreign span must not break a report)."""
    value = attributes.get(key)
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def opt_int_attr(attributes: dict[str, Any], key: str) -> int | None:
    """An integer attribute, None when absent or not an integer: unknown is not zero."""
    return whole_int(attributes.get(key))


def known(values: Iterable[int | None]) -> list[int]:
    return [value for value in values if value is not None]


def sum_known(spans: list[Span], key: str) -> int | None:
    """The sum of an attribute over spans, None unless every span carries it (a partial sum would mislead)."""
    values = [opt_int_attr(span.attributes, key) for span in spans]
    return sum(values) if values and None not in values else None  # type: ignore[arg-type]


def max_known(spans: list[Span], key: str) -> int | None:
    return max(known(opt_int_attr(span.attributes, key) for span in spans), default=None)


def min_known(spans: list[Span], key: str) -> int | None:
    return min(known(opt_int_attr(span.attributes, key) for span in spans), default=None)


def first_known(spans: list[Span], key: str) -> int | None:
    return next(iter(known(opt_int_attr(span.attributes, key) for span in spans)), None)


def str_attr(attributes: dict[str, Any], key: str) -> str | None:
    value = attributes.get(key)
    return value if isinstance(value, str) and value else None


def by_device(attributes: dict[str, Any], prefix: str) -> dict[str, int]:
    """``<prefix><device>`` attributes → {device: bytes}."""
    return {
        key[len(prefix) :]: int_attr(attributes, key) for key in attributes if key.startswith(prefix) and key != prefix
    }


def real_bytes(per_device: dict[str, int]) -> int:
    """Bytes that occupy memory: every device but ``meta``."""
    return sum(value for device, value in per_device.items() if device != META)
