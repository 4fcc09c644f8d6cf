"""nn.LSTM / nn.GRU / nn.RNN and their cells on neuron: the fused cell kernels (kernels/rnn.py).

On PrivateUse1, ATen routes the LSTM and GRU cells to ``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``
and their backward (``_thnn_fused_lstm_cell_backward_impl``, ``_thnn_fused_gru_cell_backward``), which
have no CPU kernel: before kernels/rnn.py, nn.LSTM and nn.GRU raised NotImplementedError on neuron.
nn.RNN's tanh/relu cells are ``addmm`` + ``tanh``/``relu`` (already native); they are checked here too.

Tolerances. The device's cell is ATen's fused kernel (fp32 throughout, one rounding per output, gates
summed as ``(x W_ih + h W_hh) + b_ih + b_hh``); CPU's cell is a composite that rounds after every op and
adds the biases inside each linear (or oneDNN's fused RNN for LSTM, chosen by host). Both differ from
the exact result, and the difference grows through the time steps and layers, so a module's outputs
and gradients are judged against float64 on the same (dtype-rounded) parameters and inputs: the
device's max error may be at most twice CPU's own plus the dtype's torch.testing tolerance on the
tensor's scale (``_close_to_reference``). Measured (2 layers, bidirectional, T=7, B=3, H=6): float32
device vs float64 max 2.4e-6 on gradients of magnitude 23 (CPU 3.5e-6), bfloat16 0.19 on a bias
gradient of 23 (CPU 0.07: the fused cell's bias gradient is rounded per time step and summed by
autograd in bf16, as on CUDA). The fused ops themselves are compared with their ATen formula in
float64 at the torch.testing defaults (one rounding of fp32 arithmetic).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from device_impl import dispatch

TOL = {torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}  # torch.testing defaults
FUSED = {
    "LSTM": ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl"),
    "GRU": ("aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward"),
}
MODULES = {
    "LSTM": lambda **kw: torch.nn.LSTM(**kw),
    "GRU": lambda **kw: torch.nn.GRU(**kw),
    "RNN_tanh": lambda **kw: torch.nn.RNN(nonlinearity="tanh", **kw),
    "RNN_relu": lambda **kw: torch.nn.RNN(nonlinearity="relu", **kw),
}


def _close_to_reference(dev: torch.Tensor, cpu: torch.Tensor, ref: torch.Tensor, where: str) -> float:
    """The device's max error against float64 is at most 2x CPU's own plus the dtype tolerance; returns it."""
    assert dev.device.type == "neuron", where
    assert dev.dtype == cpu.dtype and dev.shape == cpu.shape, f"{where}: {dev.dtype}{tuple(dev.shape)} vs CPU " \
        f"{cpu.dtype}{tuple(cpu.shape)}"
    rtol, atol = TOL[cpu.dtype]
    got, ref = dev.cpu().double(), ref.double()
    err_dev = (got - ref).abs().max().item() if ref.numel() else 0.0
    err_cpu = (cpu.double() - ref).abs().max().item() if ref.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    allowed = 2 * err_cpu + atol + rtol * scale
    assert err_dev <= allowed, f"{where}: device error {err_dev:.3g} vs float64 > allowed {allowed:.3g} " \
        f"(CPU's own error {err_cpu:.3g}, scale {scale:.3g})"
    return err_dev


def _run(module: torch.nn.Module, x, h0, grad: bool):
    """Outputs (output, h_n[, c_n]) and, with grad, the gradients of input, h0 and every parameter."""
    out = module(x, h0) if h0 is not None else module(x)
    if isinstance(out, tuple):
        out = [out[0]] + (list(out[1]) if isinstance(out[1], tuple) else [out[1]])
    else:  # a cell: its new state
        out = list(out) if isinstance(out, tuple) else [out]
    if not grad:
        return [t.detach() for t in out]
    loss = sum((t.float() * (k + 1)).sum() for k, t in enumerate(out))  # weights: every output counts
    loss.backward()
    leaves = [x] + (list(h0) if isinstance(h0, tuple) else [h0] if h0 is not None else [])
    return [t.detach() for t in out] + [t.grad for t in leaves] + [p.grad for p in module.parameters()]


def _leaf(t: torch.Tensor, dtype, device, grad: bool) -> torch.Tensor:
    return t.detach().clone().to(dtype).to(device).requires_grad_(grad)


def _compare(make, x, h0, dtype=torch.float32, grad=True):
    """Module (or cell) on float64 CPU, CPU in ``dtype`` and neuron; returns the device's max error."""
    torch.manual_seed(0)
    base = make()
    results = {}
    for name, device, dt in (("ref", "cpu", torch.float64), ("cpu", "cpu", dtype), ("dev", "neuron", dtype)):
        m = make()
        m.load_state_dict(base.state_dict())
        m = m.to(dtype).to(dt).to(device)  # parameters rounded to dtype, then (for the reference) widened
        xs = _leaf(x, dtype, "cpu", False).to(dt).to(device).requires_grad_(grad)
        hs = None
        if h0 is not None:
            hs = tuple(_leaf(h, dtype, "cpu", False).to(dt).to(device).requires_grad_(grad) for h in h0)
            hs = hs if len(hs) > 1 else hs[0]
        if name == "dev":
            dispatch.reset_stats()
        results[name] = _run(m, xs, hs, grad)
    worst = 0.0
    for k, (ref, cpu, dev) in enumerate(zip(results["ref"], results["cpu"], results["dev"])):
        worst = max(worst, _close_to_reference(dev, cpu, ref, f"result {k}"))
    fallbacks = {op: c["fallback"] for op, c in dispatch.stats().items() if c["fallback"]}
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"
    return worst


