"""A recurring add/sub/mul/div/exp/tanh/sigmoid/neg/relu call served from its plan
(device_impl/kernels/elementwise/recurring.py) changes the host cost and nothing else: the same output bits,
launch figures, device clock, statistics and errors as the full path, which a call takes wherever the plan's
answers might not hold."""

from __future__ import annotations

import pytest
import torch

from device_impl import engine
from device_impl._core import C
from device_impl.engine import core
from device_impl.kernels import replay
from device_impl.kernels.elementwise import recurring
from device_impl.kernels.elementwise.binary import RECURRING

DEV = "neuron"
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _bits(t: torch.Tensor) -> torch.Tensor:
    host = t.detach().cpu().contiguous()
    return host.view(_BITS.get(host.dtype, host.dtype))


def _values(shape, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=g).to(dtype).to(DEV)
    x = torch.randn(shape, generator=g) * 3
    flat = x.view(-1)
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 0.5, -2.5, 1e-40])
    flat[: min(flat.numel(), specials.numel())] = specials[: flat.numel()]
    return x.to(dtype).to(DEV)


@pytest.fixture
def launches(monkeypatch):
    """Every completed launch's figures (what core._close reports), in order."""
    figures: list[tuple] = []
    original = core._close

    def spy(kernel, device, device_ns, busy, *rest):
        figures.append((kernel, device, device_ns, dict(busy), *rest[:-1]))
        return original(kernel, device, device_ns, busy, *rest)

    monkeypatch.setattr(core, "_close", spy)
    previous = replay.set_enabled(True)
    replay.reset()
    for plans in recurring.ALL:
        plans.plans.clear()
    yield figures
    replay.set_enabled(previous)


def _run(figures: list, fn):
    """fn's output, launch figures, device clock advance, engine.stats() and last launch's report."""
    figures.clear()
    engine.reset_stats()
    clock = C.device_time_ns(0)
    out = fn()
    last = engine.last_launch()
    return (out, list(figures), C.device_time_ns(0) - clock, engine.stats(),
            (last.device_ns, last.busy_ns, last.hbm_bytes_read, last.hbm_bytes_written, last.flops,
             last.instructions, last.sbuf_peak_bytes, last.psum_peak_bytes))


def _served() -> int:
    return sum(p.served for p in recurring.ALL)


CASES = {
    "add_1k": lambda x, y: torch.add(x, y),
    "sub_1k": lambda x, y: torch.sub(x, y),
    "operator": lambda x, y: x + y,
    "add_out": lambda x, y: torch.add(x, y, out=torch.empty(torch.broadcast_shapes(x.shape, y.shape),
                                                            dtype=torch.result_type(x, y), device=DEV)),
    "alpha_1": lambda x, y: torch.add(x, y, alpha=1),
    "mul": lambda x, y: torch.mul(x, y),
    "mul_out": lambda x, y: torch.mul(x, y, out=torch.empty(torch.broadcast_shapes(x.shape, y.shape),
                                                            dtype=torch.result_type(x, y), device=DEV)),
    "div": lambda x, y: torch.div(x, y),
    "div_operator": lambda x, y: x / y,
}
SHAPES = {"1k": ((1024,), (1024,)), "2d": ((64, 96), (64, 96)), "broadcast": ((64, 1), (1, 96)),
          "multi_tile": ((300_000,), (300_000,)), "scalar_tensor": ((), ())}
DTYPES = {"fp32": (torch.float32, torch.float32), "bf16": (torch.bfloat16, torch.bfloat16),
          "int_float": (torch.int32, torch.float32), "int": (torch.int64, torch.int64),
          "bf16_fp32": (torch.bfloat16, torch.float32)}


