"""The device runtime underneath ``torch.neuron``: devices, memory, RNG, streams, configuration, hooks.

These modules sit below ``dispatch``, ``kernels``, ``eager`` and ``compiler`` and import none of them
(tests/test_layering.py checks it); ``device_impl.neuron`` is the ``torch.neuron`` module that
gathers them with the dispatch, compiler and engine counters for users.
"""
