"""The loaded C++ core (``_neuron_C``), shared by every module that needs it."""

from device_impl._build import load

C = load()
