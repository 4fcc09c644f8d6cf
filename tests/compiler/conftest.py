"""Compiler tests: shared helpers come from tests/support.py; ``slow`` tests run only on request
(``-m slow`` or NEURONSIM_SLOW=1), so the default run stays short."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: support.py


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a long compiler test (whole models); run with -m slow or NEURONSIM_SLOW=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("NEURONSIM_SLOW") == "1" or "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow compiler test: run with -m slow or NEURONSIM_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
