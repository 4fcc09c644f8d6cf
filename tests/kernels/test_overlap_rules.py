"""out= aliasing: the device refuses exactly what CPU refuses (ATen's MemoryOverlap rules).

Each case builds its tensors from one storage on the device it is given, runs the op there, and
reports the storage afterwards (or the error), so CPU and neuron outcomes compare directly. Writing
into a disjoint slice of an input's storage is legal; the device once refused it, because it
compared storages instead of byte ranges.
"""

import warnings

import pytest
import torch

from device_impl.kernels import overlap


def _storage(d, n=8):
    return torch.arange(float(n), device=d)


def _idx(d, *values):
    return torch.tensor(values, device=d)


def _mask(d):
    return torch.tensor([True, False, True, False], device=d)


CASES = {
    "add into a disjoint slice": lambda a, d: torch.add(a[:4], 1, out=a[4:]),
    "add over itself (full overlap)": lambda a, d: torch.add(a, 1, out=a),
    "add into a shifted view (partial)": lambda a, d: torch.add(a[:4], 1, out=a[1:5]),
    "mul into a stride-0 out": lambda a, d: torch.mul(a[:3], 2, out=a[:1].expand(3)),
    "cat into a disjoint slice": lambda a, d: torch.cat([a[:2], a[2:4]], out=a[4:]),
    "cat into one of its inputs": lambda a, d: torch.cat([a[:2], a[2:4]], out=a[2:4]),
    "cat into an overlapping out, resized first": lambda a, d: torch.cat([a[:4], a[:4]], out=a[:2]),
    "index_put_ from a disjoint slice": lambda a, d: a[:4].index_put_((_idx(d, 0, 1),), a[4:6]),
    "index_put_ from inside itself": lambda a, d: a.index_put_((_idx(d, 0, 1),), a[4:6]),
    "gather into a disjoint slice": lambda a, d: torch.gather(a[:4], 0, _idx(d, 3, 2), out=a[4:6]),
    "gather into its input": lambda a, d: torch.gather(a[:4], 0, _idx(d, 3, 2, 1, 0), out=a[:4]),
    "index_select into a disjoint slice": lambda a, d: torch.index_select(a[:4], 0, _idx(d, 3, 2), out=a[4:6]),
    "index_select into a stride-0 out": lambda a, d: torch.index_select(a[:4], 0, _idx(d, 3, 2), out=a[4:5].expand(2)),
    "take into a disjoint slice": lambda a, d: torch.take(a[:4], _idx(d, 3, 2), out=a[4:6]),
    "take into its input": lambda a, d: torch.take(a[:2], _idx(d, 1, 0), out=a[:2]),
    "masked_select into a disjoint slice": lambda a, d: torch.masked_select(a[:4], _mask(d), out=a[4:6]),
    "masked_select into its input": lambda a, d: torch.masked_select(a[:4], _mask(d), out=a[:4]),
}


def _outcome(case, device):
    a = _storage(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resize-of-a-non-empty-out deprecation warning
        try:
            CASES[case](a, device)
        except RuntimeError as error:
            return "raised", str(error).split(".")[0], a.cpu().tolist()
    return "ok", None, a.cpu().tolist()


@pytest.mark.parametrize("case", sorted(CASES))
def test_aliasing_outcome_matches_cpu(case):
    assert _outcome(case, "neuron") == _outcome(case, "cpu")


def test_gather_with_an_empty_index_checks_nothing_else():
    """CPU checks gather's index dtype and sizes only when the index has elements."""
    for device in ("cpu", "neuron"):
        out = torch.gather(torch.randn(2, 2, device=device), 1, torch.empty(0, 2, dtype=torch.uint8, device=device))
        assert out.shape == (0, 2) and out.device.type == device


def test_overlap_status_follows_aten():
    a = torch.arange(8.0, device="neuron")
    assert overlap.status(a, a) is overlap.Status.FULL
    assert overlap.status(a[:4], a.view(2, 4)[0]) is overlap.Status.FULL  # same bytes, same strides
    assert overlap.status(a[:4], a[2:6]) is overlap.Status.PARTIAL
    assert overlap.status(a.view(2, 4), a.view(4, 2).t()) is overlap.Status.PARTIAL  # same bytes, other order
    assert overlap.status(a[:4], a[4:]) is overlap.Status.NO
    assert overlap.status(a[:4], torch.arange(4.0, device="neuron")) is overlap.Status.NO
    assert overlap.status(a[::2], a[1::2]) is overlap.Status.TOO_HARD  # not dense: let through, as ATen
    assert overlap.status(a[:0], a) is overlap.Status.NO
    assert overlap.has_internal_overlap(a[:1].expand(3))
    assert not overlap.has_internal_overlap(a[:1].expand(0))
