"""What CPU eager does on *this* host, asked of the running torch: the one place host-dependent choices live.

CPU eager is the oracle the device is judged against, and several of its answers depend on the machine it
runs on, not only on PyTorch's version:

* **Which convolution backend runs**, and so the output's memory format, whether a transposed convolution
  with an empty output is accepted, and which gradients the backward returns. oneDNN (mkldnn) takes bf16 on
  CPUs with AVX-512 (or AVX-NE-CONVERT), fp16 only with AVX512-FP16, float32 by a size and thread-count
  heuristic, and nothing when ``torch.backends.mkldnn.enabled`` is off; otherwise CPU runs its native
  ``slow_conv*`` kernels. Rather than copy those rules, the device builds CPU tensors with the same sizes,
  strides, dtype and ``requires_grad`` and asks ``torch._C._select_conv_backend`` (the function
  ``at::convolution`` itself calls) and ``torch._C._conv_determine_backend_memory_format``.
* **Whether a direct convolution multiplies its zero padding** (``conv_skips_padding``): ATen's native kernels
  and some of oneDNN's form ``0 * w`` at every padded position (NaN for an infinite or NaN weight), oneDNN's
  direct kernels form none; which oneDNN kernel runs is oneDNN's choice per problem (sizes, strides, groups) and
  ISA, so it is asked of CPU's own convolution of ones and an infinite weight, once per problem. Its backward
  (``conv_backward_skips_padding``) is asked the same way: oneDNN's backward kernels are chosen apart from the
  forward's (a grad_weight next to padding: ``inf * 0`` where grad_output is infinite).
* **Which form ``gelu`` takes** (``onednn_gelu_form``): contiguous float32 (and bf16 where oneDNN has bf16 on
  the CPU) tensors run oneDNN's kernel for this host's ISA, which halves last (asked of CPU's gelu of 3e38: the
  AVX-512 kernel overflows there) or adds two halves (the AVX2 one: +0.0 where ATen's form gives -0.0).
  Its gradient (``onednn_gelu_backward``) is oneDNN's backward form on the same inputs, asked of CPU's own
  gelu_backward (+0.0 where the erf is -1, where ATen's form gives a tiny negative derivative).
* **How wide ``RowwiseMoments`` runs its Welford** (``rowwise_moments_lanes``): the lanes of group/layer norm's
  statistics, whose merges decide where an overflowing row's moments turn NaN; asked of CPU's group norm of 1e20s.
* **Whether a multiply-add rounds once.** ATen's vectorized loops call ``vec::fmadd``, one rounding on the
  AVX2/AVX-512 kernels (and the compiler contracts ``a * b + c`` in the scalar loops compiled with them);
  the ``DEFAULT`` kernels (``ATEN_CPU_CAPABILITY=default``, or a CPU without AVX2) compute ``a * b`` and
  then ``+ c``, two roundings. ``torch.backends.cpu.get_cpu_capability()`` says which kernels this process
  dispatches to.
* **Whether a bfloat16/float16 vector loop computes in float32.** The AVX2/AVX-512 ``Vectorized`` types of
  the reduced floats convert to fp32; under ``DEFAULT`` the vector loop rounds as the scalar lambda, which
  for some ops (rsqrt) rounds an intermediate to the dtype.

* **Which float32 exp a loop calls** (``vector_exp``, ``scalar_exp``, ``softmax_backward_vector``): SLEEF's
  ``expf_u10`` in the AVX2/AVX-512 ``Vectorized<float>::exp``, libm's ``expf`` under ``DEFAULT`` and in every
  scalar loop (a vector loop's tail); they part ways in the last place (``engine.expf``). Asked of the running
  torch by computing exps with ``_log_softmax_backward_data``, whose loop reads ``g - exp(y) * sum(g)``: with
  ``g = [1, 0]`` along its dim the second row is exactly ``-exp(y)``.

* **Whether CPU's FFT rejects an empty batch** (``fft_rejects_empty_batch``): with MKL (the x86 builds) a
  transform over a batch of 0 signals raises "MKL FFT error: ... Inconsistent configuration parameters";
  pocketfft builds return the empty result. Asked of the running torch with a (0, 2) tensor: nothing to compute.

The answers are read from torch at the call (the capability is fixed once torch has loaded, so it is read
once). Nothing here computes a device result: proxies are allocated, never written or read (the probes that
run a CPU kernel do so once, on inputs of their own, and keep only the answer); the selection runs
outside any active dispatch mode (the host-compute guard of ``NEURONSIM_ASSERT_NO_CPU`` would otherwise
see the views ``_select_conv_backend`` takes of a 1-d problem).
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

from device_impl.engine import expf


@functools.cache
def cpu_capability() -> str:
    """The ATen CPU kernels this process dispatches to: ``DEFAULT``, ``AVX2``, ``AVX512`` (or an ARM level)."""
    return torch.backends.cpu.get_cpu_capability()


def fused_multiply_add() -> bool:
    """Whether CPU's vectorized loops round ``a * b + c`` once (vec::fmadd) rather than twice."""
    return cpu_capability() != "DEFAULT"


