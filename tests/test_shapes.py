"""Bucketing and padding (device_impl.shapes): each policy's buckets, masks, HF batches, and the promise
that a right-padded causal model gives the unpadded logits on its real tokens."""

import pytest
import torch

from device_impl import shapes


@pytest.mark.parametrize("spec, lengths, expected", [
    ("none", [1, 127, 128, 129, 700], [1, 127, 128, 129, 700]),
    ("multiple:128", [1, 127, 128, 129, 700], [128, 128, 128, 256, 768]),
    ("multiple:64", [0, 64, 65], [64, 64, 128]),
    ("pow2", [1, 2, 3, 127, 128, 129, 700], [1, 2, 4, 128, 128, 256, 1024]),
    ("pow2:32", [1, 33], [32, 64]),
    ("buckets:512,128,256", [1, 128, 129, 512], [128, 128, 256, 512]),
    ("max:300", [1, 299, 300], [300, 300, 300]),
])
def test_policy_buckets(spec, lengths, expected):
    policy = shapes.parse(spec)
    assert policy.buckets_for(lengths) == expected
    assert shapes.parse(policy.name) == policy  # names round-trip


def test_padded_fraction_is_the_share_of_padding_tokens():
    policy = shapes.parse("multiple:128")
    # 100 -> 128, 200 -> 256, 128 -> 128: 428 real of 512 served
    assert policy.padded_fraction([100, 200, 128]) == pytest.approx(1 - 428 / 512)
    assert shapes.parse("none").padded_fraction([3, 5]) == 0.0


@pytest.mark.parametrize("spec", ["buckets:128,256", "max:256"])
def test_overflow_names_the_length_and_the_fix(spec):
    with pytest.raises(shapes.BucketOverflowError, match="257"):
        shapes.parse(spec).bucket(257)


@pytest.mark.parametrize("spec", ["zigzag", "multiple:0", "buckets:", "multiple:x", "max:-1"])
def test_bad_policies_are_value_errors(spec):
    with pytest.raises(ValueError):
        shapes.parse(spec)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_to_returns_values_and_mask(device, side):
    x = torch.arange(6, dtype=torch.float32, device=device).reshape(2, 3)
    padded, mask = shapes.pad_to(x, 5, dim=1, value=-1.0, side=side)
    assert padded.device.type == device and mask.dtype == torch.bool
    expected = [[0, 1, 2, -1, -1], [3, 4, 5, -1, -1]]
    expected_mask = [[True, True, True, False, False]] * 2
    if side == "left":
        expected = [row[3:] + row[:3] for row in expected]
        expected_mask = [row[3:] + row[:3] for row in expected_mask]
    assert padded.cpu().tolist() == expected
    assert mask.cpu().tolist() == expected_mask
    restored = shapes.unpad(padded, 3, side=side)
    assert torch.equal(restored.cpu(), x.cpu())


def test_pad_to_refuses_to_shrink():
    with pytest.raises(ValueError, match="truncate"):
        shapes.pad_to(torch.zeros(2, 5), 3)


def test_pad_batch_pads_every_sequence_field():
    batch = {"input_ids": torch.tensor([[5, 6, 7], [8, 9, 10]]),
             "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
             "labels": torch.tensor([[6, 7, 1], [9, 10, 1]]),
             "position_ids": torch.tensor([[0, 1, 2], [0, 1, 2]])}
    out = shapes.pad_batch(batch, "multiple:4", pad_token_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 7, 0], [8, 9, 10, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]
    assert out["labels"].tolist() == [[6, 7, 1, -100], [9, 10, 1, -100]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    bare = shapes.pad_batch({"input_ids": torch.tensor([[1, 2]])}, "multiple:4")
    assert bare["attention_mask"].dtype == torch.int64 and bare["attention_mask"].tolist() == [[1, 1, 0, 0]]


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_right_padded_llama_gives_the_unpadded_logits_on_real_tokens(device):
    transformers = pytest.importorskip("transformers")
    from harness.models import tiny_llama_config

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(tiny_llama_config()).eval().to(device)
    ids = torch.randint(1, 128, (2, 37))
    with torch.no_grad():
        plain = model(input_ids=ids.to(device)).logits
        batch = shapes.pad_batch({"input_ids": ids}, "multiple:64")
        assert batch["input_ids"].shape == (2, 64)
        padded = model(**{k: v.to(device) for k, v in batch.items()}).logits
    assert padded.shape[1] == 64
    torch.testing.assert_close(shapes.unpad(padded, 37).cpu(), plain.cpu(), rtol=1e-5, atol=1e-5)
