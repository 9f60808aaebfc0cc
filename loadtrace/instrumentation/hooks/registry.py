"""The hook engine: one way to declare a hook, one way to install and remove it, one wrapper that contains faults.

Each hooked library has a module in this package whose ``HOOKS`` lists ``Hook(module, target, handler)``. A handler
is called before the original with ``(instance, args, kwargs)`` and returns ``None`` to let the call pass untouched
(the fast path), or a ``Call`` whose ``done(result, error)`` runs after it and may return a proxy for the result.

Hooks install when their module is imported (post-import hooks), or at once if it already is; names that other
modules bound with ``from x import y`` before that are rebound too; ``uninstall`` restores every module's binding of
ours, a module first imported while ours was in place included.
A handler that raises is reported once and the original call goes ahead with its original arguments and result.

A target called once per tensor (``Hook.inline``) gets a plain function of its own in its place instead of wrapt's
wrapper: through wrapt a call costs ~10,000 more instructions here (on a method wrapt binds a new wrapper object per
call, and the handler is one more frame), through the plain function ~1,500, and it answers the per-tensor question in
its first lines (benchmarks/README.md, issue 50). It calls the original itself and contains its own faults; a release
whose target it was not written for keeps the generic wrapper.

A wrapper is a Python frame between the caller and the function it called. ``warnings.warn(..., stacklevel=2)``
inside that function would name the wrapper's file and module instead of the caller's, and filters by module would
stop matching: every call-through frame of ours is marked (``call_through``) so that ``warnings`` steps over it.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FunctionType
from typing import Any, Protocol, TypeVar

import wrapt

from ... import semconv
from .._log import warn_once
from ..tracing import spans


class Call(Protocol):
    def done(self, result: Any, error: BaseException | None) -> Any: ...


Handler = Callable[[Any, tuple, dict], "Call | None"]


@dataclass(frozen=True)
class Hook:
    module: str
    target: str  # attribute path inside the module, e.g. "safe_open" or "PreTrainedModel.from_pretrained"
    handler: Handler
    # In place only while a load is open: for functions a training loop calls constantly (torch.zeros_like), where
    # even a pass-through wrapper outside loading would cost the job.
    while_loading: bool = False
    # Per-tensor targets: ``inline(original)`` makes the plain function that stands in for the original (it calls it
    # and contains its own faults), or None where the original is not the one it was written for: then ``handler``'s
    # generic wrapper, as for any hook.
    inline: Callable[[Any], Callable | None] | None = None

    @property
    def name(self) -> str:
        return f"{self.module}.{self.target}"


def fault(where: str, error: BaseException, scope: spans.Scope | None = None) -> None:
    """A loadtrace fault: said once per process, counted on the load it happened in, never raised into the job."""
    warn_once(
        "hook",
        f"hook {where} failed ({type(error).__name__}: {error}); the call went ahead untraced "
        f"(every hook fault is counted in {semconv.HOOK_ERRORS} on its load span)",
    )
    tracing = spans.tracing()
    if tracing is not None:
        try:
            tracing.record_fault(where, scope)
        except Exception:
            pass


# CPython's ``warnings`` (``_is_internal_filename`` in Lib/warnings.py, ``is_internal_filename`` in Python/_warnings.c,
# 3.10 to 3.13 alike) does not count a frame whose code's file name contains both "importlib" and "_bootstrap" when
# it walks ``stacklevel`` frames up: that is how the import machinery stays out of warnings raised during an import.
# Our call-through frames carry that mark, appended to their real path: the caller's file, line and module are what a
# warning names, traced or not. Tracebacks still show our frames and their source (linecache finds it through the
# module's loader, as the name is not a file), and the real path stays its prefix (``torch.call_site``).
# The mark costs nothing per call. A warning raised by C code with stacklevel=1 names the innermost Python frame, the
# wrapper's when the wrapped function is a C function: CPython offers no way to step over that one.
CALL_THROUGH_MARK = " (loadtrace call-through: skipped by warnings like importlib._bootstrap)"

F = TypeVar("F", bound=Callable[..., Any])


def _marked(code: CodeType) -> CodeType:
    if code.co_filename.endswith(CALL_THROUGH_MARK):
        return code
    consts = tuple(_marked(const) if isinstance(const, CodeType) else const for const in code.co_consts)
    return code.replace(co_filename=code.co_filename + CALL_THROUGH_MARK, co_consts=consts)


def call_through(function: F) -> F:
    """Mark ``function`` (and the functions defined inside it) as a call-through frame that ``warnings`` skips."""
    if isinstance(function, FunctionType):
        function.__code__ = _marked(function.__code__)
    return function


def call_through_proxies(module_name: str) -> None:
    """Mark every method of the wrapt proxies defined in ``module_name``: a proxy's method runs between the caller and
    the wrapped object's method (``safetensors``' ``get_tensor``, a slice's ``__getitem__``)."""
    for value in list(vars(sys.modules[module_name]).values()):
        if isinstance(value, type) and issubclass(value, wrapt.ObjectProxy) and value.__module__ == module_name:
            for member in vars(value).values():
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if isinstance(member, property):
                    for accessor in (member.fget, member.fset, member.fdel):
                        if accessor is not None:
                            call_through(accessor)
                else:
                    call_through(member)