@pytest.mark.parametrize("dtypes", DTYPES, ids=list(DTYPES))
@pytest.mark.parametrize("shapes", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_served_call_is_the_full_paths(launches, case, shapes, dtypes):
    fn = CASES[case]
    (sx, sy), (dx, dy) = SHAPES[shapes], DTYPES[dtypes]
    x, y = _values(sx, dx, 1), _values(sy, dy, 2)
    _run(launches, lambda: fn(x, y))  # the full path, at the instruction level: recorded, its key seen
    _run(launches, lambda: fn(x, y))  # the full path again (replayed): its plan learnt
    served = _served()
    full = _run(launches, lambda: fn(x, y))  # ... whose recording a plan now serves
    assert _served() == served + 1, "a recurring call was not served from its plan"
    for plans in recurring.ALL:
        plans.plans.clear()
    reference = _run(launches, lambda: fn(x, y))  # the full path again (a replay of the same recording)
    assert _served() == served + 1
    assert full[0].dtype == reference[0].dtype and full[0].shape == reference[0].shape
    assert full[0].stride() == reference[0].stride()
    assert torch.equal(_bits(full[0]), _bits(reference[0]))
    assert full[1:] == reference[1:]


def test_in_place_and_overlapping_outs(launches):
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    expected = x.cpu() + y.cpu()
    for _ in range(3):
        z = x.clone()
        z.add_(y)  # add.out(z, y, out=z): full overlap, allowed
        assert torch.equal(_bits(z), _bits(expected))
    assert _served() >= 1
    base = torch.zeros(2048, device=DEV)
    out = base[:1024]
    for _ in range(3):  # learnt (out shares no memory with the operands), then served
        torch.add(x, y, out=out)
    served = _served()
    shifted = base[1:1025]  # the same metadata as out, partially overlapping an operand
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the "
                                           "written-to tensor refer to a single memory location"):
        torch.add(shifted, y, out=base[2:1026])
    assert _served() == served


def test_sub_of_bool_raises_every_time(launches):
    b = torch.ones(1024, dtype=torch.bool, device=DEV)
    served = _served()
    for _ in range(3):
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
            torch.sub(b, b)
    assert _served() == served


def test_the_full_path_where_a_plan_may_not_hold(launches):
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    start = _served()
    for _ in range(3):  # recorded and its key seen; its plan learnt; served
        torch.add(x, y)
    served = _served()
    assert served == start + 1
    replay.reset()  # the plan's recording forgotten: the full path records it again, then plans again
    torch.add(x, y)
    assert _served() == served and replay.stats()["recorded"] == 1
    torch.add(x, y)
    assert _served() == served + 1
    with engine.record_trace() as trace:  # a trace needs every instruction: the full path, instruction level
        torch.add(x, y)
    assert _served() == served + 1 and trace.reports[-1].events
    previous = replay.set_enabled(False)
    try:
        torch.add(x, y)
    finally:
        replay.set_enabled(previous)
    assert _served() == served + 1
    torch.add(x, y, alpha=2)  # another alpha: the full path
    torch.add(x, y, alpha=2)
    assert _served() == served + 1
    host = torch.tensor(2.0)  # a host 0-d operand: never planned
    torch.add(x, host)
    torch.add(x, host)
    assert _served() == served + 1
    out = torch.empty(0, device=DEV)  # resized (the full path) on its first call only, then torch.add(x, y)'s plan
    for _ in range(3):
        torch.add(x, y, out=out)
    assert _served() == served + 3
    seen = len(RECURRING["add"].plans)
    for n in range(1, 6):  # metadata that never recurs: a key each, no plan
        torch.add(x[:n], y[:n])
    assert [p for p in list(RECURRING["add"].plans.values())[seen:]] == [None] * 5


def test_a_resizing_call_warns_as_the_full_path(launches):
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    out = torch.empty(1024, device=DEV)
    for _ in range(3):
        torch.add(x, y, out=out)
    wrong = torch.empty(512, device=DEV)
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.add(x, y, out=wrong)


def test_replay_keys_name_code_objects_by_identity():
    """An emit's code is keyed by its id (kept alive in replay._KEPT), not hashed on every launch, and repeated
    launches add no entries."""
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    torch.add(x, y)
    kept = len(replay._KEPT)
    for _ in range(5):
        torch.mul(x, y)
        torch.add(x, y)
    torch.mul(x, y)
    assert len(replay._KEPT) <= kept + 1
    for key in replay._figures:
        assert not any(isinstance(part, type(test_replay_keys_name_code_objects_by_identity.__code__))
                       for part in key[1])


