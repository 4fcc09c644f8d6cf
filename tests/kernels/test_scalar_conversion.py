"""A Python scalar written into a tensor converts as c10's checked conversion does, on every op that
writes one: out of range is an error, and a complex value goes into a real tensor only without an
imaginary part (index_fill_ refuses any complex value). The device once dropped the imaginary part
silently (fill_, masked_fill, full, scatter with a value)."""

import warnings

import pytest
import torch


def _true(d):
    return torch.tensor(True, device=d)


def _first(d):
    return torch.tensor([0], device=d)


CASES = {
    "fill_ 1j": lambda d: torch.zeros(2, device=d).fill_(1j),
    "fill_ 2+0j": lambda d: torch.zeros(2, device=d).fill_(complex(2, 0)),
    "full int64 1j": lambda d: torch.full((2,), 1j, dtype=torch.int64, device=d),
    "masked_fill 1j": lambda d: torch.zeros(2, device=d).masked_fill(_true(d), 1j),
    "masked_fill 3+0j": lambda d: torch.zeros(2, device=d).masked_fill(_true(d), complex(3, 0)),
    "masked_fill bool 1j": lambda d: torch.zeros(2, dtype=torch.bool, device=d).masked_fill(_true(d), 1j),
    "masked_fill float32 1e40": lambda d: torch.zeros(2, device=d).masked_fill(_true(d), 1e40),
    "masked_fill int8 300": lambda d: torch.zeros(2, dtype=torch.int8, device=d).masked_fill(_true(d), 300),
    "index_fill 1j": lambda d: torch.zeros(2, device=d).index_fill(0, _first(d), 1j),
    "index_fill 2+0j": lambda d: torch.zeros(2, device=d).index_fill(0, _first(d), complex(2, 0)),
    "scatter 1j": lambda d: torch.zeros(2, device=d).scatter(0, _first(d), 1j),
    "scatter 2+0j": lambda d: torch.zeros(2, device=d).scatter(0, _first(d), complex(2, 0)),
}


def _outcome(case, device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's ComplexWarning from a conversion that is then checked
        try:
            return "ok", CASES[case](device).cpu().tolist()
        except RuntimeError as error:
            return "raised", str(error)


@pytest.mark.parametrize("case", sorted(CASES))
def test_scalar_conversion_matches_cpu(case):
    assert _outcome(case, "neuron") == _outcome(case, "cpu")
