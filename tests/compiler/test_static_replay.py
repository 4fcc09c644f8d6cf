"""Static programs simulate fast (compiler.replay): the fast path computes the same bits as the
instruction-level path, and the launch reports exactly the instruction-level device time, busy times,
HBM bytes, flops and instruction count, from the schedule recorded at compile time and kept in the NEFF."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from torch import nn

import device_impl.compiler as compiler
from device_impl import engine
from device_impl.compiler import executor, neff, replay
from device_impl.runtime import config
from harness.models import DecoderBlock
from support import run_python


class LlamaMLP(nn.Module):
    """The SwiGLU MLP of a Llama layer, with an edge-sized hidden width (tiles 128 + 1, 512 + 1)."""

    def __init__(self, hidden: int = 129, intermediate: int = 513):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 0.125, dim=-1)


class LayerNorm(nn.Module):
    def __init__(self, hidden: int = 300):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x) + 1.0


class Embed(nn.Module):
    """A gather with data-dependent rows (stablehlo.gather) feeding a matmul."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(300, 64)
        self.proj = nn.Linear(64, 32)

    def forward(self, ids):
        return self.proj(self.table(ids))


class IndexAdd(nn.Module):
    """A scatter with duplicate data-dependent rows (stablehlo.scatter, accumulating)."""

    def forward(self, x, ids, y):
        return torch.index_add(x * 2, 0, ids, y) + 1


