"""Tile kernels for aten ops, one module per family, written against device_impl.engine.

Importing this package registers every kernel in the lowering table
(device_impl.dispatch.TABLE).
"""

from device_impl.kernels import copy, elementwise, matmul  # noqa: F401
