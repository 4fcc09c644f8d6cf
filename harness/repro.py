"""Reproducers: a failing case as a self-contained script (plain torch + ``import device_impl``).

The script rebuilds the inputs exactly (values as literals, the layout as
the same view code), runs the spec's expression on CPU and on the device,
and asserts what the harness checked, so running it alone fails the same
way the case did.
"""

from __future__ import annotations

from harness.cases import Case
from harness.compare import DEFAULT_TOLERANCE, Comparison
from harness.specs import OpSpec
from harness.values import LAYOUT_CODE, dtype_named, literal

_CHECKER = '''
def same(actual, expected, where="output"):
    """Values (NaN where CPU has NaN), dtype and shape equal; integers exact."""
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{where}: structure differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            same(a, e, f"{where}[{i}]")
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected or (actual != actual and expected != expected), f"{where}: {actual} != {expected}"
        return
    assert actual.device.type == DEVICE.split(":")[0], f"{where}: result on {actual.device}"
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != CPU {expected.dtype}"
    got = actual.detach().cpu()
    if expected.is_floating_point() or expected.is_complex():
        torch.testing.assert_close(got, expected.detach(), rtol=RTOL.get(expected.dtype, 1.3e-6),
                                   atol=ATOL.get(expected.dtype, 1e-5), equal_nan=True, msg=lambda m: f"{where}: {m}")
    else:
        assert torch.equal(got, expected), f"{where}: values differ"


def shares(outputs, inputs):
    outs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    return [(i, j) for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.numel()
            for j, x in enumerate(inputs) if x.numel() and o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()]
'''


def _tolerances(spec: OpSpec, case: Case) -> tuple[dict, dict]:
    rtol = {str(k): v[0] for k, v in DEFAULT_TOLERANCE.items()}
    atol = {str(k): v[1] for k, v in DEFAULT_TOLERANCE.items()}
    override = spec.tolerance.get(case.dtype)
    if override is not None:
        rtol[f"torch.{case.dtype}"], atol[f"torch.{case.dtype}"] = override
    return rtol, atol


def render(spec: OpSpec, case: Case, expression: str, comparison: Comparison | None = None) -> str:
    rtol, atol = _tolerances(spec, case)
    lines = [
        f"# neuronsim reproducer: op spec {spec.name!r}, dtype {case.dtype}, mode {case.mode}, device {case.device}",
        f"# harness verdict: {comparison.message if comparison else ''}".rstrip(),
        "import torch",
        "import torch.nn.functional as F",
        "import device_impl  # registers the neuron device (plain `import torch` does once installed)",
        "",
        f"DEVICE = {case.device!r}",
        "RTOL = {" + ", ".join(f"{k}: {v!r}" for k, v in rtol.items()) + "}",
        "ATOL = {" + ", ".join(f"{k}: {v!r}" for k, v in atol.items()) + "}",
        _CHECKER.strip("\n"),
        "",
        "",
        "def inputs(device):",
    ]
    names = []
    for i, t in enumerate(case.tensors):
        lines.append(f"    b{i} = {literal(t)}.to(device)")
        view = LAYOUT_CODE[t.layout].format(b=f"b{i}", shape=tuple(t.shape))
        suffix = ".detach().requires_grad_()" if t.requires_grad else ""
        lines.append(f"    x{i} = {view}{suffix}")
        names.append(f"x{i}")
    lines.append(f"    return [{', '.join(names)}]")
    call = expression
    mode_wrap = {
        "eager": "{call}",
        "adaptive": "run_adaptive(lambda: {call})",
        "compiled": "torch.compile(lambda: {call}, backend=DEVICE.split(':')[0], fullgraph=True)()",
    }[case.mode]
    unpack = f"{', '.join(names)}," if names else "_"
    lines += [
        "",
        "",
        "def run_adaptive(fn):",
        "    module = getattr(torch, DEVICE.split(':')[0])",
        "    previous = module.get_eager_mode()",
        "    module.set_eager_mode('adaptive')",
        "    try:",
        "        out = fn()",
        "        module.synchronize()",
        "        return out",
        "    finally:",
        "        module.set_eager_mode(previous)",
        "",
        "",
        "device = 'cpu'",
        f"cpu_in = inputs('cpu')",
        f"{unpack} = cpu_in",
        f"torch.manual_seed({sum(t.seed for t in case.tensors) % (2**31)})",
        "try:",
        f"    expected, cpu_error = {call}, None",
        "except Exception as e:",
        "    expected, cpu_error = None, e",
        "device = DEVICE",
        f"dev_in = inputs(DEVICE)",
        f"{unpack} = dev_in",
        f"torch.manual_seed({sum(t.seed for t in case.tensors) % (2**31)})",
        "try:",
        f"    actual, dev_error = {mode_wrap.format(call=call)}, None",
        "except Exception as e:",
        "    actual, dev_error = None, e",
        "if cpu_error is not None or dev_error is not None:",
        "    assert cpu_error is not None and dev_error is not None and isinstance(dev_error, type(cpu_error)), (",
        "        f'error parity: CPU {cpu_error!r}, device {dev_error!r}')",
        "else:",
    ]
    if spec.check == "properties":
        lines += ["    assert type(actual) is type(expected)",
                  "    print('random op: shapes and dtypes', [getattr(a, 'shape', None) for a in "
                  "(actual if isinstance(actual, (tuple, list)) else [actual])])"]
    else:
        lines += [
            "    same(actual, expected)",
            "    assert shares(actual, dev_in) == shares(expected, cpu_in), (",
            "        f'aliasing: device {shares(actual, dev_in)}, CPU {shares(expected, cpu_in)}')",
            "    for i, (d, c) in enumerate(zip(dev_in, cpu_in)):",
            "        same(d, c, f'input x{i} after the call')",
        ]
        if spec.grad and any(t.requires_grad for t in case.tensors):
            lines += [
                "    def grads(out, leaves, device):",
                "        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])",
                "                if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]",
                "        g = torch.Generator().manual_seed(" + str(sum(t.seed for t in case.tensors) % (2**31)) + ")",
                "        cot = [torch.randn(o.shape, generator=g).to(o.dtype).to(device) for o in outs]",
                "        leaves = [x for x in leaves if x.requires_grad]",
                "        got = torch.autograd.grad(outs, leaves, cot, allow_unused=True)",
                "        return [torch.zeros_like(x) if gr is None else gr for x, gr in zip(leaves, got)]",
                "    same(grads(actual, dev_in, DEVICE), grads(expected, cpu_in, 'cpu'), 'gradient')",
            ]
    lines.append("print('reproducer passed: the device matches CPU for this case')")
    return "\n".join(lines) + "\n"


__all__ = ["render", "dtype_named"]
