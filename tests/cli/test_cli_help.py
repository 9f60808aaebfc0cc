"""Promise (issue 15): the CLI explains itself. ``loadtrace --version``; ``python -m loadtrace`` is the same command;
every option of every command has help text; the top-level help says how to record a trace."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

from loadtrace.cli.commands import build_parser


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_option_of_every_command_has_help():
    parser = build_parser()
    undocumented = [
        f"{name} {action.option_strings or action.dest}"
        for name, command in {"loadtrace": parser, **commands(parser)}.items()
        for action in command._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert not undocumented


def test_version_and_python_dash_m_are_the_same_command():
    by_module = subprocess.run([sys.executable, "-m", "loadtrace", "--version"], capture_output=True, text=True)
    assert by_module.returncode == 0 and by_module.stdout == f"loadtrace {version('loadtrace')}\n"
    bad = subprocess.run([sys.executable, "-m", "loadtrace", "report"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("loadtrace: error: ") and bad.stderr.count("\n") == 1


def test_the_top_level_help_says_how_to_record_a_trace_and_report_it():
    text = build_parser().format_help()
    assert "LOADTRACE=1 torchrun --nproc_per_node 8 train.py" in text
    assert "loadtrace report loadtrace-traces/ --latest" in text
