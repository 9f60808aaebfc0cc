"""Promise (issue 10): the code is shaped the way the README describes it, and CI's one command checks that (ruff
and mypy: lint/test_ruff_and_mypy.py).

- every span name and ``loadtrace.*`` attribute key is spelled once, in ``loadtrace/semconv.py``;
- data flows one way: the analysis half (``loadtrace/analysis/``, ``loadtrace/cli/``) imports nothing of loadtrace
  but the shared formats and itself, the instrumentation half imports nothing of the analysis half, and the shared
  formats import only the standard library and each other. The shared formats
  are the contracts of the files between the halves: ``semconv`` (span names and keys), ``statefile`` (the state a
  dead rank leaves) and ``startup_split`` (the split a rank's startup span carries);
- inside the instrumentation half, imports run downwards through its rooms (issue 43): activation → hooks → tracing
  → beside → exporting → counting → the floor; the hooks reach the rooms below them through the tracing front
  (``tracing.spans``) alone, the launcher's witness excepted;
- the import graph of ``loadtrace/`` has no cycle, lazy imports included, and at most 8 modules sit at its top.

These read the source tree (``ast``), not the installed wheel.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from support.venvs import REPO

PACKAGE = REPO / "loadtrace"

# A ``loadtrace.*`` attribute key or prefix: dotted lowercase components, optionally ending in "." (a prefix).
KEY_LIKE = re.compile(r"loadtrace(\.[a-z0-9_]+)+\.?|loadtrace\.")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_analysis(module: str) -> bool:
    return module == "loadtrace.__main__" or module.startswith(("loadtrace.analysis", "loadtrace.cli"))


ANALYSIS = sorted(m for m in MODULES if is_analysis(m))

SHARED_FORMATS = ("loadtrace.semconv", "loadtrace.statefile", "loadtrace.startup_split", "loadtrace.version")

INSTRUMENTATION = sorted(m for m in MODULES if not is_analysis(m) and m not in SHARED_FORMATS)


def tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))


def resolve(module: str, level: int, name: str | None) -> str:
    """The absolute module a (possibly relative) ``from`` names, seen from ``module``."""
    if level == 0:
        return name or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports(module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import in ``module``, lazy ones inside functions included; ``from a import
    b`` counts as ``a.b`` when that is a module, else ``a``; ``importlib.import_module("x")`` counts too."""
    found = []
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(module, node.level, node.module)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((node.lineno, full if full in MODULES else base))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def own(imported: str) -> bool:
    return imported == "loadtrace" or imported.startswith("loadtrace.")


