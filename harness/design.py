"""Designed coverage: a covering design of each op spec's cells, in every profile.

Random exploration (Hypothesis) finds what nobody thought of, but left alone it leaves the
edges to chance: four quick cases of ``mul`` drew no NaN, four of ``neg`` no signed zero.
So each op spec also gets a designed set of cases, the same in every run and profile:
every dtype the spec supports x every value domain that applies to the dtype x every
layout (made on the device) x every size class (0-dim, empty, small, and the tile edges
127/128/129, 511/512/513, 2047/2048/2049 along the free axis), covered by a greedy
covering design (every dtype with every domain, layout and size class, and every float dtype with each
edge domain on a contiguous tensor at a tile edge, where CPU runs its vectorized or library kernel; ``_greedy``),
plus the op's error inputs (out-of-range and non-integer indices, non-broadcastable shapes, a dim out of range, an
argument outside its domain).

A designed case is drawn by the spec's own ``draw`` with a ``harness.strategies.Target``
active and a seed derived from its coordinates, so it is reproducible on its own and its
test id names it (``mul-float32-special-expanded-129``). What a spec cannot honour (a conv
whose sizes are its own) is not realized; ``cells_of`` reads the coordinates a case really
has from its tensors, and those are what the store records (the ``cells`` column) and what
``python -m harness coverage-cells`` shows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import sys
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from functools import lru_cache
from typing import Any, Iterable

from harness import strategies as hs
from harness.cases import Case
from harness.specs import SPECS, OpSpec
from harness.values import LAYOUTS, TensorSpec

# The domains the design draws (the others, e.g. "unit" or "uniform" floats, stay to Hypothesis).
FLOAT_DESIGN_DOMAINS = ("normal", "positive", "special", "signed_zero", "denormal", "near_overflow", "tails",
                        "near_zero", "negative")
INT_DESIGN_DOMAINS = ("small_int", "int_edges", "uniform")
BOOL_DESIGN_DOMAINS = ("bool",)
SIZE_EDGES: dict[str, tuple[int | str, ...]] = {
    "0-dim": ("0-dim",), "empty": ("empty",), "small": (7,),
    "tile-128": (127, 128, 129), "tile-512": (511, 512, 513), "tile-2048": (2047, 2048, 2049),
}
SIZE_CLASSES = tuple(SIZE_EDGES)
# CPU takes another kernel for a dense contiguous tensor of more than a few elements than for a strided view or a
# lone element: its vectorized loop (Vectorized<T>, more than one SIMD vector and a tail at a tile edge) or a library
# kernel (oneDNN's gelu of a contiguous float32 tensor adds x/2 + x/2 * erf(...): +0.0 where ATen's scalar form gives
# -0.0). Where such a kernel differs from the scalar one, it differs in kind on the edge values: a zero's sign, NaN
# propagation, overflow to inf, denormals flushed, saturation. So every float dtype meets each of these domains on a
# layout that is contiguous (``is_contiguous()``: contiguous, and offset, whose view starts 3 elements in) at a tile
# edge size (``_greedy``'s ``host path`` pairs): a device kernel that mimics CPU's contiguous path wrongly is caught
# there. near_zero and negative hold finite normal values, where the two paths differ only in rounding (within the
# tolerances; the Hypothesis profiles draw contiguous tensors of every size): left to the greedy rows.
HOST_PATH_DOMAINS = ("special", "signed_zero", "denormal", "near_overflow", "tails")
HOST_PATH_LAYOUTS = ("contiguous", "offset")
HOST_PATH_SIZES = ("tile-128", "tile-512", "tile-2048")
HOST_PATH_ELEMENTS = min(SIZE_EDGES["tile-128"])
# An empty tensor holds no values, so a row of any domain but the dtype's plain one (normal, small_int, bool) at that
# size covers nothing of its domain (near_overflow on an empty tensor): such rows never take it. A 0-dim tensor holds
# one value (of the mixed pools, special, signed_zero and denormal, a plain one half the time), and CPU takes its
# scalar path there: an edge domain's row does not take that size either. The plain rows cover those sizes.
NO_ELEMENTS = ("0-dim", "empty")
# bad_dim: a dim argument out of range; bad_arg: another argument outside its domain (a negative size or offset,
# a probability outside [0, 1], a step of the wrong sign), which CPU's kernel rejects
ERRORS = ("oob_index", "index_dtype", "shape_mismatch", "bad_dim", "bad_arg")
NO_TENSOR = "-"  # the domain and layout of a case without tensor inputs (factories)
ERROR_PARAM = "_design_error"  # a case parameter naming the error input a designed case has


def design_domains(dtype: str) -> tuple[str, ...]:
    if dtype == "bool":
        return BOOL_DESIGN_DOMAINS
    if dtype in hs.FLOAT_DTYPES:
        return FLOAT_DESIGN_DOMAINS
    return INT_DESIGN_DOMAINS


@dataclass(frozen=True)
class Cell:
    """Coordinates of a designed case: what it targets (and, from ``cells_of``, what it got)."""

    dtype: str
    domain: str
    layout: str
    size: str  # a size class (SIZE_CLASSES)
    edge: int | str | None = None  # the exact free-axis length within the class
    error: str | None = None

    @property
    def id(self) -> str:
        parts = [self.dtype, self.domain, self.layout, str(self.edge if self.edge is not None else self.size)]
        if self.error:
            parts.append(self.error)
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _layout_fits(layout: str, size: str) -> bool:
    """A layout needs elements to view (0-dim and empty tensors are contiguous only)."""
    return layout == "contiguous" or size not in ("0-dim", "empty")


def _family(dtype: str) -> str:
    return "float" if dtype in hs.FLOAT_DTYPES else "bool" if dtype == "bool" else "int"


def _domains(spec: OpSpec, dtype: str) -> tuple[str, ...]:
    """The value domains designed for ``dtype`` in ``spec``: the dtype's own and the spec's extra ones."""
    return design_domains(dtype) + spec.extra_domains.get(dtype, ())


def _greedy(dtypes: tuple[str, ...], extra: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> \
        list[tuple[str, str, str, str]]:
    """A covering design, greedily (AETG-style): one row per (dtype, domain) pair, each row's
    (layout, size) chosen to cover the most pairs not yet covered among (dtype, layout),
    (dtype, size), (domain, layout), (domain, size) and (layout, size), first of all its *host path* pair:
    a float dtype's edge domain (``HOST_PATH_DOMAINS``) on a contiguous layout at a tile edge, where CPU's
    vectorized or library kernel runs (and a row of a domain whose point is its values takes no size without them,
    ``NO_ELEMENTS``);
    then rows for any (dtype, layout) and (dtype, size) pair still missing. So every dtype meets every domain,
    layout and size class, and every float dtype meets its edge domains where CPU's contiguous kernels run; the
    other pairs are covered as far as those rows reach. (Full pairwise
    over all four axes needs at least |domains| x |layouts| = 91 rows for an all-dtype op, about
    20,000 cases for the table: more than the quick budget; see docs/architecture.md.)
    Integer dtypes share their layouts and sizes as a family (int8 and int64 take the same
    strided paths), so each integer dtype gets its three domains. ``extra``: (dtype, domains) a spec adds."""
    choices = [(lay, size) for lay in LAYOUTS for size in SIZE_CLASSES if _layout_fits(lay, size)]
    covered: set[tuple] = set()
    rows: list[tuple[str, str, str, str]] = []

    def pairs(dtype, domain, layout, size) -> set[tuple]:
        key = dtype if _family(dtype) == "float" else _family(dtype)
        got = {("dl", key, layout), ("ds", key, size), ("ml", domain, layout), ("ms", domain, size),
               ("ls", layout, size)}
        if _host_path(dtype, domain) and layout in HOST_PATH_LAYOUTS and size in HOST_PATH_SIZES:
            got.add(("host", dtype, domain))
        return got

    def add(dtype, domain, layout, size) -> None:
        rows.append((dtype, domain, layout, size))
        covered.update(pairs(dtype, domain, layout, size))

    def gain(dtype, domain, options):
        """A row's choice: its host path pair first (a row elsewhere costs a row for it later), then the most pairs."""
        def new(c):
            fresh = pairs(dtype, domain, *c) - covered
            return (("host", dtype, domain) in fresh, len(fresh), -options.index(c))
        return new

    more = dict(extra)
    # A spec's extra domain is there to show which elements a kernel reads: its rows take the layouts whose
    # storage holds elements outside the view or repeats them (a whole-tensor reduction reads the same elements of a
    # transposed or expanded tensor in any order; an offset one is contiguous), then transposed (a reduction along a
    # dim reads other rows).
    reads = [c for lay in ("sliced", "overlapping", "transposed") for c in choices if c[0] == lay]
    for dtype in dtypes:
        for domain in design_domains(dtype) + more.get(dtype, ()):
            options = reads if domain in more.get(dtype, ()) else choices
            if domain != design_domains(dtype)[0]:
                barred = NO_ELEMENTS if _host_path(dtype, domain) else ("empty",)
                options = [c for c in options if c[1] not in barred]
            add(dtype, domain, *max(options, key=gain(dtype, domain, options)))
    for dtype in dtypes:
        key = dtype if _family(dtype) == "float" else _family(dtype)
        for layout in LAYOUTS:
            if ("dl", key, layout) not in covered:
                size = next(s for s in SIZE_CLASSES if _layout_fits(layout, s) and ("ds", key, s) not in covered) \
                    if any(_layout_fits(layout, s) and ("ds", key, s) not in covered for s in SIZE_CLASSES) else "small"
                add(dtype, design_domains(dtype)[0], layout, size)
        for size in SIZE_CLASSES:
            if ("ds", key, size) not in covered:
                add(dtype, design_domains(dtype)[0], "contiguous", size)
    return rows