# (num_layers, bidirectional, batch_first, initial state)
CONFIGS = [(1, False, False, False), (2, True, True, True), (2, False, False, True), (1, True, True, False)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "L{}-{}-{}-{}".format(
    c[0], "bi" if c[1] else "uni", "bf" if c[2] else "tf", "h0" if c[3] else "noh0"))
@pytest.mark.parametrize("kind", list(MODULES))
def test_module_forward_and_backward_match_cpu(kind, config):
    layers, bidir, batch_first, with_state = config
    T, B, I, H = 5, 3, 4, 6
    g = torch.Generator().manual_seed(layers * 10 + bidir)
    x = torch.randn((B, T, I) if batch_first else (T, B, I), generator=g)
    h0 = None
    if with_state:
        shape = (layers * (2 if bidir else 1), B, H)
        h0 = (torch.randn(shape, generator=g), torch.randn(shape, generator=g)) if kind == "LSTM" else \
            (torch.randn(shape, generator=g),)
    make = lambda: MODULES[kind](input_size=I, hidden_size=H, num_layers=layers, bidirectional=bidir,  # noqa: E731
                                 batch_first=batch_first)
    _compare(make, x, h0)
    if kind in FUSED:
        stats = dispatch.stats()
        steps = T * layers * (2 if bidir else 1)
        assert stats[FUSED[kind][0]]["native"] == steps and stats[FUSED[kind][1]]["native"] == steps


@pytest.mark.parametrize("kind", list(MODULES))
def test_module_bfloat16_matches_cpu(kind):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, 4, generator=g)
    make = lambda: MODULES[kind](input_size=4, hidden_size=6, num_layers=2, bidirectional=True)  # noqa: E731
    _compare(make, x, None, dtype=torch.bfloat16)


CELLS = {
    "LSTMCell": lambda bias: torch.nn.LSTMCell(5, 7, bias=bias),
    "GRUCell": lambda bias: torch.nn.GRUCell(5, 7, bias=bias),
    "RNNCell_tanh": lambda bias: torch.nn.RNNCell(5, 7, bias=bias, nonlinearity="tanh"),
    "RNNCell_relu": lambda bias: torch.nn.RNNCell(5, 7, bias=bias, nonlinearity="relu"),
}