def reduced_float_vectors() -> bool:
    """Whether cpu_kernel_vec's vector lambdas compute bfloat16/float16 in float32, rounding once at the end
    (the AVX2/AVX-512 ``Vectorized<BFloat16/Half>`` convert each vector to fp32), rather than as its scalar
    lambda does. Under the ``DEFAULT`` kernels the vector lambda rounds as the scalar one: measured in torch
    2.13 over every positive finite float16 and bfloat16, ``rsqrt``'s vector loop under ``DEFAULT`` is
    bit-identical to its scalar lambda ``1 / std::sqrt(x)`` (the square root rounded to the dtype first:
    c10's sqrt of Half/BFloat16 returns the dtype), and under AVX2/AVX512 to ``1 / sqrt(x)`` in fp32 rounded
    once (8389 float16 and 9023 bfloat16 inputs round differently)."""
    return cpu_capability() != "DEFAULT"


def onednn_gelu(x: torch.Tensor, approximate: str) -> bool:
    """Whether CPU's ``gelu`` on a tensor like ``x`` forms its result otherwise than ATen's own kernel,
    ``x * 0.5 * (1 + erf(x / sqrt(2)))``: one of oneDNN's forms (``onednn_gelu_form``)."""
    return onednn_gelu_form(x, approximate) is not None


def onednn_gelu_form(x: torch.Tensor, approximate: str) -> str | None:
    """How CPU's ``gelu`` (and ``gelu_backward``) on a tensor like ``x`` forms its result where it runs oneDNN's
    ``eltwise_gelu_erf`` rather than ATen's own kernel (None: ATen's form). ``use_mkldnn`` of ATen's Activation.cpp
    takes a contiguous float32 tensor of more than one element, or a bfloat16 one where oneDNN has bf16 on this CPU
    (``mkldnn_bf16_device_check``, which ``torch.ops.mkldnn._is_mkldnn_bf16_supported`` returns), while
    ``torch.backends.mkldnn.enabled`` is on; only for ``approximate='none'``. oneDNN's JIT kernel is chosen per
    ISA, and its form is asked of CPU's own gelu of a contiguous tensor (``_onednn_gelu_kind``):

    * ``"product"``: ``x * (1 + erf(x / sqrt(2)))`` in fp32, then halved: inf above FLT_MAX / 2 (the AVX-512
      kernel, measured in torch 2.13);
    * ``"halves"``: ``x / 2 + x / 2 * erf(x / sqrt(2))``: finite up to FLT_MAX, and +0.0, not ATen's -0.0, where
      the erf is -1 (x below about -5.6, and -0.0 itself: the AVX2 kernel, measured on an AVX2 EPYC, torch 2.13)."""
    if approximate != "none" or not torch.backends.mkldnn.is_available() or not torch.backends.mkldnn.enabled:
        return None
    if x.numel() <= 1 or not x.is_contiguous():
        return None
    if x.dtype == torch.float32 or (x.dtype == torch.bfloat16 and _onednn_bf16()):
        return _onednn_gelu_kind(x.dtype)
    return None


@functools.cache
def _onednn_gelu_kind(dtype: torch.dtype) -> str | None:
    """``onednn_gelu_form``'s answer for ``dtype``, asked of CPU's gelu of contiguous tensors (the oneDNN path):
    of 3e38 (inf: ``"product"``), else of -100 and -0.0 (+0.0: ``"halves"``; ATen's form gives -0.0 for both)."""
    with _disable_current_modes():
        if bool(torch.isinf(torch.nn.functional.gelu(torch.full((16,), 3e38, dtype=dtype))).all()):
            return "product"
        zeros = torch.nn.functional.gelu(torch.tensor([-100.0, -0.0] * 8, dtype=dtype))
        if bool((zeros == 0).all()) and not bool(torch.signbit(zeros).any()):
            return "halves"
    return None


def onednn_gelu_backward(x: torch.Tensor, approximate: str) -> bool:
    """Whether CPU's ``gelu_backward`` with input ``x`` runs oneDNN's ``eltwise_gelu_erf`` backward rather than
    ATen's kernel (``dy * (cdf + x * pdf)``). ATen's gelu_backward_out_cpu takes oneDNN where ``use_mkldnn(x)``
    holds (the forward's rule, ``onednn_gelu_form``: the input's layout decides, not the gradient's); oneDNN's
    backward forms ``d = (T + 0.5) + 0.5 * erf(R)`` with ``R = x / sqrt(2)`` and ``T = R / sqrt(pi) * exp(-R * R)``
    on every ISA, so where the erf is -1 and T below half a unit of 0.5 (x below about -6) ``d`` is +0.0 and
    ``dy * d`` takes dy's sign, where ATen's form gives ``-7.7e-22`` at x = -10. Asked of CPU's own gelu_backward
    of a contiguous tensor of -10s (``_onednn_gelu_backward_kind``), per dtype."""
    if onednn_gelu_form(x, approximate) is None:
        return False
    return _onednn_gelu_backward_kind(x.dtype)


@functools.cache
def _onednn_gelu_backward_kind(dtype: torch.dtype) -> bool:
    """``onednn_gelu_backward``'s answer for ``dtype``: CPU's gelu_backward of a contiguous -10 with gradient 1 is
    exactly +0.0 in oneDNN's form, -7.7e-22 in ATen's."""
    with _disable_current_modes():
        d = torch.ops.aten.gelu_backward(torch.ones(16, dtype=dtype), torch.full((16,), -10.0, dtype=dtype))
        return bool((d == 0).all()) and not bool(torch.signbit(d).any())


GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE: the grain ATen's kernels give parallel_for (at::sum, arange)


