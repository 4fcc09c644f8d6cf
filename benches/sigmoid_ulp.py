"""ScalarE's sigmoid and silu against CPU and the exact value, over every float32 input (or a stride of them).

Usage: python benches/sigmoid_ulp.py [--stride N] [--compare-stride M] [--bits FILE]

The device computes CPU's float32 formulas, 1 / (1 + exp(-x)) and x / (1 + exp(-x)), with exp(-x) taken in
float64 and rounded once to float32 (``device_impl.engine.isa._exp_neg_into``). Two reports:

- compare (every M-th float32, default 4099): the largest ULP distance of the device's result from torch
  CPU's (the running capability: set ATEN_CPU_CAPABILITY) and from the correctly rounded value, beside the
  formulation it replaced (scipy's ``expit`` in float32) and CPU's own. "Correctly rounded" is judged where
  CPU's float32 exp(-x) does not overflow (x >= -88.7228: below, CPU and the device give 0 by formula where
  the exact value is a float32 down to 2.9e-39; that range is reported apart).
- scan (every N-th float32, default all 2^32): the inputs whose float64 exp(-x) lies within MARGIN float64
  ULP of a float32 rounding midpoint, the only ones whose rounded exp another host's float64 exp (numpy's
  AVX512F loop, libm) could change; for each, the sigmoid and silu are computed with the exp rounded both
  ways, and the inputs where that changes the result are counted, with the least distance among them: an
  exp implementation changes a result only if its error at that input reaches that distance (float64 exps
  are within an ULP). A digest of every result; --bits writes it, to compare two runs under different
  NPY_DISABLE_CPU_FEATURES (measured: every 16th float32 gave the same digests under numpy's AVX512F exp
  and libm's, and 8 inputs within 64 ULP, the nearest 4 ULP away).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from device_impl.engine import isa  # noqa: E402

MARGIN = 64  # float64 ULP: far beyond any float64 exp's error (glibc < 1 ULP, numpy's AVX512F loop < 4)
CHUNK = 1 << 24
NEW = {"sigmoid": isa._sigmoid, "silu": isa._silu}
OVERFLOW = float(np.float32(-88.72283172607422))  # below: CPU's float32 exp(-x) overflows


def ordered(bits: np.ndarray) -> np.ndarray:
    """float32 bit patterns as integers whose difference is the ULP distance (-0.0 and 0.0 are one apart)."""
    i = bits.astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF) - 1, i)


def ulp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np.abs(ordered(a.view(np.uint32)) - ordered(b.view(np.uint32)))
    return np.where((np.isnan(a) & np.isnan(b)) | ((a == 0) & (b == 0)), 0, d)


def midpoint_distance(y: np.ndarray) -> np.ndarray:
    """How many float64 ULP ``y`` lies from the nearest float32 rounding midpoint (inf where none is near)."""
    bits = np.abs(y).view(np.uint64)
    e = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64) - 1023
    ok = (e >= -149) & (e <= 127) & (y != 0)
    shift = np.clip(np.where(e >= -126, 29, -97 - e), 1, 52).astype(np.uint64)
    low = (bits & ((np.uint64(1) << shift) - np.uint64(1))).astype(np.int64)
    half = (np.uint64(1) << (shift - np.uint64(1))).astype(np.int64)
    d = np.abs(low - half).astype(np.float64)
    at_bottom = e == -150  # [2^-150, 2^-149): the midpoint between 0 and the least subnormal is 2^-150 itself
    d = np.where(at_bottom, (bits & np.uint64((1 << 52) - 1)).astype(np.float64), d)
    top = e == 127  # [2^127, 2^128): the midpoint above the largest float32 (2^128 - 2^103) decides overflow
    d = np.where(top, np.abs((bits & np.uint64((1 << 29) - 1)).astype(np.int64) - (1 << 28)), d)
    return np.where(ok | at_bottom | top, d, np.inf)


def exact(fn: str, x: np.ndarray) -> np.ndarray:
    """The correctly rounded float32 values (ties to even), with mpmath at 200 bits."""
    import mpmath  # noqa: PLC0415
    mpmath.mp.prec = 200
    out = np.empty(x.size, np.float32)
    for i, v in enumerate(x.tolist()):
        s = 1 / (1 + mpmath.exp(-mpmath.mpf(v)))
        value = s if fn == "sigmoid" else mpmath.mpf(v) * s
        d = np.float32(float(value))  # within one float32 ULP; the nearer neighbour is chosen exactly
        out[i] = min((d, np.nextafter(d, np.float32(np.inf)), np.nextafter(d, np.float32(-np.inf))),
                     key=lambda c: (abs(mpmath.mpf(float(c)) - value), int(np.float32(c).view(np.uint32)) & 1))
    return out


def correctly_rounded(fn: str, x: np.ndarray) -> np.ndarray:
    """float64 evaluation rounded once, and mpmath where it lies near a float32 midpoint."""
    wide = np.exp(np.negative(x, dtype=np.float64)) + 1.0
    wide = (1.0 if fn == "sigmoid" else x.astype(np.float64)) / wide
    ref = wide.astype(np.float32)
    risky = midpoint_distance(wide) < MARGIN
    ref[risky] = exact(fn, x[risky])
    return ref


def finish(fn: str, x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The device's float32 formula on a given float32 exp(-x)."""
    d = e + np.float32(1)
    return np.float32(1) / d if fn == "sigmoid" else x / d