class TileSteps(nn.Module):
    """Steps that run their tile program inside a replayed launch: convolution, reduce_window (max pool,
    cumsum), pad, argmax, concatenate."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = nn.functional.max_pool2d(self.conv(x), 2)
        z = nn.functional.pad(y, (1, 2, 0, 1), value=0.5).cumsum(-1)
        return torch.cat([z.flatten(), y.argmax(dim=1).to(z.dtype).flatten()])


class Attention(nn.Module):
    """SDPA (compiler/opaque.py: one attention step, the eager flash tile program) between fused groups;
    200 queries and keys: a full and an edge block of 128. ``masked``: grouped-query heads and a bool mask
    (a constant of the program) in place of ``is_causal``."""

    def __init__(self, masked: bool = False):
        super().__init__()
        self.masked = masked
        keep = torch.rand(200, 200, generator=torch.Generator().manual_seed(3)) > 0.2
        keep[:, 0] = True
        self.register_buffer("keep", keep, persistent=False)

    def forward(self, x):
        q, k, v = (x * 0.5).unbind(0)
        if not self.masked:
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) + 1
        k, v = k[:, :2], v[:, :2]
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.keep, enable_gqa=True) + 1


class AttentionWideHeads(nn.Module):
    """SDPA whose head dims take several tiles (kernels/attention.py: Q K^T summed over two E_TILE chunks, P V
    over two N_TILE column blocks), with a float mask (a constant of the program) and a scale of its own."""

    def __init__(self):
        super().__init__()
        bias = torch.randn(130, 150, generator=torch.Generator().manual_seed(4))
        bias[:, 3:9] = float("-inf")
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x):
        q, k, v = x[..., :130, :160] * 0.25, x[..., 160:320], x
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.bias.to(x.dtype), scale=0.3) * 2


def _inputs(kind: str, shape, dtype, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    if kind == "ids":
        return (torch.randint(0, 300, shape, generator=g),)
    if kind == "index_add":
        return (torch.randn(shape, generator=g).to(dtype), torch.randint(0, shape[0], (200,), generator=g),
                torch.randn((200,) + shape[1:], generator=g).to(dtype))
    return (torch.randn(shape, generator=g).to(dtype),)


CASES = {
    "decoder_block_fp32": (lambda: DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128), (2, 128, 256),
                           torch.float32),
    "decoder_block_bf16": (lambda: DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128), (2, 128, 256),
                           torch.bfloat16),
    "llama_mlp_fp32": (LlamaMLP, (3, 7, 129), torch.float32),
    "llama_mlp_bf16": (LlamaMLP, (3, 7, 129), torch.bfloat16),
    "softmax_fp32": (Softmax, (5, 3, 1000), torch.float32),
    "softmax_bf16": (Softmax, (4, 129, 77), torch.bfloat16),
    "layer_norm_fp32": (LayerNorm, (3, 130, 300), torch.float32),
    "layer_norm_bf16": (LayerNorm, (3, 130, 300), torch.bfloat16),
    "tile_steps_fp32": (TileSteps, (2, 3, 18, 20), torch.float32, "", "convolution"),
    "gather_fp32": (Embed, (3, 50), torch.float32, "ids", "gather"),
    "scatter_fp32": (IndexAdd, (70, 33), torch.float32, "index_add", "scatter"),
    "scatter_bf16": (IndexAdd, (70, 33), torch.bfloat16, "index_add", "scatter"),
    "attention_fp32": (Attention, (3, 2, 4, 200, 64), torch.float32, "", "attention"),
    "attention_bf16": (Attention, (3, 2, 4, 200, 64), torch.bfloat16, "", "attention"),
    "attention_masked_fp32": (lambda: Attention(masked=True), (3, 1, 4, 200, 64), torch.float32, "", "attention"),
    "attention_wide_heads_fp32": (AttentionWideHeads, (2, 3, 150, 600), torch.float32, "", "attention"),
    "attention_wide_heads_bf16": (AttentionWideHeads, (1, 2, 150, 600), torch.bfloat16, "", "attention"),
}


def _plans() -> list[replay.StepPlan]:
    """The group plans of every compiled program in memory: the fused steps' wide runners and the products'
    epilogues (``epilogue_plan``)."""
    plans = []
    for exe in compiler.cache._MEMORY.values():
        for _, runner in exe._fast or ():
            if isinstance(getattr(runner, "__self__", None), replay.StepPlan):
                plans.append(runner.__self__)
            if getattr(runner, "epilogue_plan", None) is not None:
                plans.append(runner.epilogue_plan)
    return plans


def _compiled_decoder() -> tuple:
    """The decoder block (seeded) compiled whole, and its input, after one call (the program compiled)."""
    torch.manual_seed(0)
    model = DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128).to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    xs = [torch.randn(2, 128, 256).to("neuron")]
    with torch.no_grad():
        compiled(*xs)
    return compiled, xs


def test_a_products_epilogue_is_planned_and_replayed(fresh, monkeypatch):
    """The decoder block's o, up and down products carry epilogues (the residual add and norm, silu * up, the
    residual add): each is recorded at the first fast execution and replayed after, with the bits and
    figures of the instruction-level run (``_assert_replays_match``)."""
    compiled, xs = _compiled_decoder()
    _run(compiled, xs, monkeypatch, fast=True)  # the plans are recorded by the first fast execution at the latest
    epilogues = [runner.epilogue_plan for exe in compiler.cache._MEMORY.values() for _, runner in exe._fast or ()
                 if getattr(runner, "epilogue_plan", None) is not None]
    # the o projection's norm, the MLP's silu * up and residual, and the rotary on the q and k projections
    assert len(epilogues) == 5 and all(plan.instructions for plan in epilogues), epilogues
    before = [plan.replays for plan in epilogues]
    _assert_replays_match(compiled, [torch.randn(2, 128, 256).to("neuron")], monkeypatch)
    assert [plan.replays - b for plan, b in zip(epilogues, before)] == [2] * 5


def test_a_plan_reads_and_writes_whole_tiles_where_they_lie_in_hbm(fresh, monkeypatch):
    """A plan's whole-tile loads whose tile only elementwise instructions read, and whole-tile stores of a tile one
    elementwise instruction wrote, are not issued at a replay: the tile is bound to its HBM view (the decoder
    block's norms, residual adds and silu * up: 9 tiles), with the bits and figures of the instruction-level
    run. The rotary epilogues (loads and stores of regions of a tile) and a load whose tile a row sum reads
    in place stay as recorded."""
    compiled, xs = _compiled_decoder()
    _run(compiled, xs, monkeypatch, fast=True)  # records the plans
    plans = _plans()
    assert sorted(len(plan.binds) for plan in plans) == [0, 0, 2, 2, 2, 3], [len(p.binds) for p in plans]
    for plan in plans:
        assert len(plan.direct or plan.instructions) == len(plan.instructions) - len(plan.binds)
    before = [plan.direct_replays for plan in plans]
    _assert_replays_match(compiled, [torch.randn(2, 128, 256).to("neuron")], monkeypatch)
    assert [plan.direct_replays - b for plan, b in zip(plans, before)] == [2 if plan.binds else 0 for plan in plans]
    for plan in plans:  # each bound tile has its own array back after the replay
        assert all(tile.data is plan.kept_data[tile] for tile, *_ in plan.binds)


def test_bound_tiles_that_overlap_in_hbm_run_the_plan_as_recorded():
    """Bound tiles must lie on separate bytes at every execution (a result written where an input it still
    reads lies would read the input after it was overwritten; inputs and outputs are placed by the caller, so
    bases apart at the recording may overlap later): an execution whose bound views overlap, or whose array
    has another dtype than its tile, binds nothing and issues the plan as recorded."""
    from device_impl.engine.memory import Tile

    base = np.zeros(1024, np.float32)
    a, b = (Tile(np.empty((4, 64), np.float32), "sbuf", name) for name in "ab")
    apart = [(a, 0, 0, (4, 64), (256, 4)), (b, 0, 1024, (4, 64), (256, 4))]
    bound = replay._bind(apart, [base])
    assert [tile for tile, _ in bound] == [a, b]
    assert all(np.shares_memory(view, base) and view.shape == (4, 64) for _, view in bound)
    assert replay._bind([(a, 0, 0, (4, 64), (256, 4)), (b, 0, 1020, (4, 64), (256, 4))], [base]) == []
    assert replay._bind(apart, [base.view(np.int32)]) == []


def _assert_replays_match(fn, xs, monkeypatch) -> None:
    """Fast executions that replay recorded group plans compute the instruction-level bits and report its
    figures, twice (the plans' tiles are reused: nothing of the first replay may leak into the second)."""
    slow = _run(fn, xs, monkeypatch, fast=False)
    before = sum(plan.replays for plan in _plans())
    for _ in range(2):
        fast = _run(fn, xs, monkeypatch, fast=True)
        assert torch.equal(_bits(slow[0]) if slow[0].is_floating_point() else slow[0].cpu(),
                           _bits(fast[0]) if fast[0].is_floating_point() else fast[0].cpu())
        assert slow[1:] == fast[1:]
    planned = [plan for plan in _plans() if plan.instructions is not None]
    refused = [plan.refused for plan in _plans() if plan.refused]
    assert not refused, refused  # every step here records (no group divides integers)
    fused = any(step["kind"] == "fused" for exe in compiler.cache._MEMORY.values() for step in exe.program.steps)
    assert planned or not fused
    assert sum(plan.replays for plan in _plans()) - before == 2 * len(planned)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _run(fn, xs, monkeypatch, fast: bool) -> tuple[torch.Tensor, dict, dict, int]:
    """Outputs, engine statistics, the launch report (less its start time) and the device clock advance."""
    monkeypatch.setattr(executor, "STATIC_REPLAY", fast)
    calls = {"fast": 0}
    original = executor.Executable.run_fast

    def counting(self, nc, env):
        calls["fast"] += 1
        return original(self, nc, env)

    monkeypatch.setattr(executor.Executable, "run_fast", counting)
    engine.reset_stats()
    torch.neuron.synchronize()
    before = torch.neuron.device_time_ns()
    with torch.no_grad():
        out = fn(*xs)
    torch.neuron.synchronize()
    after = torch.neuron.device_time_ns()
    report = dataclasses.asdict(engine.last_launch())
    report.pop("start_ns")
    assert calls["fast"] == (1 if fast else 0), calls
    return out, engine.stats(), report, after - before


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_matches_the_instruction_level_run(case, fresh, monkeypatch):
    factory, shape, dtype, *inputs = CASES[case]
    torch.manual_seed(0)
    model = factory().to(dtype).to("neuron")
    xs = [x.to("neuron") for x in _inputs(inputs[0] if inputs else "", shape, dtype)]
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    with torch.no_grad():  # the first call compiles and loads the NEFF's constants (a copy on the device clock)
        compiled(*xs)
    slow = _run(compiled, xs, monkeypatch, fast=False)
    fast = _run(compiled, xs, monkeypatch, fast=True)
    assert torch.equal(_bits(slow[0]), _bits(fast[0])), "fast path changed the numerics"
    assert slow[1] == fast[1]  # per-kernel device_ns, hbm_bytes, flops, busy ns per engine
    assert slow[2] == fast[2]  # the launch report: device time, busy, HBM read/write, flops, instructions, peaks
    assert slow[3] == fast[3]
    # the first fast execution recorded its groups' plans; later ones replay them, on other values
    others = [x.to("neuron") for x in _inputs(inputs[0] if inputs else "", shape, dtype, seed=7)]
    _assert_replays_match(compiled, others, monkeypatch)
    neff_stats = [v for k, v in fast[1].items() if k.startswith("neff:")]
    assert neff_stats and all(s["device_ns"] > 0 and s["hbm_bytes"] > 0 for s in neff_stats)
    if inputs:  # the step kind the case is about is in the replayed program
        assert any(step["kind"] == inputs[1] for exe in compiler.cache._MEMORY.values()
                   for step in exe.program.steps)
    # and both agree with CPU eager within the usual tolerance (the fast path computes, it does not copy)
    with torch.no_grad():
        expected = model.cpu()(*[x.cpu() for x in xs])
    torch.testing.assert_close(fast[0].cpu().float(), expected.float(),
                               **({"atol": 5e-2, "rtol": 5e-2} if dtype == torch.bfloat16 else {}))


def test_the_recorded_schedule_is_the_launch_of_the_instruction_level_run(fresh, monkeypatch):
    """The schedule recorded at compile time (zero inputs, host arrays) equals what a real run measures."""
    model = LlamaMLP().to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    x = torch.randn(3, 7, 129).to("neuron")
    _, _, report, _ = _run(compiled, [x], monkeypatch, fast=False)
    (exe,) = compiler.cache._MEMORY.values()
    schedule = exe.program.schedule
    assert schedule is not None
    assert report["device_ns"] == schedule["end_ns"] + engine.core.PLATFORM.launch_overhead_ns
    assert report["busy_ns"] == schedule["busy_ns"]
    assert (report["hbm_bytes_read"], report["hbm_bytes_written"]) == (schedule["hbm_read"], schedule["hbm_write"])
    assert (report["flops"], report["instructions"]) == (schedule["flops"], schedule["instructions"])
    assert (report["sbuf_peak_bytes"], report["psum_peak_bytes"]) == (schedule["sbuf_peak"], schedule["psum_peak"])


def test_a_trace_records_every_instruction(fresh, monkeypatch):
    """While a trace records, the program runs instruction by instruction (the trace needs them)."""
    compiled = torch.compile(Softmax().to("neuron"), backend="neuron", fullgraph=True)
    x = torch.randn(4, 300).to("neuron")
    compiled(x)
    monkeypatch.setattr(executor, "STATIC_REPLAY", True)
    with engine.record_trace() as trace:
        compiled(x)
    (report,) = [r for r in trace.reports if r.kernel.startswith("neff:")]
    assert len(report.events) == report.instructions > 0


def test_a_data_dependent_program_keeps_the_instruction_level_path(fresh, monkeypatch):
    def f(x):
        return torch.sort(x, dim=-1).values * 2

    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    x = torch.randn(4, 33).to("neuron")
    _run(compiled, [x], monkeypatch, fast=False)
    (exe,) = compiler.cache._MEMORY.values()
    assert exe.program.schedule is None and not replay.is_static(exe.program)
    monkeypatch.setattr(executor, "STATIC_REPLAY", True)
    out = compiled(x)  # run_fast is not taken (no schedule): _run's count would say so
    torch.testing.assert_close(out.cpu(), torch.sort(x.cpu(), dim=-1).values * 2)


def test_every_step_kind_is_classified():
    """A runner kind without an entry would silently count as data-dependent: each must be decided."""
    from device_impl.compiler import steps

    assert set(steps.RUNNERS) | {"fused"} == set(replay.STEP_KINDS)
    assert set(replay.WIDE) == {k for k, v in replay.STEP_KINDS.items() if v == "wide"}
    assert set(replay.STEP_KINDS.values()) == {"wide", "plan", "tile", "data"}


def test_the_switch_forces_the_instruction_level_path():
    assert config.static_replay({}) is True
    assert config.static_replay({"NEURON_STATIC_REPLAY": "0"}) is False
    assert config.static_replay({"NEURON_STATIC_REPLAY": "1"}) is True
    with pytest.raises(ValueError, match="NEURON_STATIC_REPLAY"):
        config.static_replay({"NEURON_STATIC_REPLAY": "sometimes"})


WARM = """
import json, torch, device_impl
import device_impl.compiler as compiler
from device_impl import engine
from device_impl.compiler import executor
from harness.models import DecoderBlock
if {forbid_instructions}:
    def refuse(self, nc, env):
        raise AssertionError("instruction-level run in a warm process")
    executor.Executable.run_steps = refuse
torch.manual_seed(0)
model = DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128).to("neuron")
x = torch.randn(2, 128, 256).to("neuron")
compiled = torch.compile(model, backend="neuron", fullgraph=True)
with torch.no_grad():
    out = compiled(x)
(exe,) = compiler.cache._MEMORY.values()
launch = engine.last_launch()
print(json.dumps({{"stats": compiler.stats(), "schedule": exe.program.schedule, "device_ns": launch.device_ns,
                  "hbm": launch.hbm_bytes, "bits": out.cpu().view(torch.int32).sum().item(),
                  "checksum": float(out.cpu().double().sum())}}))
"""


def test_a_program_from_the_disk_cache_has_its_schedule(tmp_path):
    """A fresh process that loads the NEFF from disk replays at once: no instruction-level run at all."""
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.getcwd()}
    cold = run_python(WARM.format(forbid_instructions=False), **env, NEURON_STATIC_REPLAY="0")
    assert cold.returncode == 0, cold.stderr[-3000:]
    cold = json.loads(cold.stdout.strip().splitlines()[-1])
    warm = run_python(WARM.format(forbid_instructions=True), **env)
    assert warm.returncode == 0, warm.stderr[-3000:]
    warm = json.loads(warm.stdout.strip().splitlines()[-1])
    assert cold["stats"]["compiles"] == 1 and warm["stats"]["cache_hits_by_source"]["disk"] == 1
    assert warm["schedule"] == cold["schedule"] and warm["schedule"]["instructions"] > 0
    assert (warm["device_ns"], warm["hbm"], warm["bits"]) == (cold["device_ns"], cold["hbm"], cold["bits"])
    (path,) = [os.path.join(d, f) for d, _, files in os.walk(tmp_path) for f in files if f.endswith(".neff")]
    assert neff.read(path).program.schedule == cold["schedule"]


def test_a_program_that_refuses_zeros_is_not_replayed(fresh, monkeypatch):
    """The schedule is recorded on zero inputs; an integer division by them raises (as on CPU), so that
    program keeps the instruction-level path instead of failing to compile."""
    def f(x, y):
        return torch.div(x, y, rounding_mode="floor") + 1

    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    x = torch.arange(-20, 20, dtype=torch.int32).reshape(4, 10)
    y = torch.full((4, 10), 3, dtype=torch.int32)
    out, _, _, _ = _run(compiled, [x.to("neuron"), y.to("neuron")], monkeypatch, fast=False)
    (exe,) = compiler.cache._MEMORY.values()
    assert replay.is_static(exe.program) and exe.program.schedule is None
    assert torch.equal(out.cpu(), torch.div(x, y, rounding_mode="floor") + 1)


class Projected(nn.Module):
    """Attention with trainable projections: its training step has both attention steps (compiler/opaque.py)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 3 * 64)

    def forward(self, x):
        # contiguous heads: the backward graph's saved inputs are laid out as the schedule was recorded
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 32).permute(2, 0, 3, 1, 4).contiguous()
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


TRAINED = {"decoder_block": (lambda: DecoderBlock(hidden=128, heads=2, kv_heads=1, seq=64), (2, 64, 128)),
           "attention": (Projected, (2, 150, 64))}


@pytest.mark.parametrize("case", sorted(TRAINED))
def test_a_training_step_replays_forward_and_backward(fresh, monkeypatch, case):
    """AOTAutograd's backward graph (transposed products, reductions of gradients, the flash backward)
    replays exactly too."""
    torch.manual_seed(0)
    factory, shape = TRAINED[case]
    model = factory().to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    x = torch.randn(*shape).to("neuron")

    calls = []
    original = executor.Executable.run_fast
    monkeypatch.setattr(executor.Executable, "run_fast",
                        lambda self, nc, env: calls.append(self.name) or original(self, nc, env))

    def step(fast: bool):
        monkeypatch.setattr(executor, "STATIC_REPLAY", fast)
        model.zero_grad(set_to_none=True)
        engine.reset_stats()
        compiled(x).square().mean().backward()
        torch.neuron.synchronize()
        grads = [_bits(p.grad).clone() for p in model.parameters()]
        return grads, {k: v for k, v in engine.stats().items() if k.startswith("neff:")}

    _, first = step(False)  # compiles, and lays the forward's weights out once (compiler.layout), in a launch
    assert any(name.endswith(":layout") for name in first)
    slow_grads, slow_stats = step(False)
    assert not calls
    fast_grads, fast_stats = step(True)
    assert len(calls) == 2  # both programs took the fast path
    assert len(slow_stats) == 2 and slow_stats == fast_stats  # the forward and the backward program
    assert all(torch.equal(a, b) for a, b in zip(slow_grads, fast_grads))
    assert all(exe.program.schedule is not None for exe in compiler.cache._MEMORY.values())
    if case == "attention":
        kinds = {step["kind"] for exe in compiler.cache._MEMORY.values() for step in exe.program.steps}
        assert {"attention", "attention_backward"} <= kinds


def test_an_input_laid_out_otherwise_runs_instruction_by_instruction(fresh, monkeypatch):
    """DMA costs follow strides: a transposed input is not what the schedule was recorded with."""
    def f(x):
        return torch.softmax(x * 2 + 1, dim=-1)

    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    x = torch.randn(64, 48).to("neuron")
    compiled(x.t())
    calls = []
    original = executor.Executable.run_fast
    monkeypatch.setattr(executor.Executable, "run_fast",
                        lambda self, nc, env: calls.append(self.name) or original(self, nc, env))
    monkeypatch.setattr(executor, "STATIC_REPLAY", True)
    out = compiled(x.t())
    assert not calls and compiler.cache._MEMORY and all(
        exe.program.schedule is not None for exe in compiler.cache._MEMORY.values())
    torch.testing.assert_close(out.cpu(), f(x.cpu().t()))
    compiled(x.t().contiguous())
    assert len(calls) == 1


def _mm(shape_a, shape_b):
    return lambda g: (torch.randn(shape_a, generator=g), torch.randn(shape_b, generator=g)), torch.matmul


EDGES = {  # tile edges (1, 127, 129, 513) where a wide runner's one tile differs most from the tile loop
    "mm_1x1x1": _mm((1, 1), (1, 1)),
    "mm_1x129x513": _mm((1, 129), (129, 513)),
    "mm_127x1x2": _mm((127, 1), (1, 2)),
    "mm_129x257x1": _mm((129, 257), (257, 1)),
    "mm_130x300x514": _mm((130, 300), (300, 514)),
    "bmm_4x129x130x3": _mm((4, 129, 130), (4, 130, 3)),
    # stacked products (the wide runner multiplies every batch in one np.matmul): gemv-shaped blocks too
    "bmm_5x1x300x513": _mm((5, 1, 300), (5, 300, 513)),
    "bmm_3x129x7x1": _mm((3, 129, 7), (3, 7, 1)),
    "bmm_8x32x16x32": _mm((8, 32, 16), (8, 16, 32)),
    # whole tiles (replay.TileOperand: packed operands, one np.matmul per K slice): several K slices and N
    # blocks (accumulated apart from the output), a bf16 output, one-row and one-column (gemv) tiles
    "mm_256x384x1024": _mm((256, 384), (384, 1024)),
    "mm_256x384x1024_bf16": (lambda g: (torch.randn(256, 384, generator=g).bfloat16(),
                                        torch.randn(384, 1024, generator=g).bfloat16()), torch.matmul),
    "bmm_3x1x256x1024": _mm((3, 1, 256), (3, 256, 1024)),
    "mm_256x256x1_t": (lambda g: (torch.randn(256, 256, generator=g), torch.randn(1, 256, generator=g)),
                       lambda a, b: a @ b.t()),
    # one value the stationary operand of a product and the moving one of the next (tiled otherwise)
    "mm_operand_both_sides": (lambda g: (torch.randn(256, 256, generator=g), torch.randn(256, 3, generator=g),
                                         torch.randn(3, 256, generator=g)),
                              lambda a, b, c: torch.cat([(a @ b).flatten(), (c @ a).flatten()])),
    # tiled, batched (one np.matmul over every batch and block); mm_1x1x1 and bmm_8x32x16x32 are whole tiles
    # too small to pack (replay.TILED_ELEMENTS): block by block
    "bmm_8x128x64x64": _mm((8, 128, 64), (8, 64, 64)),
    "sum_dim0": (lambda g: (torch.randn(129, 3, generator=g),), lambda x: x.sum(0) * 3),
    "mean_long_rows": (lambda g: (torch.randn(2, 1, 5000, generator=g),), lambda x: x.mean(-1, keepdim=True) - x),
    "amax_middle": (lambda g: (torch.randn(5, 300, 7, generator=g),), lambda x: x.amax(1) + x.sum(1)),
    "logsumexp": (lambda g: (torch.randn(33, 1025, generator=g),), lambda x: torch.logsumexp(x, -1)),
    "gelu_tanh_bf16": (lambda g: (torch.randn(129, 513, generator=g).bfloat16(),),
                       lambda x: nn.functional.gelu(x, approximate="tanh") * torch.tanh(x)),
    "where_int32": (lambda g: (torch.randint(-5, 5, (127, 9), generator=g, dtype=torch.int32),),
                    lambda x: torch.where(x > 0, x * 3, -x).sum(-1)),
}


@pytest.mark.parametrize("case", sorted(EDGES))
def test_tile_edges_match_the_instruction_level_run(case, fresh, monkeypatch):
    make, f = EDGES[case]
    xs = [x.to("neuron") for x in make(torch.Generator().manual_seed(2))]
    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    slow = _run(compiled, xs, monkeypatch, fast=False)
    fast = _run(compiled, xs, monkeypatch, fast=True)
    assert torch.equal(_bits(slow[0]) if slow[0].is_floating_point() else slow[0].cpu(),
                       _bits(fast[0]) if fast[0].is_floating_point() else fast[0].cpu())
    assert slow[1:] == fast[1:]
    _assert_replays_match(compiled, [x.to("neuron") for x in make(torch.Generator().manual_seed(8))], monkeypatch)
    assert bool(_tile_operands()) == (case in TILED_EDGES)


TILED_EDGES = {"mm_256x384x1024", "mm_256x384x1024_bf16", "bmm_3x1x256x1024", "mm_256x256x1_t",
               "mm_operand_both_sides", "bmm_8x128x64x64"}


def test_a_group_dividing_integers_is_not_planned():
    """An integer division checks its divisor for zeros by reading a tile in Python (CPU raises): a plan
    would issue the instructions without the check, so such a group is never recorded (its program
    refuses the zeros its schedule is recorded on as well, so it runs instruction by instruction today)."""
    step = {"kind": "fused", "ops": [{"op": "divide", "in_types": ["int32", "int32"]},
                                     {"op": "multiply", "in_types": ["int32", "int32"]}]}
    assert not replay.plannable(step)
    step["ops"][0]["in_types"] = ["float32", "float32"]
    assert replay.plannable(step)
    step["ops"][0] = {"op": "remainder", "in_types": ["int64", "int64"]}
    assert not replay.plannable(step)


def test_a_group_over_the_plan_budget_runs_as_before(fresh, monkeypatch):
    """A group whose tiles exceed PLAN_BYTES is not recorded (a plan keeps its tiles between executions)."""
    monkeypatch.setattr(replay, "PLAN_BYTES", 0)
    compiled = torch.compile(Softmax().to("neuron"), backend="neuron", fullgraph=True)
    x = torch.randn(4, 300).to("neuron")
    slow = _run(compiled, [x], monkeypatch, fast=False)
    for _ in range(2):
        fast = _run(compiled, [x], monkeypatch, fast=True)
        assert torch.equal(_bits(slow[0]), _bits(fast[0])) and slow[1:] == fast[1:]
    plans = _plans()
    assert plans and all(plan.refused and plan.instructions is None and plan.replays == 0 for plan in plans)


def test_a_replayed_gather_checks_the_new_indices(fresh, monkeypatch):
    """A gather's plan issues its offsets program with each execution's indices: its bounds check still
    raises PyTorch's IndexError for an index the recording never saw, and other rows move as recorded."""
    torch.manual_seed(0)
    model = Embed().to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    ids = torch.randint(0, 300, (3, 50), generator=torch.Generator().manual_seed(3)).to("neuron")
    with torch.no_grad():
        compiled(ids)
    _assert_replays_match(compiled, [ids], monkeypatch)
    assert any(step["kind"] == "gather" for exe in compiler.cache._MEMORY.values() for step in exe.program.steps)
    assert any(plan.replays for plan in _plans())
    bad = ids.clone()
    bad[1, 7] = 300
    with torch.no_grad(), pytest.raises(IndexError, match="out of bounds"):
        compiled(bad)
    other = torch.randint(0, 300, (3, 50), generator=torch.Generator().manual_seed(4)).to("neuron")
    _assert_replays_match(compiled, [other], monkeypatch)


def test_a_plan_recorded_on_aliasing_inputs_reads_each_input_later(fresh, monkeypatch):
    """Recorded while one input lay inside another (a row of the same storage), an operand's bytes fall in
    two base arrays; which one it was read through is then ambiguous, so no plan is kept, and later calls with
    separate inputs read each from its own tensor."""
    compiled = torch.compile(lambda a, b: a * 2 + b * 3, backend="neuron", fullgraph=True)
    x = torch.randn(2, 8).to("neuron")
    expected = x.cpu() * 2 + x[1].cpu() * 3
    for _ in range(2):
        out, *_ = _run(compiled, [x, x[1]], monkeypatch, fast=True)
        assert torch.equal(out.cpu(), expected)
    y, z = torch.randn(2, 8).to("neuron"), torch.randn(8).to("neuron")
    for _ in range(2):
        out, *_ = _run(compiled, [y, z], monkeypatch, fast=True)
        assert torch.equal(out.cpu(), y.cpu() * 2 + z.cpu() * 3)


def _tile_operands() -> list[replay.TileOperand]:
    """The packed operands (stationary, moving) of every tiled product of the compiled programs in memory."""
    return [operand for exe in compiler.cache._MEMORY.values() for _, runner in (exe._fast or ())
            for operand in getattr(runner, "operands", ())]


def test_a_kept_weight_is_packed_again_after_every_update(fresh, monkeypatch):
    """A product's weight is packed into its TensorE tiles once and kept while its bytes are unchanged
    (replay.TileOperand): each update in place, through the tensor under no_grad (its version counter
    moves), through ``.data`` (it does not), or from 0.0 to -0.0 (equal as floats, not as bits), is packed
    again and read by the next execution, whose bits are still the instruction-level run's. The weight is a
    plain input here: a parameter is kept in TensorE's layout on the device instead (compiler.layout, tested
    below), which the product reads in place."""
    weight = (torch.rand(512, 256) * 2 - 1).div(16).to("neuron")  # nn.Linear(256, 512)'s initial range
    x = torch.randn(2, 128, 256).to("neuron")
    compiled = torch.compile(lambda x, w: nn.functional.linear(x, w), backend="neuron", fullgraph=True)
    with torch.no_grad():
        compiled(x, weight)

    def check(xs) -> None:
        slow = _run(compiled, [*xs, weight], monkeypatch, fast=False)
        fast = _run(compiled, [*xs, weight], monkeypatch, fast=True)
        assert torch.equal(_bits(slow[0]), _bits(fast[0]))
        assert slow[1:] == fast[1:]
        expected = nn.functional.linear(xs[0].cpu(), weight.cpu())
        torch.testing.assert_close(fast[0].cpu(), expected)

    check([x])
    (stationary, moving), = [_tile_operands()]
    assert moving.keepable and moving.kept is not None and moving.packs == 1
    check([x])
    assert moving.packs == 1  # the same bytes: the kept tiles
    updates = [lambda w: w.mul_(-0.5), lambda w: w.data.add_(0.25),
               lambda w: w.data[3, 7].fill_(0.0), lambda w: w.data[3, 7].fill_(-0.0)]
    for packs, update in enumerate(updates, start=2):
        version = weight._version
        with torch.no_grad():
            update(weight)
        assert (weight._version != version) == (packs == 2)  # only the first update is versioned
        check([x])
        check([x])
        assert moving.packs == packs and moving.kept is not None
    # the activation: kept while its bytes are the same; not kept once they differ at two executions in a row
    assert stationary.kept is not None and stationary.packs == 1
    check([torch.randn(2, 128, 256).to("neuron")])
    assert stationary.kept is not None and stationary.packs == 2
    check([x])
    assert stationary.kept is None and not stationary.keepable and stationary.packs == 3
    check([x])
    assert stationary.kept is None and stationary.packs == 4 and moving.packs == len(updates) + 1


class Products(nn.Module):
    """Tiled products whose blocks split along each block axis (compiler/workers.py): a projection of one M
    block and two N blocks (its output evacuated block by block), and a batched product of four."""

    def __init__(self):
        super().__init__()
        self.wide = nn.Linear(256, 1024, bias=False)

    def forward(self, x, y):
        return self.wide(x[0, :128]).sum() + torch.bmm(x, y)


THREADED = {
    "decoder_block_fp32": CASES["decoder_block_fp32"],
    "decoder_block_bf16": CASES["decoder_block_bf16"],
    "attention_fp32": CASES["attention_fp32"],
    "attention_wide_heads_fp32": CASES["attention_wide_heads_fp32"],
    "products_fp32": (Products, None, torch.float32),
}


@pytest.mark.parametrize("case", sorted(THREADED))
def test_threaded_blocks_give_the_bits_of_one_thread(case, fresh, monkeypatch):
    """Product blocks and attention batches shared among two host threads (workers.split) compute the bits
    of one thread and of the instruction-level run, with the same recorded figures; the shares did run apart."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from device_impl.compiler import workers

    factory, shape, dtype, *inputs = THREADED[case]
    torch.manual_seed(0)
    model = factory().to(dtype).to("neuron")
    if shape is None:
        g = torch.Generator().manual_seed(2)
        xs = [torch.randn(4, 256, 256, generator=g).to("neuron"), torch.randn(4, 256, 512, generator=g).to("neuron")]
    else:
        xs = [x.to("neuron") for x in _inputs(inputs[0] if inputs else "", shape, dtype)]
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    shares = []
    split = workers.split

    def counting(extent, work, threads):
        shares.append(min(threads, extent))
        return split(extent, work, threads)

    monkeypatch.setattr(workers, "split", counting)
    # every execution at two threads splits (which count pays on this host is SplitChoice's, tested below)
    monkeypatch.setattr(workers.SplitChoice, "threads", lambda self, wanted: wanted)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"), torch.no_grad():
        compiled(*xs)
        monkeypatch.setattr(workers, "THREADS", 1)
        shares.clear()
        one = _run(compiled, xs, monkeypatch, fast=True)
        assert max(shares, default=1) == 1
        shares.clear()
        monkeypatch.setattr(workers, "THREADS", 2)
        assert workers.width() == 2
        two = _run(compiled, xs, monkeypatch, fast=True)
        assert shares and max(shares) == 2
        again = _run(compiled, xs, monkeypatch, fast=True)  # the shares' epilogue plans, recorded above, replayed
        slow = _run(compiled, xs, monkeypatch, fast=False)
    assert torch.equal(_bits(one[0]), _bits(two[0])), "threads changed the numerics"
    assert torch.equal(_bits(slow[0]), _bits(two[0])) and torch.equal(_bits(slow[0]), _bits(again[0]))
    assert one[1:] == two[1:] == again[1:] == slow[1:]
    if case.startswith("decoder_block"):
        # the projections' epilogues (rotary, the norm after o, silu(gate) * up, the residual add) ran in the shares,
        # each share's rows by a plan of its own, replayed; each share packed its own blocks of the activation
        runners = [runner for exe in compiler.cache._MEMORY.values() for _, runner in (exe._fast or ())]
        plans = [plan for runner in runners for plan in getattr(runner, "share_plans", {}).values()
                 if plan is not runner.epilogue_plan]
        assert len(plans) >= 8 and all(plan.replays >= 1 for plan in plans), [p.replays for p in plans]
        assert sum(operand.share_packs for operand in _tile_operands()) >= 4


def test_threads_follow_torch_and_stay_off_beside_a_threaded_blas(monkeypatch):
    """workers.width: NEURON_HOST_THREADS where set, else torch's thread count; one thread while numpy's BLAS
    runs several per call (its threaded kernels give other bits, and it spreads each product itself)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from device_impl.compiler import workers

    monkeypatch.setattr(workers, "THREADS", None)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            assert workers.blas_threads() == 1
            assert workers.width() == 2
            torch.set_num_threads(1)
            assert workers.width() == 1
            monkeypatch.setattr(workers, "THREADS", 3)
            assert workers.width() == 3
        with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
            assert workers.width() == 1
    finally:
        torch.set_num_threads(threads)
    assert config.host_threads({}) is None and config.host_threads({"NEURON_HOST_THREADS": " 2 "}) == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="NEURON_HOST_THREADS"):
            config.host_threads({"NEURON_HOST_THREADS": bad})


