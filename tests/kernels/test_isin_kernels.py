"""isin against CPU eager: all overloads (Tensor_Tensor, Tensor_Scalar, Scalar_Tensor, out=), invert,
assume_unique, type promotion of the test values, NaN and signed zeros, both algorithms (per-value
compares and sorted search, one chunk or several) and CPU's errors."""

import pytest
import torch

from device_impl.kernels import membership
from diff import FLOATS, INTS, LAYOUTS, check, pair, values

TEST_SIZES = (0, 1, 2, membership.COMPARE_MAX, membership.COMPARE_MAX + 1, 1000)


def _pool(shape, dtype, seed):
    """Values from a small range, so elements and test values collide often."""
    return values(shape, dtype, "small_int" if dtype.is_floating_point else "normal", seed=seed)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("m", TEST_SIZES)
def test_tensor_tensor(dtype, m):
    elements, tests = _pool((3, 129), dtype, 1), _pool((m,), dtype, 2)
    check(torch.isin, elements, tests)
    check(lambda e, t: torch.isin(e, t, invert=True), elements, tests)


@pytest.mark.parametrize("m", (3, 1000))
def test_special_values_match_exactly(m):
    special = values((4, 12), torch.float32, "special")
    tests = torch.cat([values((m - 3,), torch.float32, "small_int"), torch.tensor([float("nan"), 0.0, -float("inf")])])
    check(torch.isin, special, tests)  # NaN is in nothing (not even NaN); -0.0 is in {0.0}
    check(lambda e, t: torch.isin(e, t, invert=True), special, tests)
    check(torch.isin, tests, special)


@pytest.mark.parametrize("shape", [(), (0,), (1,), (129,), (2, 3, 5), (513, 3)], ids=str)
@pytest.mark.parametrize("m", (1, 1000))
def test_element_shapes(shape, m):
    check(torch.isin, _pool(shape, torch.int64, 1), _pool((m,), torch.int64, 2))
    check(torch.isin, _pool((m,), torch.int64, 2), _pool(shape, torch.int64, 1))  # test values of any shape


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", (5, 200))
def test_layouts(layout, m):
    (e, ed), (t, td) = pair((6, 130), torch.int32, layout, seed=1), pair((m,), torch.int32, seed=2)
    check(torch.isin, e, t, neuron_args=(ed, td))
    (t2, t2d) = pair((4, m), torch.int32, layout, seed=3)
    if m <= 20 and layout in ("transposed", "expanded"):
        # CPU's small-set loop views the test values with .view(-1), which raises for these layouts
        # ("view size is not compatible"); neuron answers as CPU does for a contiguous copy.
        assert torch.equal(torch.isin(ed, t2d).cpu(), torch.isin(e, t2.contiguous()))
        return
    check(torch.isin, e, t2, neuron_args=(ed, t2d))


@pytest.mark.parametrize("dtypes", [(torch.uint8, torch.int8), (torch.int32, torch.float32), (torch.bfloat16,
                                    torch.float32), (torch.float16, torch.bfloat16), (torch.int8, torch.int64)],
                         ids=str)
@pytest.mark.parametrize("m", (4, 300))
def test_type_promotion(dtypes, m):
    a, b = dtypes
    check(torch.isin, _pool((5, 40), a, 1), _pool((m,), b, 2))
    check(torch.isin, _pool((m,), b, 2), _pool((5, 40), a, 1))


def test_test_values_convert_to_the_common_dtype():
    """A 0-dim test value does not promote: 300 becomes int8 44 (wraps), 0.1 becomes bf16(0.1)."""
    check(torch.isin, torch.tensor([44, 45, 300 - 256], dtype=torch.int8), torch.tensor(300))
    check(torch.isin, torch.tensor([0.1, 0.2]).bfloat16(), torch.tensor(0.1))
    check(torch.isin, torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([257]))  # promoted: no wrap
    host = torch.tensor(2)  # a CPU scalar next to neuron elements
    check(lambda e: torch.isin(e, host), _pool((3, 7), torch.int32, 1))


