"""neuronsim: a simulated AWS Trainium NeuronCore registered as PyTorch's ``neuron`` device.

``import device_impl`` (or plain ``import torch`` once the package is
installed, through the ``torch.backends`` entry point) registers the device
through PrivateUse1: the C++ core (allocator, guard, hooks, metadata
kernels), the ``torch.neuron`` module, and the dispatch table.
"""

from __future__ import annotations

_registered = False
_module_initialising = True


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group, run by ``import torch``.

    Defined before ``import torch`` because ``import device_impl`` itself
    imports torch, which runs this entry point while this module is still
    initialising; registration then happens at the end of this module.
    """
    if not _module_initialising:
        register()


import torch  # noqa: E402


def register() -> None:
    """Make ``neuron`` a PyTorch device. Safe to call more than once."""
    global _registered
    if _registered:
        return
    from device_impl import dispatch, neuron
    from device_impl.runtime import config, devices

    settings = config.read()
    devices.configure(settings)
    torch.utils.rename_privateuse1_backend("neuron")
    torch._register_device_module("neuron", neuron)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    dispatch.install()
    import device_impl.kernels  # noqa: F401  (registers the native kernels)
    from device_impl.dispatch import table, written

    written.guard_composite_writes(table.resolve)  # out= of composite kernels checked like the native ones
    from device_impl import amp

    amp.install()  # autocast policy and GradScaler kernels
    from device_impl import distributed

    distributed.register()  # dist.init_process_group(backend="neuron")
    from device_impl import profiler  # noqa: F401  (engine launches become torch.profiler ranges)

    from device_impl.compiler import registration

    registration.install()  # torch.compile(backend="neuron"); Dynamo and the compiler load on first use

    if settings.eager_mode != "eager":
        from device_impl import eager

        eager.set_eager_mode(settings.eager_mode)

    _registered = True


register()
_module_initialising = False