UNARY = {
    "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "neg": torch.neg, "relu": torch.relu,
    "relu_module": torch.nn.functional.relu,
    "exp_out": lambda x: torch.exp(x, out=torch.empty(x.shape, dtype=torch.float32 if not x.dtype.is_floating_point
                                                      else x.dtype, device=DEV)),
    "neg_out": lambda x: torch.neg(x, out=torch.empty_like(x)),
    "sigmoid_": lambda x: x.clone().sigmoid_(), "exp_": lambda x: x.clone().exp_(), "neg_": lambda x: x.clone().neg_(),
}
UNARY_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int": torch.int32}
UNARY_SHAPES = {"1k": (1024,), "2d": (64, 96), "multi_tile": (300_000,), "scalar_tensor": ()}


@pytest.mark.parametrize("dtype", UNARY_DTYPES, ids=list(UNARY_DTYPES))
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=list(UNARY_SHAPES))
@pytest.mark.parametrize("case", UNARY, ids=list(UNARY))
def test_a_served_unary_call_is_the_full_paths(launches, case, shape, dtype):
    fn = UNARY[case]
    dt = UNARY_DTYPES[dtype]
    if dt == torch.int32 and case.endswith("_") and case != "neg_":
        pytest.skip("an integer tensor's in-place exp/sigmoid is refused (result type Float)")
    x = _values(UNARY_SHAPES[shape], dt, 1)
    _run(launches, lambda: fn(x))  # the full path, at the instruction level: recorded, its key seen
    _run(launches, lambda: fn(x))  # the full path again (replayed): its plan learnt
    served = _served()
    full = _run(launches, lambda: fn(x))  # ... whose recording a plan now serves
    assert _served() == served + 1, "a recurring call was not served from its plan"
    for plans in recurring.ALL:
        plans.plans.clear()
    reference = _run(launches, lambda: fn(x))  # the full path again (a replay of the same recording)
    assert _served() == served + 1
    assert full[0].dtype == reference[0].dtype and full[0].shape == reference[0].shape
    assert full[0].stride() == reference[0].stride()
    assert torch.equal(_bits(full[0]), _bits(reference[0]))
    assert full[1:] == reference[1:]


def test_a_small_plan_runs_on_the_hbm_views(launches):
    """A one-tile, one-instruction launch's plan is direct (engine.replay.one_tile_direct): its served calls
    give the full path's bits, in place too (out is an operand)."""
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    for _ in range(3):
        torch.mul(x, y)
        torch.exp(x)
    direct = [plan.direct for ops in recurring.ALL for plan in ops.plans.values() if plan is not None]
    assert len(direct) == 2 and all(direct)

    def in_place():
        z, w = x.clone(), x.clone()
        for _ in range(3):
            z.mul_(y)
            w.exp_()
        return z, w

    served = _served()
    z, w = in_place()
    assert _served() == served + 6
    assert torch.equal(_bits(z), _bits(x.cpu() * y.cpu() * y.cpu() * y.cpu()))
    previous = replay.set_enabled(False)  # every launch instruction by instruction, none served
    try:
        z_ref, w_ref = in_place()
    finally:
        replay.set_enabled(previous)
    assert _served() == served + 6
    assert torch.equal(_bits(z), _bits(z_ref)) and torch.equal(_bits(w), _bits(w_ref))


WRONG = {
    "mul": lambda x, y, out: torch.mul(x, y, out=out),
    "div": lambda x, y, out: torch.div(x, y, out=out),
    "add": lambda x, y, out: torch.add(x, y, out=out),
    "exp": lambda x, y, out: torch.exp(x, out=out),
    "neg": lambda x, y, out: torch.neg(x, out=out),
}


def _error(fn) -> tuple[type, str] | None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class and message are compared
        return type(e), str(e)
    return None


