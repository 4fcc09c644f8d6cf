"""Tile kernels for aten ops, one module per family, written against device_impl.engine.

Importing this package registers every kernel in the lowering table
(device_impl.dispatch.TABLE). See docs/kernels.md for how to write one.
"""

from device_impl.kernels import (  # noqa: F401
    attention,
    copy,
    elementwise,
    indexing,
    matmul,
    membership,
    products,
    random,
    reduction,
    rnn,
    shape,
    spatial,
)