def parallel_ranges(n: int, grain: int = 1) -> tuple[int, list[tuple[int, int]]]:
    """How CPU's ``at::parallel_for(0, n, grain, f)`` splits [0, n) among OpenMP threads: (the thread count
    ``at::get_num_threads()``, whose per-thread buffers a kernel allocates, and the ranges ``f`` runs, in thread
    order). One range where the loop runs inline (n <= grain, n <= 1 or one thread); else min(threads,
    ceil(n / grain)) tasks of ceil(n / tasks) iterations (ATen's ParallelOpenMP.h invoke_parallel). Read from the
    running torch: its thread count is this process's setting."""
    threads = torch.get_num_threads()
    if n <= grain or n <= 1 or threads == 1:
        return threads, [(0, n)]
    tasks = min(threads, -(-n // grain))
    size = -(-n // tasks)
    return threads, [(a, min(n, a + size)) for a in range(0, n, size)]


@functools.cache
def rowwise_moments_lanes() -> int:
    """Vectorized<float>::size() in CPU's ``RowwiseMoments`` (group norm's and layer norm's statistics): the lanes
    its Welford runs in, whose merge with the scalar tail multiplies an overflowing delta * delta by 0 (NaN) where a
    row has no tail. Asked of the running torch: a row of n equal values 1e20 gives a NaN rstd for n <= K and a
    finite one at n = K + 1 (its one scalar element merges with the lanes at delta 0), so K is the first n whose
    rstd is finite, less one."""
    with _disable_current_modes():
        for n in range(2, 130):
            x = torch.full((1, n, 1), 1e20)
            rstd = torch.ops.aten.native_group_norm(x, None, None, 1, n, 1, 1, 1e-5)[2]
            if not bool(torch.isnan(rstd).any()):
                return n - 1
    return 8


@functools.cache
def _onednn_bf16() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def vector_block(dtype: torch.dtype) -> int:
    """Elements one step of cpu_kernel_vec's vectorized loop covers (2 * Vectorized<T>::size()): the rest of
    each contiguous inner run goes to its scalar lambda. Vectorized<T> is 32 bytes in torch 2.13's kernels for
    every capability (measured here under the AVX512, AVX2 and DEFAULT kernels: lerp's zero signs and add's
    bf16/fp16 overflow switch at 16 float32 and 32 bfloat16/float16 elements)."""
    return 2 * 32 // dtype.itemsize


@functools.cache
def elu_backward_block(dtype: torch.dtype) -> int:
    """Elements one step of ``elu_backward``'s vectorized loop covers, where its vector lambda (a NaN input's
    gradient is NaN) and its scalar one (the gradient passed on) part ways. Unlike lerp's and add's (``vector_block``),
    it follows the capability: measured in torch 2.13, 16 float32 / 32 bfloat16 elements under AVX2 and DEFAULT,
    32 / 64 under AVX-512. Asked of the running torch: the shortest all-NaN input whose first gradient is NaN
    (a value larger than any tensor where none is)."""
    with _disable_current_modes():
        for n in (2 ** k for k in range(1, 10)):
            x = torch.full((n,), float("nan"), dtype=dtype)
            if torch.isnan(torch.ops.aten.elu_backward(torch.ones_like(x), 1.0, 1.0, 1.0, False, x)[0]):
                return n
    return 1 << 62


# Kernels whose vector and scalar lambdas part ways at one input: (a call on n such inputs, whether its first result
# is the vector lambda's). hardshrink_backward/softshrink_backward (ATen's shrink_backward_kernel): the vector lambda
# masks the gradient with ``(x < -l) | (x > l)``, 0 for a NaN x, the scalar one passes it on; softshrink: the
# vector lambda gives +0.0 inside [-l, l], the scalar one ``x * 0`` (-0.0 for a negative x).
_LAMBDA_PROBES: dict[str, Callable[[int, torch.dtype], bool]] = {
    "shrink_backward": lambda n, dtype: torch.ops.aten.hardshrink_backward(
        torch.ones(n, dtype=dtype), torch.full((n,), float("nan"), dtype=dtype), 0.5)[0].item() == 0,
    "softshrink": lambda n, dtype: not torch.signbit(torch.ops.aten.softshrink(
        torch.full((n,), -0.25, dtype=dtype), 0.5)[0]).item(),
    # hardtanh_backward: the vector lambda keeps ``(x > min) & (x < max) & grad``, 0 for a NaN x; the scalar one
    # ``x <= min || x >= max ? 0 : grad`` passes it on
    "hardtanh_backward": lambda n, dtype: torch.ops.aten.hardtanh_backward(
        torch.ones(n, dtype=dtype), torch.full((n,), float("nan"), dtype=dtype), -1.0, 1.0)[0].item() == 0,
}


@functools.cache
def lambda_block(kernel: str, dtype: torch.dtype) -> int:
    """Elements one step of ``kernel``'s vectorized loop covers (``_LAMBDA_PROBES``), asked of the running torch: the
    shortest input whose first result is the vector lambda's (a value larger than any tensor where none is).
    Measured in torch 2.13: ``vector_block``'s 16 float32 / 32 bfloat16 and float16 under AVX-512, AVX2 and DEFAULT
    for the shrinks, and under AVX2 and DEFAULT for hardtanh_backward (elu_backward's differs: ``elu_backward_block``)."""
    probe = _LAMBDA_PROBES[kernel]
    with _disable_current_modes():
        for n in (2 ** k for k in range(1, 10)):
            if probe(n, dtype):
                return n
    return 1 << 62


@functools.cache
def extremum_tie_first(op: str, dtype: torch.dtype) -> bool:
    """Whether CPU's ``fmax``/``fmin`` (``op``) of a zero and a zero of the other sign returns its first operand
    (else its second), asked of the running torch on 64 elements (the vector loop and, measured in torch 2.13, its
    scalar tail alike). Measured: float32 the first under AVX-512, AVX2 and DEFAULT; bfloat16 the second in all
    three; float16 the first under AVX-512/AVX2 and the second under DEFAULT."""
    fn = getattr(torch, op)
    with _disable_current_modes():
        got = fn(torch.zeros(64, dtype=dtype), -torch.zeros(64, dtype=dtype))
        return not bool(torch.signbit(got[0]))


@functools.lru_cache(maxsize=None)
def rank_one_signs(dtype: torch.dtype, rows: bool, cols: bool) -> str | None:
    """How CPU's ``mm``/``addmm`` of a contraction of one (K = 1) signs its zeros, for a result of more than one row
    (``rows``) and more than one column (``cols``): ``"product"``, each element is ``beta * self + alpha * a * b``
    with the product's own sign, or ``alpha * a * b`` alone without ``self`` (``0 * -1 = -0.0``); ``"from_zero"``,
    the same under ``self``, but without it the product is added to +0.0 (+0.0 for ``0 * -1``); None, a sum started
    at +0.0 whatever ``self`` (``-0.0 + (+0.0 + -0.0) = +0.0``), as TensorE's PSUM sum is.

    It is the BLAS's answer, not ATen's: measured in torch 2.13 (MKL) on an AVX2 host, float32 and float64 are
    ``"product"`` where both exceed one (the gemm kernel: every layout of either operand and of out=, 2x2 up to
    600x600 and 4096x3) and ``"from_zero"`` where either is one (gemv); bfloat16/float16 (ATen's own gemm) None.
    Asked of the running torch once per (dtype, shape class): ``zeros(r, 1) @ -ones(1, c)`` without and with a
    -0.0 ``self``."""
    with _disable_current_modes(), torch.no_grad():
        a, b = torch.zeros(2 if rows else 1, 1, dtype=dtype), -torch.ones(1, 2 if cols else 1, dtype=dtype)
        if bool(torch.mm(a, b).signbit().all()):
            return "product"
        self = torch.full((a.shape[0], b.shape[1]), -0.0, dtype=dtype)
        return "from_zero" if bool(torch.addmm(self, a, b).signbit().all()) else None


def _proxy(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised CPU tensor with ``t``'s sizes, strides, dtype and requires_grad (for metadata only)."""
    p = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")
    if t.requires_grad and t.dtype.is_floating_point:
        p.requires_grad_(True)
    return p


def conv_backend(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                 output_padding: Sequence[int], groups: int, *, backward: bool = False,
                 bias_sizes: Sequence[int] | None = None) -> "torch._C._ConvBackend":
    """The backend ``at::convolution`` (``backward=False``) or ``at::convolution_backward`` (``True``, with
    the gradient's ``bias_sizes``) would pick for these arguments on CPU, on this host, now.

    Parameters are the normalised ones (one entry per spatial dimension), as ``aten::convolution`` sees them.
    Follows ``torch.backends.mkldnn.enabled``/``flags()`` and the intra-op thread count at the call.
    """
    with _disable_current_modes():
        args = (_proxy(x), _proxy(w), _proxy(bias) if bias is not None else None, list(stride), list(padding),
                list(dilation), bool(transposed), list(output_padding), int(groups))
        if backward:  # the binding's second overload selects with need_backward=true, as convolution_backward does
            return torch._C._select_conv_backend(*args, list(bias_sizes) if bias_sizes is not None else None)
        return torch._C._select_conv_backend(*args)


def conv_memory_format(x: torch.Tensor, w: torch.Tensor, backend: "torch._C._ConvBackend") -> torch.memory_format:
    """The memory format CPU's chosen convolution backend gives its output (and input/weight gradients)."""
    with _disable_current_modes():
        return torch._C._conv_determine_backend_memory_format(_proxy(x), _proxy(w), backend)


def is_onednn(backend: "torch._C._ConvBackend") -> bool:
    """Whether the backend is one of oneDNN's (they share semantics the native kernels lack: empty outputs of
    a transposed convolution are accepted, the backward returns grad_weight whenever grad_bias is asked)."""
    return int(backend) in _ONEDNN


# Mkldnn, MkldnnTranspose, MkldnnEmpty: consecutive in ATen's ConvBackend enum (ConvUtils.h); Python's binding
# of the enum omits MkldnnTranspose, so the range is taken from the two it does name.
_ONEDNN = range(int(torch._C._ConvBackend.Mkldnn), int(torch._C._ConvBackend.MkldnnEmpty) + 1)


def conv_sums_from_zero(backend: "torch._C._ConvBackend") -> bool:
    """Whether CPU's ``backend`` forms a transposed convolution's output, or a direct convolution's grad_input, by
    adding column sums into a zero-filled tensor: then no element of it is -0.0, whatever the sums' signs.

    ATen's native kernels do (``col2im``/``col2vol`` after a ``fill(0)``, ``unfolded2d_acc``/``Unfold3dAccCPU`` into
    a zeroed grad_input): a float16 column sum of -1.9e-8 rounds to -0.0 in the columns' gemm, and ``+0.0 + -0.0``
    is +0.0 (measured in torch 2.13 over every native backend: Slow2d, SlowDilated2d, Slow3d, SlowDilated3d
    backward, SlowTranspose2d/3d forward, 1- to 3-d, kernels 1 to 3 wide, strides 1 and 2, dilation 2; float16,
    bfloat16 and float32 with oneDNN off: no -0.0 where the exact sums were tiny negatives). oneDNN's kernels keep
    their own signs (float32 backward-data of stride 2 gives -0.0 for an underflowing sum, of stride 1 +0.0): not
    said here. The backend is the one ``conv_backend`` asked of the running torch."""
    return int(backend) in _SUMS_FROM_ZERO


_SUMS_FROM_ZERO = frozenset(int(getattr(torch._C._ConvBackend, name)) for name in (
    "Slow2d", "SlowDilated2d", "Slow3d", "SlowDilated3d", "SlowTranspose2d", "SlowTranspose3d"))


def conv_skips_padding(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int], groups: int) -> bool:
    """Whether CPU's direct convolution (``at::convolution`` forward, not transposed) of tensors like ``x`` and ``w``
    forms no product with its zero padding, on this host, now: then an infinite or NaN weight at a tap that meets
    the padding leaves those outputs finite (or infinite) where a kernel that multiplies the padded zeros gives
    ``0 * inf = NaN``.

    ATen's native kernels (``slow_conv2d``/``slow_conv3d``/``slow_conv_dilated*``, im2col on a padded copy) always
    multiply them. oneDNN's answer is its implementation's, which oneDNN picks per problem and ISA: measured in
    torch 2.13 on an AVX2 host, float32 with one group and a 3- or 5-wide kernel runs a direct kernel that skips
    padding, while two groups or a 1-wide kernel multiply it (as its AVX-512 bf16 1-wide conv1d does); no rule of
    sizes says which. So it is asked of the running torch, once per problem (``_padding_probe``): CPU's convolution
    of ones and an all-infinite weight of the same sizes, strides and dtype, under the current
    ``torch.backends.mkldnn`` flag and thread count (which decide the backend), is NaN exactly where it multiplied
    padding. A problem with no padding, or one CPU runs natively, is answered without running anything."""
    if not any(padding) or x.numel() == 0 or w.numel() == 0:
        return False
    nsp = len(stride)
    backend = conv_backend(x, w, None, stride, padding, dilation, False, [0] * nsp, groups)
    if not is_onednn(backend):
        return False
    return _padding_probe(tuple(x.shape), tuple(x.stride()), tuple(w.shape), tuple(w.stride()), x.dtype,
                          tuple(stride), tuple(padding), tuple(dilation), int(groups),
                          torch.backends.mkldnn.enabled, torch.get_num_threads())


def conv_backward_skips_padding(grad_output: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: Sequence[int],
                                padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                                output_padding: Sequence[int], groups: int,
                                output_mask: Sequence[bool]) -> tuple[bool, bool]:
    """(grad_input, grad_weight): whether CPU's ``convolution_backward`` of tensors like these forms no product with
    the padding, on this host, now (``conv_skips_padding``'s question for the backward). Where it multiplies, a
    non-finite grad_output at an output whose window meets the padding gives ``inf * 0 = NaN`` in grad_weight (a
    direct convolution: the padded input's zeros; a transposed one: the padded grad_output's zeros meet a non-finite
    input), and a transposed convolution's grad_input (a direct convolution of grad_output) meets its padding with the
    weight. A direct convolution's grad_input (col2im, or oneDNN's backward-data) multiplies nothing of the kind.

    ATen's native backward kernels (im2col) always multiply; oneDNN's backward-weights and backward-data kernels are
    its choice per problem and ISA, and not the forward's: measured in torch 2.13 on an AVX2 host, float32 with a
    batch of 2, one group and a 3-wide kernel skips, two groups or a 1-wide kernel multiply unless channels-last
    (grad_weight), and a transposed 1-wide kernel's grad_input multiplies unless channels-last. So it is asked of
    CPU's own backward (``_backward_padding_probe``): every operand all-infinite, the same sizes, strides and dtype,
    under the current oneDNN flag and thread count; a gradient is NaN exactly where it multiplied padding. A
    problem with no padding, or one CPU runs natively, is answered without running anything (both multiply)."""
    if not any(padding) or x.numel() == 0 or w.numel() == 0 or grad_output.numel() == 0:
        return False, False
    backend = conv_backend(x, w, None, stride, padding, dilation, transposed, output_padding, groups, backward=True)
    if not is_onednn(backend):
        return False, False
    return _backward_padding_probe(
        tuple(grad_output.shape), tuple(grad_output.stride()), tuple(x.shape), tuple(x.stride()), tuple(w.shape),
        tuple(w.stride()), x.dtype, tuple(stride), tuple(padding), tuple(dilation), bool(transposed),
        tuple(output_padding), int(groups), (bool(output_mask[0]), bool(output_mask[1])),
        torch.backends.mkldnn.enabled, torch.get_num_threads())


@functools.lru_cache(maxsize=512)
def _backward_padding_probe(g_shape, g_stride, x_shape, x_stride, w_shape, w_stride, dtype, stride, padding, dilation,
                            transposed, output_padding, groups, mask, _onednn, _threads) -> tuple[bool, bool]:
    """``conv_backward_skips_padding``'s question put to CPU's backward (the last two arguments only key the cache):
    for each of grad_input and grad_weight, True where it has no NaN. Every product of two infinities is +inf; a
    gradient is NaN only where an infinity met a padded zero. A gradient the mask leaves out answers False."""
    with _disable_current_modes(), torch.no_grad():
        g, x, w = (torch.empty_strided(shape, strides, dtype=dtype).fill_(float("inf"))
                   for shape, strides in ((g_shape, g_stride), (x_shape, x_stride), (w_shape, w_stride)))
        gi, gw, _ = torch.ops.aten.convolution_backward(g, x, w, None, list(stride), list(padding), list(dilation),
                                                        transposed, list(output_padding), groups,
                                                        [mask[0], mask[1], False])
        return (gi is not None and not bool(torch.isnan(gi).any()),
                gw is not None and not bool(torch.isnan(gw).any()))


def onednn_facts() -> dict[str, object]:
    """What, besides a problem's sizes, strides and dtype, decides which kernel CPU's convolution runs, and so whether
    it multiplies its padding (``conv_skips_padding``): whether oneDNN is on, the intra-op thread count (ATen's
    backend heuristic), the instruction sets this CPU has (``torch.cpu._is_*_supported``) and the cap
    ``ONEDNN_MAX_CPU_ISA``/``DNNL_MAX_CPU_ISA`` puts on oneDNN's. Part of the compile cache's Dynamo-level key, which
    names a NEFF before the program's convolutions are asked (``compiler.cache.dynamo_key``)."""
    isa = {name[4:-10]: bool(getattr(torch.cpu, name)()) for name in sorted(dir(torch.cpu))
           if name.startswith("_is_") and name.endswith("_supported")}
    return {"enabled": bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
            "threads": torch.get_num_threads(), "isa": isa,
            "max_isa": [os.environ.get("ONEDNN_MAX_CPU_ISA"), os.environ.get("DNNL_MAX_CPU_ISA")]}


@functools.lru_cache(maxsize=512)
def _padding_probe(x_shape, x_stride, w_shape, w_stride, dtype, stride, padding, dilation, groups, _onednn,
                   _threads) -> bool:
    """``conv_skips_padding``'s question put to CPU's convolution (the last two arguments only key the cache):
    True where no output is NaN. Ones times an all-infinite weight give +inf at every output a real input
    reaches; an output is NaN only where an infinite weight met a padded zero."""
    with _disable_current_modes(), torch.no_grad():
        x = torch.empty_strided(x_shape, x_stride, dtype=dtype).fill_(1)
        w = torch.empty_strided(w_shape, w_stride, dtype=dtype).fill_(float("inf"))
        out = torch.ops.aten.convolution(x, w, None, list(stride), list(padding), list(dilation), False,
                                         [0] * len(stride), groups)
        return not bool(torch.isnan(out).any())


@functools.cache
def fft_rejects_empty_batch() -> bool:
    """Whether CPU's ``_fft_r2c`` raises for a batch of no signals (MKL's descriptor refuses a batch count of 0;
    pocketfft returns an empty tensor). The probe's input has no element, so no transform is computed."""
    with _disable_current_modes():
        try:
            torch.ops.aten._fft_r2c(torch.empty((0, 2)), [1], 0, True)
        except RuntimeError:
            return True
    return False


def _exp_probe_inputs() -> np.ndarray:
    """Every finite float16 and bfloat16 value as float32 (129 024 values, both formats' whole range: exps
    that overflow, underflow to denormals and zero, and the ones near 1 where log_softmax's gradient cancels),
    padded with zeros to a multiple of 256 so no vector loop has a tail."""
    h = np.arange(1 << 16, dtype=np.uint16)
    x = np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])
    x = x[np.isfinite(x)]
    return np.concatenate([x, np.zeros(-x.size % 256, np.float32)])


def _log_softmax_backward_exp(y: np.ndarray, scalar: bool) -> np.ndarray:
    """exp(y) as CPU's ``_log_softmax_backward_data`` (float32) computes it: in its vector loop (``y`` along the
    inner dimension of a (2, n) problem reduced over dim 0, n a multiple of every vector width) or in its scalar
    tail (an (n, 2, 1) problem reduced over dim 1: an inner size of 1 is all tail). ``g = [1, 0]`` along the dim
    makes the sum 1 and the second row ``0 - exp(y) * 1``, exact however the multiply-add rounds."""
    n = y.size
    zeros = np.zeros(n, np.float32)
    with _disable_current_modes():
        if scalar:
            g = torch.from_numpy(np.stack([zeros + 1, zeros], 1)[:, :, None].copy())
            yy = torch.from_numpy(np.stack([zeros, y], 1)[:, :, None].copy())
            out = torch.ops.aten._log_softmax_backward_data(g, yy, 1, torch.float32)[:, 1, 0]
        else:
            g = torch.from_numpy(np.stack([zeros + 1, zeros]))
            out = torch.ops.aten._log_softmax_backward_data(g, torch.from_numpy(np.stack([zeros, y])), 0,
                                                            torch.float32)[1]
        return np.float32(0) - out.numpy()  # 0 - (0 - e): e, with +0.0 for an exp that underflowed


def _closest_exp(observed: np.ndarray, y: np.ndarray) -> str:
    """The ``expf.EXPF`` entry whose bits differ from ``observed`` at the fewest inputs (0 when it is the
    function CPU calls; tests/kernels/test_cpu_exp.py holds the chosen one to that)."""
    bits = observed.view(np.int32)
    misses = {name: int(np.count_nonzero(fn(y).view(np.int32) != bits)) for name, fn in expf.EXPF.items()}
    return min(misses, key=misses.__getitem__)


@functools.cache
def vector_exp() -> str:
    """The float32 exp of ATen's vector loops (``Vectorized<float>::exp``) on this host, as a ``expf.EXPF``
    name: ``sleef_u10`` on the AVX2/AVX-512 kernels, ``libm`` under ``DEFAULT`` (measured in torch 2.13).
    Asked of log_softmax's backward, whose vector loop calls it on every element but a dimension's tail."""
    y = _exp_probe_inputs()
    return _closest_exp(_log_softmax_backward_exp(y, scalar=False), y)


@functools.cache
def scalar_exp() -> str:
    """The float32 exp of ATen's scalar loops (``std::exp``, libm's ``expf``) on this host, as a
    ``expf.EXPF`` name; asked of log_softmax's backward along a dim whose inner size is 1 (all tail)."""
    y = _exp_probe_inputs()
    return _closest_exp(_log_softmax_backward_exp(y, scalar=True), y)


@functools.cache
def softmax_backward_vector(dtype: torch.dtype) -> int | None:
    """Elements per vector of ``_vec_log_softmax_backward`` in ``dtype`` (``Vectorized<scalar_t>::size()``): along a
    dim that is not the last, the last ``inner_size % size`` positions of the inner dimensions run its scalar
    tail, with ``scalar_exp`` instead of ``vector_exp``; None where the two exps are one function (nothing to
    tell apart, as under ``DEFAULT``). Asked of the running torch: an input (representable in ``dtype``) where
    the two exps' gradients differ in ``dtype``, along a row of 255 positions; the tail is the run of positions
    that show the scalar exp's bits, ``255 % size`` of them, ``size`` being a power of two."""
    if vector_exp() == scalar_exp():
        return None
    vec, sca = expf.EXPF[vector_exp()], expf.EXPF[scalar_exp()]
    bits = {2: torch.int16, 4: torch.int32}[dtype.itemsize]

    def rounded(a: np.ndarray) -> np.ndarray:  # float32 values rounded to dtype, as bit patterns
        return torch.from_numpy(np.asarray(a, np.float32)).to(dtype).view(bits).numpy()

    with _disable_current_modes():
        y = torch.from_numpy(_exp_probe_inputs()).to(dtype).float().numpy()
        y = y[np.isfinite(y)]
        # row 0 of a (2, n) problem over dim 0 with g = [1, 0]: 1 - exp(y) * 1 (exact in float32), rounded
        apart = rounded(1 - vec(y)) != rounded(1 - sca(y))
        if not apart.any():
            return None
        x = float(y[np.argmax(apart)])
        length = 255
        g = torch.stack([torch.ones(length), torch.zeros(length)]).to(dtype)
        yy = torch.stack([torch.full((length,), x), torch.zeros(length)]).to(dtype)
        row = torch.ops.aten._log_softmax_backward_data(g, yy, 0, dtype)[0].view(bits).numpy()
        scalar_row = rounded(1 - sca(np.full(length, x, np.float32)))
    tail = 0
    while tail < length and row[length - 1 - tail] == scalar_row[length - 1 - tail]:
        tail += 1
    return tail + 1


def _layout_key(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (tuple(t.shape), tuple(t.stride()), t.dtype)


def sdpa_layouts(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                 dropout_p: float, is_causal: bool, scale: float | None,
                 grad_out: torch.Tensor | None = None) -> tuple[tuple[int, ...] | None, tuple | None]:
    """The strides CPU's ``F.scaled_dot_product_attention`` gives its output and, with ``grad_out``, the query,
    key and value gradients of these arguments' layouts, on this host, now.

    CPU runs one of two kernels, chosen per call by ``torch._fused_sdp_choice`` (sizes, strides, dropout, mask,
    the ``sdpa_kernel``/``torch.backends`` switches): its flash kernel, whose output and gradients are laid out
    (batch, seq, head, dim) and transposed to (batch, head, seq, dim), or the math composite, whose layouts are its
    matmuls' (an overlapping query gives an output with the batch innermost). The choice is asked of CPU on
    never-written proxies; the chosen path's layouts of torch's own meta kernels (the flash kernels' meta
    registrations, the math composite and its autograd on meta tensors), which nothing computes. A layout that
    is not dense comes back None; the answers are cached per layout (sizes, strides, dtypes, scalars, switches).
    Where the switches leave CPU no kernel for the call (``sdpa_kernel([SDPBackend.OVERRIDEABLE])``, which the
    device serves: CPU raises "No viable backend"), both come back None: a layout question never refuses a call."""
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),
             torch.backends.cuda.mem_efficient_sdp_enabled())
    if not (flags[0] or flags[1]):  # neither of CPU's kernels (asked, CPU would warn and raise)
        return None, None
    return _sdpa_layouts(_layout_key(query), _layout_key(key), _layout_key(value), _layout_key(attn_mask),
                         float(dropout_p), bool(is_causal), None if scale is None else float(scale),
                         _layout_key(grad_out), flags)


