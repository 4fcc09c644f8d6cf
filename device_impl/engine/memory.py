"""SBUF and PSUM: the on-chip memories, and the tiles kernels allocate in them.

A tile is a 2-D region ``[P <= 128, F]``: partition dimension first, free
dimension second. Capacity is accounted per partition (a tile of F elements
of dtype d uses F * sizeof(d) bytes of every partition it spans), which is
how NKI budgets SBUF. Reads of a tile no instruction has written return
poison (NaN for floats), so a kernel that reads before it writes produces
NaN instead of plausible garbage.

Timing state lives on the tile too: when its last write completes
(``ready``), when its last access ends (``last_use``) and, for a tile that
reuses memory freed by earlier tiles, when that memory became free
(``available``). The timeline reads these to order instructions.
"""

from __future__ import annotations

from collections import deque
from sys import getrefcount

import numpy as np

from device_impl.engine.dtypes import poison_value


class EngineError(RuntimeError):
    """A kernel broke a hardware rule (tile shape, memory capacity, operand placement)."""


class Tile:
    __slots__ = ("data", "space", "_name", "root", "ready", "last_use", "available", "initialized", "nbytes", "key")

    def __init__(self, data: np.ndarray, space: str, name: str, root: "Tile | None" = None):
        self.data = data
        self.space = space
        self._name = name
        self.root = self if root is None else root
        self.ready = 0.0
        self.last_use = 0.0
        self.available = 0.0
        self.initialized = False
        self.nbytes = 0
        self.key = None  # (shape, dtype) of a pool's tile: where its array goes when released

    @property
    def name(self) -> str:
        """The kernel's name for the tile, or ``sbuf<n>`` for an unnamed one (built when asked: only
        error messages and reprs read it, and formatting it for every tile cost ~0.2 us a tile)."""
        name = self._name
        return name if isinstance(name, str) else f"{self.space}{name}"

    @property
    def shape(self) -> tuple[int, int]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def partitions(self) -> int:
        return self.data.shape[0]

    @property
    def free(self) -> int:
        return self.data.shape[1]

    def __getitem__(self, key) -> "Tile":
        """A sub-region (rows, columns) sharing memory and timing with this tile."""
        sub = self.data[key]
        if sub.ndim != 2:
            raise EngineError(f"a tile region must stay 2-D [partition, free]; {self.name}[{key}] is {sub.shape}")
        return Tile(sub, self.space, f"{self.name}[...]", self.root)

    def read(self) -> np.ndarray:
        """The tile's values, poisoned first if never written."""
        root = self.root
        if not root.initialized:
            root.data.fill(poison_value(root.data.dtype))
            root.initialized = True
        return self.data

    def write_target(self) -> np.ndarray:
        """The array an instruction writes into. A partial first write poisons the rest of the tile."""
        root = self.root
        if not root.initialized:
            if self is not root:
                root.data.fill(poison_value(root.data.dtype))
            root.initialized = True
        return self.data

    def __repr__(self) -> str:
        return f"Tile({self.name}, {self.space}, {self.shape}, {self.dtype})"


# np.dtype by the dtype argument kernels pass (np.dtype, numpy scalar type or name): np.dtype() of a
# cached key is skipped, which was a tenth of a small tile's allocation.
_DTYPES: dict = {}

# Host memory kept for reuse by later tiles of the same shape and dtype, per pool (see MemoryPool.release).
SPARE_BYTES_MAX = 64 << 20
# Only arrays from this size up (bytes) are reused: np.empty of a small one is cheap (malloc keeps such
# chunks), where taking it back would cost more than it saves. These also look, inside a launch, for an
# unreachable retired tile's array before a fresh one.
REUSE_MIN_BYTES = 64 << 10


_FREED: dict[tuple, np.ndarray] = {}


def _take_back(spares: dict, tile) -> None:
    """Keep ``tile``'s array for a later tile of its shape and dtype; the tile keeps a read-only poison view."""
    key = tile.key
    kept = spares.get(key)
    if kept is None:
        spares[key] = [tile.data]
    else:
        kept.append(tile.data)
    freed = _FREED.get(key)
    if freed is None:
        freed = _freed(key)
    tile.data = freed
    tile.initialized = True


