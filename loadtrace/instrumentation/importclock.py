"""The startup's import clock (issue 26): when the hooked libraries' modules were imported, for the startup's
``imports`` phase (``semconv.STARTUP_IMPORTS``). activation.py's watcher times each outermost import of a hooked
package's module into ``times``; the startup (startup.py) puts them on its span when it ends and stops the clock.
Standard library only, and nothing of ours: both sides import it."""

from __future__ import annotations

import sys

PAIRS_KEPT = 64
times: list[int] = []  # [start, end, ...] in ns since the epoch


def import_times() -> list[int]:
    """The hooked libraries' outermost imports so far, as ``semconv.STARTUP_IMPORTS`` spells them."""
    return list(times)


def record(start: int, end: int) -> None:
    if len(times) < 2 * PAIRS_KEPT:
        times.extend((start, end))


def stop_import_clock() -> None:
    """The startup is over (or this is a forked child): the watcher, once it has activated tracing, leaves
    ``sys.meta_path``; later imports are not timed. A watcher still waiting to activate stays."""
    for finder in list(sys.meta_path):
        if getattr(finder, "is_import_clock", False) and getattr(finder, "triggered", False):
            setattr(finder, "stopped", True)  # noqa: B010 - a finder of ours, typed by sys as any finder
            try:
                sys.meta_path.remove(finder)
            except ValueError:
                pass
