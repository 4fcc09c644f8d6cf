"""Compiler tests share tests/support.py with the top-level tests (it lives one directory up)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty NEFF disk cache under tmp_path/cache, and Dynamo's and the compiler's in-memory caches and
    counters cleared before and after (the disk-cache and static-replay tests)."""
    import device_impl.compiler as compiler
    from device_impl.compiler import backend

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    backend.reload_settings()
    torch._dynamo.reset()
    compiler.reset_stats()
    compiler.clear_cache()
    yield tmp_path
    torch._dynamo.reset()
    compiler.clear_cache()
    compiler.reset_stats()
    backend.reload_settings()


@pytest.fixture
def no_neff_cache(monkeypatch):
    """No NEFF disk cache (every compile runs the whole pipeline), and Dynamo's and the compiler's in-memory
    caches cleared before and after."""
    import device_impl.compiler as compiler
    from device_impl.compiler import backend

    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    backend.reload_settings()
    compiler.clear_cache()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    compiler.clear_cache()
    backend.reload_settings()