def docstrings(root: ast.AST) -> set[int]:
    """ids of the docstring nodes of ``root`` and of every class and function in it."""
    found = set()
    for node in ast.walk(root):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spelled_names(module: str) -> list[str]:
    """``line: literal`` for each string constant in ``module`` that is a span name or looks like a ``loadtrace.*``
    attribute key (f-strings whose literal start is ``loadtrace.`` included), docstrings and module names excepted."""
    from loadtrace import semconv

    root = tree(module)
    skip = docstrings(root)
    in_fstrings = {id(v) for n in ast.walk(root) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n}
    found = []
    for node in ast.walk(root):
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and str(first.value).startswith("loadtrace."):
                found.append((node.lineno, f"f{ast.unparse(node)[1:]}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in skip or id(node) in in_fstrings or node.value in MODULES:
                continue
            if node.value in semconv.ALL_SPANS or KEY_LIKE.fullmatch(node.value):
                found.append((node.lineno, repr(node.value)))
    return [f"{line}: {literal}" for line, literal in sorted(found)]


def test_span_names_and_attribute_keys_are_spelled_only_in_semconv():
    offenders = {}
    for module in MODULES:
        if module != "loadtrace.semconv":
            found = spelled_names(module)
            if found:
                offenders[MODULES[module].relative_to(REPO).as_posix()] = found
    assert not offenders, (
        "span names / loadtrace.* keys spelled outside loadtrace/semconv.py (use its constants):\n"
        + ("\n".join(f"  {path}: {', '.join(lines)}" for path, lines in sorted(offenders.items())))
    )


def offending_imports(modules: list[str], allowed) -> list[str]:
    return [
        f"{MODULES[m].relative_to(REPO).as_posix()}:{line} imports {imported}"
        for m in modules
        for line, imported in imports(m)
        if own(imported) and not allowed(imported)
    ]


def test_the_analysis_half_imports_only_the_shared_formats_and_itself():
    offenders = offending_imports(ANALYSIS, lambda imported: imported in SHARED_FORMATS or is_analysis(imported))
    assert not offenders, "the analysis half reaches into the instrumentation:\n  " + "\n  ".join(offenders)


def test_the_instrumentation_half_imports_nothing_of_the_analysis_half():
    offenders = offending_imports(INSTRUMENTATION, lambda imported: not is_analysis(imported))
    assert not offenders, "the instrumentation half imports the analysis half:\n  " + "\n  ".join(offenders)


@pytest.mark.parametrize("module", SHARED_FORMATS)
def test_the_shared_formats_import_only_the_standard_library_and_each_other(module):
    found = [(line, imported) for line, imported in imports(module)]
    outside = [
        f"line {line}: {imported}"
        for line, imported in found
        if imported.partition(".")[0] not in sys.stdlib_module_names and imported not in ("__future__", *SHARED_FORMATS)
    ]
    assert not outside, f"{module} imports beyond the standard library: {outside}"


def test_the_halves_are_found():
    """The checks above are only as good as the module lists they walk."""
    assert "loadtrace.cli" in ANALYSIS and any(m.startswith("loadtrace.analysis.") for m in ANALYSIS), ANALYSIS
    in_job = {"loadtrace.instrumentation.tracing.spans", "loadtrace.instrumentation.hooks"}
    assert in_job <= set(INSTRUMENTATION), INSTRUMENTATION


# The instrumentation half's rooms (loadtrace/instrumentation/__init__.py), lowest first: a module imports its own
# room and the rooms below it, never one above. The floor is the package's own top-level modules but activation.
IN_JOB = "loadtrace.instrumentation"
ROOMS = ("floor", "counting", "exporting", "beside", "tracing", "hooks", "activation")
FLOOR = ("", "settings", "context", "importclock", "_log")
# What the hooks may import of the rooms below them: the front, and the witness (torchelastic's hook, in the launcher).
HOOKS_REACH = (f"{IN_JOB}.tracing.spans", f"{IN_JOB}.beside.witness")


def room(module: str) -> str | None:
    """The room of the instrumentation half ``module`` is in; None outside the half, "?" in none of them."""
    if module != IN_JOB and not module.startswith(f"{IN_JOB}."):
        return None
    top = module[len(IN_JOB) + 1 :].partition(".")[0]
    return "floor" if top in FLOOR else top if top in ROOMS else "?"


def upward(module: str, imported: str) -> bool:
    """Whether ``module`` importing ``imported`` breaks the rooms' order (both in the instrumentation half)."""
    mine, theirs = room(module), room(imported)
    if mine is None or theirs is None:
        return False
    if ROOMS.index(theirs) > ROOMS.index(mine):
        return True
    return mine == "hooks" and theirs not in ("hooks", "floor") and imported not in HOOKS_REACH


IN_JOB_MODULES = [m for m in INSTRUMENTATION if room(m) is not None]


def test_every_in_job_module_is_in_a_room():
    assert all(room(m) != "?" for m in IN_JOB_MODULES), [m for m in IN_JOB_MODULES if room(m) == "?"]
    assert {room(m) for m in IN_JOB_MODULES} == set(ROOMS)


def test_the_in_job_rooms_import_only_downwards():
    offenders = [
        f"{MODULES[m].relative_to(REPO).as_posix()}:{line} ({room(m)}) imports {imported} ({room(imported)})"
        for m in IN_JOB_MODULES
        for line, imported in imports(m)
        if upward(m, imported)
    ]
    assert not offenders, (
        "an import upwards through the in-job rooms ("
        + " → ".join(reversed(ROOMS))
        + "):\n  "
        + ("\n  ".join(offenders))
    )


def test_the_rooms_rule_finds_an_upward_import():
    """The check above is only as good as its rule: counting reaching up to tracing is caught, and so is a hook
    reaching past the front; the front's own imports, and the hooks' of it, are not."""
    assert upward(f"{IN_JOB}.counting.scope", f"{IN_JOB}.tracing.spans")
    assert upward(f"{IN_JOB}.exporting.export", f"{IN_JOB}.beside.witness")
    assert upward(f"{IN_JOB}.settings", f"{IN_JOB}.counting.memory")
    assert upward(f"{IN_JOB}.hooks._common", f"{IN_JOB}.counting.memory")
    assert not upward(f"{IN_JOB}.tracing.spans", f"{IN_JOB}.counting.memory")
    assert not upward(f"{IN_JOB}.hooks.torch", f"{IN_JOB}.tracing.spans")
    assert not upward(f"{IN_JOB}.activation", f"{IN_JOB}.hooks.registry")


@pytest.mark.parametrize("package", [f"{IN_JOB}.{name}" for name in ("counting", "exporting", "beside", "tracing")])
def test_each_room_says_what_it_owns_and_imports_nothing(package):
    """Its ``__init__`` is the room's sign (what it owns, what it may import), and costs a process nothing more."""
    module = tree(package)
    assert ast.get_docstring(module), package
    assert not imports(package), imports(package)


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of loadtrace it imports, lazy imports inside functions and type-checking-only imports
    included. A submodule's implicit import of its parent package is not an edge: ``loadtrace/__init__.py`` imports
    its halves lazily, and nothing imports it back."""
    return {m: {imported for _, imported in imports(m) if imported in MODULES and imported != m} for m in MODULES}


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (its modules in order, the first repeated at the end), or [] when there is none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str]:
        path.append(module)
        on_path.add(module)
        for imported in sorted(graph[module]):
            if imported in on_path:
                return path[path.index(imported) :] + [imported]
            if imported not in done:
                found = visit(imported)
                if found:
                    return found
        on_path.discard(path.pop())
        done.add(module)
        return []

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return []


def test_the_import_graph_has_no_cycle():
    cycle = cycle_in(import_graph())
    assert not cycle, "an import cycle inside loadtrace/ (lazy imports included):\n  " + "\n  → ".join(cycle)


def test_the_cycle_check_finds_a_cycle():
    """The check above is only as good as its search: a cycle two hops away is found, a diamond is not one."""
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) == []
    assert "loadtrace.instrumentation.tracing.spans" in import_graph()["loadtrace.instrumentation.activation"]


def test_at_most_eight_modules_sit_directly_under_loadtrace():
    """The folders show the halves (README, How it works): the in-job half in ``instrumentation/``, the offline
    half in ``analysis/`` and ``cli/``, and at the top only the package's surface and the shared formats."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def test_the_readme_support_table_is_instruments():
    """The README's table of tested releases is ``INSTRUMENTS``, the one place they are written."""
    from loadtrace.instrumentation import INSTRUMENTS

    rows = re.findall(r"^  \| (\w+) \| `([^`]+)` \|$", (REPO / "README.md").read_text(), flags=re.M)
    assert dict(rows) == INSTRUMENTS and [name for name, _ in rows] == list(INSTRUMENTS), rows
