#!/usr/bin/env python
"""Where a traced load spends loadtrace's own time, from a py-spy ``raw`` (collapsed stacks) profile, all threads.

    LOADTRACE=1 LOADTRACE_DIR=/tmp/lt py-spy record --nonblocking -r 500 -f raw -o /tmp/spy.txt -- \\
        .venv/bin/python benchmarks/bench_load.py _load CKPT --loads 9 --out /tmp/r.json
    .venv/bin/python benchmarks/pyspy_share.py /tmp/spy.txt

A sample counts as loadtrace's own when its innermost loadtrace (or wrapt) frame is doing loadtrace's work: not on a
line that calls the wrapped original (``wrapped(...)``, ``self.__wrapped__...``: that time is the job's), read from
the installed source; a loadtrace thread asleep (``sleep(`` / ``.wait(``) is idle, not cost. Samples under imports
(``_find_and_load``) are left out: the first load's lazy imports are the same with and without loadtrace. Prints the
share of the remaining samples, the lines it was spent on, and callees.
"""

from __future__ import annotations

import collections
import importlib.util
import linecache
import os
import re
import sys

FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*):(?P<line>\d+)\)$")


def _roots() -> dict[str, str]:
    roots = {}
    for name in ("loadtrace", "wrapt"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin:
            roots[name] = os.path.dirname(os.path.dirname(spec.origin))
    return roots


def _source(path: str, roots: dict[str, str]) -> str:
    for root in roots.values():
        text = linecache.getline(os.path.join(root, path), 1)
        if text:
            return os.path.join(root, path)
    return path


def main(argv: list[str]) -> int:
    roots = _roots()
    total = own = idle = 0
    by_line: collections.Counter[str] = collections.Counter()
    by_callee: collections.Counter[str] = collections.Counter()
    by_thread: collections.Counter[str] = collections.Counter()
    with open(argv[0]) as handle:
        for raw in handle:
            stack, _, count = raw.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue  # a stack py-spy could not read whole
            frames = []
            for text in stack.split(";"):
                match = FRAME.match(text)
                if match is None:
                    frames.append((text, "", 0))
                    continue
                # A proxy module's file name carries a note after a space (call_through_proxies): the path precedes it.
                frames.append((match["function"], match["path"].split(" ")[0], int(match["line"])))
            if any(function == "_find_and_load" for function, _, _ in frames):
                continue
            n = int(count)
            total += n
            ours = [i for i, (_, path, _) in enumerate(frames) if path.startswith(("loadtrace/", "wrapt/"))]
            if not ours:
                continue
            function, path, line = frames[ours[-1]]
            code = linecache.getline(_source(path, roots), line).strip()
            if "wrapped(" in code or "__wrapped__" in code:
                continue  # the original call: the job's own time
            if "sleep(" in code or ".wait(" in code:
                total -= n  # a background thread asleep (py-spy does not always see it as idle)
                idle += n
                continue
            own += n
            by_thread["a background thread" if frames[0][0].startswith("Thread.") else "the loading thread"] += n
            by_line[f"{function} ({path}:{line})  {code[:70]}"] += n
            callee = frames[ours[-1] + 1] if ours[-1] + 1 < len(frames) else None
            by_callee[f"{function} -> {callee[0]} ({callee[1]})" if callee else f"{function} (itself)"] += n
    if not total:
        print("no samples")
        return 1
    print(
        f"{total} samples outside imports and idle waits ({idle} idle samples of loadtrace threads left out); "
        f"loadtrace's own: {own} ({own / total * 100:.2f} %)"
    )
    for thread, n in by_thread.most_common():
        print(f"  on {thread}: {n} ({n / total * 100:.2f} %)")
    print("\nby line:")
    for key, n in by_line.most_common(15):
        print(f"  {n:6d} {n / total * 100:5.2f} %  {key}")
    print("\nby callee:")
    for key, n in by_callee.most_common(15):
        print(f"  {n:6d} {n / total * 100:5.2f} %  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