def test_a_share_runs_under_the_callers_errstate_and_its_error_reaches_the_caller():
    """Each share runs in a copy of the caller's context (numpy's errstate is a context variable), every share
    finishes before split returns, and a share's error is raised to the caller."""
    import numpy as np

    from device_impl.compiler import workers

    seen = {}

    def work(start, stop):
        seen[start] = np.geterr()["over"]
        if start:
            raise ZeroDivisionError("share")

    with np.errstate(over="ignore"), pytest.raises(ZeroDivisionError, match="share"):
        workers.split(4, work, 2)
    assert seen == {0: "ignore", 2: "ignore"}
    done = []
    workers.split(5, lambda a, b: done.append((a, b)), 3)
    assert sorted(done) == [(0, 1), (1, 3), (3, 5)]


@pytest.mark.parametrize("faster", [1, 2])
def test_a_split_is_kept_only_where_it_measured_faster(monkeypatch, faster):
    """workers.SplitChoice: a step's first executions alternate between one thread and the wanted count, each
    count's first sample dropped, then the count with the lower median wall time is kept (on an SMT host two
    threads may lose to one); a new wanted count (torch.set_num_threads) measures anew."""
    from device_impl.compiler import workers

    clock = [0.0]
    monkeypatch.setattr(workers.time, "perf_counter", lambda: clock[0])
    slow = {1: 2.0 if faster == 2 else 1.0, 2: 1.0 if faster == 2 else 2.0}
    counts = []

    def execute(wanted=2):
        shares = []

        def work(start, stop):
            shares.append((start, stop))
            if start == 0:  # the caller's share: the execution's wall time on the fake clock
                clock[0] += slow.get(len(workers_in_use), 1.0)

        workers_in_use = []
        real = workers.split

        def split(extent, work_, threads):
            workers_in_use.extend(range(min(threads, extent)))
            return real(extent, work_, threads)

        monkeypatch.setattr(workers, "split", split)
        choice.run(4, work, wanted)
        assert sorted(shares)[0][0] == 0 and sorted(shares)[-1][1] == 4  # the range covered either way
        counts.append(len(shares))

    choice = workers.SplitChoice()
    for _ in range(2 * (workers.SplitChoice.TRIALS + 1)):
        execute()
    assert counts == [2, 1] * (workers.SplitChoice.TRIALS + 1)  # alternating, the wanted count first
    assert choice.choice == faster
    counts.clear()
    for _ in range(3):
        execute()
    assert counts == [faster] * 3
    counts.clear()
    monkeypatch.setattr(workers.SplitChoice, "RECHECK", 5)
    for _ in range(2 + 2 * (workers.SplitChoice.TRIALS + 1)):  # kept RECHECK executions, then measured again
        execute()
    assert counts[:2] == [faster] * 2 and counts[2:4] == [2, 1] and choice.choice == faster
    counts.clear()
    execute(wanted=3)  # another width: measured anew, the wanted count first
    assert counts == [3] and choice.choice is None and choice.wanted == 3
    counts.clear()
    execute(wanted=1)  # one thread wanted: one share, nothing measured
    assert counts == [1] and choice.wanted == 3