@pytest.mark.parametrize("with_state", [True, False], ids=["hx", "nohx"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("kind", list(CELLS))
def test_cells_match_cpu(kind, bias, with_state):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 5, generator=g)
    h0 = None
    if with_state:
        h0 = (torch.randn(4, 7, generator=g), torch.randn(4, 7, generator=g)) if kind == "LSTMCell" else \
            (torch.randn(4, 7, generator=g),)
    _compare(lambda: CELLS[kind](bias), x, h0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_packed_sequence_matches_cpu(kind):
    torch.manual_seed(3)
    m = MODULES[kind](input_size=4, hidden_size=5, num_layers=2, bidirectional=True)
    md = MODULES[kind](input_size=4, hidden_size=5, num_layers=2, bidirectional=True)
    md.load_state_dict(m.state_dict())
    md.to("neuron")
    x = torch.randn(6, 3, 4)
    lengths = torch.tensor([6, 2, 4])
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    dispatch.reset_stats()
    oc, hc = m(pack_padded_sequence(xc, lengths, enforce_sorted=False))
    od, hd = md(pack_padded_sequence(xd, lengths, enforce_sorted=False))
    pc, _ = pad_packed_sequence(oc)
    pd, _ = pad_packed_sequence(od)
    torch.testing.assert_close(pd.cpu(), pc, rtol=1e-5, atol=1e-6)
    for a, b in zip(hc if isinstance(hc, tuple) else [hc], hd if isinstance(hd, tuple) else [hd]):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)
    (pc * torch.arange(1, pc.shape[-1] + 1)).sum().backward()
    (pd * torch.arange(1, pd.shape[-1] + 1).to("neuron")).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    for p, q in zip(m.parameters(), md.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)
    stats = dispatch.stats()
    assert stats[FUSED[kind][0]]["native"] > 0 and stats[FUSED[kind][1]]["native"] > 0
    assert not [op for op, c in stats.items() if c["fallback"]]


# --- the fused ops against their ATen formula (RNN.cu) in float64 -------------------------------------


def _lstm_formula(ig, hg, cx, b1, b2):
    gates = ig.double() + hg.double()
    if b1 is not None:
        gates = gates + b1.double() + b2.double()
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.double() + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _gru_formula(ig, hg, hx, b1, b2):
    ir, iz, i_n = ig.double().chunk(3, 1)
    hr, hz, h_n = hg.double().chunk(3, 1)
    b1 = torch.zeros(ig.shape[1], dtype=torch.float64) if b1 is None else b1.double()
    b2 = torch.zeros(ig.shape[1], dtype=torch.float64) if b2 is None else b2.double()
    (b1r, b1z, b1n), (b2r, b2z, b2n) = b1.chunk(3), b2.chunk(3)
    r, z = (ir + hr + b1r + b2r).sigmoid(), (iz + hz + b1z + b2z).sigmoid()
    hn = h_n + b2n
    n = (i_n + b1n + r * hn).tanh()
    return n + z * (hx.double() - n), torch.cat([r, z, n, hx.double(), hn], 1)


def _assert_formula(dev, ref, dtype, where, contiguous=True):
    """``contiguous``: the workspace and the gates' gradients are; the states, grad_cx and grad_hx are laid out as
    CPU's composite cell lays them out (test_fused_cells_lay_out_their_results_as_cpus_composite)."""
    rtol, atol = TOL[dtype]
    assert dev.dtype == dtype and (dev.is_contiguous() or not contiguous), where
    torch.testing.assert_close(dev.cpu().double(), ref.to(dtype).double(), rtol=rtol, atol=atol,
                               msg=lambda m: f"{where}: {m}")


def _device(*tensors, layout="contiguous"):
    out = []
    for t in tensors:
        if t is None:
            out.append(None)
        elif layout == "transposed" and t.dim() == 2:  # same values, column-major on the device
            out.append(t.t().contiguous().to("neuron").t())
        else:
            out.append(t.to("neuron"))
    return out


# (batch, hidden): one tile; batch past a partition tile and hidden past a 512-column tile
SIZES = [(3, 6), (129, 513)]


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B, H", SIZES)
def test_fused_lstm_cell_and_backward_follow_aten_formula(B, H, dtype, bias, layout):
    g = torch.Generator().manual_seed(B + H)
    ig, hg = (torch.randn(B, 4 * H, generator=g).to(dtype) for _ in range(2))
    cx = torch.randn(B, H, generator=g).to(dtype)
    b1, b2 = (torch.randn(4 * H, generator=g).to(dtype) for _ in range(2)) if bias else (None, None)
    dispatch.reset_stats()
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(*_device(ig, hg, cx, b1, b2, layout=layout))
    r_hy, r_cy, r_ws = _lstm_formula(ig, hg, cx, b1, b2)
    for name, d, r in (("hy", hy, r_hy), ("cy", cy, r_cy), ("workspace (i, f, g, o)", ws, r_ws)):
        _assert_formula(d, r, dtype, name, contiguous=name.startswith("workspace"))
    # backward from the device's own workspace and cy, as autograd passes them
    gh, gc = (torch.randn(B, H, generator=g).to(dtype) for _ in range(2))
    cases = [(gh, gc), (None, gc), (gh, None)]
    for grad_hy, grad_cy in cases:
        d_gh, d_gc, d_cx = _device(grad_hy, grad_cy, cx, layout=layout)
        grad_gates, grad_cx, grad_bias = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
            d_gh, d_gc, d_cx, cy, ws, bias)
        i, f, gg, o = ws.cpu().double().chunk(4, 1)
        t = cy.cpu().double().tanh()
        go = torch.zeros(B, H, dtype=torch.float64) if grad_hy is None else grad_hy.double()
        goc = torch.zeros(B, H, dtype=torch.float64) if grad_cy is None else grad_cy.double()
        dc = go * o * (1 - t * t) + goc
        ref = torch.cat([dc * gg * (1 - i) * i, dc * cx.double() * (1 - f) * f, dc * i * (1 - gg * gg),
                         go * t * (1 - o) * o], 1)
        _assert_formula(grad_gates, ref, dtype, "grad_gates")
        _assert_formula(grad_cx, dc * f, dtype, "grad_cx", contiguous=False)
        if bias:
            _assert_formula(grad_bias, grad_gates.cpu().double().sum(0), dtype, "grad_bias")
        else:
            assert grad_bias is None
    assert torch.ops.aten._thnn_fused_lstm_cell_backward_impl(None, None, cx.to("neuron"), cy, ws, bias) == \
        (None, None, None)
    assert not [op for op, c in dispatch.stats().items() if c["fallback"]]


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B, H", SIZES)
def test_fused_gru_cell_and_backward_follow_aten_formula(B, H, dtype, bias, layout):
    g = torch.Generator().manual_seed(B * H)
    ig, hg = (torch.randn(B, 3 * H, generator=g).to(dtype) for _ in range(2))
    hx = torch.randn(B, H, generator=g).to(dtype)
    b1, b2 = (torch.randn(3 * H, generator=g).to(dtype) for _ in range(2)) if bias else (None, None)
    dispatch.reset_stats()
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(*_device(ig, hg, hx, b1, b2, layout=layout))
    r_hy, r_ws = _gru_formula(ig, hg, hx, b1, b2)
    _assert_formula(hy, r_hy, dtype, "hy", contiguous=False)
    _assert_formula(ws, r_ws, dtype, "workspace (r, z, n, hx, hn + b_hn)")
    assert torch.equal(ws.cpu()[:, 3 * H:4 * H], hx), "the workspace keeps hx exactly"
    gh = torch.randn(B, H, generator=g).to(dtype)
    (d_gh,) = _device(gh, layout=layout)
    gi, ghg, ghx, gbi, gbh = torch.ops.aten._thnn_fused_gru_cell_backward(d_gh, ws, bias)
    r, z, n, h0, hn = ws.cpu().double().chunk(5, 1)
    go = gh.double()
    d_in = go * (1 - z) * (1 - n * n)
    d_r, d_z = d_in * hn * (1 - r) * r, go * (h0 - n) * (1 - z) * z
    _assert_formula(gi, torch.cat([d_r, d_z, d_in], 1), dtype, "grad_input_gates")
    _assert_formula(ghg, torch.cat([d_r, d_z, d_in * r], 1), dtype, "grad_hidden_gates")
    _assert_formula(ghx, go * z, dtype, "grad_hx", contiguous=False)
    if bias:
        _assert_formula(gbi, gi.cpu().double().sum(0), dtype, "grad_input_bias")
        _assert_formula(gbh, ghg.cpu().double().sum(0), dtype, "grad_hidden_bias")
    else:
        assert gbi is None and gbh is None
    assert not [op for op, c in dispatch.stats().items() if c["fallback"]]


