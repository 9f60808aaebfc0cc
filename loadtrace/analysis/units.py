"""Byte counts as people read them: shared by the findings' sentences and the rendered table."""

from __future__ import annotations


def human_bytes(value: int) -> str:
    """Exact bytes with a readable size: ``1,009,152 B (1.0 MB)``."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value:,} B ({value / scale:.1f} {unit})"
    return f"{value:,} B"


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "?%"
