"""The instruction set of the simulated NeuronCore: the living definition.

Five engines, each a handful of instructions. Every instruction checks its
operands against the hardware rules, computes with numpy, and places itself
on the launch's timeline with a cost from ``constants``:

* DMA      HBM <-> SBUF transfers with strided access patterns, row gathers
           and scatters with indices held in SBUF (indirect DMA), HBM -> HBM.
* TensorE  matmul: stationary [K<=128, M<=128] x moving [K<=128, N<=512]
           into one PSUM bank, fp32 accumulation; transpose via identity.
* VectorE  elementwise ALU ops on one or two tiles or a tile and a scalar,
           reductions and scans along the free axis, casts, select, memset.
* ScalarE  activation: out = f(scale * x + bias), optionally summed along the
           free axis in the same pass.
* GpSimdE  cross-partition work: iota, partition reductions and broadcasts,
           per-partition sort, random numbers, and programs on its general
           purpose cores (``run``) for irregular algorithms.

Numerics: floating point is computed in fp32 and rounded to nearest-even
when written to a narrower tile; integers are exact and wrap. No instruction
calls torch.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numpy.lib.array_utils import byte_bounds

from device_impl.engine.constants import Platform
from device_impl.engine import expf
from device_impl.engine.dtypes import FP32, compute_dtype, is_float
from device_impl.engine.memory import EngineError, Tile
from device_impl.engine.timeline import Timeline

# --- operation tables ---------------------------------------------------------

def _floor_divide(a, b):
    """PyTorch's div_floor: exact for integers; for floats c10::div_floor_floating, which goes
    through fmod (so inf // 1 is NaN, as on CPU) and corrects the quotient's rounding."""
    if a.dtype.kind in "iub":
        return np.floor_divide(a, b)
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = np.where(div != 0, np.floor(div), np.copysign(np.zeros_like(div), a / b))
    floordiv = np.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    return np.where(b == 0, a / b, floordiv)


def _trunc_divide(a, b):
    if a.dtype.kind in "iub":
        q = np.floor_divide(a, b)
        fix = (q < 0) & (q * b != a)
        return q + fix
    return np.trunc(np.true_divide(a, b))


def _remainder(a, b):
    """Python-style remainder: the result takes the sign of the divisor (torch.remainder)."""
    if a.dtype.kind in "iub":
        return np.remainder(a, b)
    r = np.fmod(a, b)
    fix = (r != 0) & ((r < 0) != (b < 0))
    return np.where(fix, r + b, r)


def _power(a, b):
    """Integer powers with negative exponents follow PyTorch: 1 for base 1, +-1 for base -1, else 0."""
    if a.dtype.kind in "iu" and np.asarray(b).dtype.kind in "iu":
        b = np.asarray(b)
        positive = np.power(a, np.maximum(b, 0))
        if not np.any(b < 0):
            return positive
        minus_one = np.where(b % 2 == 0, 1, -1).astype(a.dtype)
        negative = np.where(a == 1, 1, np.where(a == -1, minus_one, 0)).astype(a.dtype)
        return np.where(b < 0, negative, positive)
    result = np.power(a, b)
    exponent = np.asarray(b)
    if result.dtype.kind == "f" and (exponent.ndim or exponent == 0.5):  # (a uniform exponent other than 0.5
        # needs no fix: skip two passes over the tile.) numpy's power loop takes sqrt for a uniform exponent 0.5
        # (sqrt(-0.0) = -0.0, sqrt(-inf) = nan); IEEE pow, which the instruction computes, gives +0.0 and +inf there.
        fix = (exponent == 0.5) & ((a == 0) | (a == -np.inf))
        if np.any(fix):
            result = np.where(fix, np.abs(a), result).astype(result.dtype, copy=False)
    return result


def _bound(fn: Callable) -> Callable:
    """max/min against a bound that keeps the first operand on a tie (clamp_min/clamp_max).

    ``maximum``/``minimum`` follow the vector max/min (x86 vmaxps, numpy): the second operand
    wins a tie, which only shows on signed zeros. A clamp to a scalar bound keeps the value on
    CPU (relu(-0.0) and clamp(-0.0, min=0.0) are -0.0 at every position), so clamps to an
    immediate use these. NaN in either operand still propagates.
    """
    def alu(a, b):
        result = fn(a, b)
        if result.dtype.kind not in "fc":
            return result
        return np.where(np.equal(a, b), np.broadcast_to(a, result.shape), result).astype(result.dtype, copy=False)
    return alu


ALU_BINARY: dict[str, Callable] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide,
    "floor_divide": _floor_divide, "trunc_divide": _trunc_divide, "remainder": _remainder, "fmod": np.fmod,
    "maximum": np.maximum, "minimum": np.minimum, "clamp_min": _bound(np.maximum), "clamp_max": _bound(np.minimum),
    "fmax": np.fmax, "fmin": np.fmin, "power": _power,
    "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "nextafter": np.nextafter,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}

ALU_UNARY: dict[str, Callable] = {
    "copy": lambda x: x, "negative": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor,
    "ceil": np.ceil, "trunc": np.trunc, "round": np.round, "bitwise_not": np.invert,
    "logical_not": np.logical_not, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "signbit": np.signbit, "square": np.square, "reciprocal": np.reciprocal,
}


def _gelu_erf(x):
    from scipy.special import erf  # noqa: PLC0415  (scipy is optional at import time)
    return 0.5 * x * (1.0 + erf(x * np.float32(1 / math.sqrt(2))))


def _erf(x):
    from scipy.special import erf  # noqa: PLC0415
    return erf(x)


def _erfc(x):
    from scipy.special import erfc  # noqa: PLC0415
    return erfc(x)


def _erfinv(x):
    from scipy.special import erfinv  # noqa: PLC0415
    return np.where(x == 0, x, erfinv(x))  # keeps -0.0, as CPU does


def _gelu_tanh(x):
    c = np.float32(math.sqrt(2 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def _exp_neg_into(x: np.ndarray, out: np.ndarray) -> None:
    """exp(-x) as a float32: float64's exp of the exactly widened -x, rounded once to ``out``'s dtype
    (``x`` may be ``out``).

    Why not numpy's float32 exp: its bits depend on the host (numpy's AVX512F and AVX2 loops and libm's
    expf differ in the last place). Float64 exp is within a few float64 ULP on every implementation numpy
    dispatches to, so the float32 rounding can differ between hosts only where the float64 value lies within
    those few ULP of a float32 rounding midpoint. ``benches/sigmoid_ulp.py`` lists such inputs: of every 16th
    float32, 8 lie within 64 float64 ULP of one, the nearest 4 ULP away (x = 2.98e-8, where exp(-x) is
    1 - x to rounding on any implementation), the others 28 or more, against float64 exp errors under
    half an ULP; the results were identical under numpy's AVX512F loop and libm's exp. Elsewhere this is the
    correctly rounded float32 exp, as CPU's (SLEEF's u10 expf, glibc's expf) is in almost every case.
    Overflow is float32's: inf exactly where CPU's float32 exp overflows (x < -88.7228)."""
    np.negative(x, out=out)  # exact
    np.exp(out, out=out, dtype=np.float64)  # widened exactly per buffer; the one rounding, float64 -> float32


def _sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    """ScalarE's sigmoid, the one every mode computes (eager, static replay, adaptive's fused chains,
    compiled programs and their constant folding): CPU's float32 formula 1 / (1 + exp(-x)), with the exp of
    ``_exp_neg_into`` and the add and divide in float32 (IEEE: one correct rounding each, the same bits on
    every host). It replaced scipy's ``expit`` in float32 (glibc ``expf`` per element, the same formula):
    the same bits but where glibc's expf was not correctly rounded, at half the host time, and independent
    of the host (``benches/sigmoid_ulp.py`` states the ULP figures). ``out`` is float32; ``x`` may be it."""
    _exp_neg_into(x, out)
    np.add(out, np.float32(1), out=out)
    np.divide(np.float32(1), out, out=out)


def _silu_into(x: np.ndarray, out: np.ndarray) -> None:
    """ScalarE's silu, CPU's float32 formula x / (1 + exp(-x)): see ``_sigmoid_into``."""
    if np.may_share_memory(x, out):
        x = x.copy()  # in place: x is read again after out holds exp(-x)
    _exp_neg_into(x, out)
    np.add(out, np.float32(1), out=out)
    np.divide(x, out, out=out)


def _sigmoid(x) -> np.ndarray:
    """``_sigmoid_into`` as a function: the float32 sigmoid of x (as ScalarE reads it: in float32)."""
    x = np.asarray(x)
    out = np.empty(x.shape, FP32)
    with np.errstate(all="ignore"):
        _sigmoid_into(x if x.dtype == FP32 else x.astype(FP32), out)  # bfloat16/float16: exact
    return out


def _silu(x) -> np.ndarray:
    """``_silu_into`` as a function: the float32 silu of x (as ScalarE reads it: in float32)."""
    x = np.asarray(x)
    out = np.empty(x.shape, FP32)
    with np.errstate(all="ignore"):
        _silu_into(x if x.dtype == FP32 else x.astype(FP32), out)  # bfloat16/float16: exact
    return out


# ScalarE's activation table: transcendental functions evaluated in fp32.
ACTIVATIONS: dict[str, Callable] = {
    "identity": lambda x: x, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": np.reciprocal, "tanh": np.tanh, "sigmoid": _sigmoid,
    "relu": lambda x: np.where(x < 0, 0.0, x), "gelu": _gelu_erf, "gelu_tanh": _gelu_tanh,
    "silu": _silu, "softplus": lambda x: np.logaddexp(0, x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": _erf, "erfc": _erfc, "erfinv": _erfinv, "abs": np.abs, "square": np.square,
    # CPU's own float32 exps (engine/expf.py), for kernels whose result shows an exp's last place: the one a
    # CPU loop calls on this host is named by kernels.cpu_host (vector_exp, scalar_exp)
    **{f"exp_{name}": fn for name, fn in expf.EXPF.items()},
}

# Functions ScalarE evaluates directly in fp32 with numpy's vectorised float32 kernels: each stays
# within a few ULP of the correctly rounded fp32 result, as PyTorch's own CPU kernels (SLEEF) do.
# Measured against torch 2.13 CPU float32 on 1.4M inputs (normal x3, uniform +-100, tiny values),
# max ULP distance: exp 2, tanh 1, log 3, sin 1, cos 1, expm1 3, log1p 2 -- inside the
# float32 tolerance (rtol 1.3e-6, ~11 ULP). Sigmoid and silu are the exception: CPU's float32 formula on a
# float64 exp rounded once (``_sigmoid_into``/``_silu_into``: host-independent bits; see there). Every other
# function (sinh/cosh overflow early in float32; erf and friends come from scipy) is evaluated in float64
# and rounded once. The float32 path is ~50x faster on this machine, which is most of an activation-heavy
# kernel's host time.
FP32_NATIVE: dict[str, Callable] = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "expm1": np.expm1,
    "log1p": np.log1p, "sqrt": np.sqrt, "identity": lambda x: x, "abs": np.abs, "square": np.square,
    "relu": lambda x: np.where(x < 0, np.float32(0), x),
    "sigmoid": _sigmoid, "silu": _silu,
    **{f"exp_{name}": fn for name, fn in expf.EXPF.items()},  # float32 in, float32 out: CPU's bits
}


REDUCTIONS: dict[str, Callable] = {
    "add": np.add.reduce, "multiply": np.multiply.reduce, "maximum": np.maximum.reduce,
    "minimum": np.minimum.reduce, "logical_or": np.logical_or.reduce, "logical_and": np.logical_and.reduce,
}

def _sum_scan(x: np.ndarray, axis: int) -> np.ndarray:
    """Running sums from an accumulator that starts at +0.0, as the engine's (and CPU's cumsum loop) does:
    numpy's accumulate starts from the first element, so a leading -0.0 (or a run of them) stays -0.0,
    where 0.0 + -0.0 is +0.0. Adding +0.0 afterwards is exact for every other value."""
    return np.add.accumulate(x, axis=axis) + x.dtype.type(0)


SCANS: dict[str, Callable] = {
    "add": _sum_scan, "multiply": np.multiply.accumulate, "maximum": np.maximum.accumulate,
    "minimum": np.minimum.accumulate,
}


def _operand(tile: Tile, dtype: np.dtype) -> np.ndarray:
    values = tile.read()
    return values if values.dtype == dtype else values.astype(dtype)


def _common_compute(*tiles: Tile) -> np.dtype:
    return np.result_type(*(compute_dtype(t.dtype) for t in tiles))


def _store(out: Tile, values) -> None:
    out.write_target()[...] = values


def contiguous_runs(array: np.ndarray) -> int:
    """How many contiguous byte runs a DMA descriptor list needs to cover ``array``."""
    if array.size == 0:
        return 0
    run = 1
    for n, stride in zip(reversed(array.shape), reversed(array.strides)):
        if n == 1:
            continue
        if stride != array.itemsize * run:
            break
        run *= n
    return array.size // run


def _runs_in_range(array: np.ndarray, n: int) -> int:
    """Contiguous runs a flat range of ``n`` elements of ``array`` spans."""
    if array.flags.c_contiguous:
        return 1
    runs = contiguous_runs(array)
    return math.ceil(n * runs / array.size) if array.size else 0


def _range_copy(view: np.ndarray, flat: np.ndarray, start: int, stop: int, store: bool) -> None:
    """Elements [start, stop) of ``view`` in row-major order copied to the 1-D ``flat`` (``store``: from it),
    as at most two partial rows per dimension and one block of whole rows: strided block copies, where
    numpy's ``view.flat[start:stop]`` walked the elements one by one (60x slower on a 64K broadcast)."""
    if start >= stop:
        return
    if view.ndim <= 1:
        view = view.reshape(-1)
        if store:
            view[start:stop] = flat
        else:
            flat[...] = view[start:stop]
        return
    inner = math.prod(view.shape[1:])
    i0, r0 = divmod(start, inner)
    i1, r1 = divmod(stop, inner)
    if i0 == i1:
        _range_copy(view[i0], flat, r0, r1, store)
        return
    pos = 0
    if r0:
        pos = inner - r0
        _range_copy(view[i0], flat[:pos], r0, inner, store)
        i0 += 1
    if i1 > i0:
        n = (i1 - i0) * inner
        block = flat[pos:pos + n].reshape((i1 - i0,) + view.shape[1:])
        if store:
            view[i0:i1] = block
        else:
            np.copyto(block, view[i0:i1])
        pos += n
    if r1:
        _range_copy(view[i1], flat[pos:], 0, r1, store)


def flat_in(data: np.ndarray, src: np.ndarray, start: int, stop: int) -> bool:
    """The bytes ``DMA.load_flat`` moves: elements [start, stop) of ``src`` in row-major order into the
    contiguous ``data``. True when ``src`` is C-contiguous (one run). Shared with eager replay
    (``engine.replay``), which moves the same bytes without scheduling the transfer."""
    if src.flags.c_contiguous:
        data.reshape(-1)[...] = src.reshape(-1)[start:stop]
        return True
    _range_copy(src, data.reshape(-1), start, stop, store=False)
    return False


def flat_copy(src: np.ndarray, start: int, stop: int) -> np.ndarray:
    """A new contiguous 1-D array of the bytes ``flat_in`` moves (elements [start, stop) of ``src`` in
    row-major order): what a replayed launch's small tiles hold (``engine.replay``)."""
    if src.flags.c_contiguous:
        return src.reshape(-1)[start:stop].copy()
    out = np.empty(stop - start, src.dtype)
    _range_copy(src, out, start, stop, store=False)
    return out


def flat_out(dst: np.ndarray, start: int, stop: int, values: np.ndarray) -> bool:
    """The bytes ``DMA.store_flat`` moves: ``values`` into elements [start, stop) of ``dst`` in row-major
    order. True when ``dst`` is C-contiguous (one run)."""
    values = values.reshape(-1)
    if dst.flags.c_contiguous:
        dst.reshape(-1)[start:stop] = values
        return True
    if any(stride == 0 and n > 1 for n, stride in zip(dst.shape, dst.strides)):
        dst.flat[start:stop] = values  # elements sharing memory: the last in row-major order is written last
    else:
        _range_copy(dst, values, start, stop, store=True)
    return False


class _Engine:
    name = ""

    def __init__(self, platform: Platform, timeline: Timeline):
        self.platform = platform
        self.timeline = timeline


class DMA(_Engine):
    """Moves bytes; never changes them (no casts: engines do those)."""

    name = "dma"

    def __init__(self, platform: Platform, timeline: Timeline):
        super().__init__(platform, timeline)
        # The cost model's constants, read once (dma_bytes_per_second is a computed property).
        self._descriptor_bytes = platform.dma_descriptor_bytes
        self._bytes_per_second = platform.dma_bytes_per_second
        self._latency_ns = platform.dma_issue_ns + platform.dma_latency_ns

    def _schedule(self, what: str, nbytes: int, runs: int, reads=(), writes=()) -> float:
        # Bandwidth is shared by the 16 queues: the transfer (with per-run descriptor overhead)
        # occupies it; issuing on a queue and completion latency overlap other queues' transfers.
        cost = (nbytes + runs * self._descriptor_bytes) / self._bytes_per_second * 1e9
        return self.timeline.schedule("dma", what, cost, reads, writes, latency_ns=self._latency_ns)

    def _wrote(self, dst: np.ndarray, done: float) -> None:
        """Record a write to HBM the running program tracks (``Timeline.hbm_targets``), for the loads of
        the bytes it wrote (``_ready``)."""
        if not dst.size:
            return
        lo, hi = byte_bounds(dst)
        for tlo, thi, writes in self.timeline.hbm_targets:
            if tlo <= lo < thi:
                writes.append((lo, hi, done))

    def _hbm(self, view: np.ndarray) -> bool:
        """Does ``view`` live in HBM (not in an on-chip range, ``Timeline.onchip``)? Its first byte decides."""
        onchip = self.timeline.onchip
        if not onchip or not view.size:
            return True
        address = view.__array_interface__["data"][0]
        return not any(lo <= address < hi for lo, hi in onchip)

    def load(self, dst: Tile, src: np.ndarray) -> None:
        """HBM -> SBUF. ``src`` is any strided view with dst's element count, read in row-major order."""
        if src.size != dst.data.size:
            raise EngineError(f"dma load of {src.shape} into tile {dst.shape}")
        if src.dtype != dst.dtype:
            raise EngineError(f"dma moves bytes: source {src.dtype} and tile {dst.dtype} differ; cast on an engine")
        target = dst.write_target()
        target[...] = src.reshape(target.shape) if src.shape != target.shape else src
        timeline = self.timeline
        if self._hbm(src):
            timeline.hbm_read += src.nbytes
        if timeline.hbm_floors:
            floor = timeline.floor
            timeline.floor = self._ready(src, floor)
            try:
                self._schedule("dma_load", src.nbytes, contiguous_runs(src), writes=(dst,))
            finally:
                timeline.floor = floor
            return
        self._schedule("dma_load", src.nbytes, contiguous_runs(src), writes=(dst,))

    def _ready(self, src: np.ndarray, floor: float) -> float:
        """When the bytes ``src`` reads are final (``Timeline.hbm_floors``; ``floor`` outside them): a view
        starts inside the array it views, so its first byte's address decides. Where the range's writes
        are recorded, the last one that touches the view's byte span (a superset of its bytes) decides."""
        if not src.size:
            return floor
        address = src.__array_interface__["data"][0]
        for lo, hi, ready, writes in self.timeline.hbm_floors:
            if lo <= address < hi:
                if writes:
                    blo, bhi = byte_bounds(src)
                    last = max((done for wlo, whi, done in writes if wlo < bhi and blo < whi), default=None)
                    if last is not None:
                        return last
                return ready
        return floor

    def store(self, dst: np.ndarray, src: Tile) -> None:
        """SBUF -> HBM. ``dst`` is any writable strided view with src's element count."""
        if dst.size != src.data.size:
            raise EngineError(f"dma store of tile {src.shape} into {dst.shape}")
        if src.dtype != dst.dtype:
            raise EngineError(f"dma moves bytes: tile {src.dtype} and destination {dst.dtype} differ")
        values = src.read()
        dst[...] = values.reshape(dst.shape) if values.shape != dst.shape else values
        if self._hbm(dst):
            self.timeline.hbm_write += dst.nbytes
        done = self._schedule("dma_store", dst.nbytes, contiguous_runs(dst), reads=(src,))
        if self.timeline.hbm_targets:
            self._wrote(dst, done)

    def load_flat(self, dst: Tile, src: np.ndarray, start: int, stop: int) -> None:
        """HBM -> SBUF of elements [start, stop) of ``src`` in row-major order (any strides)."""
        n = stop - start
        data = dst.data
        if n != data.size or dst.root is not dst:
            raise EngineError(f"flat dma of {n} elements into tile {dst.shape}")
        if src.dtype != data.dtype:
            raise EngineError(f"dma moves bytes: source {src.dtype} and tile {dst.dtype} differ; cast on an engine")
        dst.initialized = True  # a root tile, written whole (write_target's bookkeeping, inlined)
        runs = 1 if flat_in(data, src, start, stop) else _runs_in_range(src, n)
        nbytes = n * src.itemsize
        timeline = self.timeline
        if self._hbm(src):
            timeline.hbm_read += nbytes
        cost = (nbytes + runs * self._descriptor_bytes) / self._bytes_per_second * 1e9
        if timeline.hbm_floors:  # see load
            floor = timeline.floor
            timeline.floor = self._ready(src, floor)
            try:
                timeline.schedule("dma", "dma_load", cost, (), (dst,), self._latency_ns)
            finally:
                timeline.floor = floor
            return
        timeline.schedule("dma", "dma_load", cost, (), (dst,), self._latency_ns)

    def store_flat(self, dst: np.ndarray, start: int, stop: int, src: Tile) -> None:
        """SBUF -> HBM into elements [start, stop) of ``dst`` in row-major order (any strides)."""
        n = stop - start
        data = src.data
        if n != data.size or src.root is not src:
            raise EngineError(f"flat dma of tile {src.shape} into {n} elements")
        if data.dtype != dst.dtype:
            raise EngineError(f"dma moves bytes: tile {src.dtype} and destination {dst.dtype} differ")
        runs = 1 if flat_out(dst, start, stop, src.read()) else _runs_in_range(dst, n)
        nbytes = n * dst.itemsize
        timeline = self.timeline
        if self._hbm(dst):
            timeline.hbm_write += nbytes
        done = timeline.schedule("dma", "dma_store", (nbytes + runs * self._descriptor_bytes)
                                 / self._bytes_per_second * 1e9, (src,), (), self._latency_ns)
        if timeline.hbm_targets:
            self._wrote(dst, done)

    def load_rows(self, dst: Tile, table: np.ndarray, rows: Tile) -> None:
        """Indirect DMA gather: dst[p] = table[rows[p, 0]] for a 2-D HBM table (embedding lookups)."""
        index = rows.read()[:, 0].astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= table.shape[0]):
            raise IndexError(f"index {int(index.max() if index.max() >= table.shape[0] else index.min())} is out "
                             f"of bounds for dimension 0 with size {table.shape[0]}")
        target = dst.write_target()
        target[...] = table[index]
        nbytes = target.nbytes
        if self._hbm(table):
            self.timeline.hbm_read += nbytes
        self._schedule("dma_gather", nbytes, len(index), reads=(rows,), writes=(dst,))

    def store_rows(self, table: np.ndarray, rows: Tile, src: Tile, accumulate: bool = False,
                   in_order: bool = False) -> None:
        """Indirect DMA scatter: table[rows[p, 0]] = src[p] (or += with accumulate). ``in_order``: each row is
        added to the destination in partition order, rounded to its dtype each time, as CPU's serial loops add
        (``x + a + b``, not ``x + (a + b)``: near the top of the range the two overflow differently); else the
        duplicates are summed first."""
        index = rows.read()[:, 0].astype(np.int64)
        values = src.read()
        if index.size and (index.min() < 0 or index.max() >= table.shape[0]):
            raise IndexError(f"index out of bounds for dimension 0 with size {table.shape[0]}")
        if accumulate:
            # DMA compute-on-write: duplicates accumulate, in fp32 for narrow floats. The float sums start at
            # -0.0, the identity of addition (x + -0.0 is x for every x, -0.0 included), so a row that holds -0.0
            # and receives only -0.0 stays -0.0, as adding the values one by one gives (from +0.0 it became +0.0).
            acc = compute_dtype(table.dtype)
            rows_hit, inverse = np.unique(index, return_inverse=True)
            if in_order:  # unbuffered: one add per row, in order, each rounded to the table's dtype
                work = table[rows_hit]
                np.add.at(work, inverse, values.astype(table.dtype))
                table[rows_hit] = work
            else:
                sums = np.full((len(rows_hit),) + table.shape[1:], -0.0 if acc.kind == "f" else 0, dtype=acc)
                np.add.at(sums, inverse, values.astype(acc))
                table[rows_hit] = (table[rows_hit].astype(acc) + sums).astype(table.dtype)
        else:
            table[index] = values
        nbytes = values.nbytes
        if self._hbm(table):
            self.timeline.hbm_write += nbytes
        done = self._schedule("dma_scatter", nbytes, len(index), reads=(rows, src))
        if self.timeline.hbm_targets:
            self._wrote(table, done)

    def hbm_copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """HBM -> HBM (DRAM to DRAM descriptors), same dtype, broadcasting src to dst."""
        if src.dtype != dst.dtype:
            raise EngineError(f"dma moves bytes: {src.dtype} -> {dst.dtype} needs an engine cast")
        np.copyto(dst, src)
        if self._hbm(src):
            self.timeline.hbm_read += src.nbytes
        if self._hbm(dst):
            self.timeline.hbm_write += dst.nbytes
        done = self._schedule("dma_hbm_copy", dst.nbytes, max(contiguous_runs(dst), contiguous_runs(src)))
        if self.timeline.hbm_targets:
            self._wrote(dst, done)


class TensorE(_Engine):
    name = "tensor"

    def __init__(self, platform: Platform, timeline: Timeline):
        super().__init__(platform, timeline)
        self.loaded: tuple | None = None  # identity of the stationary tile in the array
        self.last_moving = 0  # columns streamed by the previous instruction (hides the next weight load)

    def _load_cost(self, key: tuple) -> int:
        """Cycles to load a new stationary tile that the previous moving stream did not hide."""
        if key == self.loaded:
            return 0
        self.loaded = key
        return max(0, self.platform.pe_rows - self.last_moving)

    def matmul(self, out: Tile, stationary: Tile, moving: Tile, accumulate: bool = False) -> None:
        """out[M, N] (+)= stationary[K, M].T @ moving[K, N], in fp32, into one PSUM bank."""
        k, m = stationary.shape
        k2, n = moving.shape
        p = self.platform
        if out.space != "psum":
            raise EngineError("matmul writes PSUM")
        if stationary.space != "sbuf" or moving.space != "sbuf":
            raise EngineError("matmul operands must be in SBUF")
        if k != k2 or out.shape != (m, n):
            raise EngineError(f"matmul shapes: stationary {stationary.shape}, moving {moving.shape}, out {out.shape}")
        if k > p.pe_rows or m > p.pe_cols or n > p.moving_free_max:
            raise EngineError(f"matmul limits: K<= {p.pe_rows}, M<={p.pe_cols}, N<={p.moving_free_max}; got "
                              f"K={k}, M={m}, N={n}")
        product = _operand(stationary, FP32).T @ _operand(moving, FP32)
        target = out.write_target()
        if accumulate:
            target += product
        else:
            target[...] = product
        fp32 = stationary.dtype == FP32 or moving.dtype == FP32
        cycles = max(n, 64) * (p.fp32_slowdown if fp32 else 1)
        cycles += self._load_cost((id(stationary.root), stationary.data.__array_interface__["data"][0],
                                   stationary.shape))
        self.last_moving = n
        self.timeline.flops += 2 * k * m * n
        self.timeline.schedule("tensor", "matmul", cycles / p.tensor_hz * 1e9, (stationary, moving),
                               (out,) if not accumulate else (out,))

    def transpose(self, out: Tile, src: Tile) -> None:
        """out[F, P] = src[P, F].T (a matmul against the identity), into PSUM."""
        pdim, fdim = src.shape
        p = self.platform
        if out.space != "psum" or out.shape != (fdim, pdim):
            raise EngineError(f"transpose of {src.shape} needs a PSUM tile of {(fdim, pdim)}")
        if pdim > p.pe_rows or fdim > p.pe_cols:
            raise EngineError(f"transpose limited to {p.pe_rows}x{p.pe_cols}; got {src.shape}")
        target = out.write_target()
        target[...] = src.read().T
        # src is the stationary operand and the identity [P, P] streams through it.
        cycles = max(pdim, 64) * (p.fp32_slowdown if src.dtype == FP32 else 1)
        cycles += self._load_cost((id(src.root), src.data.__array_interface__["data"][0], src.shape))
        self.last_moving = pdim
        self.timeline.schedule("tensor", "transpose", cycles / p.tensor_hz * 1e9, (src,), (out,))


# (function, compute dtype) -> the dtype a numpy ufunc computes for operands of that dtype, or _NOT_UFUNC
# where the function is not one (composites like _floor_divide) or has no loop for it. NEP 50: a result
# dtype depends on the operand dtypes only, so one probe per pair answers every later call. The sentinels
# are void dtypes, which equal no tile's dtype (None would: np.dtype("f8") == None is True).
_NOT_UFUNC = np.dtype("V1")
_UNKNOWN = np.dtype("V2")
_UFUNC_RESULT: dict[tuple[Callable, np.dtype], np.dtype] = {}


def _ufunc_result(fn: Callable, compute: np.dtype, nin: int) -> np.dtype:
    key = (fn, compute)
    result = _UFUNC_RESULT.get(key, _UNKNOWN)
    if result is not _UNKNOWN:
        return result
    result = _NOT_UFUNC
    if isinstance(fn, np.ufunc) and fn.nin == nin and fn.nout == 1:
        try:
            with np.errstate(all="ignore"):
                result = fn(*([np.zeros(1, dtype=compute)] * nin)).dtype
        except TypeError:  # no loop for the dtype: the ordinary path raises the ordinary error
            result = _NOT_UFUNC
    _UFUNC_RESULT[key] = result
    return result


def _tensor_scalar(out: Tile, a: Tile, op: str, scalar, reverse: bool, dtype: np.dtype | None, op1: str | None,
                   scalar1) -> list[Tile]:
    """tensor_scalar's arithmetic (``VectorE.tensor_scalar``), written into ``out``; the tiles it reads. One
    definition for the engines that run it (VectorE, GpSimd), so either gives the same bits."""
    fn = ALU_BINARY[op]
    compute = np.dtype(dtype) if dtype is not None else compute_dtype(a.dtype)
    x = _operand(a, compute)
    reads = [a]

    def scalar_of(value) -> np.ndarray:
        if isinstance(value, Tile):
            if value.shape != (a.partitions, 1):
                raise EngineError(f"tensor_scalar's per-partition scalar {value.shape} for a tile {a.shape}")
            reads.append(value)
            return _operand(value, compute)
        return np.asarray(value).astype(compute)

    s = scalar_of(scalar)
    target = out.write_target()
    if op1 is not None:
        x = fn(s, x) if reverse else fn(x, s)
        if x.dtype != compute:
            x = x.astype(compute)
        fn = ALU_BINARY[op1]
        s = scalar_of(scalar1)
        reverse = False
    if target.shape == x.shape and _ufunc_result(fn, compute, 2) == target.dtype:
        if reverse:
            fn(s, x, out=target)
        else:
            fn(x, s, out=target)
    else:
        target[...] = fn(s, x) if reverse else fn(x, s)
    return reads


class VectorE(_Engine):
    name = "vector"

    def __init__(self, platform: Platform, timeline: Timeline):
        super().__init__(platform, timeline)
        self._overhead_cycles = platform.instruction_overhead_cycles  # read once: every instruction costs them
        self._hz = platform.vector_hz

    def _schedule(self, what: str, free: int, n_inputs: int, reads, writes) -> None:
        cycles = self._overhead_cycles + free * (n_inputs if n_inputs > 1 else 1)
        self.timeline.schedule("vector", what, cycles / self._hz * 1e9, reads, writes)

    def tensor_tensor(self, out: Tile, a: Tile, b: Tile, op: str, dtype: np.dtype | None = None) -> None:
        """out = a <op> b elementwise; b may be [P, 1] (a per-partition scalar).

        A ufunc whose result has out's dtype and shape writes straight into the tile (``out=``): the same
        bits as computing a temporary and copying it, without the temporary."""
        fn = ALU_BINARY[op]
        compute = np.dtype(dtype) if dtype is not None else _common_compute(a, b)
        x = a.read()
        if x.dtype != compute:
            x = x.astype(compute)
        y = b.read()
        if y.dtype != compute:
            y = y.astype(compute)
        target = out.write_target()
        shape = target.shape
        if shape == x.shape and (y.shape == shape or y.shape == (shape[0], 1)):
            result = _UFUNC_RESULT.get((fn, compute))  # _ufunc_result's cache, read inline (every instruction)
            if result is None:  # (no value is None: a dtype or a void sentinel)
                result = _ufunc_result(fn, compute, 2)
        else:
            result = _NOT_UFUNC  # a void dtype: equal to no tile's dtype (None would equal float64)
        if result == target.dtype:
            fn(x, y, out=target)
        else:
            target[...] = fn(x, y)
        self._schedule(op, shape[1], 2, (a, b), (out,))

    def tensor_scalar(self, out: Tile, a: Tile, op: str, scalar, reverse: bool = False,
                      dtype: np.dtype | None = None, op1: str | None = None, scalar1=None) -> None:
        """out = a <op> scalar (or scalar <op> a with reverse); the scalar is an immediate.

        With ``op1``, a second immediate operation in the same pass, as VectorE's tensor_scalar takes two
        (NKI's ``op0``/``op1``): out = (a <op> scalar) <op1> scalar1, the intermediate kept in the compute
        dtype (the bits two instructions give when the first writes a tile of that dtype), one pass's cost.

        Either scalar may be a [P, 1] tile instead of an immediate: a per-partition scalar (NKI's tensor_scalar
        takes a vector operand of one value per partition), read by the same pass."""
        reads = _tensor_scalar(out, a, op, scalar, reverse, dtype, op1, scalar1)
        self._schedule(op if op1 is None else f"{op}_{op1}", out.free, 1, reads, (out,))

    def scalar_tensor_tensor(self, out: Tile, a: Tile, op0: str, scalar, op1: str, b: Tile, reverse0: bool = False,
                             reverse1: bool = False, dtype: np.dtype | None = None) -> None:
        """out = (a <op0> scalar) <op1> b in one pass (NKI's scalar_tensor_tensor): ``scalar`` an immediate or a
        [P, 1] per-partition tile, ``b`` a tile of out's shape; ``reverse0``: scalar <op0> a, ``reverse1``:
        b <op1> (...). The intermediate is rounded to the compute dtype, so the bits are those of a tensor_scalar
        writing a tile of that dtype followed by a tensor_tensor; one pass reading two tiles (tensor_tensor's
        cost)."""
        compute = np.dtype(dtype) if dtype is not None else _common_compute(a, b)
        x = _operand(a, compute)
        reads = [a, b]
        if isinstance(scalar, Tile):
            if scalar.shape != (a.partitions, 1):
                raise EngineError(f"scalar_tensor_tensor's per-partition scalar {scalar.shape} for a tile {a.shape}")
            reads.append(scalar)
            s = _operand(scalar, compute)
        else:
            s = np.asarray(scalar).astype(compute)
        if b.shape != out.shape or a.shape != out.shape:
            raise EngineError(f"scalar_tensor_tensor shapes: {a.shape} and {b.shape} into {out.shape}")
        fn0, fn1 = ALU_BINARY[op0], ALU_BINARY[op1]
        x = fn0(s, x) if reverse0 else fn0(x, s)
        if x.dtype != compute:
            x = x.astype(compute)
        y = _operand(b, compute)
        target = out.write_target()
        if _ufunc_result(fn1, compute, 2) == target.dtype:
            if reverse1:
                fn1(y, x, out=target)
            else:
                fn1(x, y, out=target)
        else:
            target[...] = fn1(y, x) if reverse1 else fn1(x, y)
        self._schedule(f"{op0}_{op1}", out.free, 2, reads, (out,))

    def tensor_unary(self, out: Tile, a: Tile, op: str, dtype: np.dtype | None = None) -> None:
        fn = ALU_UNARY[op]
        compute = np.dtype(dtype) if dtype is not None else compute_dtype(a.dtype)
        x = _operand(a, compute)
        target = out.write_target()
        if target.shape == x.shape and _ufunc_result(fn, compute, 1) == target.dtype:
            fn(x, out=target)
        else:
            target[...] = fn(x)
        self._schedule(op, out.free, 1, (a,), (out,))

    def tensor_copy(self, out: Tile, a: Tile) -> None:
        """Copy with conversion to out's dtype (round to nearest-even for floats)."""
        values = a.read()
        target = out.write_target()
        if is_float(values.dtype) and target.dtype.kind in "iu":
            # float -> int converts toward zero; out-of-range values are undefined, as on CPU
            target[...] = np.trunc(values.astype(FP32) if values.dtype != FP32 else values)
        else:
            target[...] = values
        self._schedule("copy", out.free, 1, (a,), (out,))

    def select(self, out: Tile, mask: Tile, on_true: Tile, on_false: Tile) -> None:
        compute = _common_compute(on_true, on_false)
        _store(out, np.where(mask.read().astype(bool), _operand(on_true, compute), _operand(on_false, compute)))
        self._schedule("select", out.free, 3, (mask, on_true, on_false), (out,))

    def memset(self, out: Tile, value) -> None:
        _store(out, value)
        self._schedule("memset", out.free, 0, (), (out,))

    def tensor_reduce(self, out: Tile, a: Tile, op: str, dtype: np.dtype | None = None) -> None:
        """out[P, 1] = reduce(a[P, F]) along the free axis, accumulating in ``dtype`` (fp32 for floats)."""
        if out.shape != (a.partitions, 1):
            raise EngineError(f"reduce of {a.shape} writes [{a.partitions}, 1], not {out.shape}")
        compute = np.dtype(dtype) if dtype is not None else compute_dtype(a.dtype)
        result = REDUCTIONS[op](_operand(a, compute), axis=1, keepdims=True)
        _store(out, result)
        self._schedule(f"reduce_{op}", a.free, 1, (a,), (out,))

    def arg_reduce(self, values: Tile, indices: Tile, a: Tile, op: str) -> None:
        """Per-partition max/min and the first index where it occurs (NaN counts as the extreme)."""
        x = a.read()
        compute = compute_dtype(x.dtype)
        x = x.astype(compute) if x.dtype != compute else x
        nan = np.isnan(x) if is_float(compute) else None
        if op == "maximum":
            idx = np.argmax(x, axis=1)
        elif op == "minimum":
            idx = np.argmin(x, axis=1)
        else:
            raise EngineError(f"arg_reduce op must be maximum or minimum, not {op}")
        if nan is not None:
            has_nan = nan.any(axis=1)
            idx = np.where(has_nan, np.argmax(nan, axis=1), idx)
        _store(indices, idx[:, None])
        _store(values, np.take_along_axis(x, idx[:, None], axis=1))
        self._schedule(f"arg_{op}", a.free, 1, (a,), (values, indices))

    def tensor_scan(self, out: Tile, a: Tile, op: str, dtype: np.dtype | None = None) -> None:
        """Inclusive scan along the free axis (cumsum / cumprod / cummax / cummin)."""
        compute = np.dtype(dtype) if dtype is not None else compute_dtype(a.dtype)
        result = SCANS[op](_operand(a, compute), axis=1)
        _store(out, result)
        self._schedule(f"scan_{op}", a.free, 2, (a,), (out,))


class ScalarE(_Engine):
    name = "scalar"

    def activation(self, out: Tile, a: Tile, func: str, scale: float | Tile = 1.0, bias: float | Tile = 0.0,
                   accumulate: Tile | None = None) -> None:
        """out = func(scale * a + bias) in fp32; scale/bias are immediates or [P, 1] tiles.
        With ``accumulate`` ([P, 1]), the row sums of out are written there in the same pass."""
        fn = ACTIVATIONS[func]
        x = _operand(a, FP32)
        own = x is not a.data  # x is a temporary of this instruction: scale and bias may update it in place
        reads = [a]
        if isinstance(scale, Tile):
            reads.append(scale)
            x = _affine(np.multiply, x, _operand(scale, FP32), own)
            own = True
        elif scale != 1.0:
            x = _affine(np.multiply, x, np.float32(scale), own)
            own = True
        if isinstance(bias, Tile):
            reads.append(bias)
            x = _affine(np.add, x, _operand(bias, FP32), own)
        elif bias != 0.0:
            x = _affine(np.add, x, np.float32(bias), own)
        target = out.write_target()
        into = target.dtype == FP32 and target.shape == x.shape and target.flags.c_contiguous
        native = FP32_NATIVE.get(func)
        if native is not None:  # see FP32_NATIVE: within a few ULP of correctly rounded
            with np.errstate(all="ignore"):
                direct = _FP32_INTO.get(func) if into else None
                if direct is not None:
                    direct(x, target)  # the same bits native(x) computes, without the temporary
                    y = target
                else:
                    y = np.asarray(native(x), dtype=FP32)
                    target[...] = y
        else:  # evaluated as if correctly rounded to fp32 (in float64, then rounded once)
            wide = np.asarray(fn(x.astype(np.float64)), dtype=np.float64)
            if into:
                target[...] = wide  # the float64 -> float32 cast astype would do, into the tile
                y = target
            else:
                y = wide.astype(FP32)
                target[...] = y
        writes = [out]
        if accumulate is not None:
            _store(accumulate, y.sum(axis=1, keepdims=True, dtype=FP32))
            writes.append(accumulate)
        p = self.platform
        cycles = p.scalar_overhead_cycles + out.free
        self.timeline.schedule("scalar", func, cycles / p.scalar_hz * 1e9, reads, writes)


def _affine(fn: np.ufunc, x: np.ndarray, operand, own: bool) -> np.ndarray:
    """fn(x, operand) for an activation's scale or bias, written over x when x is the instruction's own
    temporary of the result's shape (fp32 op fp32 is fp32 either way: the same bits)."""
    if own and (not isinstance(operand, np.ndarray) or operand.shape[-1] == 1 or operand.shape == x.shape):
        return fn(x, operand, out=x)
    return fn(x, operand)


def _ufunc_into(fn: np.ufunc) -> Callable[[np.ndarray, np.ndarray], None]:
    def into(x: np.ndarray, out: np.ndarray) -> None:
        fn(x, out=out)
    return into


# FP32_NATIVE functions that can write an fp32 tile directly: fn(x, out) computes what
# np.asarray(FP32_NATIVE[name](x), dtype=FP32) does (a float32 ufunc loop gives the same bits with
# out= as without), skipping the result's temporary and its copy into the tile.
_FP32_INTO: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
    **{name: _ufunc_into(FP32_NATIVE[name])
       for name in ("exp", "log", "tanh", "sin", "cos", "expm1", "log1p", "sqrt", "abs", "square")},
    "identity": lambda x, out: np.copyto(out, x),
    "sigmoid": _sigmoid_into, "silu": _silu_into,
}


class GpSimdE(_Engine):
    name = "gpsimd"

    def _schedule(self, what: str, elements: int, reads, writes, factor: float = 1.0) -> None:
        p = self.platform
        cycles = p.instruction_overhead_cycles + math.ceil(elements * factor / p.gpsimd_elements_per_cycle)
        self.timeline.schedule("gpsimd", what, cycles / p.gpsimd_hz * 1e9, reads, writes)

    def tensor_scalar(self, out: Tile, a: Tile, op: str, scalar, reverse: bool = False,
                      dtype: np.dtype | None = None, op1: str | None = None, scalar1=None) -> None:
        """VectorE's tensor_scalar (the same arithmetic, the same bits) on GpSimd, which NKI's tensor_scalar may
        also be issued to (its ``engine`` argument); GpSimd's cost rule over the elements it reads and writes."""
        reads = _tensor_scalar(out, a, op, scalar, reverse, dtype, op1, scalar1)
        self._schedule(op if op1 is None else f"{op}_{op1}", sum(t.data.size for t in reads) + out.data.size,
                       reads, (out,))

    def iota(self, out: Tile, base: int = 0, partition_step: int = 0, free_step: int = 1) -> None:
        """out[p, f] = base + p * partition_step + f * free_step."""
        pdim, fdim = out.shape
        values = (base + np.arange(pdim, dtype=np.int64)[:, None] * partition_step
                  + np.arange(fdim, dtype=np.int64)[None, :] * free_step)
        _store(out, values)
        self._schedule("iota", out.data.size, (), (out,))

    def affine_select(self, out: Tile, a: Tile, fill: float, base: int = 0, partition_step: int = 0,
                      free_step: int = 1) -> None:
        """out[p, f] = a[p, f] where base + p * partition_step + f * free_step >= 0, else the immediate ``fill``
        (NKI's ``affine_select``: a mask that is an affine function of the position, e.g. causal attention's,
        made and applied in one GpSimd pass, with no mask tile and no VectorE time)."""
        if out.shape != a.shape:
            raise EngineError(f"affine_select of {a.shape} writes {a.shape}, not {out.shape}")
        pdim, fdim = a.shape
        keep = (base + np.arange(pdim, dtype=np.int64)[:, None] * partition_step
                + np.arange(fdim, dtype=np.int64)[None, :] * free_step) >= 0
        x = a.read()
        _store(out, np.where(keep, x, np.asarray(fill).astype(x.dtype)))
        self._schedule("affine_select", a.data.size, (a,), (out,))

    def partition_reduce(self, out: Tile, a: Tile, op: str, dtype: np.dtype | None = None) -> None:
        """out[1, F] = reduce over partitions of a[P, F]."""
        if out.shape != (1, a.free):
            raise EngineError(f"partition reduce of {a.shape} writes [1, {a.free}], not {out.shape}")
        compute = np.dtype(dtype) if dtype is not None else compute_dtype(a.dtype)
        _store(out, REDUCTIONS[op](_operand(a, compute), axis=0, keepdims=True))
        self._schedule(f"partition_{op}", a.data.size, (a,), (out,))

    def partition_broadcast(self, out: Tile, a: Tile) -> None:
        """out[P, F] = a[1, F] on every partition."""
        if a.partitions != 1 or a.free != out.free:
            raise EngineError(f"partition broadcast of {a.shape} into {out.shape}")
        _store(out, np.broadcast_to(a.read(), out.shape))
        self._schedule("partition_broadcast", out.data.size, (a,), (out,))

    def sort(self, values: Tile, indices: Tile | None, a: Tile, descending: bool = False) -> None:
        """Stable sort of each partition's row; NaN sorts as the largest value (as PyTorch)."""
        x = a.read()
        if is_float(x.dtype):
            key = x.astype(FP32)
            nan = np.isnan(key)
            finite = np.where(nan, 0, key)
            # lexsort sorts by the last key first and is stable.
            order = np.lexsort((-finite, ~nan) if descending else (finite, nan), axis=-1)
        else:
            key = x.astype(np.uint8) if x.dtype == np.bool_ else x
            order = np.argsort(~key if descending else key, axis=1, kind="stable")
        _store(values, np.take_along_axis(x, order, axis=1))
        writes = [values]
        if indices is not None:
            _store(indices, order)
            writes.append(indices)
        self._schedule("sort", a.data.size, (a,), writes, factor=max(1.0, math.log2(max(a.free, 2))))

    def random(self, out: Tile, seed: int, offset: int, distribution: str = "uniform") -> None:
        """Counter-based random numbers (Philox 4x64): the same (seed, offset) gives the same tile."""
        bits = np.random.Generator(np.random.Philox(key=seed, counter=offset))
        shape = out.shape
        if distribution == "uniform":
            values = bits.random(shape, dtype=np.float32)
        elif distribution == "normal":
            values = bits.standard_normal(shape, dtype=np.float32)
        elif distribution == "bits":
            values = bits.integers(0, 2**62, size=shape, dtype=np.int64)
        else:
            raise EngineError(f"unknown distribution {distribution}")
        _store(out, values)
        self._schedule(f"random_{distribution}", out.data.size, (), (out,), factor=4.0)

    def run(self, name: str, program: Callable[..., None], outs: tuple[Tile, ...], ins: tuple[Tile, ...],
            elements: int | None = None, factor: float = 1.0) -> None:
        """Run a program on GpSimd's general-purpose cores over SBUF tiles.

        For irregular work the fixed-function engines cannot express (unique,
        nonzero compaction, permutations). ``program(*out_arrays, *in_arrays)``
        writes its outputs; the cost is ``elements * factor`` element-steps.
        """
        arrays = [t.write_target() for t in outs] + [t.read() for t in ins]
        program(*arrays)
        count = elements if elements is not None else sum(t.data.size for t in ins + outs)
        self._schedule(name, count, ins, outs, factor)
