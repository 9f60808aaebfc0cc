"""The Python environments the multi-rank tests run in, and whether loadtrace is really installed in them.

Each venv is one transformers version. By default: ``.venv`` and ``.venv512`` at the repository root, those that exist.
``LOADTRACE_TEST_VENVS`` (paths separated by ``os.pathsep``) replaces that list.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .paths import REPO

DEFAULT_VENVS = (".venv", ".venv512")
INSTALL_HINT = "{python} -m pip install --no-deps --force-reinstall {repo}"


@dataclass(frozen=True)
class Venv:
    root: Path
    site_packages: Path
    transformers: str  # version string, from the installed distribution's metadata directory

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def torchrun(self) -> Path:
        return self.bin / "torchrun"

    @property
    def release(self) -> str:
        """``major.minor`` of transformers: the key of the field-facts expectations."""
        return ".".join(self.transformers.split(".")[:2])

    @property
    def id(self) -> str:
        return f"transformers{self.transformers}"

    def install_hint(self) -> str:
        return INSTALL_HINT.format(python=self.python, repo=REPO)


def _site_packages(root: Path) -> Path | None:
    found = sorted(root.glob("lib/python3*/site-packages"))
    return found[0] if found else None


def _dist_version(site_packages: Path, dist: str) -> str | None:
    for info in site_packages.glob(f"{dist}-*.dist-info"):
        match = re.fullmatch(rf"{dist}-(.+)\.dist-info", info.name)
        if match:
            return match.group(1)
    return None


def discover() -> list[Venv]:
    configured = os.environ.get("LOADTRACE_TEST_VENVS")
    candidates = (
        [Path(p) for p in configured.split(os.pathsep) if p] if configured else [REPO / d for d in DEFAULT_VENVS]
    )
    venvs = []
    for root in candidates:
        root = root if root.is_absolute() else REPO / root
        site = _site_packages(root)
        if site is None or not (root / "bin" / "torchrun").exists():
            continue
        version = _dist_version(site, "transformers")
        if version is None:
            continue
        venvs.append(Venv(root=root, site_packages=site, transformers=version))
    return venvs


def installed_problems(venv: Venv) -> list[str]:
    """Why loadtrace is not a real (non-editable) install in ``venv``; empty when it is."""
    site = venv.site_packages
    problems = []
    if not (site / "loadtrace.pth").is_file():
        problems.append(f"{site / 'loadtrace.pth'} is missing")
    if not (site / "loadtrace" / "_activate.py").is_file():
        problems.append(f"{site / 'loadtrace'} is not an installed copy of the package")
    for pth in site.glob("*.pth"):
        text = pth.read_text(errors="replace")
        if str(REPO) in text or "__editable__" in pth.name and "loadtrace" in pth.name:
            problems.append(f"{pth} points at the source tree (editable install)")
    return problems


def stale_files(venv: Venv) -> list[str]:
    """Source files of the package that differ from the installed copy (the install predates the working tree)."""
    stale = []
    for source in sorted((REPO / "loadtrace").rglob("*.py")):
        rel = source.relative_to(REPO)
        installed = venv.site_packages / rel
        if not installed.is_file() or _digest(installed) != _digest(source):
            stale.append(str(rel))
    return stale


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
