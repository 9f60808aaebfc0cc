"""Promise: with ``LOADTRACE=1``, a process that never loads (the launcher, a DataLoader worker, a tokenizer pool, any
helper) pays almost nothing: no OpenTelemetry, no hook machinery until a hooked library is imported, no files, threads,
signal handlers or exit handlers until the first span; the first span of any kind sets everything up, from any
thread, without a fork in the meantime inheriting a half-done import (loadtrace/instrumentation/activation.py)."""

from loadtrace import _activate  # noqa: F401 - _activate does nothing here: LOADTRACE is unset in tests
from loadtrace.instrumentation import settings  # noqa: F401


def test_every_hook_lives_in_a_watched_package():
    from loadtrace.instrumentation.activation import HOOKED_PACKAGES
    from loadtrace.instrumentation.hooks import all_hooks

    # ``builtins`` is always imported: its hook (safetensors.py's ``open``) installs with the others, at instrument().
    assert {hook.module.partition(".")[0] for hook in all_hooks()} <= {*HOOKED_PACKAGES, "builtins"}


def test_the_pth_entry_takes_the_same_values_as_on_as_settings():
    source = open(_activate.__file__).read()
    assert '("1", "true", "yes", "on")' in source and settings.TRUE == frozenset({"1", "true", "yes", "on"})
