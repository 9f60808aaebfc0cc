"""Where things are, for every test folder: the repository, the tests, their recorded fixtures and worker scripts."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
SPANS = FIXTURES / "spans"
WORKERS = TESTS / "workers"
