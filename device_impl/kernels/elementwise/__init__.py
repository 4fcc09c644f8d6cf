"""Kernel family 'elementwise': arithmetic, comparisons, bitwise/logical ops, unary math, activations and
their backward formulas, the ternary ops (addcmul, addcdiv, lerp), where and masked_fill.

Every op here is pointwise: an output element depends only on the elements at the same index of its
operands (broadcast to the output's shape) and on host scalars. Each op is a row in a table: which engine
instruction computes it, how its result dtype is promoted, and which dtypes CPU refuses (so we refuse
them the same way). The tile loop is ``common.elementwise``: the output's elements in its memory order
cut into flat tiles ``[p <= 128, f <= FREE_MAX]`` (consecutive elements along a partition's free axis,
then the next partition), every tensor operand DMA'd into a tile of the same shape (host scalars stay
immediates), compute on VectorE (ALU ops) or ScalarE (transcendentals), DMA out. Engines compute in fp32
and round once on store, except where CPU rounds each step to bf16/fp16 (``loop._narrow``) or fuses a
multiply-add into one rounding (GpSimd, ``loop._fma``); where CPU's vector and scalar loops round
differently, ``loop._vector_split`` gives each formula the elements CPU computes with it.

Every compute here is a chain of ``common.elementwise`` launches, so adaptive eager can queue it:
``device_impl.eager.queue.queueable`` treats every module of this package as queueable in adaptive eager.

numpy references of each op are the ALU/ACTIVATIONS tables of engine/isa.py.

Where each op is lowered (``TABLE.lookup(op).source`` names the module):

===============  ==========================================================================================
``loop``         shared: ``binary`` (one ALU step, tile or scalar operands), operand tiles, the GpSimd fma,
                 dtype refusals, and the model of CPU's vectorized loop (``_ti_loop``, ``_vector_split``)
``binary``       add, sub (alpha), mul, div (rounding modes), floor_divide, remainder, fmod, pow, atan2,
                 maximum, minimum; eq, ne, lt, le, gt, ge; bitwise_and/or/xor; logical_and/or/xor
``unary``        exp, exp2, expm1, log, log2, log10, log1p, sqrt, rsqrt, sin, cos, tan, asin, acos, atan,
                 sinh, cosh, tanh, asinh, acosh, atanh, sigmoid, erf, erfc, erfinv, reciprocal, sinc (ScalarE);
                 abs, neg, floor, ceil, trunc, round, bitwise_not, logical_not, isnan, isinf, sign (VectorE)
``activations``  relu, gelu, silu, clamp, clamp_min, clamp_max, hardtanh, leaky_relu, elu; threshold_backward,
                 sigmoid_backward, tanh_backward, gelu_backward, silu_backward, hardtanh_backward,
                 leaky_relu_backward, elu_backward
``softplus``     softplus, softplus_backward, log_sigmoid_forward (output and buffer), log_sigmoid_backward, mish
``shrinks``      threshold, hardshrink, softshrink, hardshrink_backward, softshrink_backward
``signs``        sgn, signbit, isposinf, isneginf, frac, heaviside, copysign, fmax, fmin
``logs``         logaddexp, logaddexp2, xlogy, hypot, logit
``ternary``      where, masked_fill; addcmul, addcdiv, lerp
``angle``        angle of real tensors (0, pi in the dtype, NaN kept)
``cross``        linalg_cross (CPU's scalar loop: fused multiply-add where the host's build contracts it)
``rounding``     round with decimals (round.decimals: CPU's x * 10^d rounded, / 10^d, in the opmath dtype)
``shifts``       bitwise_left_shift, bitwise_right_shift, <<, >> and their in-place forms (CPU's results for
                 counts out of range)
``gcd``          gcd, lcm (CPU's Euclid loop on GpSimd, C's remainder and wrapping as CPU computes them)
``float_bits``   nextafter (VectorE's ALU in the dtype itself), frexp (GpSimd: mantissa and int32 exponent)
===============  ==========================================================================================

Gathers, scatters and masked_select/masked_scatter are row accesses: ``kernels.indexing``. Scalar ->
dtype conversion (overflow errors, opmath) is ``device_impl.kernels.scalars``.
"""

# Importing registers the kernels (in the order the single elementwise.py registered them).
from device_impl.kernels.elementwise import (  # noqa: F401
    loop,
    binary,
    unary,
    activations,
    softplus,
    shrinks,
    signs,
    logs,
    ternary,
    rounding,
    cross,
    angle,
    shifts,
    gcd,
    float_bits,
)