def test_splits_from_two_threads_at_once_each_cover_their_range():
    """One split holds the workers at a time; another thread's split meanwhile runs on that thread, and both
    cover their whole range exactly once."""
    import threading

    from device_impl.compiler import workers

    covered = {name: [] for name in ("a", "b")}

    def caller(name):
        for _ in range(200):
            got = []
            workers.split(7, lambda start, stop: got.extend(range(start, stop)), 2)
            covered[name].append(sorted(got))

    threads = [threading.Thread(target=caller, args=(name,)) for name in covered]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(runs == [list(range(7))] * 200 for runs in covered.values())


def test_a_parameter_is_laid_out_on_the_device_once_and_again_after_every_update(fresh, monkeypatch):
    """A linear layer's weight, read by its product as ``W.t()``, is kept on the device in TensorE's layout
    (compiler.layout): made by a launch of its own, ``neff:<program>:layout``, whose device time, loads and
    stores are counted when it runs, at the first execution and after each update of the weight (through the
    parameter under no_grad, through ``.data``, 0.0 to -0.0), and at no other; every execution reads the
    current weight, and the static replay and the instruction-level run agree to the bit and the nanosecond."""
    torch.manual_seed(0)
    model = nn.Linear(256, 512, bias=False).to("neuron")
    x = torch.randn(2, 128, 256).to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    nbytes = model.weight.numel() * 4

    def layout_launches(fast: bool) -> tuple[torch.Tensor, dict]:
        monkeypatch.setattr(executor, "STATIC_REPLAY", fast)
        engine.reset_stats()
        with torch.no_grad():
            out = compiled(x)
        torch.neuron.synchronize()
        expected = nn.functional.linear(x.cpu(), model.weight.detach().cpu())
        torch.testing.assert_close(out.cpu(), expected)
        return out, {k: v for k, v in engine.stats().items() if k.endswith(":layout")}

    _, made = layout_launches(False)
    (name, first), = made.items()
    assert first["launches"] == 1 and first["device_ns"] > 0 and first["flops"] == 0
    assert first["hbm_bytes"] == 2 * nbytes  # the weight read once, its laid-out copy written once
    (exe,) = compiler.cache._MEMORY.values()
    (vid, buffer), = [(v, b) for v, b in exe.program.buffers.items() if b["kind"] == "layout"]
    assert buffer["shape"] == [256, 512]
    assert [s["operands"][1] for s in exe.program.steps if s["kind"] == "dot_general"] == [vid]
    updates = [None, lambda w: w.mul_(-0.5), lambda w: w.data.add_(0.25),
               lambda w: w.data[3, 7].fill_(0.0), lambda w: w.data[3, 7].fill_(-0.0)]
    for made_before, update in enumerate(updates, start=1):
        if update is not None:
            with torch.no_grad():
                update(model.weight)
            _, made = layout_launches(False)  # the weight changed: laid out again, counted once
            assert made == {name: first}
        assert exe.layouts.repacks == made_before
        slow = _run(compiled, [x], monkeypatch, fast=False)
        fast = _run(compiled, [x], monkeypatch, fast=True)
        assert not any(k.endswith(":layout") for k in {**slow[1], **fast[1]})  # kept: no launch
        assert torch.equal(_bits(slow[0]), _bits(fast[0])) and slow[1:] == fast[1:]
        with torch.no_grad():
            torch.testing.assert_close(fast[0].cpu(), nn.functional.linear(x.cpu(), model.weight.cpu()))