def _host_path(dtype: str, domain: str) -> bool:
    """Whether (dtype, domain) must meet CPU's contiguous kernels: a float dtype's edge domain."""
    return _family(dtype) == "float" and domain in HOST_PATH_DOMAINS


@lru_cache(maxsize=None)
def design(name: str) -> tuple[Cell, ...]:
    """The designed cells of op spec ``name`` (deterministic: the same cells every run)."""
    spec = SPECS[name]
    cells, seen = [], {}
    for dtype, domain, layout, size in _greedy(tuple(spec.dtypes), tuple(spec.extra_domains.items())):
        edges = SIZE_EDGES[size]
        n = seen.get(size, 0)
        seen[size] = n + 1
        cells.append(Cell(dtype, domain, layout, size, edges[n % len(edges)]))
    for error in ERRORS:  # one error input per dtype family (the error's class does not vary by width)
        for dtype in dict((_family(d), d) for d in reversed(spec.dtypes)).values():
            cells.append(Cell(dtype, design_domains(dtype)[0], "contiguous", "small", 7, error))
    return tuple(dict.fromkeys(cells))


class _Data:
    """What a spec's ``draw`` calls ``data.draw`` on: Hypothesis's own choice machinery, seeded.

    Its provider injects a constant now and then (p = 0.05 per choice), from Hypothesis's global pool and from the
    *local* one: every literal of the project's modules loaded in the process so far, cached process-wide at its
    first use (``providers._get_local_constants``, ``CONSTANTS_CACHE``). A designed case then hung on the process
    that drew it: remainder_scalar-float32-near_overflow-contiguous-128 divided by 0.0447 drawn in a plain process
    and by -0.0 in an op-suite one, and the table on disk is whichever drew it first. A designed draw takes its
    constants from the global pool alone (fixed by the Hypothesis version, in the table's key)."""

    def __init__(self, seed: int) -> None:
        from hypothesis.internal.conjecture.data import ConjectureData

        self._data = ConjectureData(random=random.Random(seed))
        self._data.provider._maybe_draw_constant = _global_constant(self._data.provider)

    def draw(self, strategy, label: Any = None) -> Any:
        return self._data.draw(strategy)

    def context(self):
        """Some strategies (one_of's branches) record into a build context while drawing."""
        from hypothesis.control import BuildContext

        return BuildContext(self._data, wrapped_test=lambda: None)


