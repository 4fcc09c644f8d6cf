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
* **Whether ``gelu`` runs oneDNN** (``onednn_gelu``): contiguous float32 (and bf16 where oneDNN has bf16 on
  the CPU) tensors, with its own order of operations.
* **Whether a multiply-add rounds once.** ATen's vectorized loops call ``vec::fmadd``, one rounding on the
  AVX2/AVX-512 kernels (and the compiler contracts ``a * b + c`` in the scalar loops compiled with them);
  the ``DEFAULT`` kernels (``ATEN_CPU_CAPABILITY=default``, or a CPU without AVX2) compute ``a * b`` and
  then ``+ c``, two roundings. ``torch.backends.cpu.get_cpu_capability()`` says which kernels this process
  dispatches to.
* **Whether a bfloat16/float16 vector loop computes in float32.** The AVX2/AVX-512 ``Vectorized`` types of
  the reduced floats convert to fp32; under ``DEFAULT`` the vector loop rounds as the scalar lambda, which
  for some ops (rsqrt) rounds an intermediate to the dtype.

* **Whether CPU's FFT rejects an empty batch** (``fft_rejects_empty_batch``): with MKL (the x86 builds) a
  transform over a batch of 0 signals raises "MKL FFT error: ... Inconsistent configuration parameters";
  pocketfft builds return the empty result. Asked of the running torch with a (0, 2) tensor: nothing to compute.

The answers are read from torch at the call (the capability is fixed once torch has loaded, so it is read
once). Nothing here computes a result: proxies are allocated, never written or read; the selection runs
outside any active dispatch mode (the host-compute guard of ``NEURONSIM_ASSERT_NO_CPU`` would otherwise
see the views ``_select_conv_backend`` takes of a 1-d problem).
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes


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
    """Whether CPU's ``gelu`` (and ``gelu_backward``) on a tensor like ``x`` runs oneDNN's ``eltwise_gelu_erf``
    rather than ATen's own kernel: ``use_mkldnn`` of ATen's Activation.cpp takes a contiguous float32 tensor of
    more than one element, or a bfloat16 one where oneDNN has bf16 on this CPU (``mkldnn_bf16_device_check``,
    which ``torch.ops.mkldnn._is_mkldnn_bf16_supported`` returns), while ``torch.backends.mkldnn.enabled`` is on;
    only for ``approximate='none'``. oneDNN forms ``x * (1 + erf(x / sqrt(2)))`` in fp32 before halving it, so
    it overflows to inf above FLT_MAX / 2, where ATen's ``x * 0.5 * (1 + erf(...))`` does not."""
    if approximate != "none" or not torch.backends.mkldnn.is_available() or not torch.backends.mkldnn.enabled:
        return False
    if x.numel() <= 1 or not x.is_contiguous():
        return False
    if x.dtype == torch.float32:
        return True
    return x.dtype == torch.bfloat16 and _onednn_bf16()


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