def sdpa_runs_flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                    dropout_p: float, is_causal: bool, scale: float | None) -> bool:
    """Whether CPU's ``F.scaled_dot_product_attention`` runs its flash kernel for these arguments' layouts on this
    host, now (``torch._fused_sdp_choice``, as ``sdpa_layouts`` asks it; False where CPU runs the math composite or
    has no kernel). Its flash forward has its own row max near NaN (``sdpa_flash_vector``)."""
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),
             torch.backends.cuda.mem_efficient_sdp_enabled())
    if not flags[0]:
        return False
    from torch.nn.attention import SDPBackend
    return _sdpa_choice(_layout_key(query), _layout_key(key), _layout_key(value), _layout_key(attn_mask),
                        float(dropout_p), bool(is_causal), None if scale is None else float(scale),
                        flags) == SDPBackend.FLASH_ATTENTION.value


def sdpa_flash_rules(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                     dropout_p: float, is_causal: bool, scale: float | None) -> tuple[bool, int]:
    """CPU's flash rules for this call (``kernels.attention._Problem.flash_lse``/``flash_tail``): whether its flash
    kernel runs (``sdpa_runs_flash``: rows never started get logsumexp 0), and how many of the sequence's last keys
    its row max takes in the scalar tail that skips a NaN (S % ``sdpa_flash_vector()``; none with a mask, whose max
    keeps every NaN). The eager kernel asks at the call, the compiler's cut of the traced layouts."""
    flash = sdpa_runs_flash(query, key, value, attn_mask, dropout_p, is_causal, scale)
    tail = key.shape[-2] % sdpa_flash_vector() if flash and attn_mask is None else 0
    return bool(flash), int(tail)


