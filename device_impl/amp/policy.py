"""The autocast cast policy of the neuron device, registered on the AutocastPrivateUse1 key.

PyTorch 2.13 ships autocast policies for CUDA, CPU, XPU, MPS, MTIA and MAIA
only: for PrivateUse1 it registers neither kernels nor the fallthrough that
lets ops without a policy pass (checked with
``torch._C._dispatch_dump_table("aten::mm")``). A backend is expected to
register both (OpenReg does it in C++). We do it from Python with
``torch.library``: the policy is a table (op -> cast rule) and one small
kernel per rule that casts the arguments, excludes the autocast key and
calls the op again (what ATen's ``WrapFunction_`` does).

The op lists are PyTorch's lists for non-CPU devices, exactly: the generic
``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` and ``AT_FORALL_PROMOTE`` of
ATen/autocast_mode.h (what CUDA, XPU and MTIA register), and the op those
devices ban, ``binary_cross_entropy`` ("unsafe to autocast": refused with
ATen's RuntimeError and message). CPU's own additions (conv*.padding, extra
losses, cat/stack/index_copy promote, binary_cross_entropy in fp32) are not
used, so code tuned for CUDA autocast behaves the same on neuron
(tests/test_autocast.py checks the table against the installed torch's header).
Neuron's own choice is only the default low-precision type, bfloat16
(device_impl.amp.DEFAULT_DTYPE).

| rule | ATen list | what the kernel does |
|---|---|---|
| ``lower_precision_fp`` | AT_FORALL_LOWER_PRECISION_FP | floating inputs -> autocast dtype (bf16 by default) |
| ``fp32`` | AT_FORALL_FP32 | floating inputs -> float32 |
| ``fp32_set_opt_dtype`` | AT_FORALL_FP32_SET_OPT_DTYPE | run with dtype=float32 unless the caller gave one |
| ``fp32_append_dtype`` | AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE | call the dtype-taking overload with float32 |
| ``promote`` | AT_FORALL_PROMOTE | floating inputs -> the widest floating type among them |
| ``banned`` | binary_cross_entropy (CUDA/XPU) | RuntimeError naming the safe replacement |

Differences from ATen, on purpose: casts of fp32 leaf weights are not cached
across uses inside one autocast region (ATen's ``cached_cast`` cache is not
reachable from Python); results are identical, each use pays its own cast.
Promote of a float16 and a bfloat16 tensor gives float32 (ATen raises).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

DEVICE_TYPE = "neuron"

# Rule names, as ATen's CastPolicy.
LOWER = "lower_precision_fp"  # cast floating inputs to the autocast dtype (bf16/fp16)
FP32 = "fp32"  # cast floating inputs to float32
FP32_SET_OPT_DTYPE = "fp32_set_opt_dtype"  # run with dtype=float32 unless the caller gave a dtype
FP32_APPEND_DTYPE = "fp32_append_dtype"  # call the overload that takes a dtype, with float32
PROMOTE = "promote"  # cast floating inputs to the widest floating type among them
BANNED = "banned"  # refuse inside an autocast region (ATen's binary_cross_entropy_banned)

# ATen's message for the banned op (aten/src/ATen/autocast_mode.cpp), so the refusal reads as on CUDA.
BANNED_MESSAGE = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."),
}

# op (packet or packet.overload; a bare packet means its default overload) -> rule
POLICY: dict[str, str] = {}
for _op in ("_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d "
            "conv_transpose2d.input conv_transpose3d.input convolution "
            "prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul "
            "linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell "
            "rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention").split():
    POLICY[_op] = LOWER
for _op in ("acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
            "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm rms_norm group_norm "
            "frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss "
            "cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss "
            "huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
            "multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp "
            "upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d "
            "upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d "
            "_upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa").split():
    POLICY[_op] = FP32
for _op in ("prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm linalg_matrix_norm "
            "linalg_matrix_norm.str_ord sum sum.dim_IntList").split():
    POLICY[_op] = FP32_SET_OPT_DTYPE
for _op in ("norm.Scalar", "norm.ScalarOpt_dim"):
    POLICY[_op] = FP32_APPEND_DTYPE
for _op in "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add".split():
    POLICY[_op] = PROMOTE
for _op in BANNED_MESSAGE:
    POLICY[_op] = BANNED

# norm overloads without a dtype -> the overload that takes one (ATen's AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE)
_APPEND_DTYPE_TARGET = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}

_EXCLUDE_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _eligible(value: Any) -> bool:
    """ATen's is_eligible: a floating-point neuron tensor that is not float64."""
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64
            and value.device.type == DEVICE_TYPE)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if _eligible(value) and value.dtype != dtype else value
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _cast_all(args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple[tuple, dict]:
    return tuple(_cast(a, dtype) for a in args), {k: _cast(v, dtype) for k, v in kwargs.items()}


def _widest(values: Any, current: torch.dtype) -> torch.dtype:
    """ATen's promote_type: float32 wins over the lower precision type; doubles are ignored."""
    for value in values:
        if isinstance(value, (list, tuple)):
            current = _widest(value, current)
        elif _eligible(value) and value.dtype != current:
            current = torch.promote_types(current, value.dtype)
    return current


def _first_tensor(args: tuple) -> Any:
    return args[0] if args else None


def _dtype_slot(overload: torch._ops.OpOverload) -> tuple[int, bool]:
    """(index of the ``dtype`` argument in the schema, whether it is keyword-only)."""
    for i, argument in enumerate(overload._schema.arguments):
        if argument.name == "dtype":
            return i, argument.kwarg_only
    raise ValueError(f"{overload} has no dtype argument; it cannot use the {FP32_SET_OPT_DTYPE} rule")


def _make_kernel(overload: torch._ops.OpOverload, rule: str, name: str) -> Callable[..., Any]:
    """The AutocastPrivateUse1 kernel of ``overload`` under ``rule``."""
    exclude = torch._C._ExcludeDispatchKeyGuard

    if rule == LOWER:
        def cast(args, kwargs):
            return _cast_all(args, kwargs, torch.get_autocast_dtype(DEVICE_TYPE))
    elif rule == FP32:
        def cast(args, kwargs):
            return _cast_all(args, kwargs, torch.float32)
    elif rule == PROMOTE:
        def cast(args, kwargs):
            dtype = _widest(tuple(args) + tuple(kwargs.values()), torch.get_autocast_dtype(DEVICE_TYPE))
            return _cast_all(args, kwargs, dtype)
    elif rule == FP32_SET_OPT_DTYPE:
        index, kwarg_only = _dtype_slot(overload)

        def cast(args, kwargs):
            if not _eligible(_first_tensor(args)):
                return args, kwargs
            if not kwarg_only and len(args) > index:
                if args[index] is None:
                    args = args[:index] + (torch.float32,) + args[index + 1:]
            elif kwargs.get("dtype") is None:
                kwargs = dict(kwargs, dtype=torch.float32)
            return args, kwargs
    elif rule == BANNED:
        message = BANNED_MESSAGE[name]

        def kernel(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(message)

        return kernel
    elif rule == FP32_APPEND_DTYPE:
        target = _resolve(_APPEND_DTYPE_TARGET[name])

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with exclude(_EXCLUDE_AUTOCAST):
                if _eligible(_first_tensor(args)):
                    return target(*args, **kwargs, dtype=torch.float32)
                return overload(*args, **kwargs)

        return kernel
    else:
        raise ValueError(f"unknown autocast rule {rule!r}")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with exclude(_EXCLUDE_AUTOCAST):
            args, kwargs = cast(args, kwargs)
            return overload(*args, **kwargs)

    return kernel


def _resolve(name: str) -> torch._ops.OpOverload | None:
    packet, _, overload = name.partition(".")
    packet_obj = getattr(torch.ops.aten, packet, None)
    if packet_obj is None:
        return None
    return getattr(packet_obj, overload or "default", None)


_libraries: list[torch.library.Library] = []


def install() -> list[str]:
    """Register the fallthrough and every policy kernel on AutocastPrivateUse1 (idempotent).

    Returns the ops registered (an op missing from this torch build is skipped).
    """
    if _libraries:
        return registered()
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    for name, rule in POLICY.items():
        overload = _resolve(name)
        if overload is None:
            continue
        kernels.impl(overload._schema.name.split("::")[1] + (f".{overload._overloadname}"
                                                           if overload._overloadname != "default" else ""),
                     _make_kernel(overload, rule, name), "AutocastPrivateUse1")
    _libraries.extend((fallthrough, kernels))
    return registered()


def registered() -> list[str]:
    """The policy entries that have a kernel on AutocastPrivateUse1 in this process."""
    return [name for name in POLICY if _resolve(name) is not None and torch._C._dispatch_has_kernel_for_dispatch_key(
        _qualified(name), "AutocastPrivateUse1")]


def _qualified(name: str) -> str:
    return f"aten::{name}"


def rule_of(op: str) -> str | None:
    """The cast rule of an aten op ('mm', 'softmax.int'), or None when autocast leaves it alone."""
    return POLICY.get(op[len("aten::"):] if op.startswith("aten::") else op)
