"""Shared fixtures for the unit tests of device_impl, harness and reports."""

from __future__ import annotations

import os

# Native kernels run with the CPU dispatch key excluded during tests: a kernel that
# reached a torch CPU kernel would raise instead of silently computing on the host.
os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import device_impl  # noqa: E402,F401  (registers the device even with autoload off)
from device_impl import dispatch  # noqa: E402

@pytest.fixture
def fresh_stats():
    """Dispatch counters reset before and after the test."""
    dispatch.reset_stats()
    yield dispatch
    dispatch.reset_stats()


@pytest.fixture
def adaptive():
    """Adaptive eager mode for one test, its queue, statistics and program cache cleared first and nothing left
    queued after (the adaptive test files' shared setup)."""
    from device_impl import eager

    eager.flush()
    eager.reset_stats()
    eager.clear_cache()
    torch.neuron.set_eager_mode("adaptive")
    try:
        yield eager
    finally:
        torch.neuron.set_eager_mode("eager")
    assert eager.pending() == 0
