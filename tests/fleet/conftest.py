"""The rollup tests' fleet: a chDB database filled from the recorded fleet once per module, copied per test."""

from pathlib import Path

import pytest
from support.clickhouse_fleet import copy_of, fleet_of


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, str]:
    """The fleet without the restart (tests add it when they need it), filled once."""
    return fleet_of(tmp_path_factory.mktemp("fleet"), with_restart=False)


@pytest.fixture
def fleet(filled, tmp_path) -> tuple[Path, str]:
    """A fresh copy per test: a rollup changes the database."""
    return copy_of(filled, tmp_path)