def test_empty_batch_gives_empty_results_and_zero_bias_grads():
    ig = torch.empty(0, 8, device="neuron")
    cx = torch.empty(0, 2, device="neuron")
    b = torch.randn(8).to("neuron")
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ig, ig, cx, b, b)
    assert hy.shape == (0, 2) and ws.shape == (0, 8)
    _, _, gb = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(cx, cx, cx, cy, ws, True)
    assert torch.equal(gb.cpu(), torch.zeros(8))
    ws5 = torch.empty(0, 10, device="neuron")
    *_, gbi, gbh = torch.ops.aten._thnn_fused_gru_cell_backward(cx, ws5, True)
    assert torch.equal(gbi.cpu(), torch.zeros(6)) and torch.equal(gbh.cpu(), torch.zeros(6))


def test_bad_arguments_raise_pytorch_errors():
    ig = torch.randn(3, 8, device="neuron")
    with pytest.raises(RuntimeError, match="previous state"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, torch.randn(3, 3, device="neuron"))
    with pytest.raises(RuntimeError, match="same size"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(3, 6, device="neuron"), torch.randn(3, 9, device="neuron"),
                                            torch.randn(3, 2, device="neuron"))
    with pytest.raises(RuntimeError, match="2-dimensional"):
        torch.ops.aten._thnn_fused_lstm_cell(ig[None], ig[None], torch.randn(3, 2, device="neuron"))
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        i = torch.ones(3, 8, dtype=torch.long, device="neuron")
        torch.ops.aten._thnn_fused_lstm_cell(i, i, torch.ones(3, 2, dtype=torch.long, device="neuron"))
    with pytest.raises(RuntimeError):  # CPU's own module checks the input size first
        torch.nn.LSTM(4, 2).to("neuron")(torch.randn(3, 1, 5, device="neuron"))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_float64_runs_through_counted_fallbacks_and_matches_cpu(kind):
    """float64 is storage-only on the engines: the fused cell runs ATen's formula as device ops, each taking
    the counted CPU fallback (there is no fused CPU kernel to borrow)."""
    torch.manual_seed(4)
    m = MODULES[kind](input_size=3, hidden_size=4).double()
    md = MODULES[kind](input_size=3, hidden_size=4).double()
    md.load_state_dict(m.state_dict())
    md.to("neuron")
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    dispatch.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warnings
        oc, od = m(xc)[0], md(xd)[0]
        oc.sum().backward()
        od.sum().backward()
    torch.testing.assert_close(od.cpu(), oc)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    stats = dispatch.stats()
    assert stats[FUSED[kind][0]]["native"] == 4 and stats[FUSED[kind][1]]["native"] == 4
    assert stats["aten::sigmoid.out"]["fallback"] > 0 and stats["aten::tanh.out"]["fallback"] > 0


