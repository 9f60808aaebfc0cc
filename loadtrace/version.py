"""loadtrace's version, written only here: the package's build (pyproject.toml reads it) and its spans use it."""

__version__ = "0.1.0"
