"""Differential checks of native kernels against CPU eager.

``check(fn, *args)`` runs ``fn`` on CPU copies and on neuron copies of the
same inputs (same values, same layout: strides and storage offsets too) and
asserts that outputs match (torch.testing tolerances per dtype, NaN where
CPU has NaN, exact for integers and bools, same dtype and shape) or that
both raise the same exception class; and that no op of the call fell back
to the CPU (unless the inputs have a dtype the engines do not compute on).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from device_impl import dispatch

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
ALL_DTYPES = FLOATS + INTS + (torch.bool,)
EDGE_SIZES = (1, 127, 128, 129, 511, 512, 513)
EDGE_SHAPES = ((), (0,), (1,), (127,), (128,), (129,), (511,), (512,), (513,), (3, 129), (2, 3, 5), (129, 3))
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset")

# torch.testing defaults (DESIGN.md section 4)
TOLERANCES = {torch.float32: (1.3e-6, 1e-5), torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}


def values(shape: Sequence[int], dtype: torch.dtype, domain: str = "normal", seed: int = 0) -> torch.Tensor:
    """A CPU tensor with values from ``domain``: normal, positive, unit (in (-1, 1)), small_int, special."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        lo, hi = (max(info.min, -20), min(info.max, 20) + 1) if domain != "full" else (info.min, info.max)
        if domain == "positive":
            lo = 1
        return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)
    base = torch.randn(shape, generator=g, dtype=torch.float64)
    if domain == "positive":
        base = base.abs() + 0.1
    elif domain == "unit":
        base = torch.tanh(base) * 0.99
    elif domain == "small_int":
        base = torch.round(base * 3)
    elif domain == "special":
        specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 1.0, -1.0,
                                 65504.0, -3.5, 2.5], dtype=torch.float64)
        flat = base.flatten()
        flat[: min(len(flat), len(specials))] = specials[: len(flat)]
        base = flat.reshape(shape)
    return base.to(dtype)


def _layout(base_shape: Sequence[int], layout: str) -> tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]:
    """(shape of the base tensor to create, view turning it into a tensor of base_shape with that layout)."""
    shape = tuple(base_shape)
    if layout == "contiguous" or len(shape) == 0:
        return shape, lambda t: t
    if layout == "transposed":
        return tuple(reversed(shape)), lambda t: t.permute(*reversed(range(t.dim())))
    if layout == "sliced":
        return shape[:-1] + (shape[-1] * 2,), lambda t: t[..., ::2]
    if layout == "expanded":
        return shape[:-1] + (1,), lambda t: t.expand(*shape)
    if layout == "offset":
        n = 1
        for s in shape:
            n *= s
        return (n + 3,), lambda t: t[3:].view(shape)
    raise ValueError(layout)


def pair(shape: Sequence[int], dtype: torch.dtype, layout: str = "contiguous", domain: str = "normal",
         seed: int = 0, device: str = "neuron") -> tuple[torch.Tensor, torch.Tensor]:
    """The same tensor on CPU and on neuron, with the same values, strides and storage offset."""
    base_shape, make_view = _layout(shape, layout)
    base = values(base_shape, dtype, domain, seed)
    return make_view(base), make_view(base.to(device))


def _compare(actual: Any, expected: Any, tol: tuple[float, float] | None, where: str, zero_sign: bool = True) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: expected a tensor, got {type(actual)}"
        assert actual.device.type == "neuron", f"{where}: result on {actual.device}, expected neuron"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != CPU {expected.dtype}"
        assert actual.shape == expected.shape, f"{where}: shape {tuple(actual.shape)} != CPU {tuple(expected.shape)}"
        got = actual.cpu()
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            rtol, atol = tol if tol is not None else TOLERANCES.get(expected.dtype, (1.3e-6, 1e-5))
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{where}: {m}")
            if zero_sign and not expected.dtype.is_complex:
                zeros = (got == 0) & (expected == 0)
                wrong = torch.signbit(got[zeros]) != torch.signbit(expected[zeros])
                assert not wrong.any(), f"{where}: {int(wrong.sum())} zero(s) with the wrong sign (-0.0 vs 0.0)"
        else:
            assert torch.equal(got, expected), f"{where}: integer/bool mismatch\n neuron {got}\n cpu    {expected}"
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), f"{where}: structure differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, tol, f"{where}[{i}]", zero_sign)
    else:
        assert actual == expected or (actual != actual and expected != expected), f"{where}: {actual} != {expected}"


