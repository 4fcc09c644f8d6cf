"""Build and load the C++ core, once per machine.

The extension is compiled with ``torch.utils.cpp_extension`` into a cache
directory keyed by the torch version, the Python ABI and a hash of the
sources, so a second import (or a second checkout of the same sources)
loads the shared object directly and never invokes the compiler.
``python -m device_impl build-core`` builds it ahead of time (the Makefile does).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import time
from pathlib import Path
from types import ModuleType

CSRC = Path(__file__).parent / "csrc"
SOURCES = ("allocator.cpp", "host_allocator.cpp", "device.cpp", "aten_ops.cpp", "profiler_stubs.cpp", "attention.cpp", "module.cpp")
EXTENSION_NAME = "_neuron_C"
CFLAGS = ("-O2", "-fvisibility=hidden")

_loaded: ModuleType | None = None
last_build: dict | None = None  # what the most recent load() in this process did


def _cache_root() -> Path:
    override = os.environ.get("NEURONSIM_EXT_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neuronsim" / "ext"


def build_key() -> str:
    """Hash of everything that changes the binary: sources, flags, torch, Python ABI."""
    import torch

    digest = hashlib.sha256()
    for part in (torch.__version__, sysconfig.get_config_var("SOABI") or sys.version, " ".join(CFLAGS)):
        digest.update(part.encode())
    for path in sorted(CSRC.iterdir()):
        if path.suffix in {".cpp", ".h"}:
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    import torch

    return _cache_root() / f"torch-{torch.__version__}" / build_key()


def _import_shared_object(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(EXTENSION_NAME, str(path))
    spec = importlib.util.spec_from_file_location(EXTENSION_NAME, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load(verbose: bool = False) -> ModuleType:
    """Return the C++ core, compiling it only if this exact build is not cached."""
    global _loaded, last_build
    if _loaded is not None:
        return _loaded
    directory = build_dir()
    shared_object = directory / f"{EXTENSION_NAME}.so"
    info_file = directory / "build_info.json"
    if shared_object.exists() and info_file.exists():
        _loaded = _import_shared_object(shared_object)
        last_build = {"compiled": False, "path": str(shared_object)}
        return _loaded

    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    _loaded = cpp_extension.load(
        name=EXTENSION_NAME,
        sources=[str(CSRC / s) for s in SOURCES],
        extra_cflags=list(CFLAGS),
        build_directory=str(directory),
        verbose=verbose,
    )
    seconds = time.perf_counter() - started
    info_file.write_text(json.dumps({"key": build_key(), "seconds": round(seconds, 1)}))
    last_build = {"compiled": True, "path": str(shared_object), "seconds": seconds}
    return _loaded
