"""Promise: every spelling of ``LOADTRACE`` (and ``OTEL_SDK_DISABLED``) means the same to the three places that read
it at interpreter start: the installed ``loadtrace.pth`` line (is loadtrace imported at all), ``loadtrace._activate``
(watch for the first hooked import, or only read the settings so that a bad value is said) and ``settings.from_env``
(what the watcher turns on). Each place's own code is run here on each spelling; processes/test_activation.py starts
one real interpreter per behaviour (off, on, an unknown value said once and taken as off)."""

from __future__ import annotations

import ast
import builtins
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadtrace import _activate
from loadtrace.instrumentation import _log, settings

ON = ["1", "true", "yes", "on", "YES", "True", " on ", "1\n"]
OFF = [None, "", "0", "false", "no", "off", "OFF", " 0 ", "No"]
UNKNOWN = ["maybe", "2", "yse", "enabled"]
SDK_DISABLED = ["true", "TRUE", " true "]
SDK_NOT_DISABLED = [None, "", "false", "1", "yes"]  # OpenTelemetry's own rule: only "true" disables


def environment(loadtrace: str | None, sdk_disabled: str | None = None) -> dict[str, str]:
    env = {"LOADTRACE": loadtrace, "OTEL_SDK_DISABLED": sdk_disabled}
    return {name: value for name, value in env.items() if value is not None}


def pth_imports(env: dict[str, str]) -> list[str]:
    """What the installed ``loadtrace.pth`` imports in an interpreter started with ``env``: its line run as ``site``
    runs a ``.pth`` line that starts with ``import`` (``exec``), with ``os.environ`` being ``env``."""
    line = (Path(sysconfig.get_paths()["purelib"]) / "loadtrace.pth").read_text().strip()
    imported: list[str] = []

    def recording_import(name: str, *args: object, **kwargs: object) -> object:
        if name == "os":
            return SimpleNamespace(environ=env)
        imported.append(name)
        return SimpleNamespace()

    exec(line, {"__builtins__": {**vars(builtins), "__import__": recording_import}})
    return imported


def activate_watches(env: dict[str, str]) -> bool:
    """``_activate``'s own test (its one ``if``: watch, else only read the settings) on ``env``."""
    source = Path(_activate.__file__).read_text()
    (test,) = [node.test for node in ast.walk(ast.parse(source)) if isinstance(node, ast.If)]
    return eval(compile(ast.Expression(test), _activate.__file__, "eval"), {"os": SimpleNamespace(environ=env)})


def traced(env: dict[str, str]) -> bool:
    """What the watcher does at the first hooked import (``activation._on_watched_import``): instrument or not."""
    found = settings.from_env(env)
    return found.enabled and not found.sdk_disabled


@pytest.mark.parametrize("sdk_disabled", SDK_NOT_DISABLED)
@pytest.mark.parametrize("value", ON)
def test_on_imports_loadtrace_which_watches_and_traces(value, sdk_disabled):
    env = environment(value, sdk_disabled)
    assert pth_imports(env) == ["loadtrace._activate"]
    assert activate_watches(env) and traced(env)


@pytest.mark.parametrize("value", OFF)
def test_off_and_unset_import_nothing(value):
    assert pth_imports(environment(value)) == []
    assert not traced(environment(value))


@pytest.mark.parametrize("value", UNKNOWN)
def test_an_unknown_value_imports_loadtrace_only_to_say_it_and_is_off(value, capsys, monkeypatch):
    monkeypatch.setattr(_log, "_said", set())  # said once per process: another test may have said it already
    env = environment(value)
    assert pth_imports(env) == ["loadtrace._activate"] and not activate_watches(env)
    assert not traced(env)
    said = capsys.readouterr().err.splitlines()
    assert said == [f"loadtrace: LOADTRACE={value!r} is not one of 1/true/yes/on or 0/false/no/off; taken as off"]


@pytest.mark.parametrize("sdk_disabled", SDK_DISABLED)
@pytest.mark.parametrize("value", ["1", "on"])
def test_otel_sdk_disabled_wins(value, sdk_disabled):
    env = environment(value, sdk_disabled)
    assert pth_imports(env) == []
    assert not traced(env)  # nor would a watcher started another way turn it on
