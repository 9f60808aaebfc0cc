"""Promise (issue 48): the layout rules hold, over the whole ``loadtrace/`` package, so that they stay held.

- no function or method is over ``MAX_FUNCTION_LINES`` lines (from its ``def`` to its last line, docstring and
  comments included: what a reader must hold at once);
- the ``Tracing`` front (``loadtrace/instrumentation/tracing/spans.py``, the hooks' one door) is at most
  ``MAX_FRONT_LINES`` lines: what follows the scopes lives in the collaborators it owns, not in the door.

These read the source tree (``ast``), not the installed wheel.
"""

from __future__ import annotations

import ast

from support.venvs import REPO

PACKAGE = REPO / "loadtrace"
MAX_FUNCTION_LINES = 60
FRONT = PACKAGE / "instrumentation" / "tracing" / "spans.py"
MAX_FRONT_LINES = 250


def lengths(source: str) -> list[tuple[int, str, int]]:
    """(line, name, length in lines) of every function and method in ``source``, nested ones included."""
    return [
        (node.lineno, node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
    ]


def test_no_function_is_over_sixty_lines():
    over = [
        f"{path.relative_to(REPO).as_posix()}:{line} {name} ({length} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name, length in lengths(path.read_text())
        if length > MAX_FUNCTION_LINES
    ]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines:\n  " + "\n  ".join(over)


def test_the_tracing_front_is_at_most_250_lines():
    classes = [node for node in ast.parse(FRONT.read_text()).body if isinstance(node, ast.ClassDef)]
    (front,) = [node for node in classes if node.name == "Tracing"]
    assert front.end_lineno is not None
    length = front.end_lineno - front.lineno + 1
    assert length <= MAX_FRONT_LINES, f"the Tracing front is {length} lines (at most {MAX_FRONT_LINES})"


def test_the_count_finds_what_breaks_the_rule():
    """The check above is only as good as its count: a 60-line function passes, a 61-line method is found."""
    body = "".join(f"    x{index} = {index}\n" for index in range(59))
    method = "".join(f"        x{index} = {index}\n" for index in range(60))
    source = f"def sixty():\n{body}\n\nclass C:\n    def sixty_one(self):\n{method}"
    assert [(name, length) for _, name, length in lengths(source)] == [("sixty", 60), ("sixty_one", 61)]