def _sdpa_proxy(key):
    return None if key is None else torch.empty_strided(key[0], key[1], dtype=key[2], device="cpu")


@functools.lru_cache(maxsize=512)
def _sdpa_choice(q, k, v, mask, dropout_p, is_causal, scale, _flags) -> int | None:
    """``torch._fused_sdp_choice`` on never-written CPU proxies of these layouts; None where CPU has no kernel."""
    gqa = len(q[0]) >= 3 and len(k[0]) >= 3 and q[0][-3] != k[0][-3]
    with _disable_current_modes():
        try:
            return torch._fused_sdp_choice(_sdpa_proxy(q), _sdpa_proxy(k), _sdpa_proxy(v), _sdpa_proxy(mask), dropout_p, is_causal,
                                           scale=scale, enable_gqa=gqa)
        except RuntimeError:  # math off and flash refusing these arguments: CPU has no kernel for them
            return None


@functools.cache
def sdpa_flash_vector() -> int:
    """The vector width w of CPU's flash attention forward's row max without a mask, asked of it.

    Its row max over a block of keys (``_mul_reduce_max_fusion_kernel``) takes the vector part's max with
    ``vec::maximum`` (a NaN kept) and the block's last ``size % w`` keys in a scalar loop, ``std::max(max, x)``,
    which skips a NaN x. A row whose max stays -inf is never started: its probabilities are 0 (its NaN scores
    with them), its output 0 * V and its logsumexp 0. So keys [-inf, ..., -inf, NaN] give 0 where the NaN is a
    tail key (n % w != 0) and NaN where it is in the vector part: w is the least n giving NaN (1: no key skips a
    NaN, where none up to 64 does). The key blocks (512) are multiples of w, so the tail is the sequence's last
    ``S % w`` keys whatever they are."""
    def nan_out(n: int) -> bool:
        q = torch.ones((1, 1, 1, 1))
        k = torch.full((1, 1, n, 1), -float("inf"))
        k[0, 0, -1, 0] = float("nan")
        o, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, torch.ones((1, 1, n, 1)), 0.0,
                                                                            False, scale=1.0)
        return bool(torch.isnan(o).all())

    with _disable_current_modes():
        return next((n for n in range(1, 65) if nan_out(n)), 1)


