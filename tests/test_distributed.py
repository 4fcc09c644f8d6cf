"""dist.init_process_group(backend="neuron"): collectives and DDP across 2 ranks on loopback.

Each test starts two processes running tests/distributed_worker.py (one rank per NeuronCore)
and checks what they report. Every collective's result is compared with the value the
semantics give; DDP is compared with single-process training on the full batch. A hang
cannot block the suite: ranks use a 120 s collective timeout and the test kills them if they
have not exited after PROCESS_TIMEOUT_S (a bound against deadlock, not a performance limit).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

WORKER = Path(__file__).with_name("distributed_worker.py")
WORLD = 2
PROCESS_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(scenario: str, tmp_path: Path, env_per_rank=None) -> list[dict]:
    port = str(_free_port())
    procs, paths = [], []
    for rank in range(WORLD):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
        env.update(GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore")
        env.update((env_per_rank or {}).get(rank, {}))
        path = tmp_path / f"{scenario}.{rank}.json"
        paths.append(path)
        procs.append(subprocess.Popen([sys.executable, str(WORKER), scenario, str(rank), str(WORLD), port, str(path)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=PROCESS_TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{scenario}: ranks did not finish (deadlock?)")
    results = []
    for rank, (p, path, log) in enumerate(zip(procs, paths, logs)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{log[-3000:]}"
        result = json.loads(path.read_text())
        assert result["ok"], f"rank {rank} failed:\n{result['error']}"
        results.append(result)
    return results


@pytest.fixture(scope="module")
def collectives(tmp_path_factory):
    return _run("collectives", tmp_path_factory.mktemp("collectives"))


def test_backend_is_registered_for_neuron():
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert "neuron" in dist.Backend.backend_capability["neuron"]


def test_one_rank_per_neuroncore(collectives):
    for rank, r in enumerate(collectives):
        assert r["backend"] == "neuron"
        assert r["device_count"] == 2 and r["current_device"] == rank and r["device"] == f"neuron:{rank}"


def _expected_reduce(name: str) -> list[float]:
    a = [i + 1 for i in range(6)]
    b = [i + 2 for i in range(6)]
    return {"SUM": [x + y for x, y in zip(a, b)], "AVG": [(x + y) / 2 for x, y in zip(a, b)],
            "MAX": b, "MIN": a, "PRODUCT": [x * y for x, y in zip(a, b)]}[name]


@pytest.mark.parametrize("op, dtype", [(op, dtype) for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT")
                                       for dtype in ("float32", "bfloat16", "float16", "int32")
                                       if (op, dtype) != ("AVG", "int32")])  # refused: see below
def test_all_reduce(collectives, op, dtype):
    for r in collectives:
        assert r[f"all_reduce.{op}.{dtype}"] == _expected_reduce(op)


def test_all_reduce_refuses_integer_average(collectives):
    for r in collectives:
        assert r["errors"]["avg_int"].startswith("ValueError: ReduceOp.AVG needs floating-point tensors")


def test_all_reduce_non_contiguous(collectives):
    base = torch.arange(12.0).reshape(3, 4)
    expected = (base * 1 + base * 2).t().tolist()
    for r in collectives:
        assert r["all_reduce.noncontiguous"] == expected
        assert r["all_reduce.noncontiguous.stride"] == [1, 4]  # still the caller's view


def test_broadcast(collectives):
    assert all(r["broadcast"] == [1.0, 1.0, 1.0] for r in collectives)


def test_all_gather(collectives):
    for r in collectives:
        assert r["all_gather"] == [[1.0, 1.0], [2.0, 2.0]]
        assert r["all_gather_into_tensor"] == [0.5, 0.5, 1.5, 1.5]  # bfloat16 through int16 host views


def test_reduce_scatter(collectives):
    # rank r contributes [arange(2) + r + 10 j for j]; rank j receives the sum over r of entry j
    for j, r in enumerate(collectives):
        assert r["reduce_scatter"] == [(0 + 0 + 10 * j) + (0 + 1 + 10 * j), (1 + 0 + 10 * j) + (1 + 1 + 10 * j)]
    # rank r contributes arange(4) * (r + 1); rank j receives elements [2j, 2j + 2) summed
    full = [x * 1 + x * 2 for x in range(4)]
    for j, r in enumerate(collectives):
        assert r["reduce_scatter_tensor"] == full[2 * j:2 * j + 2]
        assert r["reduce_scatter_tensor.AVG"] == [x / 2 for x in full[2 * j:2 * j + 2]]


def test_all_to_all(collectives):
    for j, r in enumerate(collectives):
        # all_to_all_single: rank r sends arange(4) + 100 r, chunk j to rank j
        assert r["all_to_all_single"] == [2 * j, 2 * j + 1, 100 + 2 * j, 101 + 2 * j]
        # all_to_all with uneven sizes: rank r sends j + 1 copies of 10 r + j to rank j
        assert r["all_to_all"] == [[10.0 * src + j] * (j + 1) for src in range(WORLD)]


def test_reduce_gather_scatter(collectives):
    assert collectives[0]["reduce"] == [2.0, 2.0]  # 1 * 2 on the destination
    assert collectives[0]["gather"] == [[5.0, 5.0], [6.0, 6.0]]
    assert [r["scatter"] for r in collectives] == [[20.0] * 3, [21.0] * 3]


def test_barrier_send_recv(collectives):
    assert all(r["barrier"] for r in collectives)
    assert collectives[1]["recv"] == [0.5, 1.5, 2.5, 3.5]
    assert collectives[0]["recv"] == [7, 8, 9]
    assert collectives[0]["batch_isend_irecv"] == [1.0, 1.0]
    assert collectives[1]["batch_isend_irecv"] == [0.0, 0.0]


def test_object_collectives(collectives):
    assert all(r["all_gather_object"] == [{"rank": 0}, {"rank": 1}] for r in collectives)


def test_collectives_see_adaptive_eager_queue(collectives):
    y = [(2 * i + 1) + (2 * (i + 1) + 1) for i in range(4)]
    for r in (c["adaptive"] for c in collectives):
        assert r["mode"] == "adaptive"
        assert r["y"] == y
        assert r["z"] == [10 * v for v in y]
        assert r["all_gather"] == [[3.0, 3.0], [4.0, 4.0]]


def test_ddp_matches_single_process_training(tmp_path):
    # Each process sees one NeuronCore (as torchrun on Trainium): rank r is neuron:0 = physical core r.
    results = _run("ddp", tmp_path, env_per_rank={r: {"NEURON_RT_VISIBLE_CORES": str(r)} for r in range(WORLD)})
    for rank, r in enumerate(results):
        assert r["device"] == "neuron:0" and r["device_count"] == 1 and r["physical_core"] == rank
        assert r["param_change"] > 1e-3  # training moved the weights
        assert r["max_param_diff_vs_single_process"] < 1e-5, r
    assert results[0]["param_checksum"] == results[1]["param_checksum"]  # replicas stay identical