def test_tensor_scalar_and_scalar_tensor():
    ints, floats = _pool((3, 50), torch.int64, 1), _pool((3, 50), torch.float32, 2)
    for test in (2, -3, 2.0, 2.5, 257):
        check(lambda e: torch.isin(e, test), ints)
        check(lambda e: torch.isin(e, test, invert=True), floats)
    check(lambda e: torch.isin(e, 1), _pool((9,), torch.uint8, 1))
    check(lambda e: torch.isin(e, 257), torch.tensor([1, 2], dtype=torch.uint8))  # as eq: 257 wraps to 1
    check(lambda e: torch.isin(e, float("nan")), values((4, 12), torch.float32, "special"))
    check(lambda e: torch.isin(e, float("nan"), invert=True), values((4, 12), torch.float32, "special"))
    for element in (2, 2.0, 2.5, -20, 300, 0.0):
        for tests in (ints, floats, _pool((0,), torch.int64, 3), _pool((129, 9), torch.int8, 4)):
            check(lambda t: torch.isin(element, t), tests)
            check(lambda t: torch.isin(element, t, invert=True), tests)


@pytest.mark.parametrize("m", (membership._SORTING_MIN - 1, membership._SORTING_MIN, 40))
@pytest.mark.parametrize("element", (2.220446049250313e-16, 1e-30, 259, -1))
def test_scalar_tensor_compares_in_cpus_dtype_on_both_sides_of_its_sorting_threshold(element, m):
    """isin(scalar, tensor): below CPU's sorting threshold the scalar is cast to result_type (2.2e-16 rounds to 0 in
    float16, 259 wraps in int8), from it on CPU compares in promote_types (the scalar's double/long, the tensor's)."""
    for dtype in (torch.float16, torch.bfloat16, torch.int8, torch.uint8):
        tests = torch.zeros(m, dtype=dtype)
        tests[1:] = 3
        check(lambda t: torch.isin(element, t), tests)
        check(lambda t: torch.isin(element, t, invert=True), tests)


def test_out_variants_and_assume_unique():
    e, t = _pool((4, 33), torch.int32, 1), _pool((40,), torch.int32, 2)
    check(lambda e, t: torch.isin(e, t, out=torch.empty(4, 33, dtype=torch.bool, device=e.device)), e, t)
    check(lambda e, t: torch.isin(e, t, out=torch.empty(0, dtype=torch.bool, device=e.device)), e, t)
    check(lambda e, t: torch.isin(e, t, invert=True, out=torch.empty(33, 4, dtype=torch.bool,
                                                                      device=e.device).t()), e, t)
    check(lambda e: torch.isin(e, 3, out=torch.empty(4, 33, dtype=torch.bool, device=e.device)), e)
    check(lambda t: torch.isin(3, t, out=torch.empty(0, dtype=torch.bool, device=t.device)), t)
    # assume_unique only picks CPU's algorithm (its result is undefined when the inputs are not unique)
    unique_e, unique_t = torch.randperm(200)[:60].view(4, 15), torch.randperm(200)[:80]
    check(lambda e, t: torch.isin(e, t, assume_unique=True), unique_e, unique_t)
    check(lambda e, t: torch.isin(e, t, assume_unique=True, invert=True), unique_e, unique_t)
    for out_dtype in (torch.int64, torch.float32):  # CPU requires a bool out
        check(lambda e, t: torch.isin(e, t, out=torch.empty(4, 33, dtype=out_dtype, device=e.device)), e, t)
        check(lambda e: torch.isin(e, 3, out=torch.empty(4, 33, dtype=out_dtype, device=e.device)), e)


def test_unsupported_inputs_raise():
    b, f = values((5,), torch.bool), values((5,), torch.float32)
    check(torch.isin, b, b)
    check(torch.isin, f, b)
    check(torch.isin, b, f)
    check(lambda e: torch.isin(e, True), f)
    check(lambda e: torch.isin(e, 1j), f)
    check(lambda t: torch.isin(True, t), f)


def test_several_sorted_chunks(monkeypatch):
    """Test sets longer than one SBUF chunk are sorted chunk by chunk into a device scratch tensor."""
    monkeypatch.setattr(membership, "CHUNK_BYTES", 16)  # 128 partitions x 2 int64 = 256 values per chunk
    elements, tests = _pool((3, 129), torch.int64, 1), values((1000,), torch.int64, "full", seed=2)
    elements[0, :50] = tests[::20]  # hits in every chunk
    check(torch.isin, elements, tests)
    check(lambda e, t: torch.isin(e, t, invert=True), elements, tests)
    check(torch.isin, _pool((2, 70), torch.float32, 3), values((700,), torch.float32, "special", seed=4))


def test_generate_eos_check():
    """transformers' generate() stopping criterion: the last tokens against the end-of-sequence ids."""
    tokens = torch.tensor([[5, 2, 7], [9, 9, 2]])
    check(lambda t, eos: torch.isin(t[:, -1], eos).any(), tokens, torch.tensor([2]))
    check(lambda t, eos: torch.isin(t[:, -1], eos), tokens, torch.tensor([2, 7]))