@pytest.mark.parametrize("op", WRONG, ids=list(WRONG))
def test_calls_a_plan_may_not_serve_raise_as_cpu(launches, op):
    """With the op's plan learnt for these operands, an out= on the host, an out= partially overlapping an operand
    and an out= of a dtype the result cannot be cast to each take the full path and raise PyTorch's error,
    every time (the same class and message as CPU's call)."""
    fn = WRONG[op]
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    out = torch.empty(1024, device=DEV)
    for _ in range(3):
        fn(x, y, out)
    served = _served()
    assert served >= 1
    host_out = torch.empty(1024)
    base = torch.zeros(2048, device=DEV)
    cpu_base = torch.zeros(2048)
    calls = {
        "host_out": (lambda: fn(x, y, host_out), None),
        "overlap": (lambda: fn(base[1:1025], y, base[2:1026]), lambda: fn(cpu_base[1:1025], y.cpu(), cpu_base[2:1026])),
        "long_out": (lambda: fn(x, y, torch.empty(1024, dtype=torch.long, device=DEV)),
                     lambda: fn(x.cpu(), y.cpu(), torch.empty(1024, dtype=torch.long))),
    }
    for name, (device_call, cpu_call) in calls.items():
        for _ in range(3):
            got = _error(device_call)
            assert got is not None and issubclass(got[0], RuntimeError), (name, got)
            if cpu_call is not None:
                assert got == _error(cpu_call), name
    assert _served() == served
    for _ in range(2):  # and the plan still serves the calls it holds for
        fn(x, y, out)
    assert _served() == served + 2


def test_a_rounding_division_is_never_served(launches):
    x, y = _values((1024,), torch.float32, 1), _values((1024,), torch.float32, 2)
    served = _served()
    for mode in ("floor", "trunc"):
        for _ in range(3):
            torch.div(x, y, rounding_mode=mode)
    assert _served() == served
    a = torch.randint(-5, 5, (1024,), device=DEV)
    b = torch.zeros(1024, dtype=torch.long, device=DEV)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            torch.div(a, b, rounding_mode="floor")


def test_relu_of_bool_raises_every_time(launches):
    b = torch.ones(1024, dtype=torch.bool, device=DEV)
    x = _values((1024,), torch.float32, 1)
    for _ in range(3):
        torch.relu(x)
    served = _served()
    for _ in range(3):
        with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
            torch.relu(b)
    assert _served() == served
    host = torch.ones(1024)  # a host tensor of the planned metadata but device: CPU's relu, not a plan
    for _ in range(2):
        assert torch.relu(host).device.type == "cpu"
    assert _served() == served


def _outcome(fn):
    """A call's error (class, message), or its result as data: bits, sizes, strides, storage offset, and the
    bits of every tensor it returns beside it (a base whose view it wrote)."""
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - the class and message are compared
        return type(e), str(e)
    results = result if isinstance(result, tuple) else (result,)
    return [(_bits(t), tuple(t.shape), t.stride(), t.storage_offset(), t.dtype) for t in results]


def _same_outcome(got, expected) -> bool:
    if isinstance(got, tuple) or isinstance(expected, tuple):
        return got == expected
    return len(got) == len(expected) and all(
        torch.equal(g[0], e[0]) and g[1:] == e[1:] for g, e in zip(got, expected))