class HookWrapper(wrapt.FunctionWrapper):
    """Ours, told apart from anyone else's wrapper: installing again must not wrap twice."""


@call_through
def _wrapper(hook: Hook) -> Callable:
    handler = hook.handler

    def wrapper(wrapped, instance, args, kwargs):
        try:
            call = handler(instance, args, kwargs)
        except Exception as error:
            fault(hook.name, error)
            call = None
        if call is None:
            return wrapped(*args, **kwargs)
        return call_done(hook.name, call, wrapped, args, kwargs)

    return wrapper


@call_through
def call_done(where: str, call: Call, wrapped: Callable, args: tuple, kwargs: dict) -> Any:
    """The original call, then ``call.done`` with its result or error; a fault in ``done`` gives the job the result."""
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        try:
            call.done(None, error)
        except Exception as problem:
            fault(where, problem)
        raise
    try:
        return call.done(result, None)
    except Exception as problem:
        fault(where, problem)
        return result


# The plain functions standing in for per-tensor targets: installing again finds them and leaves them be.
_inlined: weakref.WeakSet[Callable] = weakref.WeakSet()


def _inline(hook: Hook, original: Any) -> Callable | None:
    """``hook.inline(original)``, made to look like the original where Python looks (name, qualified name, module,
    docstring, ``__wrapped__``: ``inspect.signature`` and ``help`` show the original's); None: the generic wrapper."""
    if hook.inline is None:
        return None
    try:
        function = hook.inline(original)
    except Exception as error:
        fault(hook.name, error)
        return None
    if function is not None:
        functools.update_wrapper(function, original)
        _inlined.add(function)
    return function


def ours(value: Any) -> bool:
    """Whether ``value`` is a hook of ours in place of a target: wrapt's wrapper or an inline function."""
    try:
        return isinstance(value, HookWrapper) or value in _inlined
    except TypeError:  # unhashable: not ours
        return False


@dataclass
class _Installed:
    hook: Hook
    parent: Any
    attribute: str
    original: Any
    wrapper: Any


@dataclass
class _WhileLoading:
    hook: Hook
    parent: Any
    attribute: str
    wrapper: Any = None  # while a load is open: ours, around whatever was there when the first load opened
    replaced: Any = None


