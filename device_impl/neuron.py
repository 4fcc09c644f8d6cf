"""``torch.neuron``: the device module of the simulated NeuronCores (registered by ``device_impl.register``).

Names follow TorchNeuron and torch.cuda so that device-generic code runs
unchanged: devices, the memory API, RNG, streams and events.
"""

from device_impl import amp  # noqa: F401  (torch.neuron.amp)
from device_impl.amp import get_amp_supported_dtype, is_bf16_supported  # noqa: F401
from device_impl.runtime.devices import (  # noqa: F401
    NeuronDeviceProperties,
    current_device,
    device,
    device_count,
    device_of,
    get_device_name,
    get_device_properties,
    is_available,
    set_device,
    synchronize,
)
from device_impl.runtime.memory import (  # noqa: F401
    check_allocator_invariants,
    empty_cache,
    empty_host_cache,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
)
from device_impl.runtime.random import (  # noqa: F401
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from device_impl.runtime.streams import (  # noqa: F401
    Event,
    Stream,
    current_stream,
    default_stream,
    device_time_ns,
    set_stream,
    stream,
)


def set_eager_mode(mode: str) -> None:
    """'adaptive' queues and fuses neuron ops until their data is needed; 'eager' runs each at once."""
    from device_impl import eager

    eager.set_eager_mode(mode)


def get_eager_mode() -> str:
    from device_impl import eager

    return eager.get_eager_mode()


def eager_mode(mode: str):
    """``with torch.neuron.eager_mode("adaptive"):`` run the block in that mode."""
    from device_impl import eager

    return eager.eager_mode(mode)


def dispatch_stats() -> dict:
    """Per-op call counts by tier on this device (what device_impl.dispatch.stats() returns).

    Exposed on torch.neuron so device-agnostic tools (the harness) can ask any PyTorch device
    module for it without importing this package.
    """
    from device_impl import dispatch

    return dispatch.stats()


def reset_dispatch_stats() -> None:
    from device_impl import dispatch

    dispatch.reset_stats()


def lowering(op: str) -> dict:
    """How the device serves an aten overload: {'tier': ..., 'source': ...}."""
    from device_impl import dispatch

    entry = dispatch.TABLE.lookup(op)
    return {"tier": entry.tier.value, "source": entry.source}


def native_overloads() -> list:
    """Every aten overload with a native kernel (the lowering table's native tier)."""
    from device_impl import dispatch

    return dispatch.TABLE.ops(dispatch.Tier.NATIVE)


def compiler_stats() -> dict:
    """What ``torch.compile(backend="neuron")`` did since the last reset: graphs, compiles, NEFF cache hits,
    recompiles by cause (with shapes), compile seconds, fallbacks, executions (device_impl.compiler.stats()).

    On torch.neuron so the harness's port-check reads it like any device module's counters; the
    compiler package is imported only when this is called.
    """
    from device_impl import compiler

    return compiler.stats()


def reset_compiler_stats() -> None:
    from device_impl import compiler

    compiler.reset_stats()


def engine_stats() -> dict:
    """Per-kernel engine totals since the last reset: launches, device_ns, hbm_bytes, flops and busy ns per
    engine (``tensor_busy_ns``, ``vector_busy_ns``, ...), from the simulator (device_impl.engine.core.stats())."""
    from device_impl.engine import core

    return core.stats()


def reset_engine_stats() -> None:
    from device_impl.engine import core

    core.reset_stats()


def __getattr__(name: str):
    # torch.neuron.shapes: bucketing and padding helpers (device_impl.shapes), imported on first use
    if name == "shapes":
        from device_impl import shapes

        return shapes
    raise AttributeError(f"module 'torch.neuron' has no attribute {name!r}")


def _is_in_bad_fork() -> bool:
    """The simulated device has no driver state a fork could corrupt."""
    return False


def is_initialized() -> bool:
    return True


def init() -> None:
    """The device is initialised at registration; kept for torch.cuda-style code."""


def _lazy_init() -> None:
    """Called by generic PyTorch code before device use; nothing is deferred."""