def _adversarial(dev: str) -> dict:
    """Per case: (a call that learns a plan, a call of the same plan key CPU may refuse or answer otherwise),
    on ``dev``. Elementwise ops whose bits are CPU's on the device (add, neg, relu)."""
    g = torch.Generator().manual_seed(7)
    base = torch.randn(4096, generator=g).to(dev)
    x, y = base[:1024], base[2048:3072]
    sq, sq_y = base[:1024].view(32, 32), base[2048:3072].view(32, 32)

    def fresh_out(n=1024):
        return torch.zeros(n, device=dev)

    def neg_out():
        o = torch.zeros(1024, device=dev)
        torch.add(x, y, out=torch._neg_view(o))
        return o

    def neg_in_place():
        z = x.clone()
        torch._neg_view(z).add_(y)
        return z

    def set_onto_operand():
        z = x.clone()
        out = torch.empty(0, device=dev).set_(z.untyped_storage(), 0, (1024,), (1,))
        torch.add(z, y, out=out)
        return z

    def transposed_operand_of_out():
        z = sq.clone()
        torch.add(z.t(), sq_y, out=z)
        return z

    def grown_out():
        out = fresh_out(2048)[:1024].clone()
        out.resize_(2048)
        return torch.add(x, y, out=out)

    def leaf_out():
        out = torch.zeros(1024, device=dev, requires_grad=True)
        return torch.add(x, y, out=out)

    def needs_grad():
        return torch.add(x.clone().requires_grad_(), y, out=fresh_out())

    def strided_out():
        whole = fresh_out(2048)
        torch.add(x, y, out=whole[::2])
        return whole

    def in_place_overlapping():
        z = base.clone()
        z[1:1025].add_(z[:1024])
        return z

    def out_overlapping_operand():
        z = base.clone()
        torch.add(z[:1024], y, out=z[1:1025])
        return z

    return {
        "neg_bit_operand": (lambda: torch.add(x, y, out=fresh_out()), lambda: torch.add(torch._neg_view(x), y, out=fresh_out())),
        "neg_bit_unary": (lambda: torch.neg(x, out=fresh_out()), lambda: torch.neg(torch._neg_view(x), out=fresh_out())),
        "neg_bit_relu": (lambda: torch.relu(x), lambda: torch.relu(torch._neg_view(x))),
        "relu_of_a_transposed_view": (lambda: torch.relu(sq), lambda: torch.relu(sq.t())),
        "neg_bit_out": (lambda: torch.add(x, y, out=fresh_out()), neg_out),
        "neg_bit_in_place": (lambda: x.clone().add_(y), neg_in_place),
        "conj_of_real": (lambda: torch.add(x, y), lambda: torch.add(x.conj(), y)),
        "other_storage_offset": (lambda: torch.add(x, y), lambda: torch.add(base[3:1027], y)),
        "strided_same_sizes": (lambda: torch.add(x, y), lambda: torch.add(base[::4], y)),
        "expanded_same_sizes": (lambda: torch.add(x, y), lambda: torch.add(base[:1].expand(1024), y)),
        "strided_out_same_sizes": (lambda: torch.add(x, y, out=fresh_out()), strided_out),
        "expanded_out_same_sizes": (lambda: torch.add(x, y, out=fresh_out()),
                                    lambda: torch.add(x, y, out=fresh_out(1).expand(1024))),
        "out_onto_operand_storage": (lambda: torch.add(x.clone(), y, out=fresh_out()), set_onto_operand),
        "out_is_a_transposed_operand": (lambda: torch.add(sq.clone().t(), sq_y, out=torch.zeros(32, 32, device=dev)),
                                        transposed_operand_of_out),
        "out_resized_since": (lambda: torch.add(x, y, out=fresh_out()), grown_out),
        "out_requires_grad": (lambda: torch.add(x, y, out=fresh_out()), leaf_out),
        "operand_requires_grad": (lambda: torch.add(x, y, out=fresh_out()), needs_grad),
        "out_partially_overlapping_operand": (lambda: torch.add(base.clone()[:1024], y, out=base.clone()[1:1025]),
                                              out_overlapping_operand),
        "in_place_partial_overlap": (lambda: base.clone()[1:1025].add_(y), in_place_overlapping),
    }


ADVERSARIAL = list(_adversarial("cpu"))


@pytest.mark.parametrize("case", ADVERSARIAL, ids=ADVERSARIAL)
def test_a_call_of_a_planned_key_that_cpu_refuses_or_answers_otherwise_is_cpus(launches, case):
    """The table's wrapper asks the plans before its own checks (dispatch/table.py): a call with a planned key
    (dtypes, sizes, strides, devices) but another storage offset, a negative bit, an out resized since, an out
    aliasing an operand through another tensor, a transposed view or a shifted one, an operand or out requiring
    grad, answers as CPU does: the same error class and message, or the same bits, sizes, strides and storage offset."""
    learn, call = _adversarial(DEV)[case]
    start = _served()
    for _ in range(3):  # recorded, key seen, planned (and served)
        learn()
    assert _served() > start, "the learning call was never served: the case asks no plan"
    cpu_call = _adversarial("cpu")[case][1]
    expected = _outcome(cpu_call)
    for _ in range(2):
        got = _outcome(call)
        assert _same_outcome(got, expected), (got if isinstance(got, tuple) else "values/layout differ", expected
                                              if isinstance(expected, tuple) else "")