def test_same_bytes_compares_bits():
    """compiler.layout.same_bytes: equal bit for bit (-0.0 is not 0.0, a NaN equals itself and not another NaN's
    payload), through libc's memcmp where both arrays lie contiguous and numpy's comparison otherwise."""
    from device_impl.compiler import layout

    a = np.array([[0.0, 1.0, np.nan, -2.5]] * 3, dtype=np.float32)
    other_zero, other_nan = a.copy(), a.copy()
    other_zero[2, 0] = -0.0
    other_nan.view(np.uint32)[1, 2] ^= 1
    for memcmp in (layout._MEMCMP, None):
        layout_memcmp = layout._MEMCMP
        layout._MEMCMP = memcmp
        try:
            assert layout.same_bytes(a, a.copy())
            assert not layout.same_bytes(a, other_zero) and not layout.same_bytes(a, other_nan)
            assert layout.same_bytes(a[:, ::2], a[:, ::2].copy())  # strided: numpy's comparison
            assert not layout.same_bytes(a[:, ::2], other_zero[:, ::2].copy())
            assert not layout.same_bytes(a, a.copy().reshape(4, 3)) and not layout.same_bytes(a, a.view(np.int32))
        finally:
            layout._MEMCMP = layout_memcmp
    assert layout._MEMCMP is not None or os.name != "posix"  # found on Linux and macOS