# Seeds a host path cell's draw tries (``designed_case``) before it keeps its first draw.
_HOST_PATH_SEEDS = 4


def _global_constant(provider: Any):
    """The provider's ``_maybe_draw_constant`` (same chance, same choices of its random) over the global pool only."""
    from hypothesis.internal.conjecture.choice import choice_permitted
    from hypothesis.internal.conjecture.providers import GLOBAL_CONSTANTS

    def draw(choice_type: str, constraints: Any, *, p: float = 0.05) -> Any:
        if provider._random.random() > p:
            return None
        pool = tuple(c for c in GLOBAL_CONSTANTS.set_for_type(choice_type) if choice_permitted(c, constraints))
        return provider._random.choice(pool) if pool else None

    return draw


def seed_of(spec: str, cell: Cell) -> int:
    return zlib.crc32(f"{spec}|{cell.id}".encode())


def designed_case(spec: OpSpec, cell: Cell, mode: str = "eager", device: str = "neuron") -> Case:
    """The case of ``cell`` (drawn by the spec's draw under the cell's target; reproducible)."""
    goal = hs.Target(cell.dtype, None if cell.domain == NO_TENSOR else cell.domain,
                     None if cell.layout == NO_TENSOR else cell.layout, cell.edge, cell.error)
    seed = seed_of(spec.name, cell)
    last: Exception | None = None
    # A target a spec's constraints cannot meet makes its draw fail (an empty range): draw again
    # with a different seed, and at last without the size, so every cell yields a case.
    attempts = ((0, cell.edge), (1, cell.edge), (2, None))
    # A host path cell whose draw put its domain elsewhere (a broadcast pair whose tile-edge operand took another
    # domain, a strided second operand) is drawn again with other seeds, else the first draw stands.
    host = cell.error is None and _host_path(cell.dtype, cell.domain) and cell.layout in HOST_PATH_LAYOUTS \
        and cell.size in HOST_PATH_SIZES
    if host:
        attempts = tuple((n, cell.edge) for n in range(_HOST_PATH_SEEDS)) + ((_HOST_PATH_SEEDS, None),)
    first: Case | None = None
    for attempt, size in attempts:
        try:
            tensors, params = _draw(spec, hs.Target(goal.dtype, goal.domain, goal.layout, size, goal.error),
                                    seed + attempt)
            if host:
                case = Case(spec.name, cell.dtype, tuple(tensors), params, mode, device)
                if on_host_path(case, cell.domain):
                    return case
                if size is None:  # every draw at the size missed it, or failed: the first that did not fail
                    return first or case
                first = first or case
                continue
            if goal.error is not None:
                # The error is realized where the draw differs from the same draw without it (a spec
                # without index tensors or broadcast operands draws the same case): say so in params,
                # which the call text does not use, so the cell reads it back.
                plain = _draw(spec, hs.Target(goal.dtype, goal.domain, goal.layout, size), seed + attempt)
                if repr(plain) != repr((tensors, params)):  # repr: a NaN parameter equals itself
                    params = {**params, ERROR_PARAM: goal.error}
                elif attempt < 2:
                    continue  # this draw had no room for it (an empty index tensor): another seed
            return Case(spec.name, cell.dtype, tuple(tensors), params, mode, device)
        except Exception as error:  # noqa: BLE001 - hypothesis' invalid-argument errors and the like
            last = error
    if first is not None:
        return first
    raise RuntimeError(f"op spec {spec.name}: no case for designed cell {cell.id}: {last}") from last


