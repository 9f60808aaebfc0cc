"""The ``loadtrace`` command (``commands``) and its renderers: the report's table (``render``) and the timeline page
(``render_timeline``, ``timeline.html``). Part of the analysis half: imports nothing of the instrumentation."""

from __future__ import annotations

from .commands import main

__all__ = ["main"]
