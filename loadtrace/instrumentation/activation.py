"""How this process turns tracing on: at once (``instrument``), or when a hooked library is first imported (``watch``).

``LOADTRACE=1`` reaches every Python process of a job (``loadtrace.pth``): the launcher, each rank, each DataLoader
worker, tokenizer pools, evaluation helpers. Most never load a checkpoint, so activation does only what cannot wait,
with modules the interpreter has already loaded: it watches for the first import of a library loadtrace hooks (a
finder on ``sys.meta_path``). That import brings in the settings and the hook machinery (wrapt, the hook modules) and
installs the hooks; the OpenTelemetry SDK, the trace and state files, the monitor thread and the signal handlers wait
for the first span (``spans.Tracing.provider``). A process that imports none of those libraries pays for this module
and nothing else.

loadtrace imports its machinery lazily, from whichever thread gets there first. An import in flight while another
thread forks leaves the child waiting forever on the import lock it inherited held, as soon as it imports that module
too (a DataLoader worker: CI hung once). So every such import runs under ``importing()`` (the package's ground floor,
``loadtrace/instrumentation/__init__.py``), which holds a fork back until it has finished.
"""

from __future__ import annotations

import _thread
import os
import sys
from time import time_ns

from . import HOOKED_PACKAGES, importing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .hooks.registry import Registry
    from .settings import Settings


def _after_fork_in_child() -> None:
    global _lock
    _lock = _thread.RLock()  # the parent's may be held by the forking thread, gone in this process
    _stop_import_clock()  # a forked child has no startup of its own


os.register_at_fork(after_in_child=_after_fork_in_child)


# The process's instrumentation ----------------------------------------------------------------------------------------

_lock = _thread.RLock()  # instrument, uninstrument and a watched import, one at a time
_registry: Registry | None = None  # kept for the process's life (wrapt keeps post-import hooks forever)
_instrumented = False
_watcher: _Watcher | None = None


def instrumented() -> bool:
    """Whether ``instrument()`` is in effect (``watch`` alone: not yet)."""
    return _instrumented


def registry() -> Registry:
    """The process's hook registry (benchmarks take hooks out and put them back between loads)."""
    global _registry
    if _registry is None:
        with importing():
            if _registry is None:
                from .hooks import all_hooks
                from .hooks.registry import Registry

                _registry = Registry(all_hooks())
    return _registry


def instrument(settings: Settings | None = None, tracer_provider: Any = None) -> None:
    """Hook the loading libraries now (or when they are imported) and trace through ``tracer_provider``, else
    loadtrace's own export, built at the first span. Settings from the environment unless given. Idempotent."""
    global _instrumented
    with _lock:
        _stop_watching()
        if _instrumented:
            return
        hooks = registry()
        if "loadtrace.instrumentation.tracing.spans" not in sys.modules:  # at first: an import, under the fork guard
            with importing():
                from .tracing import spans
        from .settings import from_env
        from .tracing import spans

        spans.set_tracing(spans.Tracing(settings or from_env(), tracer_provider, listener=hooks))
        hooks.install()
        _instrumented = True


def uninstrument() -> None:
    """Remove every hook ``instrument()`` installed, exactly; flush what was traced. Idempotent."""
    global _instrumented
    with _lock:
        _stop_watching()
        if not _instrumented:
            return
        _instrumented = False
        _stop_import_clock()
        from .beside import excepthooks
        from .tracing import spans

        excepthooks.stop()

        if _registry is not None:
            _registry.uninstall()
        tracing = spans.tracing()
        spans.set_tracing(None)
        if tracing is not None:
            tracing.shutdown()


def watch() -> None:
    """``LOADTRACE=1`` at interpreter start: instrument when the first hooked library is imported (at once if one
    already is), with the settings of that moment."""
    global _watcher
    with _lock:
        if _instrumented or _watcher is not None:
            return
        if any(name in sys.modules for name in HOOKED_PACKAGES):
            _on_watched_import()
            return
        _watcher = _Watcher(HOOKED_PACKAGES, _on_watched_import)
        sys.meta_path.insert(0, _watcher)


def _on_watched_import() -> None:
    """Never raises into the import that brought us here."""
    try:
        with _lock:
            _stop_watching()
            if _instrumented:
                return
            with importing():
                from .settings import from_env

            settings = from_env()
            if settings.enabled and not settings.sdk_disabled:
                instrument(settings)
    except Exception as error:
        from ._log import warn_once

        warn_once("activate", f"could not start ({type(error).__name__}: {error}); the job runs untraced")


def _stop_watching() -> None:
    """No more activation; the watcher stays on as the import clock until the startup ends (``stop_import_clock``)."""
    global _watcher
    watcher, _watcher = _watcher, None
    if watcher is not None:
        watcher.triggered = True


def _stop_import_clock() -> None:
    if "loadtrace.instrumentation.importclock" in sys.modules:  # else the clock timed nothing: no watcher triggered
        from .importclock import stop_import_clock

        stop_import_clock()


class _Watcher:
    """A ``sys.meta_path`` finder that finds nothing itself: for a module of a watched package imported outside another
    such import (in this thread), it asks the finders after it, and chains the loader they found so that the import's
    start and end are timed and ``on_import`` runs once (the first). Every other import, and the module as the job
    sees it (its ``__loader__`` and ``__spec__.loader``), is left as it was.

    Why not wrapt's ``register_post_import_hook``, which the hook registry uses once instrumented: registering one
    imports wrapt (+15 MB peak RSS measured here) and leaves wrapt's finder on ``sys.meta_path`` for the process's
    life, in every process ``LOADTRACE=1`` reaches, most of which never load (the promise: at most 5 ms and 2 MB,
    test_processes_that_never_load.py). This watcher is standard library only; after the first hooked import it
    only times the hooked libraries' imports (issue 26: the startup's ``imports`` phase), a name check per new import,
    and leaves when the startup ends (``stop_import_clock``)."""

    is_import_clock = True  # what importclock.stop_import_clock looks for on sys.meta_path

    def __init__(self, names: tuple[str, ...], on_import: Callable[[], None]):
        self.names = frozenset(names)
        self.on_import = on_import
        self.stopped = False  # out of sys.meta_path: finds nothing
        self.triggered = False  # on_import ran (or instrumentation came another way): only the clock goes on
        self.inside = _thread._local()  # an outer watched import is running in this thread

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self.stopped or fullname.partition(".")[0] not in self.names or getattr(self.inside, "value", False):
            return None
        started = time_ns()
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ChainedLoader(spec.loader, self, started)
                return spec
        return None


class _ChainedLoader:
    """The real loader, timed, then ``on_import`` (the first time); what the module keeps is the real loader."""

    def __init__(self, loader: Any, watcher: _Watcher, started: int):
        self.loader = loader
        self.watcher = watcher
        self.started = started

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        watcher = self.watcher
        watcher.inside.value = True
        try:
            self.loader.exec_module(module)
        finally:
            watcher.inside.value = False
            from . import importclock  # standard library only; imported at the first hooked import, not at start

            importclock.record(self.started, time_ns())
        if not watcher.triggered:
            watcher.triggered = True
            watcher.on_import()

    def __getattr__(self, name: str) -> Any:  # is_package, get_code, get_resource_reader, ... of the real loader
        return getattr(self.loader, name)
