"""Fixtures of the report tests: the fixture store and build/ folder (report_fixture.py), written once per module."""

from __future__ import annotations

import pytest
from report_fixture import Fixture, write_build, write_store


@pytest.fixture(scope="module")
def report_fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    root = tmp_path_factory.mktemp("report")
    build = root / "build"
    build.mkdir()
    runs = write_store(build / "results.sqlite")
    write_build(build)
    return Fixture(build / "results.sqlite", build, build / "reports", runs)