@functools.lru_cache(maxsize=512)
def _sdpa_layouts(q, k, v, mask, dropout_p, is_causal, scale, grad, _flags):
    from torch.nn.attention import SDPBackend

    proxy = _sdpa_proxy

    def meta(key, requires_grad=False):
        if key is None:
            return None
        m = torch.empty_strided(key[0], key[1], dtype=key[2], device="meta")
        return m.requires_grad_(True) if requires_grad else m

    gqa = len(q[0]) >= 3 and len(k[0]) >= 3 and q[0][-3] != k[0][-3]
    choice = _sdpa_choice(q, k, v, mask, dropout_p, is_causal, scale, _flags)
    if choice is None:
        return None, None
    with _disable_current_modes():
        mq, mk, mv = (meta(t, True) for t in (q, k, v))
        mm = meta(mask)
        if choice == SDPBackend.FLASH_ATTENTION.value:
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                mq, mk, mv, dropout_p, is_causal, attn_mask=mm, scale=scale)
            grads = None if grad is None else torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                meta(grad), mq, mk, mv, out, lse, dropout_p, is_causal, attn_mask=mm, scale=scale)
        else:
            def math() -> tuple:
                with torch.enable_grad():
                    out = torch.ops.aten._scaled_dot_product_attention_math(
                        mq, mk, mv, mm, dropout_p, is_causal, None, scale=scale, enable_gqa=gqa)[0]
                    return out, None if grad is None else torch.autograd.grad(out, (mq, mk, mv), meta(grad))

            out, grads = on_fresh_thread(math)
    return _dense_or_none(out), None if grads is None else tuple(_dense_or_none(t) for t in grads)


def _dense_or_none(t: torch.Tensor) -> tuple[int, ...] | None:
    """``t``'s strides where they lay it out densely, else None (the kernel keeps a layout of its own)."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    return tuple(t.stride()) if is_non_overlapping_and_dense_or_false(t) else None


def on_fresh_thread(fn: Callable[[], object]) -> object:
    """``fn()`` on a thread of its own: a kernel runs below autograd (its dispatch key excluded on this thread),
    where a composite's autograd graph on meta tensors, which the gradients' layouts come from (sdpa's math path,
    ``rnn``'s cells), would not be recorded; a new thread starts with the default dispatch state."""
    import threading

    result: dict = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread
            result["error"] = e

    worker = threading.Thread(target=run, name="cpu_host-layouts")
    worker.start()
    worker.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
