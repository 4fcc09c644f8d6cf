"""The environment a run happened in, stored with every run (and shown in reports)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        sha = out.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty and sha else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(device: str = "neuron") -> dict[str, str]:
    return {
        "torch": torch.__version__,
        "torch_mlir": _version("torch-mlir"),
        "python": sys.version.split()[0],
        "neuronsim": _version("neuronsim"),
        "git_sha": git_sha(),
        "machine": f"{platform.machine()} {platform.system()} {platform.release()}; {platform.processor() or 'cpu'}",
        "device": device,
        "hypothesis": _version("hypothesis"),
        # set by `python -m harness compat` (session|torch target) so its diff finds this run's results
        "tag": os.environ.get("NEURONSIM_RUN_TAG", ""),
    }
