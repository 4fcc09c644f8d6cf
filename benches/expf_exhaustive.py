"""engine/expf.py's fast float32 exps against their step-by-step references over every float32 bit pattern.

Usage: PYTHONPATH=. python benches/expf_exhaustive.py [--stride N] [--only sleef_u10|libm]

``expf_sleef_u10`` and ``expf_libm`` compute ``_sleef_u10_reference``'s and ``_libm_reference``'s bits by
other operation sequences (blocks, a table of glibc's scales, SLEEF's exact steps as plain float32/double
operations, its polynomial's first steps rounded by a magic constant). Most steps are exact by argument
(their docstrings); two of SLEEF's are a double sum rounded to float32, which is the fused result unless the
sum is a float32 midpoint, and that no input gives one is this scan's finding: all 2^32 inputs (NaN
payloads, infinities, denormals included), the fast form against the reference, bit for bit. Every input
is a function of its bits, so the scan is a proof for the host's IEEE arithmetic (the references' own
correctness against CPU is tests/kernels/test_cpu_exp.py's). About 6 minutes of one core (the references
are the slow part); --stride N checks every N-th pattern.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from device_impl.engine import expf


def main() -> int:
    """The script: asv's and pytest's discovery import this module and must not run it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--only", choices=sorted(expf.EXPF))
    args = parser.parse_args()
    pairs = {"sleef_u10": (expf.expf_sleef_u10, expf._sleef_u10_reference),
             "libm": (expf.expf_libm, expf._libm_reference)}
    chunk = 1 << 22
    failed = False
    for name, (fast, reference) in pairs.items():
        if args.only and name != args.only:
            continue
        start, differ, first = time.time(), 0, None
        for lo in range(0, 1 << 32, chunk * args.stride):
            bits = np.arange(lo, min(lo + chunk * args.stride, 1 << 32), args.stride, dtype=np.uint64)
            x = bits.astype(np.uint32).view(np.float32)
            bad = np.flatnonzero(fast(x).view(np.uint32) != reference(x).view(np.uint32))
            differ += bad.size
            if bad.size and first is None:
                first = int(x.view(np.uint32)[bad[0]])
        print(f"{name}: {differ} of {(1 << 32) // args.stride} inputs differ"
              + (f", first 0x{first:08x}" if first is not None else "") + f" ({time.time() - start:.0f} s)")
        failed |= differ > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