def _draw(spec: OpSpec, goal: hs.Target, seed: int) -> tuple[list[TensorSpec], dict[str, Any]]:
    data = _Data(seed)
    with hs.targeting(goal), data.context():
        return spec.draw(data, goal.dtype)


def size_class(shape: tuple[int, ...]) -> tuple[str, int | str]:
    if len(shape) == 0:
        return "0-dim", "0-dim"
    if 0 in shape:
        return "empty", "empty"
    last = shape[-1]
    for name, edges in SIZE_EDGES.items():
        if last in edges:
            return name, last
    return "small", last


def _shape_param(params: dict[str, Any]) -> tuple[int, ...] | None:
    for key in ("shape", "size"):
        value = params.get(key)
        if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
            return value
    return None


def cells_of(case: Case) -> Cell:
    """The coordinates ``case`` really has, read from its tensors (not from what was asked)."""
    mine = [t for t in case.tensors if t.dtype == case.dtype and not t.domain.startswith(("index:", "oob:"))]
    primary = mine[0] if mine else None
    if primary is None:
        shape = _shape_param(case.params)
        size, edge = size_class(shape) if shape is not None else ("small", None)
        domain = layout = NO_TENSOR
    else:
        size, edge = size_class(primary.shape)
        # a designed domain placed on one tensor alone (a convolution weight's non-finite taps, beside a positive
        # input) is the case's domain, whichever tensor comes first
        domain = next((t.domain for t in mine if t.domain in hs.TAP_DOMAINS), primary.domain)
        layout = next((t.layout for t in mine if t.layout != "contiguous"), "contiguous")
    return Cell(case.dtype, domain, layout, size, edge, case.params.get(ERROR_PARAM))


@dataclass(frozen=True)
class Designed:
    spec: str
    target: Cell
    case: Case

    @property
    def id(self) -> str:
        return f"{self.spec}-{self.target.id}"

    @property
    def cell(self) -> Cell:
        return cells_of(self.case)