class _SoftmaxMLP(nn.Module):
    """Two products around a softmax and a row sum: scratch values between steps, an arena small enough for SBUF."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 128), nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.softmax(self.a(x), -1)
        return self.b(h * h.sum(-1, keepdim=True))


def test_an_on_chip_arena_is_kept_across_fast_executions(fresh, monkeypatch):
    """A program whose steps all run wide and whose arena lies on chip keeps one host arena and its buffers'
    views across fast executions (``Executable.kept_scratch``): the same bits and figures as the instruction
    level, execution after execution, on other inputs too; an execution that finds the arena taken (another
    thread's) builds its own, as before."""
    torch.manual_seed(0)
    compiled = torch.compile(_SoftmaxMLP().to("neuron"), backend="neuron", fullgraph=True)
    xs = [torch.randn(32, 64).to("neuron")]
    with torch.no_grad():
        compiled(*xs)
    _run(compiled, xs, monkeypatch, fast=True)
    (exe,) = compiler.cache._MEMORY.values()
    assert exe.scratch_bytes and exe.arena_onchip and exe.kept_scratch()
    arena = exe._kept_arena
    assert arena is not None
    for seed in (1, 2):
        _assert_replays_match(compiled, [torch.randn(32, 64, generator=torch.Generator().manual_seed(seed))
                                         .to("neuron")], monkeypatch)
    assert exe._kept_arena is arena
    slow = _run(compiled, xs, monkeypatch, fast=False)
    with exe._scratch_lock:  # taken: this execution makes its own arena
        fast = _run(compiled, xs, monkeypatch, fast=True)
    assert torch.equal(_bits(slow[0]), _bits(fast[0])) and slow[1:] == fast[1:]
