"""The NeuronCore simulator: memories, engines, instruction set, cost model, timeline.

Kernels (device_impl.kernels) and the compiler emit only these instructions;
``isa.py`` is the definition of what each one does and costs.
"""

from device_impl.engine.constants import PLATFORM, PLATFORMS, Platform  # noqa: F401
from device_impl.engine.core import NeuronCore, last_launch, launch, record_trace, reset_stats, stats  # noqa: F401
from device_impl.engine.memory import EngineError, Tile  # noqa: F401
from device_impl.engine.timeline import LaunchReport, chrome_trace  # noqa: F401