@lru_cache(maxsize=None)
def cases(name: str, mode: str = "eager", device: str = "neuron") -> tuple[Designed, ...]:
    """The designed cases of op spec ``name``; a cell whose case repeats an earlier one (a spec that
    ignored the target) is dropped, so every designed case is distinct."""
    spec = SPECS[name]
    out, seen = [], set()
    for cell in design(name):
        case = designed_case(spec, cell, mode, device)
        got = cells_of(case)
        if cell.error is not None and got.error is None:
            continue  # the spec has no such error input (no index tensor, no broadcast operands)
        key = got if got.error is None else case.to_json()
        if key in seen:
            continue  # a spec that did not honour the target: the cell it got is already covered
        seen.add(key)
        out.append(Designed(name, cell, case))
    return tuple(out)


def all_cases(specs: Iterable[OpSpec] | None = None, mode: str = "eager", device: str = "neuron"
              ) -> list[Designed]:
    """Every spec's designed cases (``specs``: those specs'). Drawing all of them costs about 15 s of CPU
    (Hypothesis's choice machinery, 18k cases), which every op-suite process paid at collection, four side by
    side in ``make report``; the whole table is kept on disk (``_stored``), keyed by what the draws read, and
    processes that find none draw it together (``_drawn_together``)."""
    if specs is not None:
        return [d for s in specs for d in cases(s.name, mode, device)]
    table = _stored()
    if table is None:
        table = _drawn_together()
        _store(table)
    return [Designed(name, Cell(**cell), dataclasses.replace(Case.from_json(case), mode=mode, device=device))
            for name, rows in table.items() for cell, case in rows]


def _rows(name: str) -> list:
    """Spec ``name``'s designed cases as the table on disk holds them, JSON's types included: [cell, case] (the
    case as drawn for eager on neuron; ``all_cases`` sets the mode and device)."""
    return json.loads(json.dumps([[d.target.to_dict(), d.case.to_json()] for d in cases(name)]))


# A claim on a spec older than this with no part written: its drawer died (drawing one spec takes well under a
# second); the spec is drawn again by whoever waits for it.
_STALE_CLAIM_S = 120.0


def _drawn_together() -> dict[str, list]:
    """The whole designed table, drawn by every op-suite process that found none on disk, each spec once.

    ``make report`` starts the eager, adaptive and compiled runs (two xdist workers) at once: with an empty
    cache (a fresh clone, a changed harness) each drew all 12.5k cases itself, 4 x 15 CPU seconds on 2 cores.
    Instead each process claims the specs nobody has claimed yet (an exclusive create of ``<spec>.claim``),
    draws those, and writes each spec's rows (``<spec>.json``, atomically) beside the claims; then it reads the
    parts the others drew, waiting for those still being drawn. The draws are seeded per cell (``seed_of``), so
    which process draws a spec does not change its cases. A directory that cannot be written: this process draws
    everything itself."""
    import time

    parts = _cache_file().with_suffix(".parts")
    try:
        parts.mkdir(parents=True, exist_ok=True)
    except OSError:
        return {name: _rows(name) for name in SPECS}
    table: dict[str, list] = {}
    for name in SPECS:
        rows = _read_part(parts / f"{name}.json")
        if rows is None and _claim(parts / f"{name}.claim"):
            rows = _rows(name)
            _write_atomically(parts / f"{name}.json", rows)  # unwritten: the others draw it once the claim is stale
        if rows is not None:
            table[name] = rows
    for name in SPECS:
        while name not in table:
            rows = _read_part(parts / f"{name}.json")
            if rows is not None:
                table[name] = rows
                continue
            whole = _stored()  # a process that finished stored the table (and removed the parts)
            if whole is not None:
                return whole
            try:
                stale = time.time() - (parts / f"{name}.claim").stat().st_mtime > _STALE_CLAIM_S
            except OSError:
                stale = True  # no claim: nobody is drawing it
            if stale:
                table[name] = _rows(name)
            else:
                time.sleep(0.05)
    return {name: table[name] for name in SPECS}


def _claim(path: Path) -> bool:
    """Whether this process claimed the spec (created ``path``); False when another process did."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return not path.parent.exists()  # a claim that cannot be written: draw it (unless the parts are gone)
    return True


def _read_part(path: Path) -> list | None:
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rows if isinstance(rows, list) else None


def _write_atomically(path: Path, document: Any) -> bool:
    """``document`` as JSON at ``path``, written beside it and renamed (a reader sees a whole file or none);
    False where the directory cannot be written."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(document))
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def _design_key() -> str:
    """What the designed cases depend on: the harness's sources (specs, strategies, values, this design), the
    torch, Hypothesis and numpy versions and the Python version; a change to any draws them again."""
    import hypothesis
    import numpy
    import torch

    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    digest.update(f"{torch.__version__}|{hypothesis.__version__}|{numpy.__version__}|{sys.version_info[:2]}".encode())
    return digest.hexdigest()[:24]


