"""How an aten overload is served on neuron."""

from enum import Enum


class Tier(str, Enum):
    NATIVE = "native"          # a kernel of the device (tile program on the engine, or C++ metadata)
    DECOMPOSED = "decomposed"  # a torch._decomp decomposition into ops the device runs
    FALLBACK = "fallback"      # explicit CPU fallback: copy in, CPU kernel, copy out (counted, warned)
    COMPOSITE = "composite"    # PyTorch decomposes it before it reaches any backend
