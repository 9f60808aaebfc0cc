"""Promise (issue 43): the README is a page read in minutes that says where the rest is, and every way on from it
holds: each relative link and anchor in README.md, docs/*.md and the other READMEs names a file that exists and a
heading that is in it, as GitHub spells a heading's anchor. Links inside code are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.paths import REPO

README = REPO / "README.md"
PAGES = [
    README,
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "examples" / "README.md",
    REPO / "benchmarks" / "README.md",
]
README_MAX_LINES = 300

FENCED = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    return INLINE_CODE.sub("", FENCED.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation but ``-`` and ``_`` dropped, each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    return re.sub(r"[^\w\- ]", "", text.replace("`", "").lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated one gets ``-1``, ``-2``, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCED.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def broken(page: Path) -> list[str]:
    wrong = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            wrong.append(f"{target}: no {shown(where)}")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            wrong.append(f"{target}: no heading #{anchor} in {shown(where)}")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page):
    assert not broken(page), broken(page)


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## `loadtrace top`: live\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[ok](other.md#loadtrace-top-live) [self](#page) [web](https://example.com/x)\n"
        "[gone](nowhere.md) [lost](other.md#no-such) `[code](ignored.md)`\n```\n[fenced](ignored.md)\n```\n"
    )
    assert [line.split(":")[0] for line in broken(page)] == ["nowhere.md", "other.md#no-such"]


def test_the_readme_is_read_in_minutes_and_says_where_the_rest_is():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    linked = {target.partition("#")[0] for target in LINK.findall(prose(README.read_text()))}
    pages = {f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")}
    assert not pages - linked, f"docs pages the README does not link: {sorted(pages - linked)}"


def test_the_readme_states_the_test_command_ci_runs():
    """``.ci/run`` is setup then the whole suite; the quick start says the same two commands (``pytest`` once the
    venv is activated is ``.venv/bin/pytest``)."""
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == "bash scripts/setup.sh && .venv/bin/pytest", ci
    quick_start = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", quick_start, re.DOTALL)[:1]
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands[0] == "bash scripts/setup.sh && source .venv/bin/activate" and "pytest" in commands, commands
