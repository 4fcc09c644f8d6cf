"""DTensor and functional collectives over dist.init_process_group(backend="neuron"), 2 ranks.

Runs tests/distributed_worker.py's ``dtensor`` scenario in two processes (one rank per NeuronCore,
see test_distributed.py). Fails if the neuron process group has no group name for DeviceMesh, or
lacks the coalesced collectives the functional collectives call (both were missing).
"""

from __future__ import annotations

import pytest
import torch

from test_distributed import _run


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return _run("dtensor", tmp_path_factory.mktemp("dtensor"))


def _single_process(r: dict) -> torch.Tensor:
    return torch.tensor(r["x"]) @ torch.tensor(r["w"])


def test_mesh_and_distribute_tensor_on_neuron(ranks):
    for rank, r in enumerate(ranks):
        assert r["mesh_device"] == "neuron" and r["group"]
        assert r["local_device"] == f"neuron:{rank}"
        assert r["local_rows"] == torch.tensor(r["x"])[4 * rank:4 * (rank + 1)].tolist()


def test_row_and_column_sharded_matmul_match_single_process(ranks):
    for r in ranks:
        expected = _single_process(r)
        assert r["row.placements"] == ["Shard(dim=0)"]
        torch.testing.assert_close(torch.tensor(r["row.full"]), expected)
        assert r["col.placements"] == ["Partial(sum)"]
        torch.testing.assert_close(torch.tensor(r["col.full"]), expected)
        assert r["isinstance_dtensor"]


def test_functional_collectives(ranks):
    for rank, r in enumerate(ranks):
        assert r["funcol.all_reduce"] == [3.0, 3.0]
        assert r["funcol.all_gather_tensor"] == [1.0, 1.0, 2.0, 2.0]
        # sum over ranks of arange(4) * (rank + 1) = [0, 3, 6, 9]; rank r keeps elements [2r, 2r + 2)
        assert r["funcol.reduce_scatter_tensor"] == [0.0, 3.0, 6.0, 9.0][2 * rank:2 * rank + 2]


def test_functional_collectives_inside_torch_compile(ranks):
    for rank, r in enumerate(ranks):
        # all_reduce(2 * (rank + 1)) = 6 on both; gathered [6, 6, 6, 6] + 1, reduce-scattered: 14 each
        assert r["eager.collectives"] == [14.0, 14.0]
        assert r["compiled.collectives"] == r["eager.collectives"]
        torch.testing.assert_close(torch.tensor(r["compiled.dtensor_matmul"]), _single_process(r))
