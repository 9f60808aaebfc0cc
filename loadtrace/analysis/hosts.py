"""Host names as people count them: ``node2`` before ``node10`` (natural order), and runs of numbered names written
as ranges (``node000-node127``), so 128 nodes fit on a line."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
_PARTS = re.compile(r"(\d+)")


def natural_key(host: str | None) -> tuple[tuple[int, int | str], ...]:
    """Sort key: the name's digit runs compared as numbers, the rest as text; no host (None) first."""
    if host is None:
        return ()
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _PARTS.split(host) if part)


def host_ranges(hosts: Iterable[str | None], most: int = 6) -> str:
    """The distinct hosts in natural order, consecutive numbers of one prefix and width as one range
    (``node000-node063, node065-node127``); past ``most`` ranges, the rest counted (``, ... 40 more nodes``)."""
    ordered = sorted({host for host in hosts if host is not None}, key=natural_key)
    runs: list[list[str]] = []
    previous: tuple[str, int, int] | None = None
    for host in ordered:
        match = _NUMBERED.match(host)
        here = (match.group(1), int(match.group(2)), len(match.group(2))) if match else None
        if (
            here is not None
            and previous is not None
            and runs
            and here[::2] == previous[::2]
            and here[1] == previous[1] + 1
        ):
            runs[-1].append(host)
        else:
            runs.append([host])
        previous = here
    parts = [run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs[:most]]
    left = sum(len(run) for run in runs[most:])
    return ", ".join(parts) + (f", ... {left} more node{'s' * (left != 1)}" if left else "")