def _cache_file() -> Path:
    base = os.environ.get("NEURONSIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "neuronsim")
    return Path(base) / "design" / f"{_design_key()}.json"


def _stored() -> dict[str, list] | None:
    """The designed table from disk, or None (absent, unreadable or from other specs: drawn again)."""
    try:
        table = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return None
    return table if isinstance(table, dict) and list(table) == [s.name for s in SPECS.values()] else None


def _store(table: dict[str, list]) -> None:
    """Write the whole table (atomically: processes side by side read a whole table or none), then remove the
    parts it was drawn in (``_drawn_together``; a process still waiting on one reads this table instead)."""
    import shutil

    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # a read-only cache: draw every time
    if _write_atomically(path, table):
        shutil.rmtree(path.with_suffix(".parts"), ignore_errors=True)


def required_cells(spec: OpSpec) -> set[tuple[str, str]]:
    """The (dtype, domain) cells a spec's dtypes make applicable: every design domain of each dtype,
    for a spec whose inputs include tensors of the case's dtype (a factory has none)."""
    probe = designed_case(spec, design(spec.name)[0])
    if cells_of(probe).domain == NO_TENSOR:
        return {(dtype, NO_TENSOR) for dtype in spec.dtypes}
    return {(dtype, domain) for dtype in spec.dtypes for domain in _domains(spec, dtype)}


def on_host_path(case: Case, domain: str) -> bool:
    """Whether ``case`` brings values of ``domain`` to CPU's contiguous kernels (``HOST_PATH_DOMAINS``): every tensor
    of the case's dtype contiguous, and one of them of that domain holding at least the smallest tile edge's elements
    (more than two SIMD vectors of any dtype, on any ISA, with a tail; its size along another dim than the last, a
    cross product's 3, counts; of a broadcast pair, a 0-dim operand beside it runs in the same vectorized loop)."""
    if case.params.get(ERROR_PARAM) is not None:
        return False
    mine = [t for t in case.tensors if t.dtype == case.dtype and not t.domain.startswith(("index:", "oob:"))]
    return bool(mine) and all(t.layout in HOST_PATH_LAYOUTS for t in mine) and any(
        t.domain == domain and _numel(t.shape) >= HOST_PATH_ELEMENTS for t in mine)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def required_host_path(spec: OpSpec) -> set[tuple[str, str]]:
    """The (dtype, domain) pairs a spec's designed cases must hold on CPU's host path (``on_host_path``): each float
    dtype's ``HOST_PATH_DOMAINS``, where the spec's draw honours a contiguous tile-edge target of that dtype (a
    tensor of the dtype, contiguous, with the edge among its sizes, at two edges: one may be a coincidence); a spec
    whose sizes are its own (a convolution, a padding, as_strided's storage) or that has no tensor (a factory) is
    not held to it."""
    def honours(dtype: str, size: str) -> bool:
        edge = max(SIZE_EDGES[size])
        probe = designed_case(spec, Cell(dtype, design_domains(dtype)[0], "contiguous", size, edge))
        mine = [t for t in probe.tensors if t.dtype == dtype and not t.domain.startswith(("index:", "oob:"))]
        return bool(mine) and all(t.layout in HOST_PATH_LAYOUTS for t in mine) and any(edge in t.shape for t in mine)

    return {(dtype, domain) for dtype in spec.dtypes if _family(dtype) == "float"
            and honours(dtype, "tile-128") and honours(dtype, "tile-512") for domain in HOST_PATH_DOMAINS}


def realized(spec: OpSpec) -> dict[str, set]:
    """What the spec's designed cases really cover, per axis (and the (dtype, domain) pairs, all and on CPU's host
    path)."""
    got: dict[str, set] = {"dtype_domain": set(), "layout": set(), "size": set(), "edge": set(), "error": set(),
                           "host_path": set()}
    for designed in cases(spec.name):
        cell = designed.cell
        got["dtype_domain"].add((cell.dtype, cell.domain))
        if on_host_path(designed.case, designed.target.domain):
            got["host_path"].add((designed.target.dtype, designed.target.domain))
        got["layout"].add(cell.layout)
        got["size"].add(cell.size)
        got["edge"].add(str(cell.edge))
        if cell.error:
            got["error"].add(cell.error)
    return got


def cells_json(case: Case) -> str:
    return json.dumps(cells_of(case).to_dict())
