"""Kernel family 'shape': cat, flip, roll, repeat, padding, tril/triu, unfold, narrow_copy, complex views.

These ops move bytes and compute (almost) nothing, so most of them are DMA programs over strided HBM
views, the strides doing the work: a reflected box is read with negative strides, a replicated or
repeated one with zero strides, and every copy is walked in its destination's memory order so DMA runs
stay long (``moves._in_order``). SBUF is used only where bytes must change: a dtype conversion (VectorE
cast through flat tiles), a constant to store (a memset tile), a sum (VectorE adds in fp32), a mask
(tril/triu), or a reversal DMA descriptors would make too costly (flip of the innermost dim, GpSimd).
Pure moves take every dtype (float64 and complex included: ``dtypes=None``); ops that compute take the
engines' dtypes. Argument checks, out= resizing (``moves._resize_out``: structured ops' rules, with
CPU's warning) and memory formats follow CPU's, errors with its exception class and message.

numpy reference of each op: the same index maps applied with numpy slicing.

Where each op is lowered (``TABLE.lookup(op).source`` names the module):

====================  ======================================================================================
``moves``             shared: dim wrapping, out= rules, numpy views in memory order, the DMA helpers
                      (``_move``, ``_accumulate``, ``_fill``, ``_const_tile``), ``_serve`` (composites)
``cat_stack``         cat (stack, hstack, vstack, dstack, column_stack, row_stack, concat, concatenate
                      are PyTorch composites over cat.out)
``flip_roll_repeat``  flip (fliplr, flipud, rot90), roll, repeat (tile)
``pad``               constant_pad_nd (pad), reflection_pad{1,2,3}d, replication_pad{1,2,3}d and their
                      backward
``tril_triu``         tril, triu
``views``             unfold, unfold_backward, narrow_copy, view_as_real, view_as_complex; the view ops and
                      copies PyTorch composes over as_strided and copy_
====================  ======================================================================================

Gathers, scatters, index_select, masked ops and sort are row accesses: ``kernels.indexing``.
"""

# Importing registers the kernels (in the order the single shape.py registered them).
from device_impl.kernels.shape import (  # noqa: F401
    moves,
    cat_stack,
    flip_roll_repeat,
    pad,
    tril_triu,
    views,
)
from device_impl.kernels.shape.moves import suggest_memory_format  # noqa: F401  (shared with kernels.spatial)
