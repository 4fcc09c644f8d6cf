"""Environment configuration of the simulated device, read once at registration.

Names follow the real Neuron runtime where the meaning is the same
(NEURON_RT_NUM_CORES, NEURON_RT_VISIBLE_CORES); NEURON_HBM_BYTES is ours.
A malformed value raises ValueError naming the variable and the accepted
form, rather than silently falling back to a default.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

DEFAULT_CORES = 2  # a Trn1 chip has two NeuronCore-v2
DEFAULT_HBM_BYTES = 16 * 2**30  # half a Trn1 chip's 32 GiB per core

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20,
          "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


@dataclass(frozen=True)
class DeviceConfig:
    physical_cores: int
    visible_cores: tuple[int, ...]
    hbm_bytes: int
    eager_mode: str = "eager"  # NEURON_EAGER_MODE: 'eager' or 'adaptive' (device_impl.eager)

    @property
    def device_count(self) -> int:
        return len(self.visible_cores)


def parse_bytes(text: str, variable: str = "NEURON_HBM_BYTES") -> int:
    """'17179869184', '16GiB', '512 MiB' -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{variable}={text!r} is not a size; use bytes (17179869184) or a unit (16GiB, 512MiB).")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{variable}={text!r} must be positive.")
    return value


def parse_core_list(text: str, physical: int) -> tuple[int, ...]:
    """'0', '0-1', '0,1' (Neuron runtime syntax) -> core indices."""
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={text!r}: {part!r} is not a core index or range like '0-1'.")
        lo, hi = int(match.group(1)), int(match.group(2) or match.group(1))
        if hi < lo:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={text!r}: range {part!r} is reversed.")
        cores.extend(range(lo, hi + 1))
    bad = [c for c in cores if c >= physical]
    if bad:
        raise ValueError(f"NEURON_RT_VISIBLE_CORES={text!r} names core(s) {bad}, but the simulated instance has "
                         f"{physical} (set NEURON_RT_NUM_CORES to simulate more).")
    if len(set(cores)) != len(cores):
        raise ValueError(f"NEURON_RT_VISIBLE_CORES={text!r} lists a core twice.")
    return tuple(cores)


def read(environ: dict[str, str] | None = None) -> DeviceConfig:
    env = os.environ if environ is None else environ
    raw_cores = env.get("NEURON_RT_NUM_CORES", "").strip()
    if raw_cores:
        if not raw_cores.isdigit() or not 0 < int(raw_cores) <= 64:
            raise ValueError(f"NEURON_RT_NUM_CORES={raw_cores!r} must be an integer in 1..64.")
        physical = int(raw_cores)
    else:
        physical = DEFAULT_CORES
    visible_text = env.get("NEURON_RT_VISIBLE_CORES", "").strip()
    visible = parse_core_list(visible_text, physical) if visible_text else tuple(range(physical))
    hbm_text = env.get("NEURON_HBM_BYTES", "").strip()
    hbm = parse_bytes(hbm_text) if hbm_text else DEFAULT_HBM_BYTES
    eager_mode = env.get("NEURON_EAGER_MODE", "").strip().lower() or "eager"
    if eager_mode not in ("eager", "adaptive"):
        raise ValueError(f"NEURON_EAGER_MODE={env['NEURON_EAGER_MODE']!r} must be 'eager' or 'adaptive'.")
    return DeviceConfig(physical, visible, hbm, eager_mode)


# --- compiler (torch.compile(backend="neuron")), read at the first compile -------------------------
# Names are TorchNeuron's (DESIGN.md §7). Booleans accept 1/0, true/false, yes/no, on/off.

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class CompilerConfig:
    neff_cache_dir: str  # TORCH_NEURONX_NEFF_CACHE_DIR (default ~/.cache/neuronsim/neff)
    neff_cache: bool = True  # False with TORCH_NEURONX_DISABLE_NEFF_CACHE=1
    fallback: bool = True  # False with TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1: unsupported graphs raise
    debug_dir: str = ""  # TORCH_NEURONX_DEBUG_DIR: where compilation artifacts go
    preserve_artifacts: bool = False  # TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 keeps them
    log_level: str = "WARNING"  # TORCH_NEURONX_LOG_LEVEL


def parse_flag(env, variable: str) -> bool:
    text = env.get(variable, "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{variable}={env[variable]!r} is not a boolean; use 1 or 0 (true/false, yes/no, on/off).")


def static_replay(environ: dict[str, str] | None = None) -> bool:
    """NEURON_STATIC_REPLAY (default 1): a compiled program whose device time follows from its shapes runs
    its arithmetic without per-instruction bookkeeping and replays the schedule recorded at compile time
    (device_impl.compiler.replay), and an eager elementwise launch whose signature ran before replays that
    run's figures (device_impl.kernels.replay); 0 runs every program and launch instruction by instruction
    (the reference path, for debugging the fast one). Read once, when the compiler's executor and the
    kernels load."""
    env = os.environ if environ is None else environ
    return "NEURON_STATIC_REPLAY" not in env or parse_flag(env, "NEURON_STATIC_REPLAY")


def host_threads(environ: dict[str, str] | None = None) -> int | None:
    """NEURON_HOST_THREADS (default: unset): how many host threads a compiled program's static replay may use
    for its independent arithmetic (product blocks, attention batches: device_impl.compiler.workers). Unset,
    it follows ``torch.get_num_threads()`` at each execution, the process's statement of how many cores
    PyTorch may keep busy, so a process that pins torch to one thread (the benchmarks, a pytest-xdist worker
    told so) is not oversubscribed. Either way no thread is added while numpy's BLAS runs more than one
    thread per call (it already spreads each product, and a concurrent multi-threaded call could change its
    bits). A positive integer; 1 runs everything on the calling thread. Read once, when the executor loads."""
    env = os.environ if environ is None else environ
    text = env.get("NEURON_HOST_THREADS", "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) <= 256:
        raise ValueError(f"NEURON_HOST_THREADS={env['NEURON_HOST_THREADS']!r} must be an integer in 1..256 "
                         "(unset: follow torch.get_num_threads()).")
    return int(text)


def default_neff_cache_dir(env) -> str:
    base = env.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neuronsim", "neff")


def read_compiler(environ: dict[str, str] | None = None) -> CompilerConfig:
    """The compiler's environment variables (see CompilerConfig)."""
    env = os.environ if environ is None else environ
    level = env.get("TORCH_NEURONX_LOG_LEVEL", "").strip().upper() or "WARNING"
    if level not in LOG_LEVELS:
        raise ValueError(f"TORCH_NEURONX_LOG_LEVEL={env['TORCH_NEURONX_LOG_LEVEL']!r} must be one of "
                         f"{', '.join(LOG_LEVELS)}.")
    cache_dir = env.get("TORCH_NEURONX_NEFF_CACHE_DIR", "").strip() or default_neff_cache_dir(env)
    return CompilerConfig(
        neff_cache_dir=os.path.expanduser(cache_dir),
        neff_cache=not parse_flag(env, "TORCH_NEURONX_DISABLE_NEFF_CACHE"),
        fallback=not parse_flag(env, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"),
        debug_dir=os.path.expanduser(env.get("TORCH_NEURONX_DEBUG_DIR", "").strip()),
        preserve_artifacts=parse_flag(env, "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"),
        log_level=level,
    )