def _to_neuron(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to("neuron")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_neuron(v) for v in value)
    return value


def _has_host_only_dtype(values_: Sequence[Any]) -> bool:
    for v in values_:
        if isinstance(v, torch.Tensor) and (v.dtype == torch.float64 or v.dtype.is_complex):
            return True
        if isinstance(v, (list, tuple)) and _has_host_only_dtype(v):
            return True
    return False


def _double(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        return value.double()
    if isinstance(value, (list, tuple)):
        return type(value)(_double(v) for v in value)
    return value


def _compare_to_reference(actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor,
                          tol: tuple[float, float] | None) -> None:
    """Elementwise: the device's distance from the float64 result is at most CPU's own distance plus the
    dtype's tolerance. For ops whose legitimate CPU paths round intermediate sums differently by host."""
    rtol, atol = tol if tol is not None else TOLERANCES.get(expected.dtype, (1.3e-6, 1e-5))
    got, cpu, ref = actual.cpu().double(), expected.double(), reference.double()
    assert got.shape == cpu.shape and actual.dtype == expected.dtype, "result: dtype or shape differs from CPU"
    allowed = (cpu - ref).abs() + atol + rtol * ref.abs()
    err = (got - ref).abs()
    bad = ~(err <= allowed) & ~(got.isnan() & cpu.isnan())
    assert not bad.any(), (f"result: {int(bad.sum())} elements further from float64 than CPU's own error allows; "
                           f"worst device error {err[bad].max().item():.3g} vs allowed {allowed[bad].min().item():.3g}")


def check(fn: Callable[..., Any], *args: Any, tol: tuple[float, float] | None = None, neuron_args: Sequence[Any] | None = None,
          allow_fallback: Sequence[str] = (), zero_sign: bool = True, fp64_reference: bool = False,
          **kwargs: Any) -> Any:
    """Run ``fn`` on CPU (``args``) and neuron (``neuron_args`` or ``args`` moved to neuron) and compare.

    Returns the neuron result. ``allow_fallback``: ops allowed to take the CPU
    fallback during the call (e.g. a helper op outside the kernel under test).
    ``zero_sign=False``: +0.0 equals -0.0, for results whose zero sign CPU itself
    leaves to summation order (the caller says why). ``fp64_reference=True``: a
    single floating-point result is judged against ``fn`` in float64 instead of
    against CPU's bits: no further from it than CPU's own error plus ``tol`` (for
    ops whose CPU paths, chosen by host, round partial sums differently).
    """
    dev_args = list(neuron_args) if neuron_args is not None else [_to_neuron(a) for a in args]
    cpu_error: BaseException | None = None
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - error parity is part of the contract
        cpu_error = e
    dispatch.reset_stats()
    if cpu_error is not None:
        try:
            fn(*dev_args, **kwargs)
        except Exception as e:  # noqa: BLE001
            assert type(e) is type(cpu_error) or isinstance(e, type(cpu_error)), (
                f"CPU raised {type(cpu_error).__name__}: {cpu_error}\nneuron raised {type(e).__name__}: {e}")
            return None
        raise AssertionError(f"CPU raised {type(cpu_error).__name__}: {cpu_error}; neuron did not raise")
    actual = fn(*dev_args, **kwargs)
    if fp64_reference:
        _compare_to_reference(actual, expected, fn(*_double(list(args)), **kwargs), tol)
    else:
        _compare(actual, expected, tol, "result", zero_sign)
    if not _has_host_only_dtype(list(args)):
        fallbacks = {op: c["fallback"] for op, c in dispatch.stats().items()
                     if c["fallback"] and op not in allow_fallback}
        assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"
    return actual
