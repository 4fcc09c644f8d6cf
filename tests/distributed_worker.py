"""One rank of the 2-process tests in test_distributed.py (run as a script, one process per rank).

``python tests/distributed_worker.py SCENARIO RANK WORLD PORT OUT.json``: initialises
``dist.init_process_group(backend="neuron")`` over TCP on 127.0.0.1:PORT, runs the scenario,
and writes what it observed to OUT.json for the test to check. Nothing is asserted here:
the test process compares, so a failure names the collective and the values.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=120)  # a hung peer raises instead of blocking forever


def _values(t: torch.Tensor) -> list:
    return t.detach().cpu().float().tolist() if t.dtype == torch.bfloat16 else t.detach().cpu().tolist()


def collectives(rank: int, world: int) -> dict:
    dev = torch.device("neuron", torch.neuron.current_device())
    out: dict = {"device": str(dev), "current_device": torch.neuron.current_device(),
                 "backend": dist.get_backend(), "device_count": torch.neuron.device_count()}
    reduce_ops = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "MAX": dist.ReduceOp.MAX,
                  "MIN": dist.ReduceOp.MIN, "PRODUCT": dist.ReduceOp.PRODUCT}
    for name, op in reduce_ops.items():
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
            if name == "AVG" and not dtype.is_floating_point:
                continue
            t = (torch.arange(6) + 1 + rank).to(dtype).to(dev)
            dist.all_reduce(t, op=op)
            out[f"all_reduce.{name}.{str(dtype)[6:]}"] = _values(t)
    # a non-contiguous tensor: reduced through a contiguous device buffer and written back
    t = (torch.arange(12.0).reshape(3, 4) * (rank + 1)).to(dev).t()
    dist.all_reduce(t)
    out["all_reduce.noncontiguous"] = _values(t)
    out["all_reduce.noncontiguous.stride"] = list(t.stride())
    t = torch.full((3,), float(rank), device=dev)
    dist.broadcast(t, src=1)
    out["broadcast"] = _values(t)
    gathered = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_gather(gathered, torch.full((2,), float(rank + 1), device=dev))
    out["all_gather"] = [_values(g) for g in gathered]
    flat = torch.empty(2 * world, device=dev, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(flat, torch.full((2,), rank + 0.5, device=dev, dtype=torch.bfloat16))
    out["all_gather_into_tensor"] = _values(flat)
    piece = torch.empty(2, device=dev)
    dist.reduce_scatter(piece, [torch.arange(2.0, device=dev) + rank + 10 * j for j in range(world)])
    out["reduce_scatter"] = _values(piece)
    piece = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(piece, torch.arange(2.0 * world, device=dev) * (rank + 1))
    out["reduce_scatter_tensor"] = _values(piece)
    piece = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(piece, torch.arange(2.0 * world, device=dev) * (rank + 1), op=dist.ReduceOp.AVG)
    out["reduce_scatter_tensor.AVG"] = _values(piece)
    received = torch.empty(2 * world, device=dev)
    dist.all_to_all_single(received, torch.arange(2.0 * world, device=dev) + 100 * rank)
    out["all_to_all_single"] = _values(received)
    outputs = [torch.empty(rank + 1, device=dev) for _ in range(world)]  # uneven splits
    dist.all_to_all(outputs, [torch.full((j + 1,), 10.0 * rank + j, device=dev) for j in range(world)])
    out["all_to_all"] = [_values(o) for o in outputs]
    t = torch.full((2,), float(rank + 1), device=dev)
    dist.reduce(t, dst=0, op=dist.ReduceOp.PRODUCT)
    out["reduce"] = _values(t) if rank == 0 else None
    gather_list = [torch.empty(2, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((2,), 5.0 + rank, device=dev), gather_list, dst=0)
    out["gather"] = [_values(g) for g in gather_list] if rank == 0 else None
    piece = torch.empty(3, device=dev)
    dist.scatter(piece, [torch.full((3,), 20.0 + j, device=dev) for j in range(world)] if rank == 1 else None, src=1)
    out["scatter"] = _values(piece)
    dist.barrier()
    out["barrier"] = True
    if rank == 0:
        dist.send(torch.arange(4.0, device=dev).to(torch.bfloat16) + 0.5, dst=1)
        box = torch.empty(3, dtype=torch.int64, device=dev)
        dist.recv(box, src=1)
        out["recv"] = _values(box)
    else:
        box = torch.empty(4, dtype=torch.bfloat16, device=dev)
        dist.recv(box, src=0)
        out["recv"] = _values(box)
        dist.send(torch.tensor([7, 8, 9], device=dev), dst=0)
    # batched isend/irecv: both ranks post a send before any receive completes
    peer = 1 - rank
    incoming = torch.empty(2, device=dev)
    ops = [dist.P2POp(dist.isend, torch.full((2,), float(rank), device=dev), peer),
           dist.P2POp(dist.irecv, incoming, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    out["batch_isend_irecv"] = _values(incoming)
    objects: list = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    out["all_gather_object"] = objects
    errors = {}
    for name, call in {
        "avg_int": lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=dev), op=dist.ReduceOp.AVG),
    }.items():
        try:
            call()
            errors[name] = None
        except Exception as exc:  # noqa: BLE001 - the message is what the test checks
            errors[name] = f"{type(exc).__name__}: {exc}"
    out["errors"] = errors
    dist.barrier()
    out["adaptive"] = adaptive(rank, world)
    return out


def adaptive(rank: int, world: int) -> dict:
    """A collective sees queued results, and ops queued after it see the reduced values."""
    dev = torch.device("neuron", torch.neuron.current_device())
    torch.neuron.set_eager_mode("adaptive")
    x = torch.arange(4.0, device=dev) + rank
    y = x * 2 + 1  # queued in adaptive mode
    dist.all_reduce(y)
    z = y * 10  # queued again, must read the reduced y
    result = {"mode": torch.neuron.get_eager_mode(), "y": _values(y), "z": _values(z)}
    buckets = [torch.zeros(2, device=dev) for _ in range(world)]
    w = torch.ones(2, device=dev) * (rank + 3)  # queued
    dist.all_gather(buckets, w)
    result["all_gather"] = [_values(b) for b in buckets]
    torch.neuron.set_eager_mode("eager")
    return result


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def _batches(steps: int, world: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4 * world, 8, generator=g), torch.randn(4 * world, 2, generator=g)) for _ in range(steps)]


def ddp(rank: int, world: int) -> dict:
    """DistributedDataParallel on 2 ranks against the same training in one process on the full batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("neuron", torch.neuron.current_device())
    steps = 3
    model = DDP(_mlp().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in _batches(steps, world):
        shard = slice(4 * rank, 4 * (rank + 1))
        loss = torch.nn.functional.mse_loss(model(x[shard].to(dev)), y[shard].to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ddp_params = [p.detach().cpu() for p in model.module.parameters()]
    # the reference: one process, whole batch (the mean over shards of equal size is the whole mean)
    single = _mlp().to(dev)
    single_opt = torch.optim.SGD(single.parameters(), lr=0.1)
    for x, y in _batches(steps, world):
        loss = torch.nn.functional.mse_loss(single(x.to(dev)), y.to(dev))
        single_opt.zero_grad()
        loss.backward()
        single_opt.step()
    single_params = [p.detach().cpu() for p in single.parameters()]
    diff = max((a - b).abs().max().item() for a, b in zip(ddp_params, single_params))
    moved = max((a - b).abs().max().item() for a, b in zip(ddp_params, [p.detach() for p in _mlp().parameters()]))
    props = torch.neuron.get_device_properties(dev)
    return {"device": str(dev), "device_count": torch.neuron.device_count(), "physical_core": props.physical_core,
            "max_param_diff_vs_single_process": diff, "param_change": moved, "losses": losses,
            "param_checksum": sum(p.double().sum().item() for p in ddp_params)}


def dtensor(rank: int, world: int) -> dict:
    """DTensor and the functional collectives on a 1-D neuron mesh, eager and compiled."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("neuron", (world,))
    out: dict = {"mesh_device": mesh.device_type, "group": mesh.get_group().group_name}
    g = torch.Generator().manual_seed(0)  # the same full tensors on every rank
    x, w = torch.randn(8, 6, generator=g), torch.randn(6, 4, generator=g)
    out["x"], out["w"] = _values(x), _values(w)
    xd = distribute_tensor(x.to("neuron"), mesh, [Shard(0)])
    out["local_rows"] = _values(xd.to_local())
    out["local_device"] = str(xd.to_local().device)
    row = xd @ distribute_tensor(w.to("neuron"), mesh, [Replicate()])  # row-sharded: no communication
    out["row.placements"] = [repr(p) for p in row.placements]
    out["row.full"] = _values(row.full_tensor())
    col = distribute_tensor(x.to("neuron"), mesh, [Shard(1)]) @ distribute_tensor(w.to("neuron"), mesh, [Shard(0)])
    out["col.placements"] = [repr(p) for p in col.placements]  # partial sums over the contraction
    out["col.full"] = _values(col.redistribute(mesh, [Replicate()]).to_local())
    t = torch.full((2,), float(rank + 1), device="neuron")
    out["funcol.all_reduce"] = _values(funcol.all_reduce(t, "sum", mesh))
    out["funcol.all_gather_tensor"] = _values(funcol.all_gather_tensor(t, 0, mesh))
    out["funcol.reduce_scatter_tensor"] = _values(
        funcol.reduce_scatter_tensor(torch.arange(4.0, device="neuron") * (rank + 1), "sum", 0, mesh))

    def collectives(a: torch.Tensor) -> torch.Tensor:
        s = funcol.all_reduce(a * 2, "sum", mesh)
        gathered = funcol.all_gather_tensor(s, 0, mesh)
        return funcol.reduce_scatter_tensor(gathered + 1, "sum", 0, mesh)

    torch._dynamo.reset()
    out["compiled.collectives"] = _values(torch.compile(collectives, backend="neuron", fullgraph=True)(t))
    out["eager.collectives"] = _values(collectives(t))
    compiled_mm = torch.compile(lambda a, b: (a @ b).full_tensor(), backend="neuron")
    out["compiled.dtensor_matmul"] = _values(compiled_mm(xd, distribute_tensor(w.to("neuron"), mesh, [Replicate()])))
    out["isinstance_dtensor"] = isinstance(row, DTensor)
    return out


SCENARIOS = {"collectives": collectives, "ddp": ddp, "dtensor": dtensor}


def main() -> None:
    scenario, rank, world, port, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    result: dict
    try:
        dist.init_process_group(backend="neuron", rank=rank, world_size=world, timeout=TIMEOUT)
        result = {"ok": True, **SCENARIOS[scenario](rank, world)}
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - reported to the test process
        result = {"ok": False, "error": traceback.format_exc()}
    with open(path, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
