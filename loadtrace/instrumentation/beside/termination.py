"""Termination signals while a load is open: end the open spans with what they counted, then die as untraced.

A launcher stops ranks with SIGTERM (torchrun, when a sibling fails), a person with SIGINT, a lost terminal with
SIGHUP. SIGTERM's and SIGHUP's default action kills the process without ``atexit``, so the spans of the load in
progress would never be written. While a load is open (``install`` when the first opens, ``restore`` when the last
closes), and only from the main thread (the only one that may set handlers), ours stand in front of whatever was
there, except where the signal is ignored (SIG_IGN: the job asked not to be stopped by it). On a signal, ours calls
``on_signal`` (end and flush the open spans, bounded), then behaves exactly as the process would untraced: a Python
handler that was there (the job's own, or ``signal.default_int_handler`` for SIGINT) is called with the same
arguments; the default action is restored and the signal sent again, so the process dies *by* the signal and its
launcher sees it (torchrun reports -15).

A process forked while ours are installed (a ``Pool`` or DataLoader worker) starts with what the job had before them
(``after_fork``): a Python-level handler can lose a signal that arrives just before a blocking call, where the default
action would have killed the worker, so ``Pool.terminate()`` could wait forever on it (issue 40). The signals are held
back across the fork, so one sent to the child before it gave ours back meets the job's own disposition. The child
installs ours again only when it loads itself: not for its reads outside any load (tracing/loose.py), whose load stays
open while the worker waits for work.

At exit, while loadtrace flushes and rank 0 says the job's closing line, the signals are ``Held`` until that bounded
work is done, then met as untraced.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from .._log import warn_once

SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


def numbers() -> list[int]:
    return [number for name in SIGNALS if (number := getattr(signal, name, None)) is not None]


def name(signo: int) -> str:
    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


class Handlers:
    """Ours in front of the job's for the termination signals; ``restore`` gives back exactly what it replaced."""

    def __init__(self, on_signal: Callable[[int], None]):
        self._on_signal = on_signal
        # signal → the handler ours replaced. Kept after ``restore`` when the job has meanwhile installed its own over
        # ours (its handler may call ours, which then still calls what was there before).
        self._previous: dict[int, Any] = {}

    @staticmethod
    def _main_thread() -> bool:
        return threading.current_thread() is threading.main_thread()

    def install(self) -> None:
        if not self._main_thread():
            return
        for signo in numbers():
            if signo in self._previous:
                continue  # still ours, or the job's own now stands in front of ours: leave it
            current = signal.getsignal(signo)
            if current is None or current == signal.SIG_IGN:
                continue  # set outside Python (cannot be given back), or ignored on purpose
            signal.signal(signo, self.handle)
            self._previous[signo] = current
            _installed.add(self)

    def restore(self) -> None:
        """Put back what ours replaced, where ours is still the handler; a handler the job installed since stays."""
        if not self._main_thread():
            return
        self._give_back()

    def _give_back(self) -> None:
        for signo, previous in list(self._previous.items()):
            if signal.getsignal(signo) == self.handle:
                signal.signal(signo, previous)
                del self._previous[signo]
        if not self._previous:
            _installed.discard(self)

    def after_fork(self) -> None:
        """In a forked child (its only thread is the main one): the dispositions the job had before ours; never
        raises."""
        try:
            self._give_back()
        except Exception:
            pass  # the child goes on with ours: as before, never worse

    def watch(self) -> None:
        """``install``; where it cannot (a job that replaced the signal module, a platform without the signals), says
        so once."""
        try:
            self.install()
        except Exception as error:
            warn_once("signals", f"cannot watch termination signals ({type(error).__name__}: {error})")

    def release(self) -> None:
        """``restore``; where it cannot, says so once."""
        try:
            self.restore()
        except Exception as error:
            warn_once("signals", f"cannot give back the signal handlers ({type(error).__name__}: {error})")

    def handle(self, signo: int, frame: FrameType | None) -> Any:
        try:
            self._on_signal(signo)
        except Exception:
            pass  # never raise from here: the job's own handling goes ahead whatever happened to ours
        previous = self._previous.get(signo, signal.SIG_DFL)
        if callable(previous):
            return previous(signo, frame)
        if previous == signal.SIG_IGN:  # only if the job chained to ours after ignoring it: still ignored
            return None
        try:  # the default action: die by this signal, as untraced
            signal.signal(signo, signal.SIG_DFL)
            os.kill(os.getpid(), signo)
        except Exception:
            pass
        return None


class Held(Handlers):
    """While open: the termination signals wait until loadtrace's exit work is done (bounded by its own timeouts),
    then meet the job's own disposition, as they would have without us: its handler runs, or the default action kills
    the process by the signal. A launcher tearing a job down (torchrun SIGTERMs the other ranks the moment one
    fails) would otherwise cut rank 0's flush and closing line short. Installed and given back as ``Handlers`` (the
    main thread only; a child forked meanwhile starts with the job's own); never raises."""

    def __init__(self) -> None:
        super().__init__(on_signal=lambda signo: None)
        self._arrived: list[int] = []

    def handle(self, signo: int, frame: FrameType | None) -> None:
        self._arrived.append(signo)

    def __enter__(self) -> Held:
        try:
            self.install()
        except Exception:
            pass  # not held: the exit goes ahead as before
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.restore()
            for signo in dict.fromkeys(self._arrived):
                signal.raise_signal(signo)  # now met by what the job had: its handler, or death by the signal
        except Exception:
            pass


# The handlers with ours installed in this process now; a fork holds the signals back while there are any.
_installed: set[Handlers] = set()
_held: dict[int, set[int | signal.Signals]] = {}  # forking thread → its signal mask before the fork


def _before_fork() -> None:
    if _installed:
        try:
            _held[threading.get_ident()] = signal.pthread_sigmask(signal.SIG_BLOCK, numbers())
        except Exception:
            pass  # no signal mask here: the fork goes ahead unheld


def _unhold(mask: set[int | signal.Signals] | None) -> None:
    """The forking thread's mask as it was: a signal sent meanwhile arrives now."""
    if mask is not None:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        except Exception:
            pass


def _after_fork_in_parent() -> None:
    _unhold(_held.pop(threading.get_ident(), None))


def _after_fork_in_child() -> None:
    mask = _held.pop(threading.get_ident(), None)
    _held.clear()  # other threads' forks are the parent's
    for handlers in list(_installed):
        handlers.after_fork()
    _unhold(mask)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


def bounded(work: Callable[[], None], timeout_s: float, name: str) -> bool:
    """Run ``work`` in a daemon thread and wait for it at most ``timeout_s``: whether it finished in time. Its
    exceptions are swallowed (the job's exit or signal handling goes ahead regardless)."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except Exception:
            pass
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return done.wait(timeout_s)