# --- compiled mode --------------------------------------------------------------------------------------


class _Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 5, batch_first=True)
        self.head = torch.nn.Linear(5, 2)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.head(y).tanh().sum() + c.sum()


@pytest.fixture
def compiled_stats(monkeypatch, tmp_path):
    import device_impl.compiler as compiler

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    torch._dynamo.reset()
    compiler.reset_stats()
    yield compiler
    torch._dynamo.reset()
    compiler.reset_stats()


@pytest.mark.parametrize("allow_rnn", [False, True], ids=["dynamo-default", "allow_rnn"])
def test_compiled_lstm_forward_and_backward_match_cpu(compiled_stats, allow_rnn):
    """Dynamo refuses to trace nn.LSTM by default (config.allow_rnn=False: a graph break), so the frame runs
    eagerly on the device's fused cells; with allow_rnn=True, AOTAutograd decomposes aten.lstm into mm and
    pointwise ops and the compiler lowers forward and backward with no fallback."""
    torch.manual_seed(5)
    m, md = _Tagger(), _Tagger()
    md.load_state_dict(m.state_dict())
    md.to("neuron")
    x = torch.randn(2, 3, 4)
    dispatch.reset_stats()
    with torch._dynamo.config.patch(allow_rnn=allow_rnn):
        out = torch.compile(md, backend="neuron")(x.to("neuron"))
        out.backward()
    ref = m(x)
    ref.backward()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    for p, q in zip(m.parameters(), md.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)
    s = compiled_stats.stats()
    fused = dispatch.stats().get(FUSED["LSTM"][0], {}).get("native", 0)
    if allow_rnn:
        assert s["compiles"] == 2 and s["executions"] == 2 and s["fallbacks"] == 0, s
        assert fused == 0  # the compiled program, not the eager cell, computed the LSTM
    else:
        assert s["graphs"] == 0 and s["fallbacks"] == 0, s
        assert fused == 3
    assert not [op for op, c in dispatch.stats().items() if c["fallback"]]