def _freed(key: tuple) -> np.ndarray:
    """A read-only array of ``key``'s (shape, dtype) that is poison everywhere: a released tile's data."""
    shape, dt = key
    if len(_FREED) > 4096:  # one small view per shape and dtype; bounded all the same
        _FREED.clear()
    try:
        poison = np.full((), poison_value(dt), dtype=dt)
    except (TypeError, ValueError):  # a storage-only dtype (complex): zeros
        poison = np.zeros((), dtype=dt)
    freed = _FREED[key] = np.broadcast_to(poison, shape)
    return freed


def _sole_references() -> int:
    """What sys.getrefcount reports, inside ``MemoryPool.release``, for an array only its tile holds
    (asked of this interpreter rather than assumed: the count differs between CPython versions)."""
    tiles = [Tile(np.empty((1, 1)), "probe", "probe")]
    for tile in tiles:
        if getrefcount(tile.data) > 0:
            return getrefcount(tile.data)
    raise AssertionError("unreachable")


class MemoryPool:
    """Per-partition byte budget of SBUF or PSUM for one kernel launch.

    Freed memory is handed to later tiles in FIFO order; a tile that reuses
    it may not be written before the last access of the tiles that held it,
    which is how double-buffering limits show up in the timeline.
    """

    def __init__(self, space: str, bytes_per_partition: int, partitions: int, max_tile_bytes: int | None = None):
        self.space = space
        self.capacity = bytes_per_partition
        self.partitions = partitions
        self.max_tile_bytes = max_tile_bytes
        # Arrays of released tiles by (shape, dtype), for later tiles to reuse across launches. A large
        # fresh np.empty is new pages from the OS: a 1M-element add spent most of its time in page
        # faults (3000 a call) before tiles reused them. A reused array holds stale values, which an
        # unwritten tile never shows: read() poisons a tile no instruction has written.
        self.spares: dict[tuple, list[np.ndarray]] = {}
        self.spare_bytes = 0
        self.retired: list[Tile] = []  # released (or left live) in the current launch: recycled at reset
        # Every tile allocated in the current launch. A root tile is its own ``root``: that cycle leaves each
        # tile (its key tuple, and before recycling its array) to the garbage collector, whose collections
        # the churn of a launch's tiles triggered every few calls. ``reset`` breaks the cycle of each tile
        # nothing else holds any more, so it is freed at once. Holding them for the launch also keeps every
        # tile's ``id`` distinct within it (TensorE's loaded-stationary key uses it), whenever a collection runs.
        self.made: list[Tile] = []
        self.reset()

    def reset(self) -> None:
        if self.retired:
            self.recycle()
        made = self.made
        if made:
            for tile in made:
                if getrefcount(tile) <= _SOLE_MADE:  # only ``made`` and its own ``root``: nothing can see it
                    tile.root = None
            tile = None
            made.clear()
        self.used = 0
        self.peak = 0
        self.fresh = self.capacity  # never-used bytes: available at time 0
        self.released: deque[list] = deque()  # [bytes, free_at]
        self.count = 0

    def allocate(self, shape: tuple[int, int], dtype: np.dtype, name: str = "") -> Tile:
        p, f = shape
        if not 0 < p <= self.partitions or f <= 0:
            if f > 0:
                raise EngineError(f"{self.space} tile {name or shape} has {p} partitions; the core has "
                                  f"{self.partitions}")
            raise EngineError(f"{self.space} tile {name or shape} has an empty free dimension")
        dt = _DTYPES.get(dtype)
        if dt is None:
            dt = _DTYPES[dtype] = np.dtype(dtype)
        nbytes = f * dt.itemsize
        if self.max_tile_bytes is not None and nbytes > self.max_tile_bytes:
            raise EngineError(f"{self.space} tile {name or shape} needs {nbytes} B per partition; a bank holds "
                              f"{self.max_tile_bytes} B")
        used = self.used + nbytes
        if used > self.capacity:
            raise EngineError(f"{self.space} overflow allocating {name or shape} ({nbytes} B per partition): "
                              f"{self.used} of {self.capacity} B per partition already in use")
        self.used = used
        if used > self.peak:
            self.peak = used
        available = 0.0
        fresh = self.fresh
        if nbytes <= fresh:  # never-used memory covers it (every tile of a small launch)
            self.fresh = fresh - nbytes
        else:
            self.fresh = 0
            need = nbytes - fresh
            released = self.released
            while need > 0:
                entry = released[0]
                size = entry[0]
                used = need if need < size else size
                if entry[1] > available:
                    available = entry[1]
                entry[0] = size - used
                need -= used
                if entry[0] == 0:
                    released.popleft()
        count = self.count = self.count + 1
        key = (shape, dt)
        spares = self.spares.get(key)
        if not spares and self.retired and p * nbytes >= REUSE_MIN_BYTES:
            self.sweep()
            spares = self.spares.get(key)
        if spares:
            data = spares.pop()
            self.spare_bytes -= p * nbytes
        else:
            data = np.empty(shape, dtype=dt)
        tile = Tile(data, self.space, name or count)
        tile.available = available
        tile.nbytes = nbytes
        tile.key = key
        self.made.append(tile)
        return tile

    def release(self, tile: Tile) -> None:
        nbytes = tile.nbytes
        self.used -= nbytes
        ready = tile.ready
        last_use = tile.last_use
        self.released.append([nbytes, last_use if last_use > ready else ready])
        tile.nbytes = 0
        if nbytes and tile.data.nbytes >= REUSE_MIN_BYTES:
            self.retired.append(tile)

    def sweep(self) -> None:
        """Take back, inside a launch, the arrays of retired tiles nothing can reach any more: no kernel
        variable or list holds the Tile (only ``retired`` does) and no view holds the array. Run when a
        large tile would otherwise be a fresh array (a fused chain retires ~100 MiB of tiles a launch)."""
        spares = self.spares
        total = self.spare_bytes
        keep = []
        for tile in self.retired:
            if getrefcount(tile) > _SOLE_RETIRED or getrefcount(tile.data) > _SOLE:
                keep.append(tile)
                continue
            nbytes = tile.data.nbytes
            if total + nbytes > SPARE_BYTES_MAX:
                keep.append(tile)
                continue
            total += nbytes
            # Unreachable, but a root tile is its own ``root``: the cycle keeps it (and so its array) alive
            # until the garbage collector runs, and a second reference would keep the array from the next sweep.
            _take_back(spares, tile)
        self.spare_bytes = total
        self.retired = keep

    def recycle(self) -> None:
        """Take back the arrays of the finished launch's retired tiles (see __init__).

        Only between launches: a kernel may still read a tile it has released within its launch (the
        reduction stream releases a tile when the next is taken), so an array handed out again inside
        the launch could change under it. An array is kept only when nothing but its tile refers to it
        (no view of it is alive) and within the spare budget; that tile then lets go of it for a
        read-only poison view of its shape, so a use after the launch reads poison and cannot write."""
        spares = self.spares
        total = self.spare_bytes
        for tile in self.retired:
            if getrefcount(tile.data) > _SOLE:
                continue
            nbytes = tile.data.nbytes
            if nbytes < REUSE_MIN_BYTES:  # a small tile the launch left live
                continue
            if total + nbytes > SPARE_BYTES_MAX:
                break
            total += nbytes
            _take_back(spares, tile)
        self.spare_bytes = total
        self.retired.clear()


_SOLE = _sole_references()


def _sole_tile_references(lists: int) -> int:
    """What sys.getrefcount reports, inside a loop over one of ``lists`` lists holding a root Tile, for a
    Tile nothing else holds (``MemoryPool.sweep``: ``retired`` and ``made``; ``reset``: ``made``)."""
    tile = Tile(np.empty((1, 1)), "probe", "probe")
    holders = [[tile] for _ in range(lists)]
    del tile
    for tile in holders[0]:
        return getrefcount(tile)
    raise AssertionError("unreachable")


_SOLE_RETIRED = _sole_tile_references(2)
_SOLE_MADE = _sole_tile_references(1)
