"""The ``neuron`` c10d process group: collectives on neuron tensors, carried by gloo.

A Python ``dist.ProcessGroup`` subclass (PyTorch routes Python and C++ callers
such as DDP's reducer to its methods). Each collective stages its tensors as
zero-copy host views (host_views.py) and runs the matching gloo collective on
them, so gloo reads and writes device memory in place; only non-contiguous
tensors pay a device-side copy.

Collectives complete before they return (the simulated device has no
asynchronous streams to overlap with); the returned work is already done and
its future holds the neuron tensors, as DDP expects. ``send``/``recv`` are the
exception: they return pending work, completed by ``wait()``, so that a
batch of isend/irecv can be posted before any of them blocks.

gloo lacks ReduceOp.AVG: it is a SUM followed by a division on the device.
``alltoall`` with tensor lists is one ``alltoall_base`` over a packed buffer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from device_impl._compat import internal
from device_impl.distributed.host_views import Staged, stage

c10d = internal("torch._C._distributed_c10d", purpose="the neuron process group")
_create_work_from_future = internal("torch._C._distributed_c10d", "_create_work_from_future",
                                    "the neuron process group's work objects")

BACKEND_NAME = "neuron"


def _done(result: object) -> dist.Work:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


class _PendingWork(dist._Work):
    """Work of a point-to-point op: ``wait()`` waits for gloo, then writes results back."""

    def __init__(self, inner: dist.Work, finish: Callable[[], None], result: list[torch.Tensor]) -> None:
        super().__init__()
        self._inner = inner
        self._finish = finish
        self._result = result
        self._completed = False

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self._completed:
            self._inner.wait() if timeout is None else self._inner.wait(timeout)
            self._finish()
            self._completed = True
        return True

    def is_completed(self) -> bool:
        return self._completed

    def get_future(self) -> torch.futures.Future:
        self.wait()
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(self._result)
        return future


def _reduce_op(opts) -> dist.ReduceOp:
    return opts.reduceOp if opts is not None else dist.ReduceOp.SUM


def _check_average(op: dist.ReduceOp, tensors: Sequence[torch.Tensor]) -> bool:
    """True for AVG (run as SUM, then divide); refuses ops gloo cannot run."""
    if op == dist.ReduceOp.PREMUL_SUM:
        raise ValueError("the neuron backend does not support ReduceOp.PREMUL_SUM; scale the tensor and use "
                         "ReduceOp.SUM.")
    if op != dist.ReduceOp.AVG:
        return False
    for t in tensors:
        if not (t.is_floating_point() or t.is_complex()):
            raise ValueError(f"ReduceOp.AVG needs floating-point tensors, got {t.dtype}; use ReduceOp.SUM and "
                             f"divide, or convert the tensor to a floating type.")
    return True


def _options(kind: type, op: dist.ReduceOp, timeout: timedelta | None):
    opts = kind()
    opts.reduceOp = dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op
    if timeout is not None:
        opts.timeout = timeout
    return opts


class NeuronProcessGroup(dist.ProcessGroup):
    """c10d process group for neuron tensors (CPU tensors are passed to gloo as they are)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)

    # --- identity ---------------------------------------------------------------------------------

    def getBackendName(self) -> str:
        return BACKEND_NAME

    # c10d's ProcessGroup keeps its name on its registered backends (ProcessGroup::getGroupName reads
    # the first one), and a group implemented in Python registers none: ``group_name`` raised
    # "ProcessGroup name not set", which DeviceMesh (DTensor) and the functional collectives read
    # to find the group. The name c10d gives the group is kept here instead.
    _neuron_group_name = ""
    _neuron_group_desc = ""

    def _set_group_name(self, name: str) -> None:
        self._neuron_group_name = name

    @property
    def group_name(self) -> str:
        if not self._neuron_group_name:
            raise RuntimeError("ProcessGroup name not set")
        return self._neuron_group_name

    def _set_group_desc(self, desc: str) -> None:
        self._neuron_group_desc = desc

    @property
    def group_desc(self) -> str:
        return self._neuron_group_desc or "undefined"

    def getRank(self) -> int:
        return self._rank

    def getSize(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"NeuronProcessGroup(rank={self._rank}, size={self._size})"

    def shutdown(self) -> None:
        """``destroy_process_group`` shuts the group down. The C++ base class knows no backends of a
        group implemented in Python, so without this the gloo transport inside lived until
        interpreter exit and was torn down with its threads during finalization (a plausible cause
        of one rank aborting at exit, "terminate called without an active exception", seen once in
        a compat run and not reproduced since)."""
        gloo = self._gloo
        if gloo is not None:
            self._gloo = None
            gloo.shutdown()

    def abort(self) -> None:
        gloo = self._gloo
        if gloo is not None:
            self._gloo = None
            gloo.abort()

    def _get_backend(self, device: torch.device) -> "NeuronProcessGroup":
        """This group is its own backend for every device it serves. torch 2.14's
        ``batch_isend_irecv`` asks the group for its per-device backend (to read
        ``supports_coalescing``); the C++ lookup finds no registered backend for a
        Python-implemented group and raised "No backend type associated with device type neuron"."""
        return self

    # --- reductions ---------------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        op = _reduce_op(opts)
        average = _check_average(op, tensors)
        staged = Staged(tensors)
        stage(staged)
        self._gloo.allreduce(staged.host, _options(c10d.AllreduceOptions, op, self._timeout)).wait()
        staged.finish()
        if average:
            for t in tensors:
                t.div_(self._size)
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        for t in tensors:
            self.allreduce([t], opts)
        return _done(tensors)

    def reduce(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        op = _reduce_op(opts)
        average = _check_average(op, tensors)
        staged = Staged(tensors)
        stage(staged)
        gloo_opts = _options(c10d.ReduceOptions, op, self._timeout)
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.rootTensor = opts.rootTensor
        self._gloo.reduce(staged.host, gloo_opts).wait()
        staged.finish()
        if average and self._rank == opts.rootRank:
            for t in tensors:
                t.div_(self._size)
        return _done(tensors)

    def reduce_scatter(self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]],
                       opts=None) -> dist.Work:
        op = _reduce_op(opts)
        average = _check_average(op, output_tensors)
        outputs = Staged(output_tensors)
        inputs = [Staged(group, written=False) for group in input_tensors]
        stage(outputs, *inputs)
        self._gloo.reduce_scatter(outputs.host, [s.host for s in inputs],
                                  _options(c10d.ReduceScatterOptions, op, self._timeout)).wait()
        outputs.finish()
        if average:
            for t in output_tensors:
                t.div_(self._size)
        return _done(output_tensors)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> dist.Work:
        op = _reduce_op(opts)
        average = _check_average(op, [output])
        outputs, inputs = Staged([output]), Staged([input], written=False)
        stage(outputs, inputs)
        self._gloo._reduce_scatter_base(outputs.host[0], inputs.host[0],
                                        _options(c10d.ReduceScatterOptions, op, self._timeout)).wait()
        outputs.finish()
        if average:
            output.div_(self._size)
        return _done([output])

    _reduce_scatter_base = reduce_scatter_single

    # The functional collectives (torch.distributed._functional_collectives, DTensor's redistribution,
    # compiled collectives) call the coalesced forms; c10d's Python trampoline looks these names up.
    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts=None) -> dist.Work:
        for output, input in zip(outputs, inputs):
            self.reduce_scatter_single(output, input, opts)
        return _done(outputs)

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts=None) -> dist.Work:
        for output, input in zip(outputs, inputs):
            self.all_gather_single(output, input, opts)
        return _done(outputs)

    # --- data movement ------------------------------------------------------------------------------

    def broadcast(self, tensors: list[torch.Tensor], opts=None) -> dist.Work:
        staged = Staged(tensors)
        stage(staged)
        gloo_opts = c10d.BroadcastOptions()
        if opts is not None:
            gloo_opts.rootRank = opts.rootRank
            gloo_opts.rootTensor = opts.rootTensor
        gloo_opts.timeout = self._timeout
        self._gloo.broadcast(staged.host, gloo_opts).wait()
        staged.finish()
        return _done(tensors)

    def allgather(self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor],
                  opts=None) -> dist.Work:
        outputs = [Staged(group) for group in output_tensors]
        inputs = Staged(input_tensors, written=False)
        stage(inputs, *outputs)
        self._gloo.allgather([s.host for s in outputs], inputs.host, self._plain(c10d.AllgatherOptions)).wait()
        for s in outputs:
            s.finish()
        return _done(output_tensors)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> dist.Work:
        outputs, inputs = Staged([output]), Staged([input], written=False)
        stage(outputs, inputs)
        self._gloo._allgather_base(outputs.host[0], inputs.host[0], self._plain(c10d.AllgatherOptions)).wait()
        outputs.finish()
        return _done([output])

    _allgather_base = all_gather_single

    def gather(self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor],
               opts=None) -> dist.Work:
        outputs = [Staged(group) for group in output_tensors]
        inputs = Staged(input_tensors, written=False)
        stage(inputs, *outputs)
        gloo_opts = self._plain(c10d.GatherOptions)
        gloo_opts.rootRank = opts.rootRank
        self._gloo.gather([s.host for s in outputs], inputs.host, gloo_opts).wait()
        for s in outputs:
            s.finish()
        return _done(output_tensors)

    def scatter(self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]],
                opts=None) -> dist.Work:
        outputs = Staged(output_tensors)
        inputs = [Staged(group, written=False) for group in input_tensors]
        stage(outputs, *inputs)
        gloo_opts = self._plain(c10d.ScatterOptions)
        gloo_opts.rootRank = opts.rootRank
        self._gloo.scatter(outputs.host, [s.host for s in inputs], gloo_opts).wait()
        outputs.finish()
        return _done(output_tensors)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                          input_split_sizes: list[int], opts=None) -> dist.Work:
        outputs, inputs = Staged([output]), Staged([input], written=False)
        stage(outputs, inputs)
        self._gloo.alltoall_base(outputs.host[0], inputs.host[0], list(output_split_sizes),
                                 list(input_split_sizes), self._plain(c10d.AllToAllOptions)).wait()
        outputs.finish()
        return _done([output])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                 opts=None) -> dist.Work:
        """Tensor lists: packed into one flat buffer each way and exchanged with ``alltoall_base``."""
        dtypes = {t.dtype for t in list(output_tensors) + list(input_tensors)}
        if len(dtypes) != 1:
            raise ValueError(f"all_to_all needs one dtype across all tensors, got {sorted(map(str, dtypes))}.")
        if len(output_tensors) != self._size or len(input_tensors) != self._size:
            raise ValueError(f"all_to_all needs {self._size} input and output tensors (the world size), got "
                             f"{len(input_tensors)} and {len(output_tensors)}.")
        device = input_tensors[0].device
        send = torch.cat([t.reshape(-1) for t in input_tensors]) if input_tensors else None
        receive = torch.empty(sum(t.numel() for t in output_tensors), dtype=send.dtype, device=device)
        self.all_to_all_single(receive, send, [t.numel() for t in output_tensors],
                               [t.numel() for t in input_tensors])
        offset = 0
        for t in output_tensors:
            t.copy_(receive[offset:offset + t.numel()].view(t.shape))
            offset += t.numel()
        return _done(output_tensors)

    def barrier(self, opts=None) -> dist.Work:
        stage()  # queued device work is part of "everything before the barrier"
        self._gloo.barrier(self._plain(c10d.BarrierOptions)).wait()
        return _done([])

    # --- point to point -----------------------------------------------------------------------------

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        staged = Staged(tensors, written=False)
        stage(staged)
        inner = self._gloo.send(staged.host, dst, tag)
        return _PendingWork(inner, staged.finish, tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        staged = Staged(tensors)
        stage(staged)
        inner = self._gloo.recv(staged.host, src, tag)
        return _PendingWork(inner, staged.finish, tensors)

    # --- helpers ------------------------------------------------------------------------------------

    def _plain(self, kind: type):
        opts = kind()
        opts.timeout = self._timeout
        return opts