def _laid(shape: tuple, how: str, seed: int, device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A matrix, contiguous, transposed, overlapping (as_strided (1, 1)) or expanded along its columns."""
    g = torch.Generator().manual_seed(seed)
    make = {"transposed": lambda: torch.randn(tuple(reversed(shape)), generator=g).to(dtype).to(device).t(),
            "overlapping": lambda: torch.randn(sum(shape), generator=g).to(dtype).to(device).as_strided(shape, (1, 1)),
            "expanded": lambda: torch.randn(shape[0], 1, generator=g).to(dtype).to(device).expand(shape),
            "contiguous": lambda: torch.randn(shape, generator=g).to(dtype).to(device)}
    return make[how]()


# the cotangents' layouts: (hy's, cy's); gru_cell's hy takes the first
COTANGENTS = {"contiguous": ("contiguous", "contiguous"), "transposed": ("transposed", "transposed"),
              "expanded": ("expanded", "expanded"), "transposed-expanded": ("transposed", "expanded")}


def _cell(cell: str, state: str, cotangent: str, device: str, dtype: torch.dtype) -> list:
    """lstm_cell's (hy, cy, cx's gradient) or gru_cell's (hy, hx's gradient), with a state and cotangents of
    these layouts (``COTANGENTS``)."""
    B, I, H = 3, 5, 7
    gates = 4 if cell == "lstm" else 3
    x = _laid((B, I), "contiguous", 0, device, dtype)
    hx, cx = (_laid((B, H), state, seed, device, dtype).requires_grad_() for seed in (1, 2))
    w_ih = _laid((gates * H, I), "contiguous", 3, device, dtype)
    w_hh = _laid((gates * H, H), "contiguous", 4, device, dtype)
    b_ih, b_hh = (_laid((gates * H, 1), "contiguous", seed, device, dtype)[:, 0] for seed in (5, 6))
    grads = tuple(_laid((B, H), how, s, device, dtype) for how, s in zip(COTANGENTS[cotangent], (7, 8)))
    if cell == "gru":
        hy = torch.gru_cell(x, hx, w_ih, w_hh, b_ih, b_hh)
        grad_hx, = torch.autograd.grad(hy, (hx,), grads[0])
        return [hy, grad_hx]
    hy, cy = torch.lstm_cell(x, (hx, cx), w_ih, w_hh, b_ih, b_hh)
    grad_cx, = torch.autograd.grad((hy, cy), (cx,), grads)
    return [hy, cy, grad_cx]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cotangent", list(COTANGENTS))
@pytest.mark.parametrize("state", ["contiguous", "transposed", "overlapping", "expanded"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_fused_cells_lay_out_their_results_as_cpus_composite(cell, state, cotangent, dtype):
    """CPU's lstm_cell/gru_cell are ATen's composite cells, whose pointwise steps lay hy, cy and the state's
    gradient out from the gates, the state and the cotangents: a transposed or overlapping state gives a
    transposed hy (designed gru_cell-float32-near_zero-overlapping-7: CPU (1, 3)), a transposed cx a transposed
    gradient (lstm_cell_state-float32-positive-transposed-7) and a transposed cotangent a transposed gru hx
    gradient; the fused kernels' were contiguous. In bfloat16 too: the layouts are asked of meta tensors, whose
    Python references upcast a reduced float operand (an expanded grad_cy beside a transposed grad_hy: CPU's cx
    gradient is transposed). Values in float32 (bfloat16's are the fused cell's one rounding, not CPU's per step)."""
    expected, got = _cell(cell, state, cotangent, "cpu", dtype), _cell(cell, state, cotangent, "neuron", dtype)
    for e, g in zip(expected, got, strict=True):
        if dtype == torch.float32:
            torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-4, atol=1e-5)
        assert [s for s, n in zip(g.stride(), g.shape) if n > 1] == [s for s, n in zip(e.stride(), e.shape) if n > 1]