class Registry:
    """Installs hooks when their modules are imported; ``uninstall`` undoes exactly what ``install`` did. The
    ``spans.LoadListener`` of the tracing: while-loading hooks are in place only while a load is open."""

    def __init__(self, hooks: list[Hook]):
        self.hooks = hooks
        self.installed: dict[str, _Installed] = {}
        self.while_loading: dict[str, _WhileLoading] = {}
        self.active = False
        self._registered: set[str] = set()
        self._loads_open = 0
        self._lock = threading.Lock()

    def install(self) -> None:
        if self.active:
            return
        self.active = True
        for hook in self.hooks:
            if hook.module in sys.modules:
                self._install(hook)
            elif hook.module not in self._registered:
                # wrapt keeps post-import hooks forever: register each module once, and let it consult `active`.
                # (Before instrumenting, activation's stdlib watcher stands in: wrapt costs a never-loading process.)
                self._registered.add(hook.module)
                wrapt.register_post_import_hook(self._on_import, hook.module)

    def _on_import(self, module: Any) -> None:
        if not self.active:
            return
        for hook in self.hooks:
            if hook.module == module.__name__:
                self._install(hook)

    def _install(self, hook: Hook) -> None:
        if hook.name in self.installed or hook.name in self.while_loading:
            return
        try:
            parent, attribute, original = wrapt.resolve_path(sys.modules[hook.module], hook.target)
        except (AttributeError, KeyError) as error:
            warn_once(f"missing:{hook.name}", f"{hook.name} not found ({error}); that hook is skipped, the others run")
            return
        if hook.while_loading:
            self.while_loading[hook.name] = _WhileLoading(hook, parent, attribute)
            return
        if ours(original):
            return
        wrapper = _inline(hook, original) or HookWrapper(original, _wrapper(hook))
        setattr(parent, attribute, wrapper)
        if isinstance(parent, type(sys)):
            _rebind(parent, attribute, original, wrapper)
        self.installed[hook.name] = _Installed(hook, parent, attribute, original, wrapper)

    def load_opened(self) -> None:
        """The first open load puts the while-loading hooks in place, around whatever is there at that moment (so a
        wrapper someone else put there keeps working, inside ours)."""
        with self._lock:
            self._loads_open += 1
            if self._loads_open == 1:
                for entry in self.while_loading.values():
                    entry.replaced = getattr(entry.parent, entry.attribute)
                    entry.wrapper = wrapt.FunctionWrapper(entry.replaced, _wrapper(entry.hook))
                    setattr(entry.parent, entry.attribute, entry.wrapper)

    def load_closed(self) -> None:
        """The last load to close takes them out again; training then calls the bare functions."""
        with self._lock:
            self._loads_open = max(0, self._loads_open - 1)
            if self._loads_open == 0:
                self._take_out_while_loading()

    def _take_out_while_loading(self) -> None:
        for entry in self.while_loading.values():
            if entry.wrapper is not None and _bound(entry.parent, entry.attribute) is entry.wrapper:
                setattr(entry.parent, entry.attribute, entry.replaced)
            entry.wrapper = entry.replaced = None

    def uninstall(self) -> None:
        self.active = False
        with self._lock:
            self._take_out_while_loading()
            self.while_loading.clear()
            self._loads_open = 0
        for entry in self.installed.values():
            if _is_ours(_bound(entry.parent, entry.attribute), entry.wrapper):
                setattr(entry.parent, entry.attribute, entry.original)
            if isinstance(entry.parent, type(sys)):  # also modules first imported while ours was in place
                _rebind(entry.parent, entry.attribute, entry.wrapper, entry.original)
        self.installed.clear()


def _rebind(parent: Any, attribute: str, old: Any, new: Any) -> None:
    """Every other module's own binding of ``old`` under ``attribute`` (``from parent import attribute``) → ``new``."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if module is not parent and namespace is not None and namespace.get(attribute) is old:
            setattr(module, attribute, new)


def _is_ours(value: Any, wrapper: Any) -> bool:
    """``wrapper``, or a binding of it put back in its place: ``saved = Model.method; Model.method = patched; ...;
    Model.method = saved`` saves what the class hands out, wrapt's bound wrapper around ours, not ours."""
    return value is wrapper or (
        isinstance(value, wrapt.BoundFunctionWrapper) and getattr(value, "_self_parent", None) is wrapper
    )


def _bound(parent: Any, attribute: str) -> Any:
    """What ``parent`` itself holds under ``attribute``: a class's own dict entry (getattr would bind a new object)."""
    namespace = vars(parent) if isinstance(parent, type) else None
    return namespace.get(attribute) if namespace is not None else getattr(parent, attribute, None)
