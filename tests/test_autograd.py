"""Autograd through the device (AutogradPrivateUse1), and training on each core."""

import pytest
import torch


def test_backward_gives_gradients_on_neuron():
    x_cpu = torch.randn(4, 3, requires_grad=True)
    x = x_cpu.detach().to("neuron").requires_grad_()
    (x_cpu * x_cpu).sum().backward()
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.device.type == "neuron"
    assert torch.allclose(x.grad.cpu(), x_cpu.grad)


def test_grad_through_views_and_in_place():
    base = torch.randn(5, 5)
    x_cpu = base.clone().requires_grad_()
    x = base.to("neuron").requires_grad_()
    for t in (x_cpu, x):
        y = t * 1.0
        y[1:3].mul_(3)
        y.t().sum().backward()
    assert torch.allclose(x.grad.cpu(), x_cpu.grad)


def _train(device: str, steps: int = 5) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    inputs, targets = torch.randn(16, 10, generator=g).to(device), torch.randn(16, 3, generator=g).to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    for p in model.parameters():
        assert p.device.type == device.split(":")[0] and p.grad.device == p.device
    return losses


@pytest.mark.parametrize("device", ["neuron:0", "neuron:1"])
def test_mlp_trains_like_cpu(device):
    cpu_losses = _train("cpu")
    losses = _train(device)
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1.3e-6, atol=1e-5)


def test_no_grad_and_detach():
    x = torch.ones(3, device="neuron", requires_grad=True)
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    assert not x.detach().requires_grad
