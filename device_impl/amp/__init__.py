"""``torch.neuron.amp``: automatic mixed precision on the neuron device.

``torch.autocast("neuron", dtype=torch.bfloat16)`` (or float16) casts ops by
PyTorch's usual policy (device_impl.amp.policy): matmuls, linear layers and
convolutions run in the low-precision type; softmax, log_softmax, norms,
losses and reductions in fp32; multi-input ops such as addcmul and
index_put promote to the widest input type; binary_cross_entropy is refused as
"unsafe to autocast" (PyTorch's lists for non-CPU devices, exactly). ``torch.amp.GradScaler("neuron")``
works with native unscale/update kernels (device_impl.amp.scaler).

The helpers below are the names code written for TorchNeuron and torch.cuda.amp
uses. ``torch.neuron.amp.autocast`` defaults to bfloat16, Trainium's native
matmul type; ``torch.autocast("neuron")`` without a dtype uses the device's
autocast dtype, which registration sets to bfloat16 on the registering thread
(PyTorch keeps that setting per thread; other threads start at float16, so pass
``dtype=`` when autocasting from worker threads).

This module only imports torch; ``install()`` (called once at registration)
registers the cast policy and the GradScaler kernels.
"""

from __future__ import annotations

import functools

import torch
from torch.amp.grad_scaler import OptState

DEVICE_TYPE = "neuron"
# Low-precision types TensorE multiplies natively (FP32 runs at a quarter of the BF16 rate).
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
DEFAULT_DTYPE = torch.bfloat16

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd", "get_amp_supported_dtype", "is_autocast_enabled",
           "get_autocast_dtype", "set_autocast_dtype", "is_bf16_supported", "install"]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("neuron", dtype=...)`` accepts (torch.autocast asks the device module)."""
    return list(SUPPORTED_DTYPES)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is the engines' native low-precision type."""
    return True


def is_autocast_enabled() -> bool:
    """Whether an autocast region for neuron is active on this thread."""
    return torch.is_autocast_enabled(DEVICE_TYPE)


def get_autocast_dtype() -> torch.dtype:
    """The low-precision type autocast casts to on neuron (per thread)."""
    return torch.get_autocast_dtype(DEVICE_TYPE)


def set_autocast_dtype(dtype: torch.dtype) -> None:
    """Set the default autocast type of this thread; must be one of ``get_amp_supported_dtype()``."""
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"neuron autocast supports {[str(d) for d in SUPPORTED_DTYPES]}, not {dtype}; "
                         f"use torch.bfloat16 (recommended on Trainium) or torch.float16.")
    torch.set_autocast_dtype(DEVICE_TYPE, dtype)


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.neuron.amp.autocast(dtype=torch.bfloat16)``: ``torch.autocast("neuron", ...)`` with
    Trainium's default low-precision type."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = DEFAULT_DTYPE, cache_enabled: bool = True):
        super().__init__(DEVICE_TYPE, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.neuron.amp.GradScaler()``: ``torch.amp.GradScaler("neuron", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__(DEVICE_TYPE, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """As ``torch.amp.GradScaler.unscale_``, with 1/scale computed in fp32 on the device.

        The base class computes ``scale.double().reciprocal().float()``; float64 is not a device
        dtype, so that takes three counted CPU fallbacks per step. An fp32 reciprocal is the same
        number: IEEE division is correctly rounded, and rounding a double quotient to float gives
        the correctly rounded float quotient (53 >= 2 * 24 + 2 bits, so double rounding is innocuous).
        """
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = self._scale.reciprocal()
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = OptState.UNSCALED


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type=DEVICE_TYPE)
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type=DEVICE_TYPE)

_installed = False


def install() -> None:
    """Register the AutocastPrivateUse1 policy and the GradScaler kernels; set bfloat16 as the default
    autocast type of the calling thread. Idempotent."""
    global _installed
    if _installed:
        return
    from device_impl.amp import policy, scaler  # noqa: F401  (scaler registers its kernels on import)

    policy.install()
    torch.set_autocast_dtype(DEVICE_TYPE, DEFAULT_DTYPE)
    _installed = True

