"""Imports of PyTorch internals, guarded so a torch that moved them fails with a message naming the version.

The device relies on a few private APIs (Dynamo's backend registry and
exceptions, AOTAutograd, c10d's C++ bindings, ``torch._prims_common``). A new
torch may move any of them; the user should then read which API, which torch,
and what to do — not an ImportError from deep inside a kernel module.
``python -m harness compat`` probes the same APIs across versions.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

SUPPORTED = ">=2.13,<2.15"  # pyproject.toml's requirement


def torch_at_least(major: int, minor: int) -> bool:
    """The installed torch is major.minor or newer (kernels whose CPU semantics changed between releases)."""
    parts = torch.__version__.split("+")[0].split(".")
    return (int(parts[0]), int(parts[1])) >= (major, minor)


def internal(module: str, name: str | None = None, purpose: str = "") -> Any:
    """``import module`` (and ``getattr(module, name)``), or ImportError naming torch's version and the fix."""
    try:
        found = importlib.import_module(module)
        return getattr(found, name) if name else found
    except (ImportError, AttributeError) as e:
        what = f"{module}.{name}" if name else module
        raise ImportError(
            f"torch {torch.__version__} has no {what} ({type(e).__name__}: {e}); neuronsim uses this internal PyTorch "
            f"API{' for ' + purpose if purpose else ''} and supports torch {SUPPORTED}. Install a supported torch, or "
            f"run `python -m harness compat --torch <version>` to see what changed.") from e
