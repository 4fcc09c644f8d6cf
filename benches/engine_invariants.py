"""Engine invariants: device time, HBM bytes, per-engine busy, instruction events and output bits of ~65 ops.

Why: host-cost work on device_impl/engine must leave every simulated number and every output bit as it
was. Record on the base commit, record on the change, compare the two JSON files byte for byte:

    PYTHONPATH=<base tree> python benches/engine_invariants.py /tmp/before.json
    PYTHONPATH=<this tree> python benches/engine_invariants.py /tmp/after.json
    cmp /tmp/before.json /tmp/after.json

Covers elementwise fp32/bf16/int, broadcast, transposed, activations, reductions, softmax, layer_norm,
matmul, conv, indexing, sort/topk, casts, random, an LSTM, the decoder block's eager forward and a
25-op chain in eager and adaptive mode. Each launch's events (engine, name, start, duration) are hashed.
"""
import hashlib, json, sys, warnings
import torch
import device_impl  # noqa
from device_impl.engine import core
warnings.filterwarnings("ignore")


def main() -> None:
    """The script: asv's and pytest's discovery import this module and must not run it."""

    def h(t) -> str | list:
        """Hash of a result's bits, shape and dtype (bf16 viewed as int16)."""
        if isinstance(t, (tuple, list)):
            return [h(x) for x in t]
        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return hashlib.sha1(t.contiguous().numpy().tobytes()).hexdigest()[:16] + str(tuple(t.shape)) + str(t.dtype)

    g = torch.Generator().manual_seed(0)
    def r(*s, dt=torch.float32):
        return torch.randn(*s, generator=g).to(dt).to("neuron")
    def ri(*s, dt=torch.int32):
        return torch.randint(-50, 50, s, generator=g).to(dt).to("neuron")

    a = r(1000); b = r(1000); A = r(64, 300); B = r(300); Ab = r(64, 300, dt=torch.bfloat16); Bb = r(64, 300, dt=torch.bfloat16)
    I = ri(64, 300); J = ri(64, 300); Bool = r(64, 300) > 0; At = r(300, 64).t()
    X = r(256, 1024); W = r(128, 1024); M1 = r(96, 200); M2 = r(200, 160); Mb1 = r(96,200,dt=torch.bfloat16); Mb2 = r(200,160,dt=torch.bfloat16)
    img = r(2, 3, 16, 16); wconv = r(8, 3, 3, 3); idx = torch.randint(0, 64, (40,), generator=g).to("neuron")
    big = r(1 << 20); big2 = r(1 << 20)
    emb = r(100, 32)
    ops = {
     "add_1k": lambda: a + b, "add_1m": lambda: big + big2, "sub_bcast": lambda: A - B, "mul_scalar": lambda: A * 2.5,
     "div": lambda: A / (B + 3), "add_alpha": lambda: torch.add(A, B, alpha=0.3),
     "bf16_add": lambda: Ab + Bb, "bf16_mul_f32out": lambda: torch.mul(Ab, Bb, out=torch.empty(64,300,device="neuron")),
     "bf16_exp": lambda: torch.exp(Ab), "int_add": lambda: I + J, "int_mul": lambda: I * J, "int_floordiv": lambda: I // (J.abs() + 1),
     "int_rem": lambda: torch.remainder(I, 7), "bitand": lambda: I & J, "cmp": lambda: A > B, "where": lambda: torch.where(Bool, A, B),
     "transposed_add": lambda: At + 1.0, "exp": lambda: torch.exp(A), "sigmoid": lambda: torch.sigmoid(A), "tanh": lambda: torch.tanh(A),
     "gelu": lambda: torch.nn.functional.gelu(A), "silu": lambda: torch.nn.functional.silu(A), "erf": lambda: torch.erf(A),
     "pow": lambda: torch.pow(A.abs(), 1.7), "clamp": lambda: A.clamp(-0.5, 0.5), "relu": lambda: torch.relu(A),
     "sum_dim": lambda: A.sum(1), "sum_all": lambda: A.sum(), "amax": lambda: A.amax(0), "argmax": lambda: A.argmax(1),
     "mean_bf16": lambda: Ab.mean(1), "cumsum": lambda: A.cumsum(1), "softmax": lambda: torch.softmax(X, -1),
     "log_softmax": lambda: torch.log_softmax(X, -1), "layer_norm": lambda: torch.nn.functional.layer_norm(X, (1024,)),
     "matmul": lambda: M1 @ M2, "matmul_bf16": lambda: Mb1 @ Mb2, "linear": lambda: torch.nn.functional.linear(X, W),
     "conv2d": lambda: torch.nn.functional.conv2d(img, wconv, padding=1), "index_select": lambda: A.index_select(0, idx),
     "gather_idx": lambda: A[idx], "embedding": lambda: torch.nn.functional.embedding(idx, emb),
     "sort": lambda: torch.sort(A, 1), "topk": lambda: torch.topk(A, 5, 1), "cast_bf16": lambda: A.to(torch.bfloat16),
     "cast_int": lambda: A.to(torch.int32), "sqrt_neg": lambda: torch.sqrt(A), "masked_fill": lambda: A.masked_fill(Bool, 1.0),
     "rand": lambda: (torch.manual_seed(3), torch.rand(64, 300, device="neuron"))[1],
     "bf16_softmax": lambda: torch.softmax(X.to(torch.bfloat16), -1), "bf16_layer_norm": lambda: torch.nn.functional.layer_norm(X.to(torch.bfloat16), (1024,)),
     "bf16_sigmoid": lambda: torch.sigmoid(Ab), "bf16_silu": lambda: torch.nn.functional.silu(Ab), "sigmoid_t": lambda: torch.sigmoid(At),
     "gelu_tanh": lambda: torch.nn.functional.gelu(A, approximate="tanh"), "rsqrt": lambda: torch.rsqrt(A.abs()), "log1p": lambda: torch.log1p(A.abs()),
     "lstm": lambda: (torch.manual_seed(5), torch.nn.LSTM(16, 8).to("neuron")(r(5, 3, 16))[0])[1],
     "sum_bf16_f32": lambda: Ab.sum(1, dtype=torch.float32), "var": lambda: A.var(1), "rmsnorm_like": lambda: A * torch.rsqrt(A.pow(2).mean(-1, keepdim=True) + 1e-6),
     "dropout": lambda: (torch.manual_seed(4), torch.nn.functional.dropout(A, 0.3))[1],
    }
    out = {}
    for name, fn in ops.items():
        core.reset_stats()
        with core.record_trace() as tr:
            res = fn()
            torch.neuron.synchronize()
        st = core.stats()
        ev = hashlib.sha1(repr([(r.kernel, r.device_ns, r.instructions, sorted(r.busy_ns.items()), r.hbm_bytes, r.flops, r.sbuf_peak_bytes, r.psum_peak_bytes, r.events) for r in tr.reports]).encode()).hexdigest()[:16]
        out[name] = {"hash": h(res), "stats": st, "events": ev, "n": len(tr.reports)}
    # decoder block
    from harness.models import DecoderBlock
    torch.manual_seed(0)
    try:
        m = DecoderBlock()
    except TypeError:
        import inspect; print(inspect.signature(DecoderBlock)); raise
    x = torch.randn(2, 128, 256)
    m = m.to("neuron"); core.reset_stats()
    with core.record_trace() as tr:
        y = m(x.to("neuron")); torch.neuron.synchronize()
    ev = hashlib.sha1(repr([(r.kernel, r.device_ns, r.instructions, sorted(r.busy_ns.items()), r.hbm_bytes, r.flops, r.events) for r in tr.reports]).encode()).hexdigest()[:16]
    out["decoder_block"] = {"hash": h(y), "stats": core.stats(), "events": ev, "n": len(tr.reports)}
    x = r(1 << 16)
    def chain():
        y = x
        for i in range(10):
            y = torch.sigmoid(y * 1.01 + 0.1) if i % 2 else torch.tanh(y - 0.05)
        return torch.nn.functional.silu(y) * torch.nn.functional.gelu(y) + torch.softmax(y.view(256, 256), -1).view(-1)
    for mode in ("eager", "adaptive"):
        with torch.neuron.eager_mode(mode):
            core.reset_stats()
            with core.record_trace() as tr:
                y = chain(); torch.neuron.synchronize()
            ev = hashlib.sha1(repr([(r.kernel, r.device_ns, r.instructions, sorted(r.busy_ns.items()), r.hbm_bytes, r.flops, r.events) for r in tr.reports]).encode()).hexdigest()[:16]
            out["chain_" + mode] = {"hash": h(y), "stats": core.stats(), "events": ev, "n": len(tr.reports)}
    json.dump(out, open(sys.argv[1], "w"), indent=1, sort_keys=True)
    print(len(out), "ops recorded")


if __name__ == "__main__":
    main()
