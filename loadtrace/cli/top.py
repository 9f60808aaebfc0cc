"""``loadtrace top``: read the state files under a folder every second and show them (analysis/top.py's rows).

The terminal is curses (standard library): it reads keys (``q``) and restores the terminal however the view ends
(``curses.wrapper``), with nothing to install; what is drawn is render_top.py's plain lines, so the view is tested as
text. Started before the job has made its folder, it says once that it waits for it, and shows the ranks once it
exists. ``--once`` prints one snapshot (a table, or ``--format json``) and exits: for scripts and tests.

State files are read with ``pread``-style whole reads, never mapped: on a shared filesystem a reader sees a writer's
mmap stores only once its page cache flushes them and the client's caches expire (docs/commands.md, "loadtrace top").
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from loadtrace import statefile
from loadtrace.analysis.model import to_json
from loadtrace.analysis.sources import SourceError, StateFile
from loadtrace.analysis.top import History, TopRow, rows
from loadtrace.cli import render_top

REFRESH_S = 1.0
MAX_STATE_FILES = 10_000


def state_files(folder: Path) -> list[StateFile]:
    """Every readable state file of this user's under ``folder`` (unreadable, half-written, foreign and other users'
    ones are skipped: ``others``)."""
    return others(folder)[0]


def others(folder: Path) -> tuple[list[StateFile], int]:
    """``state_files``, and how many state files under ``folder`` other users own: top probes the pids a state names
    and reads the cgroup it names, so it acts on its own user's alone (docs/commands.md, "loadtrace top")."""
    found, foreign = [], 0
    mine = statefile.own_user()
    for path in sorted(folder.rglob("*.state"))[:MAX_STATE_FILES]:
        state = statefile.read(path, owners=mine)
        if state is not None:
            found.append(StateFile(str(path), state))
        elif _owner(path) not in (None, *mine):
            foreign += 1
    return found, foreign


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except OSError:
        return None


def _process_start_ns(pid: int) -> tuple[int | None, str | None]:
    """(when the process started, its state letter) from /proc; (None, None) where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        with open("/proc/stat") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return boot * 10**9 + int(fields[19]) * 10**9 // os.sysconf("SC_CLK_TCK"), fields[0]
    except (OSError, ValueError, IndexError, StopIteration):
        return None, None


def alive(pid: int, created_ns: int) -> bool:
    """Whether the process that wrote a state file still runs here: its pid exists, is not a zombie, and did not start
    after the file was made (a reused pid is another process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    started, letter = _process_start_ns(pid)
    if letter in ("Z", "X"):
        return False
    return started is None or created_ns <= 0 or started <= created_ns + 2 * 10**9  # /proc's start is in ticks


def cgroup_usage(directory: str) -> int | None:
    """A memory cgroup's usage now (v2 ``memory.current``, v1 ``memory.usage_in_bytes``); None where unreadable."""
    if not directory.startswith("/sys/fs/cgroup/"):
        return None  # a state file names its cgroup; read nothing else it might name
    for name in ("memory.current", "memory.usage_in_bytes"):
        try:
            return int(Path(directory, name).read_text())
        except (OSError, ValueError):
            continue
    return None


def snapshot(folder: Path, history: History | None = None) -> tuple[list[TopRow], int, int]:
    """The rows now, when, and how many state files of other users were skipped."""
    now = time.time_ns()
    found, foreign = others(folder)
    return rows(found, now, socket.gethostname(), alive, history, cgroup_usage), now, foreign


DEFAULT_FOLDER_HELP = "default: $LOADTRACE_DIR, else ./loadtrace-traces (where a job writes its traces)"


def default_folder() -> str:
    """Where a job's ranks write their files: ``LOADTRACE_DIR``, else ``./loadtrace-traces``: what ``report``,
    ``timeline`` and ``top`` read when given no source."""
    return os.environ.get("LOADTRACE_DIR") or "loadtrace-traces"


def run(folder_text: str | None, once: bool, form: str) -> int:
    folder = Path(folder_text or default_folder())
    if folder.exists() and not folder.is_dir():
        raise _not_a_folder(folder)
    if once:
        if not folder.is_dir():
            raise SourceError(f"{folder}: no such folder yet (without --once, top waits for the job to make it)")
        found, now, foreign = snapshot(folder)
        if form == "json":
            answer = {"time_unix_nano": now, "ranks": to_json(found), "other_users_state_files": foreign}
            print(json.dumps(answer, indent=2))
        else:
            lines = render_top.top_lines(found, str(folder), now, False, foreign, statefile.state_root())
            print("\n".join(lines).rstrip())
        return 0
    if form == "json":
        raise SourceError("--format json goes with --once")
    try:
        wait_for(folder)
    except KeyboardInterrupt:
        return 0
    if not (os.isatty(0) and os.isatty(1)):
        raise SourceError("top needs a terminal; for scripts use --once (with --format json)")
    import curses

    try:
        curses.wrapper(_loop, folder)
    except KeyboardInterrupt:
        pass  # Ctrl-C: curses.wrapper has already given the terminal back
    return 0


def _not_a_folder(folder: Path) -> SourceError:
    return SourceError(f"{folder}: not a folder (give the job's LOADTRACE_DIR, or a folder above it)")


def wait_for(folder: Path) -> None:
    """Started before the job, as people do: wait for its folder to appear, like ``tail -F``, saying so once (on
    stderr, before the view takes the terminal)."""
    if folder.is_dir():
        return
    print(
        f"loadtrace top: waiting for {folder} to appear (the job makes it when its first rank begins to load; "
        "Ctrl-C to stop)",
        file=sys.stderr,
        flush=True,
    )
    while not folder.is_dir():
        if folder.exists():
            raise _not_a_folder(folder)
        time.sleep(REFRESH_S / 4)


def _loop(screen: Any, folder: Path) -> None:
    import curses

    try:
        curses.curs_set(0)
    except curses.error:
        pass  # a terminal that cannot hide its cursor
    screen.timeout(int(REFRESH_S * 1000))
    history = History()
    while True:
        found, now, foreign = snapshot(folder, history)
        _draw(screen, render_top.top_lines(found, str(folder), now, True, foreign, statefile.state_root()))
        key = screen.getch()  # waits up to REFRESH_S for a key
        if key in (ord("q"), ord("Q")):
            return


def _draw(screen: Any, lines: list[str]) -> None:
    import curses

    height, width = screen.getmaxyx()
    screen.erase()
    for y, line in enumerate(lines[: max(0, height - 1)]):
        try:
            screen.addnstr(y, 0, line, max(0, width - 1))
        except curses.error:
            pass  # the last cell of a tiny window
    screen.refresh()
