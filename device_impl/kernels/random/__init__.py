"""Kernel family 'random': sampling, dropout, and the factories that compute values (arange, linspace, logspace, eye).

The contract every kernel of the family keeps:

* Random numbers come only from the core's counter-based generator (Philox on GpSimdE,
  ``nc.gpsimd.random(tile, seed, counter, stream)``). A kernel first *reserves* the draws it
  uses: ``runtime.random.reserve`` returns (seed, offset) and advances the generator by the
  number of draws, so two launches never share numbers and ``manual_seed`` replays them.
* Counters: element ``i`` of stream ``k`` of a tensor of ``numel`` elements reads counter
  ``offset + k * numel + i``; each tile asks for its own slice (``offset + k * numel +
  tile_start``). A result depends only on (seed, offset, shape, memory order), not on the
  tiling of other ops, timing, or which other ops ran between two draws.
* Streams: "uniform" (float32 in [0, 1)), "normal" (float32), "bits" (int64 in [0, 2^62));
  distributions are transforms of those tiles on ScalarE/VectorE. Permutations (randperm),
  top-k and binary searches (multinomial) are GpSimd programs.
* Checks (argument ranges, dtypes) run before any draw, with CPU's messages and classes.

Factories follow CPU's formulas exactly, including its rounding (see ``factories``).

Where each op is lowered (``TABLE.lookup(op).source`` names the module):

=================  ============================================================================
``tiles``          registration, the shared checks, the random tile loop (``sample``)
``continuous``     uniform_, normal_ (and normal.Tensor_*), exponential_, geometric_, log_normal_, cauchy_
``bernoulli``      bernoulli_.float, bernoulli_.Tensor, bernoulli.out
``integers``       random_, random_.from, random_.to (randint, random)
``randperm``       randperm.generator_out
``multinomial``    multinomial, multinomial.out
``dropout``        native_dropout, native_dropout_backward
``factories``      arange.start_out, linspace.out, logspace.out, eye.out, eye.m_out
=================  ============================================================================

Scalar -> dtype conversion (overflow errors, opmath) is ``device_impl.kernels.scalars``.
"""


from device_impl.kernels.random import (  # noqa: F401  (importing registers the kernels)
    bernoulli,
    continuous,
    dropout,
    factories,
    integers,
    multinomial,
    randperm,
    tiles,
)
