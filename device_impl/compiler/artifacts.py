"""Compilation artifacts for inspection (TorchNeuron's names).

With ``TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1`` every compiled graph
leaves, under ``TORCH_NEURONX_DEBUG_DIR`` (default: ``neuron_debug`` in the
system temp directory):

    fx_graphs/<graph>.py      the AOT graph handed to torch-mlir (readable Python)
    stablehlo/<graph>.mlir    the StableHLO module our passes read
    neff/<graph>.neff         the compiled NEFF (also a cache hit's NEFF)
"""

from __future__ import annotations

import logging
import os
import re
import tempfile

from device_impl.runtime.config import CompilerConfig

log = logging.getLogger("torch_neuronx.artifacts")


def directory(config: CompilerConfig) -> str | None:
    if not config.preserve_artifacts:
        return None
    return config.debug_dir or os.path.join(tempfile.gettempdir(), "neuron_debug")


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name)


def write(config: CompilerConfig, graph: str, fx_code: str | None = None, stablehlo: str | None = None,
          neff_bytes: bytes | None = None) -> None:
    root = directory(config)
    if root is None:
        return
    for sub, ext, content in (("fx_graphs", "py", fx_code), ("stablehlo", "mlir", stablehlo),
                              ("neff", "neff", neff_bytes)):
        if content is None:
            continue
        folder = os.path.join(root, sub)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{_safe(graph)}.{ext}")
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(path, mode) as handle:
            handle.write(content)
    log.info("compilation artifacts of %s kept under %s", graph, root)