def floats(start: int, stride: int) -> np.ndarray:
    bits = np.arange(start, min(start + CHUNK * stride, 1 << 32), stride, dtype=np.uint64)
    return bits.astype(np.uint32).view(np.float32)


def compare(stride: int) -> dict:
    from scipy.special import expit  # noqa: PLC0415
    old = {"sigmoid": lambda x: expit(x), "silu": lambda x: x * expit(x)}
    cpu = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu}
    keys = ("new-cpu", "old-cpu", "new-exact", "old-exact", "cpu-exact", "new-cpu-n", "old-cpu-n", "n")
    worst = {fn: dict.fromkeys(keys, 0) for fn in NEW}
    for start in range(0, 1 << 32, CHUNK * stride):
        x = floats(start, stride)
        x = x[~np.isnan(x)]
        live = x >= OVERFLOW
        for fn, f in NEW.items():
            y, o = f(x), old[fn](x).astype(np.float32)
            c = cpu[fn](torch.from_numpy(x)).numpy()
            ref = correctly_rounded(fn, x[live])
            w = worst[fn]
            w["n"] += x.size
            w["new-cpu"] = max(w["new-cpu"], int(ulp(y, c).max()))
            w["old-cpu"] = max(w["old-cpu"], int(ulp(o, c).max()))
            w["new-cpu-n"] += int((ulp(y, c) != 0).sum())
            w["old-cpu-n"] += int((ulp(o, c) != 0).sum())
            if ref.size:
                w["new-exact"] = max(w["new-exact"], int(ulp(y[live], ref).max()))
                w["old-exact"] = max(w["old-exact"], int(ulp(o[live], ref).max()))
                w["cpu-exact"] = max(w["cpu-exact"], int(ulp(c[live], ref).max()))
    return worst


def scan(stride: int) -> dict:
    digest = {fn: hashlib.sha256() for fn in NEW}
    near = 0
    changed = {fn: 0 for fn in NEW}
    nearest = {fn: np.inf for fn in NEW}
    for start in range(0, 1 << 32, CHUNK * stride):
        x = floats(start, stride)
        for fn, f in NEW.items():
            digest[fn].update(f(x).tobytes())
        wide = np.exp(np.negative(x, dtype=np.float64))
        risky = midpoint_distance(wide) < MARGIN
        if not risky.any():
            continue
        xr = x[risky]
        dist = midpoint_distance(wide[risky])
        near += xr.size
        e = wide[risky].astype(np.float32)
        up = np.where(wide[risky] > e, np.nextafter(e, np.float32(np.inf)), e)  # the float32s either side
        down = np.where(wide[risky] < e, np.nextafter(e, np.float32(-np.inf)), e)
        for fn in NEW:
            a, b = finish(fn, xr, up), finish(fn, xr, down)
            moved = ulp(a, b) != 0
            changed[fn] += int(moved.sum())
            if moved.any():
                nearest[fn] = min(nearest[fn], float(dist[moved].min()))
    return {"near": near, "changed": changed, "nearest": nearest,
            "digest": {fn: d.hexdigest() for fn, d in digest.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--compare-stride", type=int, default=4099)
    parser.add_argument("--bits", type=Path, help="write the digests here")
    args = parser.parse_args()
    np.seterr(all="ignore")
    print(f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}; numpy {np.__version__}")
    for fn, w in compare(args.compare_stride).items():
        print(f"{fn} (every {args.compare_stride}th float32, {w['n']} inputs): max ULP from CPU: device "
              f"{w['new-cpu']} ({w['new-cpu-n']} inputs differ), expit before {w['old-cpu']} ({w['old-cpu-n']}); "
              f"from the correctly rounded value (x >= -88.7228): device {w['new-exact']}, expit before "
              f"{w['old-exact']}, CPU {w['cpu-exact']}")
    s = scan(args.stride)
    print(f"scan (every {args.stride}th float32): float64 exp(-x) within {MARGIN} ULP of a float32 midpoint: "
          f"{s['near']} inputs; results that rounding the exp the other way changes: {s['changed']}, the "
          f"nearest of them this many float64 ULP from the midpoint: {s['nearest']}")
    for fn, d in s["digest"].items():
        print(f"{fn} digest {d}")
    if args.bits is not None:
        args.bits.write_text("".join(f"{fn} {d}\n" for fn, d in s["digest"].items()))


if __name__ == "__main__":
    main()
