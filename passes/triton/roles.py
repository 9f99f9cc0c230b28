"""What the launch parameters of a Triton kernel *do*, found from their use, never their name.

A constexpr parameter of a `@triton.jit` kernel is a *tile* when it sizes a block of the
program's data: it is the extent of a `tl.arange(0, P)`, a dimension of `tl.zeros`/`tl.full`,
a `block_shape` entry, the step of a loop (`range(0, K, P)`, `tl.range(...)`, or what a block
pointer is `tl.advance`d by each trip), or it scales a program id (`pid_m * P`) and is the
trip count of a loop whose rows are bounds-checked (`for r in range(P)`: rows per program).
Its *role* says which block:

- in a kernel with a `tl.dot` inside a loop: ``m`` and ``n`` are the two dimensions of the
  dot's accumulator (`acc = tl.zeros((P, Q))` with `acc += tl.dot(..)` or `tl.dot(a, b, acc)`),
  ``k`` is the step of the loop the dot reduces over (a GEMM's K tile, an attention kernel's
  key/value block);
- otherwise: ``grid`` (it scales a program id: the block of output a program owns), ``loop``
  (the step of a loop), ``vec`` (it only sizes a block);
- ``group``: a constexpr that is not a tile and takes part in the program-id arithmetic (the
  group size of a grouped tile order).

A parameter is *tunable* when its value comes from a literal (a launch keyword, a config
entry, a default, a host variable bound to a literal, or a `@triton.heuristics` entry that
returns a constant, which a sweep then takes out): a block size computed from the problem
(`triton.next_power_of_2(N)`, also by a heuristic, which overrides the launch) is not, and a
sweep leaves it alone. A launch passes a
value by keyword, positionally, through a `**NAME` dict bound once to a dict literal or a
`dict(...)` of keywords, or through the keywords of `functools.partial(kernel[grid], ...)` whose
result is called (`kernel_launches`); all of them count alike. A launch may sit in a host helper
the kernel is passed to (`_launch(kernel, ...)` launching `kernel[grid](...)`:
`PyModule.launches`); where that helper also runs other kernels, a sweep refuses to edit it.

`joint_config(ir)` reads a kernel's whole launch configuration by role (tiles, warps, stages,
group size); `sweep_edit(ir, kernel, configs)` writes a list of role-keyed configurations onto a
kernel as an `@triton.autotune` list (replacing the one it has, or the pinned launch values),
rewriting a host-computed grid into one that reads the tuned tiles. Both are what lets a
configuration recorded on one kernel (`BLOCK_SIZE_M=128, num_warps=8`) be proposed on another
that names its tiles differently (`BM`, `TILE`, `bm`).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import math
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from passes._recent import Recent
from passes._source import ByteEdit, indent_of, line_start
from passes.triton._py import (
    PyModule,
    bound_names,
    callee,
    dotted,
    int_value,
    is_cdiv,
    literal_int,
    names_in,
)
from passes.triton.host_counts import Rounding, constant, counts_blocks, rounding, size_of
from passes.triton.host_sizes import host_form

if TYPE_CHECKING:
    from kir import KernelIR

LAUNCH_KEYS = ("num_warps", "num_stages")
# Triton's defaults for a launch / a triton.Config that does not set them.
DEFAULT_WARPS = 4
DEFAULT_STAGES = 3
DOT_ROLES = ("m", "n", "k")
STATIC_RANGE = frozenset({"tl.static_range", "triton.language.static_range"})
RANGE_CALLS = frozenset(
    {
        "range",
        "tl.range",
        "tl.static_range",
        "triton.language.range",
        "triton.language.static_range",
    }
)
PID_CALLS = frozenset({"tl.program_id", "triton.language.program_id"})
NUM_PROGRAMS = frozenset({"tl.num_programs", "triton.language.num_programs"})


def program_axis(call: ast.Call) -> int | None:
    """The literal axis of a `tl.program_id(axis)` / `tl.num_programs(axis)` call (positional
    or `axis=`), else None."""
    arg = call.args[0] if call.args else next(
        (k.value for k in call.keywords if k.arg == "axis"), None)
    return literal_int(arg)


ARANGE = frozenset({"tl.arange", "triton.language.arange"})
SHAPED = frozenset({"tl.zeros", "tl.full", "triton.language.zeros", "triton.language.full"})
DOT = frozenset({"tl.dot", "triton.language.dot"})
ADVANCE = frozenset({"tl.advance", "triton.language.advance"})
ATOMICS_PREFIX = ("tl.atomic_", "triton.language.atomic_")


@dataclass(frozen=True, slots=True)
class Param:
    """One launch parameter of a kernel as a launch sets it."""

    name: str
    role: str
    value: int | None
    """The value the module launches the kernel with (None: computed, not tunable)."""


@dataclass(frozen=True, slots=True)
class KernelConfig:
    """A kernel's launch configuration by role."""

    kernel: str
    params: tuple[Param, ...] = ()
    num_warps: int = DEFAULT_WARPS
    num_stages: int = DEFAULT_STAGES
    autotuned: bool = False
    dot: bool = False
    """The kernel reduces with `tl.dot` inside a loop (roles m / n / k)."""
    pipelined: bool = True
    """The kernel (or a jit function it calls) loads inside a `range` / `tl.range` loop: the
    loop `num_stages` pipelines (an unrolled `tl.static_range` or a `while` is not). Not part of
    `to_json`: recorded configurations do not carry it."""
    chained: bool = False
    """The kernel (or a jit function it calls) feeds one `tl.dot`'s product into another's
    operand (attention's P @ V from S = Q K^T): the loop's step tile is then the first
    product's column count as well as the second's contraction. Not part of `to_json`."""

    def by_role(self) -> dict[str, int]:
        """Tunable values by role (the first parameter of a role when several share it)."""
        out: dict[str, int] = {}
        for p in self.params:
            if p.value is not None and p.role not in out:
                out[p.role] = p.value
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "tiles": self.by_role(),
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "autotuned": self.autotuned,
            "dot": self.dot,
            "params": {p.name: {"role": p.role, "value": p.value} for p in self.params},
        }


# -- roles -----------------------------------------------------------------------------------
def constexpr_params(kernel: ast.FunctionDef) -> list[str]:
    args = kernel.args.args + kernel.args.kwonlyargs
    return [
        a.arg for a in args if a.annotation is not None and "constexpr" in ast.dump(a.annotation)
    ]


def pid_names(kernel: ast.FunctionDef) -> set[str]:
    """Names computed from program ids by scalar arithmetic (not from loaded data)."""
    hit = _PIDS.get(kernel)
    if hit is None:
        hit = _PIDS[kernel] = frozenset(_read_pid_names(kernel))
    return set(hit)


_PIDS: weakref.WeakKeyDictionary[ast.AST, frozenset[str]] = weakref.WeakKeyDictionary()


def _read_pid_names(kernel: ast.FunctionDef) -> set[str]:
    assigns = [n for n in ast.walk(kernel) if isinstance(n, (ast.Assign, ast.AugAssign))]
    pid: set[str] = set()
    for a in assigns:
        if isinstance(a, ast.Assign) and any(
            callee(c) in PID_CALLS for c in ast.walk(a.value) if isinstance(c, ast.Call)
        ):
            pid |= {n.id for t in a.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    loops = [n for n in ast.walk(kernel) if isinstance(n, ast.For)]
    blocks = {n.id for c in ast.walk(kernel) if isinstance(c, ast.Call) and callee(c) in ARANGE
              and len(c.args) > 1 for n in ast.walk(c.args[1]) if isinstance(n, ast.Name)}
    changed = True
    while changed:
        changed = False
        for a in assigns:
            value = a.value
            if any(
                isinstance(c, ast.Call) and (callee(c).endswith("load") or callee(c) in DOT)
                for c in ast.walk(value)
            ):
                continue
            targets = [t for t in a.targets] if isinstance(a, ast.Assign) else [a.target]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if names_in(value) & pid and not names <= pid:
                pid |= names
                changed = True
        for loop in loops:  # a persistent loop over tiles: `for tile in range(pid, n, NUM_SMS)`
            if (
                isinstance(loop.target, ast.Name)
                and loop.target.id not in pid
                and _walks_programs(loop.iter, pid, blocks)
            ):
                pid.add(loop.target.id)
                changed = True
    return pid


_PROGRAM_CALLS = PID_CALLS | {"tl.num_programs", "triton.language.num_programs"}


def _walks_programs(iterable: ast.AST, pid: set[str], blocks: set[str] = frozenset()) -> bool:
    """Whether a loop over `iterable` walks program indices (`range(pid, tiles, NUM_SMS)`):
    its start or step reads a program index, and its step is not a block size (`blocks`: the
    sizes of the kernel's `tl.arange`s). A range whose stop alone does (`range(0, (pid + 1) *
    BQ, BKV)`, a causal bound) walks data, as a K loop does; so does one stepped by a block
    from a program's own start (`range(k_lo, k_hi, BLOCK_K)`, a split-K slice)."""
    if not (isinstance(iterable, ast.Call) and callee(iterable) in RANGE_CALLS and iterable.args):
        return bool(names_in(iterable) & pid)
    args = iterable.args
    step = args[2] if len(args) > 2 else next((k.value for k in iterable.keywords if k.arg == "step"), None)
    if step is not None and names_in(step) & blocks and not names_in(step) & pid:
        return False
    ends = ([args[0]] if len(args) > 1 else []) + ([step] if step is not None else [])
    return any(names_in(e) & pid or any(callee(c) in _PROGRAM_CALLS for c in ast.walk(e)
                                         if isinstance(c, ast.Call)) for e in ends)


def assignments(scope: ast.AST, augmented: bool = False) -> dict[str, list[ast.AST]]:
    """Name -> every value assigned to it under `scope` (`x = ...`; with `augmented`, also
    `x += ...`)."""
    out: dict[str, list[ast.AST]] = {}
    for a in ast.walk(scope):
        if isinstance(a, ast.Assign):
            for t in a.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(a.value)
        elif augmented and isinstance(a, ast.AugAssign) and isinstance(a.target, ast.Name):
            out.setdefault(a.target.id, []).append(a.value)
    return out


def reached(names: set[str], assigns: Mapping[str, Sequence[ast.AST]]) -> set[str]:
    """`names` and every name their assigned values read, transitively (`k_tiles = cdiv(K, BK)`:
    `k_tiles` reaches `K` and `BK`)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for value in assigns.get(n, ()):
            todo.extend(names_in(value))
    return seen


@dataclass(slots=True)
class _Facts:
    """What a function's body says about its names (see `tile_roles`)."""

    steps: dict[str, bool] = field(default_factory=dict)
    """Names that step a loop -> whether that loop is the innermost one around a tl.dot."""
    persistent: set[str] = field(default_factory=set)
    """Names that step a loop over program ids (a persistent grid's stride)."""
    sizing: set[str] = field(default_factory=set)
    grid: set[str] = field(default_factory=set)
    pid_arith: set[str] = field(default_factory=set)
    dotted_into: set[str] = field(default_factory=set)
    """Accumulators a tl.dot in a loop adds into."""
    shapes: dict[str, tuple[str, str]] = field(default_factory=dict)
    """2-D blocks made with tl.zeros / tl.full: name -> (dim0, dim1) names."""
    bounded: set[str] = field(default_factory=set)
    """Names that size a range whose indices are compared (a mask, a `tl.where` condition) or
    a block a descriptor clips (`block_shape`): a block of a larger, bounded extent."""
    offsets: set[str] = field(default_factory=set)
    """Names that scale an expression of program ids alone (`pid_m * BM`): a program's block
    offset (`grid` also holds those scaling a longer product, like `bh * S * D`)."""
    clamped: set[str] = field(default_factory=set)
    """Names passed directly to `min` / `tl.minimum` (a group size clamped to the tiles left)."""
    trips: set[str] = field(default_factory=set)
    """Names that are the whole trip count of a loop from 0 whose values the kernel compares
    with a bound (`for r in tl.static_range(R)`, `if first + r < M`): with a program's offset
    scaled by the same name, the rows a program walks one by one."""
    dot_loop: bool = False

    def absorb(self, other: _Facts, rename: Mapping[str, str]) -> None:
        """Add a called function's facts, its parameter names translated to the caller's."""

        def tr(names: set[str]) -> set[str]:
            return {rename[n] for n in names if n in rename}

        for n, inner in other.steps.items():
            if n in rename:
                self.steps[rename[n]] = self.steps.get(rename[n], False) or inner
        self.persistent |= tr(other.persistent)
        self.sizing |= tr(other.sizing)
        self.grid |= tr(other.grid)
        self.pid_arith |= tr(other.pid_arith)
        self.dotted_into |= tr(other.dotted_into)
        self.bounded |= tr(other.bounded)
        self.clamped |= tr(other.clamped)
        self.offsets |= tr(other.offsets)
        self.trips |= tr(other.trips)
        for n, dims in other.shapes.items():
            if n in rename and all(d in rename for d in dims):
                self.shapes.setdefault(rename[n], (rename[dims[0]], rename[dims[1]]))
        self.dot_loop = self.dot_loop or other.dot_loop


def _has_dot(node: ast.AST) -> bool:
    return any(isinstance(c, ast.Call) and callee(c) in DOT for c in ast.walk(node))


def dot_loops(node: ast.AST) -> list[ast.stmt]:
    """The innermost loops under `node` that reduce with `tl.dot` (at any depth: a K loop
    inside a loop over tiles or groups is the one whose loads feed the dot)."""
    loops = [n for n in ast.walk(node) if isinstance(n, (ast.For, ast.While)) and _has_dot(n)]
    return [loop for loop in loops
            if not any(inner is not loop and inner in loops for inner in ast.walk(loop))]


def accumulators(loop: ast.AST) -> set[str]:
    """The names a loop's `tl.dot` accumulates into: `acc += tl.dot(..)`, `acc = acc + tl.dot(..)`,
    `acc = tl.dot(a, b, acc)`, also through a name the product is first given in the loop
    (`part = tl.dot(a, b)`, then `acc += part` or `acc = acc + part`)."""
    products = {t.id for node in ast.walk(loop) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call) and callee(node.value) in DOT
                for t in node.targets if isinstance(t, ast.Name)}

    def feeds(value: ast.AST) -> bool:
        return _has_dot(value) or any(isinstance(n, ast.Name) and n.id in products
                                      for n in ast.walk(value))

    out: set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                and feeds(node.value):
            out.add(node.target.id)
        elif isinstance(node, ast.Call) and callee(node) in DOT:
            acc = node.args[2] if len(node.args) >= 3 else \
                next((k.value for k in node.keywords if k.arg == "acc"), None)
            if isinstance(acc, ast.Name):
                out.add(acc.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) \
                and feeds(node.value):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


_OWN_FACTS: weakref.WeakKeyDictionary[ast.FunctionDef, _Facts] = weakref.WeakKeyDictionary()


def _own_facts(kernel: ast.FunctionDef) -> _Facts:
    """A copy of the function's own facts, read once per parsed function (a materialization
    asks for the roles of each kernel of a module dozens of times; a four-kernel module took
    seconds per card)."""
    cached = _OWN_FACTS.get(kernel)
    if cached is None:
        cached = _OWN_FACTS[kernel] = _read_own_facts(kernel)
    return copy.deepcopy(cached)


def _read_own_facts(kernel: ast.FunctionDef) -> _Facts:
    facts = _Facts()
    pid = pid_names(kernel)
    assigns = assignments(kernel)
    loops = [n for n in ast.walk(kernel) if isinstance(n, (ast.For, ast.While))]
    trip_scaled: dict[str, bool] = {}  # names scaling a value computed from a loop's trip
    compared = {n for c in ast.walk(kernel) if isinstance(c, ast.Compare) for n in names_in(c)}
    for loop in loops:
        # a loop Triton unrolls (`tl.static_range`) inside the loop is part of its trip: the
        # loop it sits in is the one that walks the reduction (channel blocks around taps)
        innermost_dot = _has_dot(loop) and not any(
            inner is not loop and _has_dot(inner)
            and not (isinstance(inner, ast.For) and callee(inner.iter) in STATIC_RANGE)
            for inner in ast.walk(loop)
            if isinstance(inner, (ast.For, ast.While))
        )
        for n in _advanced_by(loop):
            facts.steps[n] = facts.steps.get(n, False) or innermost_dot
        if isinstance(loop, ast.While):
            # `while k < K: ... k += BK`: a name the body adds to a value each trip steps it
            for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                        and not any(isinstance(c, ast.Call) for c in ast.walk(node.value)):
                    for n in names_in(node.value):
                        facts.steps[n] = facts.steps.get(n, False) or innermost_dot
            continue
        if not (isinstance(loop.iter, ast.Call) and callee(loop.iter) in RANGE_CALLS):
            continue
        args = loop.iter.args
        var = loop.target.id if isinstance(loop.target, ast.Name) else None
        if var is not None and var in pid:
            if len(args) >= 3:
                facts.persistent |= names_in(args[2])
            continue
        if len(args) >= 3:
            for n in names_in(args[2]):
                facts.steps[n] = facts.steps.get(n, False) or innermost_dot
        if var is None:
            continue
        count = _trip_count(loop.iter)
        if isinstance(count, ast.Name) and _trip_values(loop, var) & compared:
            facts.trips.add(count.id)
        for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
            # an offset advanced by the block each trip (`off_k += BK`, `ptrs += BK * s`)
            if (
                isinstance(node, ast.AugAssign)
                and isinstance(node.op, ast.Add)
                and not any(isinstance(c, ast.Call) for c in ast.walk(node.value))
            ):
                for n in names_in(node.value):
                    facts.steps[n] = facts.steps.get(n, False) or innermost_dot
        bound = reached(set().union(*(names_in(a) for a in args)), assigns) if args else set()
        # The trip's own values: the loop variable and what the body computes from it
        # (`c_blk = kk % c_blocks`). A name scaling one of them (`c_blk * BK`, or
        # `(kk % c_blocks) * BK` inline) while it bounds the trip count steps the loop if it
        # also sizes a block (checked below: a filter width `r * S` sizes none).
        trip = _trip_values(loop, var)
        for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                sides = (node.left, node.right)
                for x, other in (sides, sides[::-1]):
                    if isinstance(x, ast.Name) and x.id != var and x.id in bound:
                        if isinstance(other, ast.Name) and other.id == var:
                            facts.steps[x.id] = facts.steps.get(x.id, False) or innermost_dot
                        elif names_in(other) & trip:
                            trip_scaled[x.id] = trip_scaled.get(x.id, False) or innermost_dot
    for call in ast.walk(kernel):
        if not isinstance(call, ast.Call):
            continue
        name = callee(call)
        if name in ARANGE and len(call.args) >= 2:
            facts.sizing |= names_in(call.args[1])
        elif name in SHAPED and call.args:
            facts.sizing |= names_in(call.args[0])
        for kw in call.keywords:
            if kw.arg == "block_shape":
                facts.sizing |= names_in(kw.value)
                facts.bounded |= names_in(kw.value)
        if name.split(".")[-1] in ("min", "minimum"):
            facts.clamped |= {a.id for a in call.args if isinstance(a, ast.Name)}
        if name.endswith(".reshape") or name.endswith(".view"):
            facts.sizing |= set().union(*(names_in(a) for a in call.args)) if call.args else set()

    for n, inner in trip_scaled.items():
        if n in facts.sizing:
            facts.steps[n] = facts.steps.get(n, False) or inner
    ranged = _range_derived(kernel)
    facts.bounded |= _compared_extents(kernel, ranged)

    def from_pid(node: ast.AST) -> bool:
        return bool(names_in(node) & pid) or any(
            isinstance(c, ast.Call) and callee(c) in PID_CALLS for c in ast.walk(node)
        )

    for node in ast.walk(kernel):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Mod)):
            left, right = names_in(node.left), names_in(node.right)
            if isinstance(node.op, ast.Mult):
                for side, other in ((node.left, node.right), (node.right, node.left)):
                    if isinstance(side, ast.Name) and from_pid(other) \
                            and not _rounds_to(other, side.id):
                        facts.grid.add(side.id)
                        if _index_names(other) <= pid and not _range_extents(other) and not any(
                            n in ranged for n in names_in(other)
                        ):
                            facts.offsets.add(side.id)
            if from_pid(node.left) or from_pid(node.right):
                facts.pid_arith |= left | right
    for a in ast.walk(kernel):
        if (
            isinstance(a, ast.Assign)
            and isinstance(a.value, ast.Call)
            and callee(a.value) in SHAPED
            and a.value.args
            and isinstance(a.value.args[0], (ast.Tuple, ast.List))
            and len(a.value.args[0].elts) == 2
        ):
            dims = [dotted(e) for e in a.value.args[0].elts]
            for t in a.targets:
                if isinstance(t, ast.Name):
                    facts.shapes[t.id] = (dims[0], dims[1])
    _alias_shapes(kernel, facts.shapes)
    for loop in loops:
        facts.dotted_into |= accumulators(loop)
        facts.dot_loop = facts.dot_loop or _has_dot(loop)
    return facts


def _rounds_to(node: ast.AST, name: str) -> bool:
    """`node` is a count of `name`-blocks (`x // P`, `cdiv(x, P)`): scaled by P it rounds x to
    a multiple of P (`stop // BN * BN`, a loop bound cut at whole key blocks), which offsets no
    program's block."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
        divisor = node.right
    elif is_cdiv(node, 2):
        divisor = node.args[1]
    else:
        return False
    return isinstance(divisor, ast.Name) and divisor.id == name


def _alias_shapes(kernel: ast.FunctionDef, shapes: dict[str, tuple[str, str]]) -> None:
    """Give each plain copy of a shaped block its shape (`acc2 = acc`, `(a, b) = (c, d)`: an
    inlined helper's copies of its arguments and of its results), through chains of copies."""
    pairs = [(t.id, v.id) for a in ast.walk(kernel) if isinstance(a, ast.Assign)
             for target in a.targets for t, v in _unpacked(target, a.value)
             if isinstance(t, ast.Name) and isinstance(v, ast.Name)]
    grown = True
    while grown:
        grown = False
        for name, source in pairs:
            if source in shapes and name not in shapes:
                shapes[name] = shapes[source]
                grown = True


def _advanced_by(loop: ast.AST) -> set[str]:
    """Names a block pointer is moved by each trip of `loop` (`p = tl.advance(p, (0, BK))`):
    the loop steps its block by them, whatever it counts."""
    out: set[str] = set()
    for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
        if isinstance(node, ast.Call) and callee(node) in ADVANCE and len(node.args) >= 2:
            offsets = node.args[1]
            elts = offsets.elts if isinstance(offsets, (ast.Tuple, ast.List)) else [offsets]
            out |= {e.id for e in elts if isinstance(e, ast.Name)}
    return out


def _index_names(node: ast.AST) -> set[str]:
    """The names `node` computes with, a program id read in place (`tl.program_id(0)`) not
    counting its module name."""
    inside = {id(n) for c in ast.walk(node) if isinstance(c, ast.Call) and callee(c) in PID_CALLS
              for n in ast.walk(c.func)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in inside}


def _trip_count(iterable: ast.Call) -> ast.AST | None:
    """The stop of a range call that counts from 0 in steps of 1 (`range(R)`, `tl.range(0, R)`,
    `tl.static_range(R)`): the loop's whole trip count; None for any other range."""
    args = iterable.args
    if len(args) == 1 and not any(k.arg == "step" for k in iterable.keywords):
        return args[0]
    if len(args) == 2 and literal_int(args[0]) == 0 \
            and not any(k.arg == "step" for k in iterable.keywords):
        return args[1]
    return None


def _trip_values(loop: ast.For | ast.While, var: str) -> set[str]:
    """The loop variable and the names the loop body assigns from it (directly or through
    another such name): the values that change with the trip."""
    trip = {var}
    body = [n for n in ast.walk(ast.Module(body=loop.body, type_ignores=[]))
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)]
    grown = True
    while grown:
        grown = False
        for a in body:
            name = a.targets[0].id  # type: ignore[union-attr]
            if name not in trip and names_in(a.value) & trip:
                trip.add(name)
                grown = True
    return trip


def _range_extents(node: ast.AST) -> set[str]:
    """Names sizing the `tl.arange` calls under `node`."""
    out: set[str] = set()
    for c in ast.walk(node):
        if isinstance(c, ast.Call) and callee(c) in ARANGE and len(c.args) >= 2:
            out |= names_in(c.args[1])
    return out


def _range_derived(kernel: ast.FunctionDef) -> dict[str, set[str]]:
    """Name -> the extents of the `tl.arange` calls its value is computed from (through
    assignments): the names that hold ranges of indices."""
    derived: dict[str, set[str]] = {}
    assigns = [n for n in ast.walk(kernel) if isinstance(n, (ast.Assign, ast.AugAssign))]
    changed = True
    while changed:
        changed = False
        for a in assigns:
            src = _range_extents(a.value).union(
                *(derived.get(n, set()) for n in names_in(a.value))
            )
            if not src:
                continue
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            for t in targets:
                for n in (x.id for x in ast.walk(t) if isinstance(x, ast.Name)):
                    if not src <= derived.get(n, set()):
                        derived.setdefault(n, set()).update(src)
                        changed = True
    return derived


def _compared_extents(kernel: ast.FunctionDef, derived: Mapping[str, set[str]]) -> set[str]:
    """Names sizing a `tl.arange` whose values (directly or through assignments) reach a
    comparison: the extents of ranges that are masked against a bound."""
    out: set[str] = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.Compare):
            out |= _range_extents(node).union(*(derived.get(n, set()) for n in names_in(node)))
    return out


_FACTS: weakref.WeakKeyDictionary[ast.FunctionDef, dict[tuple, _Facts]] = \
    weakref.WeakKeyDictionary()
_ROLES: weakref.WeakKeyDictionary[ast.FunctionDef, dict[tuple, dict[str, str]]] = \
    weakref.WeakKeyDictionary()


def _functions_key(functions: Mapping[str, ast.FunctionDef] | None) -> tuple:
    return tuple(sorted((n, id(f)) for n, f in (functions or {}).items()))


def _facts(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef], depth: int = 0
) -> _Facts:
    """A function's facts with those of the jit functions it calls (up to 3 calls deep).
    Read once per parsed function and set of callable functions (parsed trees are shared per
    source text, `passes.triton._py.PyModule`); callers read the result and never change it."""
    per_kernel = _FACTS.setdefault(kernel, {})
    key = (_functions_key(functions), depth)
    hit = per_kernel.get(key)
    if hit is None:
        hit = per_kernel[key] = _read_facts(kernel, functions, depth)
    return hit


def _read_facts(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef], depth: int
) -> _Facts:
    facts = _own_facts(kernel)
    if depth >= 3:
        return facts
    # `acc = helper(...)`: what the helper returns (its accumulator) is the caller's `acc`
    bound = {id(a.value): a.targets[0].id for a in ast.walk(kernel)
             if isinstance(a, ast.Assign) and len(a.targets) == 1
             and isinstance(a.targets[0], ast.Name) and isinstance(a.value, ast.Call)}
    for call in ast.walk(kernel):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in functions
            and call.func.id != kernel.name
        ):
            continue
        inner = functions[call.func.id]
        params = [a.arg for a in inner.args.args]
        rename: dict[str, str] = {}
        for i, arg in enumerate(call.args):
            if i < len(params) and isinstance(arg, ast.Name):
                rename[params[i]] = arg.id
        for kw in call.keywords:
            if kw.arg and isinstance(kw.value, ast.Name):
                rename[kw.arg] = kw.value.id
        returned = {r.value.id for r in ast.walk(inner)
                    if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)}
        if id(call) in bound and len(returned) == 1:
            rename.setdefault(returned.pop(), bound[id(call)])
        facts.absorb(_facts(inner, functions, depth + 1), rename)
    return facts


def tile_roles(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef] | None = None
) -> dict[str, str]:
    """Role of every tile / group constexpr of a kernel (see the module docstring).
    `functions`: the module's jit functions by name, so that what a called helper does with a
    parameter counts for the argument the kernel passes it."""
    per_kernel = _ROLES.setdefault(kernel, {})
    key = _functions_key(functions)
    if key not in per_kernel:
        per_kernel[key] = _read_tile_roles(kernel, functions)
    return dict(per_kernel[key])


def _read_tile_roles(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef] | None
) -> dict[str, str]:
    constexprs = constexpr_params(kernel)
    if not constexprs:
        return {}
    facts = _facts(kernel, functions or {})
    roles: dict[str, str] = {}
    accs = [facts.shapes[n] for n in facts.dotted_into if n in facts.shapes]
    if accs and facts.dot_loop:
        m_name, n_name = sorted(accs)[0] if len(set(accs)) > 1 else accs[0]
        for name, role in ((m_name, "m"), (n_name, "n")):
            if name in constexprs:
                roles[name] = role
        for name, innermost in facts.steps.items():
            if name in constexprs and name not in roles and innermost:
                roles[name] = "k"
    for name in constexprs:
        if name in roles or name in facts.persistent:
            continue
        if name in facts.grid and (name in facts.sizing or name in facts.steps
                                   or name in facts.offsets and name in facts.trips):
            # a program's block, sized by a range or walked row by row (`pid * R`, then
            # `for r in range(R)`: rows per program)
            roles[name] = "grid"
        elif name in facts.steps:
            roles[name] = "loop"
        elif name in facts.sizing:
            roles[name] = "vec"
        elif name in facts.pid_arith and name in facts.clamped:
            # a group size clamped to the tiles left; a constexpr that only splits the program
            # id (a head count: `b = bh // H`) is part of the problem, not of the schedule
            roles[name] = "group"
    return roles


def fixed_extents(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef] | None = None
) -> set[str]:
    """Tile constexprs that are a whole extent of the problem, not a block of one: they size
    a range (or a dot's accumulator) that no program id scales, no loop steps and no mask
    bounds (a head dimension `tl.arange(0, D)` loaded unmasked). Another value changes what
    the kernel computes, so a sweep must keep the launch's value."""
    roles = tile_roles(kernel, functions)
    facts = _facts(kernel, functions or {})
    return {
        n
        for n, role in roles.items()
        if role in ("m", "n", "vec")
        and n not in facts.offsets | facts.bounded
        and n not in facts.steps
    }


def is_dot_kernel(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef] | None = None
) -> bool:
    facts = _facts(kernel, functions or {})
    return facts.dot_loop and any(n in facts.shapes for n in facts.dotted_into)


def jit_functions(mod: PyModule) -> dict[str, ast.FunctionDef]:
    return {k.name: k for k in mod.kernels()}


# -- launch values ---------------------------------------------------------------------------
def _positional_params(kernel: ast.FunctionDef) -> list[str]:
    return [a.arg for a in kernel.args.args]


def _host_literal(mod: PyModule, call: ast.AST, expr: ast.AST) -> int | None:
    """The int a launch argument evaluates to when it is a literal (or literals alone: `2 *
    128`), a name bound once to a literal in the function enclosing `call` (or the module), an
    entry of a dict bound once to a literal one (`cfg["BLOCK"]`: `_dict_entry`), or an
    attribute of `self` bound once in its class (see `_attribute_literal`)."""
    value = literal_int(expr)
    if value is None and not isinstance(expr, ast.Name):
        value = constant(expr)  # literals alone: `2 * 128`
    if value is not None:
        return value
    if (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "self"
    ):
        return _attribute_literal(mod, call, expr.attr)
    if isinstance(expr, ast.Attribute) and expr.attr == "value":  # `BLOCK.value` of a constexpr
        return _module_literal(mod, expr)
    entry = _dict_entry(mod, call, expr)
    if entry is not None:  # `cfg["BLOCK"]` of `cfg = {"BLOCK": 256}`
        return _host_literal(mod, call, entry)
    if not isinstance(expr, ast.Name):
        return None
    scope = mod.enclosing(call, ast.FunctionDef)
    while scope is not None:  # the function around the launch, then the ones around it
        bound = _bindings(ast.walk(scope), expr.id)
        if bound:
            return literal_int(bound[0]) if len(bound) == 1 else None
        if expr.id in _parameters(scope):
            return _parameter_literal(mod, scope, expr.id)
        scope = mod.enclosing(scope, ast.FunctionDef)
    return _module_literal(mod, expr)


def _dict_entry(mod: PyModule, call: ast.AST, expr: ast.AST) -> ast.AST | None:
    """The value of the entry `expr` reads (`cfg["BLOCK"]`) where its dict is bound once, in the
    function around `call`, to a dict literal or `dict(...)` of keywords that nothing changes
    in place; None otherwise."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
            and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str)):
        return None
    scope = mod.enclosing(call, ast.FunctionDef)
    if scope is None:
        return None
    bound = _bindings(ast.walk(scope), expr.value.id)
    if len(bound) != 1 or not _keyed_dict(bound[0]) or _updated(scope, expr.value.id):
        return None
    return next((v for k, v, _ in _dict_entries(bound[0]) if k == expr.slice.value), None)


def host_binding(mod: PyModule, call: ast.AST, expr: ast.AST) -> ast.Constant | None:
    """The int literal a launch argument's host name is bound to: a name assigned once in the
    function around the launch, to a literal that binds it alone (`BLOCK = 32`, the element of
    `BM, BN = 64, 32`; not `BM = BN = 32`, whose one literal sizes both). Rewriting that
    literal resizes the argument and every host read of the name alike (a grid that divides by
    it). None otherwise."""
    scope = mod.enclosing(call, ast.FunctionDef)
    if not isinstance(expr, ast.Name) or scope is None:
        return None
    bound = _bindings(ast.walk(scope), expr.id)
    stores = [n for n in ast.walk(scope)
              if isinstance(n, ast.Name) and n.id == expr.id and isinstance(n.ctx, ast.Store)]
    if len(bound) != 1 or len(stores) != 1 or literal_int(bound[0]) is None:
        return None
    statement = mod.parents.get(bound[0])
    while statement is not None and not isinstance(statement, (ast.Assign, ast.AnnAssign)):
        statement = mod.parents.get(statement)
    if isinstance(statement, ast.Assign) and len(statement.targets) > 1:
        return None
    return bound[0] if isinstance(bound[0], ast.Constant) else None


def _parameters(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def _parameter_literal(mod: PyModule, fn: ast.FunctionDef, name: str) -> int | None:
    """The int a host function's parameter holds: the literal every call of the function in
    the module passes for it (`f(x, 64)`, `f(x, tile=64)`, `functools.partial(f, tile=64)`),
    or its default when no call passes it (a factory's `def make(tile=32)`, `run(a, b, TILE=64)`
    called by the harness). None when a call spreads `*args` / `**kwargs` or the calls differ."""
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    defaults = dict(zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults))
    defaults.update((a.arg, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None)
    index = positional.index(name) if name in positional else None
    passed: list[ast.AST] = []
    for c in ast.walk(mod.tree):
        if not isinstance(c, ast.Call):
            continue
        if isinstance(c.func, ast.Name) and c.func.id == fn.name:
            args = c.args
        elif (callee(c) in ("functools.partial", "partial") and c.args
              and isinstance(c.args[0], ast.Name) and c.args[0].id == fn.name):
            args = c.args[1:]
        else:
            continue
        if any(isinstance(a, ast.Starred) for a in args) or any(k.arg is None for k in c.keywords):
            return None
        if index is not None and index < len(args):
            passed.append(args[index])
        passed.extend(k.value for k in c.keywords if k.arg == name)
    if passed:
        values = {_module_literal(mod, v) for v in passed}
        return values.pop() if len(values) == 1 and None not in values else None
    return _module_literal(mod, defaults.get(name))


def _module_literal(mod: PyModule, expr: ast.AST | None) -> int | None:
    """A literal, or a module-level name bound once to one (or to `tl.constexpr(literal)`,
    also read as `NAME.value`)."""
    if isinstance(expr, ast.Attribute) and expr.attr == "value" and isinstance(expr.value, ast.Name):
        expr = expr.value
    if isinstance(expr, ast.Name):
        bound = _bindings(mod.tree.body, expr.id)
        return _constexpr_literal(bound[0]) if len(bound) == 1 else None
    return literal_int(expr)


def _constexpr_literal(expr: ast.AST | None) -> int | None:
    """An int literal, or `tl.constexpr(literal)`."""
    if isinstance(expr, ast.Call) and callee(expr).split(".")[-1] == "constexpr" \
            and len(expr.args) == 1 and not expr.keywords:
        return literal_int(expr.args[0])
    return literal_int(expr)


def _attribute_literal(mod: PyModule, call: ast.AST, attr: str) -> int | None:
    """The int `self.<attr>` holds where `call` runs, when the class binds it once: to a literal
    or module constant, or to a parameter of `__init__` whose default is one (and that no
    instantiation in the module passes; or that every one passes the same literal)."""
    cls = mod.enclosing(call, ast.ClassDef)
    if not isinstance(cls, ast.ClassDef):
        return None
    found = attribute_bindings(mod, cls, attr)
    if found is None or len(found) != 1:
        return None
    value, fn = found[0]
    if value is None:
        return None
    if not isinstance(value, ast.Name) or fn is None:
        return _module_literal(mod, value)
    params = [a.arg for a in fn.args.args]
    if value.id not in params:
        return _module_literal(mod, value)
    if fn.name != "__init__":
        return None
    index = params.index(value.id)
    defaults = dict(zip(params[len(params) - len(fn.args.defaults) :], fn.args.defaults))
    passed: list[ast.AST] = []
    for c in ast.walk(mod.tree):
        if not (isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == cls.name):
            continue
        if any(isinstance(a, ast.Starred) for a in c.args) or any(
            k.arg is None for k in c.keywords
        ):
            return None
        if index - 1 < len(c.args):  # `self` is not passed
            passed.append(c.args[index - 1])
        passed.extend(k.value for k in c.keywords if k.arg == value.id)
    if passed:
        values = {_module_literal(mod, v) for v in passed}
        return values.pop() if len(values) == 1 and None not in values else None
    return _module_literal(mod, defaults.get(value.id))


def attribute_bindings(
    mod: PyModule, cls: ast.ClassDef, attr: str
) -> list[tuple[ast.AST | None, ast.FunctionDef | None]] | None:
    """Every value a class binds `self.<attr>` (or the class attribute) to, with the method
    that binds it (None: the class body; a value None: unpacked from a non-tuple). None when
    something updates it in place (`self.attr += 1`)."""
    out: list[tuple[ast.AST | None, ast.FunctionDef | None]] = []
    for node in ast.walk(cls):
        if isinstance(node, ast.AugAssign):
            t = node.target
            if isinstance(t, ast.Attribute) and dotted(t) == f"self.{attr}":
                return None
            continue
        if isinstance(node, ast.AnnAssign):
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.Assign):
            pairs = [p for t in node.targets for p in _unpacked(t, node.value)]
        else:
            continue
        owner = mod.enclosing(node, (ast.FunctionDef, ast.ClassDef))
        for target, value in pairs:
            if isinstance(target, ast.Attribute) and dotted(target) == f"self.{attr}":
                fn = owner if isinstance(owner, ast.FunctionDef) else None
                out.append((value, fn))
            elif isinstance(target, ast.Name) and target.id == attr and owner is cls:
                out.append((value, None))
    return out


def _unpacked(target: ast.AST, value: ast.AST | None) -> list[tuple[ast.AST, ast.AST | None]]:
    """(target, value) pairs of an assignment (`a, b = x, y` -> (a, x), (b, y))."""
    if isinstance(target, (ast.Tuple, ast.List)):
        values = (
            value.elts
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            else [None] * len(target.elts)
        )
        return [p for t, v in zip(target.elts, values) for p in _unpacked(t, v)]
    return [(target, value)]


def _bindings(nodes: Any, name: str) -> list[ast.AST]:
    """The values assigned to `name` (`x = 64`, `a, x = 32, 64`)."""
    out: list[ast.AST] = []
    for n in nodes:
        if (
            isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and n.target.id == name
            and n.value is not None
        ):
            out.append(n.value)
        if not isinstance(n, ast.Assign):
            continue
        for t in n.targets:
            if isinstance(t, ast.Name) and t.id == name:
                out.append(n.value)
            elif (
                isinstance(t, (ast.Tuple, ast.List))
                and isinstance(n.value, (ast.Tuple, ast.List))
                and len(t.elts) == len(n.value.elts)
            ):
                out.extend(
                    v
                    for e, v in zip(t.elts, n.value.elts)
                    if isinstance(e, ast.Name) and e.id == name
                )
    return out


def launch_arguments(mod: PyModule, kernel: ast.FunctionDef, call: ast.Call) -> dict[str, ast.AST]:
    """Kernel parameter -> the argument node the call `kernel[grid](...)` itself passes for it
    (its `**` arguments left out: `kernel_launches` reads them)."""
    params = _positional_params(kernel)
    out: dict[str, ast.AST] = {}
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(params):
            out[params[i]] = arg
    for kw in call.keywords:
        if kw.arg:
            out[kw.arg] = kw.value
    return out


# -- launches through a dict or a partial ----------------------------------------------------
PARTIAL_CALLS = frozenset({"functools.partial"})
# Methods that change a dict in place: a dict they are called on is not read as bound.
_DICT_UPDATES = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__"})


@dataclass(frozen=True, slots=True)
class Passed:
    """One place a launch passes a value: `holder` is the call (the launch, a partial, a
    `dict(...)`) or the dict literal that holds it, `item` what to remove to stop passing it
    (the argument or keyword, a dict literal's key); `spread` names the `**NAME` dict it
    comes from (None: passed directly, or by an inline `**{...}`)."""

    value: ast.AST
    holder: ast.AST
    item: ast.AST
    spread: str | None = None


@dataclass(frozen=True, slots=True)
class Spread:
    """A `**NAME` launch argument read as the dict NAME is bound to once (in `scope`)."""

    keyword: ast.keyword
    holder: ast.Dict | ast.Call
    name: str | None
    scope: ast.AST | None


@dataclass(frozen=True, slots=True, eq=False)
class Launch:
    """One run of a kernel: `kernel[grid](...)`, or a call of what
    `functools.partial(kernel[grid], ...)` returns (`partial` is that call, `bound` the name
    its result is bound to). `passed` holds every place each parameter is passed, in the order
    Python applies them (the last one wins); `positional` the positional arguments in order;
    `opaque` the `**` arguments whose keys cannot be read."""

    call: ast.Call
    site: ast.Subscript
    passed: Mapping[str, tuple[Passed, ...]]
    positional: tuple[ast.AST, ...] = ()
    spreads: tuple[Spread, ...] = ()
    opaque: tuple[ast.keyword, ...] = ()
    partial: ast.Call | None = None
    bound: str | None = None

    def values(self) -> dict[str, ast.AST]:
        """Kernel parameter -> the value node the launch runs it with."""
        return {name: places[-1].value for name, places in self.passed.items()}


def kernel_launches(mod: PyModule, kernel: ast.FunctionDef) -> list[Launch]:
    """Every launch of `kernel` in the module: its `kernel[grid](...)` calls and those of the
    host helpers it is passed to, shared ones included (`PyModule.launches`; a rewrite of one
    asks `PyModule.shared_launch`), then the calls of a `functools.partial(kernel[grid], ...)`
    (called at once, or bound once to a name that is called). Keywords a launch spreads from a
    dict (`**meta`, with `meta` bound once to a dict literal or a `dict(...)` of keywords and
    not updated in place) count as passed."""
    hit = _LAUNCHES.get(kernel)
    if hit is None:
        hit = _LAUNCHES[kernel] = _read_launches(mod, kernel)
    return list(hit)


_LAUNCHES: weakref.WeakKeyDictionary[ast.FunctionDef, list[Launch]] = weakref.WeakKeyDictionary()


def _read_launches(mod: PyModule, kernel: ast.FunctionDef) -> list[Launch]:
    out = [
        _launch(mod, kernel, call, call.func, [(call, 0)])  # type: ignore[arg-type]
        for call in mod.launches(kernel.name, shared=True)
    ]
    partials = _partial_callees(mod)
    for made in ast.walk(mod.tree):
        if not (
            isinstance(made, ast.Call)
            and callee(made) in partials
            and made.args
            and isinstance(made.args[0], ast.Subscript)
            and dotted(made.args[0].value) == kernel.name
        ):
            continue
        site = made.args[0]
        parent = mod.parents.get(made)
        if isinstance(parent, ast.Call) and parent.func is made:
            out.append(_launch(mod, kernel, parent, site, [(made, 1), (parent, 0)], made))
            continue
        name = _bound_name(parent)
        scope = _binding_scope(mod, made, name) if name else None
        if name is None or scope is None:
            continue
        for call in ast.walk(scope):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and (
                call.func.id == name
            ):
                out.append(_launch(mod, kernel, call, site, [(made, 1), (call, 0)], made, name))
    return out


def _launch(
    mod: PyModule,
    kernel: ast.FunctionDef,
    call: ast.Call,
    site: ast.Subscript,
    calls: Sequence[tuple[ast.Call, int]],
    partial: ast.Call | None = None,
    bound: str | None = None,
) -> Launch:
    """The launch that `calls` make together (a partial's arguments, from index 1 on, come
    before those of the call of its result)."""
    params = _positional_params(kernel)
    passed: dict[str, list[Passed]] = {}
    positional: list[ast.AST] = []
    spreads: list[Spread] = []
    opaque: list[ast.keyword] = []
    args = [(a, holder) for holder, skip in calls for a in holder.args[skip:]]
    for i, (arg, holder) in enumerate(args):
        if isinstance(arg, ast.Starred):
            break
        positional.append(arg)
        if i < len(params):
            passed.setdefault(params[i], []).append(Passed(arg, holder, arg))
    for holder, _ in calls:
        for kw in holder.keywords:
            if kw.arg:
                passed.setdefault(kw.arg, []).append(Passed(kw.value, holder, kw))
                continue
            spread = _spread(mod, kw)
            if spread is None:
                opaque.append(kw)
                continue
            spreads.append(spread)
            for key, value, item in _dict_entries(spread.holder):
                passed.setdefault(key, []).append(
                    Passed(value, spread.holder, item, spread.name)
                )
    return Launch(
        call,
        site,
        {k: tuple(v) for k, v in passed.items()},
        tuple(positional),
        tuple(spreads),
        tuple(opaque),
        partial,
        bound,
    )


def _partial_callees(mod: PyModule) -> set[str]:
    """The dotted names `functools.partial` goes by in the module."""
    names = set(PARTIAL_CALLS)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ImportFrom) and node.module == "functools":
            names |= {a.asname or a.name for a in node.names if a.name == "partial"}
        elif isinstance(node, ast.Import):
            names |= {
                f"{a.asname}.partial" for a in node.names if a.name == "functools" and a.asname
            }
    return names


def _bound_name(stmt: ast.AST | None) -> str | None:
    """The name a plain `NAME = value` statement binds."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    return None


def _binding_scope(mod: PyModule, node: ast.AST, name: str) -> ast.AST | None:
    """Where `name`, read at `node`, is bound once: the enclosing function, else the module
    (None: a parameter of the function, bound several times, or not at all)."""
    fn = mod.enclosing(node, ast.FunctionDef)
    if fn is not None:
        a = fn.args  # type: ignore[attr-defined]
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        if any(p is not None and p.arg == name for p in params):
            return None
        found = _bindings(ast.walk(fn), name)
        if found:
            return fn if len(found) == 1 else None
    return mod.tree if len(_bindings(mod.tree.body, name)) == 1 else None


def _spread(mod: PyModule, kw: ast.keyword) -> Spread | None:
    """A `**` argument read as a dict of named keys: an inline `{...}` / `dict(...)`, or a name
    bound once to one and never updated in place."""
    if _keyed_dict(kw.value):
        return Spread(kw, kw.value, None, None)  # type: ignore[arg-type]
    if not isinstance(kw.value, ast.Name):
        return None
    name = kw.value.id
    scope = _binding_scope(mod, kw, name)
    if scope is None:
        return None
    nodes = ast.walk(scope) if scope is not mod.tree else mod.tree.body
    value = _bindings(nodes, name)[0]
    if not _keyed_dict(value) or _updated(scope, name):
        return None
    return Spread(kw, value, name, scope)  # type: ignore[arg-type]


def _keyed_dict(node: ast.AST) -> bool:
    """A dict literal with string keys alone, or `dict(K=V, ...)` of keywords alone."""
    if isinstance(node, ast.Dict):
        return all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys)
    return (
        isinstance(node, ast.Call)
        and callee(node) == "dict"
        and not node.args
        and all(k.arg for k in node.keywords)
    )


def _dict_entries(holder: ast.Dict | ast.Call) -> list[tuple[str, ast.AST, ast.AST]]:
    """(key, value, item to remove) of a dict literal or a `dict(...)` call."""
    if isinstance(holder, ast.Dict):
        pairs = zip(holder.keys, holder.values)
        return [(str(k.value), v, k) for k, v in pairs]  # type: ignore[union-attr]
    return [(str(k.arg), k.value, k) for k in holder.keywords]


def _updated(scope: ast.AST, name: str) -> bool:
    """Whether `scope` changes the dict `name` in place (`d[k] = v`, `del d[k]`, `d |= ..`,
    `d.update(..)`)."""
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
            and isinstance(node.ctx, (ast.Store, ast.Del))
        ):
            return True
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
        ):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _DICT_UPDATES
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            return True
    return False


def autotune_entries(mod: PyModule, kernel: ast.FunctionDef) -> list[ast.Call]:
    """The `triton.Config({...}, ...)` entries of `kernel`'s literal autotune list (one bound
    to a module-level name too); [] where it has none."""
    dec = mod.decorator(kernel, "autotune")
    if not isinstance(dec, ast.Call):
        return []
    configs = next(
        (k.value for k in dec.keywords if k.arg == "configs"), dec.args[0] if dec.args else None
    )
    if isinstance(configs, ast.Subscript):
        configs = configs.value
    if isinstance(configs, ast.Name):  # `configs=CONFIGS` bound at module level
        bound = [
            n
            for n in mod.tree.body
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == configs.id for t in n.targets)
        ]
        configs = bound[0].value if len(bound) == 1 else None
    if not isinstance(configs, (ast.List, ast.Tuple)):
        return []
    return [
        c
        for c in configs.elts
        if isinstance(c, ast.Call) and c.args and isinstance(c.args[0], ast.Dict)
    ]


def heuristic_entries(mod: PyModule, kernel: ast.FunctionDef) -> tuple[ast.Dict | None,
                                                                         dict[str, ast.AST]]:
    """The dict of `kernel`'s `@triton.heuristics({...})` (or `values={...}`) and each
    parameter it sets -> the function computing it; (None, {}) without one. Triton runs these
    after the autotuner picks a config and before the launch, so what they set wins over both."""
    dec = mod.decorator(kernel, "heuristics")
    if not isinstance(dec, ast.Call):
        return None, {}
    table = next((k.value for k in dec.keywords if k.arg == "values"),
                 dec.args[0] if dec.args else None)
    if not isinstance(table, ast.Dict):
        return None, {}
    return table, {str(k.value): v for k, v in zip(table.keys, table.values)
                   if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def heuristic_constant(fn: ast.AST) -> int | None:
    """The int a heuristic always returns (`lambda args: 2`), else None."""
    return literal_int(fn.body) if isinstance(fn, ast.Lambda) else None


def param_values(
    mod: PyModule, kernel: ast.FunctionDef, names: Sequence[str]
) -> dict[str, int | None]:
    """The int each of `names` (kernel parameters) is run with: what a heuristic sets it to
    where one does (None where it computes it), else its value in the first autotuner config,
    else at the first launch (a literal, or a host name bound to one), else its default; None
    where none of these is a literal."""
    values: dict[str, int | None] = {
        n: heuristic_constant(fn) for n, fn in heuristic_entries(mod, kernel)[1].items()
        if n in names
    }
    configs = autotune_entries(mod, kernel)
    if configs:
        first = configs[0]
        for k, v in zip(first.args[0].keys, first.args[0].values):
            if isinstance(k, ast.Constant) and str(k.value) in names \
                    and str(k.value) not in values:
                values[str(k.value)] = literal_int(v)
    launches = kernel_launches(mod, kernel)
    if launches:
        args = launches[0].values()
        for name in names:
            if name in args and name not in values:
                values[name] = _host_literal(mod, args[name], args[name])
    positional = [a.arg for a in kernel.args.args]
    defaults = dict(zip(positional[len(positional) - len(kernel.args.defaults) :],
                        kernel.args.defaults))
    for name in names:
        if name not in values and name in defaults:
            values[name] = literal_int(defaults[name])
    return {name: values.get(name) for name in names}


def kernel_config(mod: PyModule, kernel: ast.FunctionDef) -> KernelConfig:
    """The configuration a module runs `kernel` with: its first config when autotuned, else its
    first launch (else the parameters' defaults)."""
    roles = tile_roles(kernel, jit_functions(mod))
    warps, stages = DEFAULT_WARPS, DEFAULT_STAGES
    configs = autotune_entries(mod, kernel)
    autotuned = mod.decorator(kernel, "autotune") is not None
    if configs:
        for kw in configs[0].keywords:
            if kw.arg == "num_warps" and literal_int(kw.value):
                warps = literal_int(kw.value)
            if kw.arg == "num_stages" and literal_int(kw.value) is not None:
                stages = literal_int(kw.value)
    launches = kernel_launches(mod, kernel)
    if launches:
        args = launches[0].values()
        for key in LAUNCH_KEYS:
            value = _host_literal(mod, args[key], args[key]) if key in args else None
            if key == "num_warps" and value:
                warps = value
            if key == "num_stages" and value is not None:
                stages = value
    values = param_values(mod, kernel, list(roles))
    fixed = fixed_extents(kernel, jit_functions(mod))
    params = tuple(
        Param(n, r, None if n in fixed else values.get(n)) for n, r in roles.items()
    )
    return KernelConfig(
        kernel.name,
        params,
        int(warps),
        int(stages),
        autotuned,
        is_dot_kernel(kernel, jit_functions(mod)),
        _pipelined(kernel, jit_functions(mod)),
        _chains_dots(kernel, jit_functions(mod)),
    )


def _chains_dots(kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef]) -> bool:
    """A loop of `kernel`, or of a jit function it calls (3 calls deep), chains two products
    inside its body (`_chained_dots` over the loop: a product computed in an earlier step, or
    after the loop, does not count); the flash-attention helper that holds the kernel's loop
    counts."""
    return _in_calls(kernel, functions, lambda fn: any(
        _chained_dots(loop) for loop in ast.walk(fn) if isinstance(loop, ast.For)))


def _pipelined(kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef]) -> bool:
    """`kernel` or a jit function it calls (3 calls deep) loads inside a loop that
    `num_stages` pipelines: a `for` over `range` / `tl.range` (not `tl.static_range`, nor a
    `tl.range` that sets its own `num_stages`, which the launch's does not change) whose body
    loads, itself or through a jit function it calls."""
    return _in_calls(kernel, functions, lambda fn: any(
        isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
        and callee(loop.iter) in RANGE_CALLS and callee(loop.iter) not in STATIC_RANGE
        and not any(k.arg == "num_stages" for k in loop.iter.keywords)
        and _loads(loop, functions, fn.name) for loop in ast.walk(fn)))


def _in_calls(kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef],
              holds: Callable[[ast.FunctionDef], bool], depth: int = 0) -> bool:
    """`holds` is true of `kernel` or of a jit function it calls, 3 calls deep."""
    if holds(kernel):
        return True
    if depth >= 3:
        return False
    called = {c.func.id for c in ast.walk(kernel) if isinstance(c, ast.Call)
              and isinstance(c.func, ast.Name) and c.func.id in functions
              and c.func.id != kernel.name}
    return any(_in_calls(functions[n], functions, holds, depth + 1) for n in called)


def _loads(node: ast.AST, functions: Mapping[str, ast.FunctionDef], own: str,
           depth: int = 0) -> bool:
    """`node` loads from memory: a `.load` call, or a call of a jit function that loads."""
    for c in ast.walk(node):
        if not isinstance(c, ast.Call):
            continue
        if callee(c).split(".")[-1] == "load":
            return True
        if depth < 3 and isinstance(c.func, ast.Name) and c.func.id in functions \
                and c.func.id != own and _loads(functions[c.func.id], functions, c.func.id,
                                                depth + 1):
            return True
    return False


def joint_config(ir: KernelIR) -> dict[str, KernelConfig]:
    """Every kernel's configuration by role, keyed by kernel name (read once per source among
    the last `CONFIGS_KEPT`)."""
    def read() -> dict[str, KernelConfig]:
        mod = PyModule(ir)
        return {k.name: kernel_config(mod, k) for k in mod.kernels()}

    return dict(_CONFIGS.get(ir.source, read))


CONFIGS_KEPT = 256
_CONFIGS: Recent[dict[str, KernelConfig]] = Recent(CONFIGS_KEPT)


# -- operator signature ----------------------------------------------------------------------
def operator_signature(ir: KernelIR) -> frozenset[str]:
    """Structural traits of a module's kernels, read from the code (not from any name):
    `dot-loop` (a tl.dot reducing in a loop), `two-dots` (a dot whose operand is computed from
    another dot: attention's P @ V), `online-softmax` (a running max with exp rescaling in a
    loop), `row-reduce` (tl.sum / tl.max / tl.min over an axis), `scan` (cumsum or an
    associative scan), `sort` (tl.sort / topk / histogram), `elementwise` (none of the above).
    Retrieval compares cases by these. How a kernel is implemented (block pointers, a persistent
    grid, atomics) is left out: it is what optimization changes, not what the operator is."""
    mod = PyModule(ir)
    traits: set[str] = set()
    for kernel in mod.kernels():
        calls = [c for c in ast.walk(kernel) if isinstance(c, ast.Call)]
        names = [callee(c) for c in calls]
        short = [n.split(".")[-1] for n in names]
        if is_dot_kernel(kernel, jit_functions(mod)):
            traits.add("dot-loop")
        if _chained_dots(kernel):
            traits.add("two-dots")
        in_loops = [
            c
            for loop in ast.walk(kernel)
            if isinstance(loop, ast.For)
            for c in ast.walk(loop)
            if isinstance(c, ast.Call)
        ]
        loop_short = {callee(c).split(".")[-1] for c in in_loops}
        if {"exp", "exp2"} & loop_short and ("max" in loop_short or "maximum" in loop_short):
            traits.add("online-softmax")
        for c in calls:
            tail = callee(c).split(".")[-1]
            if (
                tail in ("sum", "max", "min", "argmax", "argmin", "reduce")
                and callee(c).startswith(("tl.", "triton."))
                and (len(c.args) >= 2 or any(k.arg == "axis" for k in c.keywords))
            ):
                traits.add("row-reduce")
        if {"cumsum", "cumprod", "associative_scan"} & set(short):
            traits.add("scan")
        if {"sort", "topk", "histogram"} & set(short):
            traits.add("sort")
    if not traits & {"dot-loop", "two-dots", "online-softmax", "row-reduce", "scan", "sort"}:
        traits.add("elementwise")
    return frozenset(traits)


def _chained_dots(kernel: ast.AST) -> bool:
    """Whether an operand of a `tl.dot` is computed (through assignments) from another dot's
    result; two independent products (a K loop split in two, `a @ b + c @ d`) are not."""
    assigns = [n for n in ast.walk(kernel) if isinstance(n, (ast.Assign, ast.AugAssign))]
    from_dot: set[str] = set()
    changed = True
    while changed:
        changed = False
        for a in assigns:
            if not (_has_dot(a.value) or names_in(a.value) & from_dot):
                continue
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            for t in targets:
                for n in (x.id for x in ast.walk(t) if isinstance(x, ast.Name)):
                    if n not in from_dot:
                        from_dot.add(n)
                        changed = True
    for c in ast.walk(kernel):
        if isinstance(c, ast.Call) and callee(c) in DOT:
            operands = list(c.args[:2]) + [k.value for k in c.keywords if k.arg in ("a", "b")]
            if any(names_in(o) & from_dot or _has_dot(o) for o in operands):
                return True
    return False


# -- writing a config list -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SweepRefusal:
    reason: str
    detail: Mapping[str, Any] = field(default_factory=dict)


def fit_configs(target: KernelConfig, configs: Sequence[Mapping[str, Any]]) -> list[dict[str, int]]:
    """Role-keyed configs (`{"m": 128, "n": 256, "k": 64, "num_warps": 8, ...}`) as the target's
    own parameter values: a role the target lacks is dropped, a tunable parameter the configs
    do not set keeps its current value, duplicates go (first kept). The role's value goes to
    its first parameter (`KernelConfig.by_role`); others of the same role keep their ratio to
    it (a 16x128 tile of two `grid` blocks at a `grid` of 32 is 32x256, not 32x32, which would
    never run the shape the author wrote). A loop step the host computes
    (no literal value) takes the `loop` a config sets explicitly: any step walks the same
    range (`sweep_edit` keeps it only where every config sets it and the loop is masked)."""
    out: list[dict[str, int]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    first = target.by_role()
    for cfg in configs:
        values: dict[str, int] = {}
        for p in target.params:
            if p.value is None:
                if p.role == "loop" and "loop" in cfg:
                    values[p.name] = int(cfg["loop"])
                continue
            v = max(1, p.value * int(cfg[p.role]) // first[p.role]) if p.role in cfg \
                else p.value
            # a `vec` block is all of its masked range a program covers: smaller drops elements
            values[p.name] = max(v, p.value) if p.role == "vec" else v
        values["num_warps"] = int(cfg.get("num_warps", target.num_warps))
        values["num_stages"] = int(cfg.get("num_stages", target.num_stages))
        key = tuple(sorted(values.items()))
        if key not in seen:
            seen.add(key)
            out.append(values)
    return out


def _dimension_keys(kernel: ast.FunctionDef) -> list[str]:
    """Non-constexpr parameters the kernel compares against or divides by (problem sizes):
    the autotuner's cache key."""
    constexprs = set(constexpr_params(kernel))
    params = [a.arg for a in kernel.args.args if a.arg not in constexprs]
    used: set[str] = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.Compare):
            used |= names_in(node)
        elif isinstance(node, ast.Call) and (
            is_cdiv(node) or callee(node) in RANGE_CALLS
        ):
            used |= names_in(node)
        elif isinstance(node, ast.keyword) and node.arg == "shape":
            used |= names_in(node.value)
    pointers = _ptr_like(kernel)
    return [p for p in params if p in used and p not in pointers]


def _ptr_like(kernel: ast.FunctionDef) -> set[str]:
    """Pointer parameters: the base of address arithmetic (`p + offs`, never inside a product
    or a comparison) or of a block pointer / tensor descriptor."""
    constexprs = set(constexpr_params(kernel))
    params = {a.arg for a in kernel.args.args} - constexprs
    out: set[str] = set()
    compared: set[str] = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.Compare):
            compared |= names_in(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                if isinstance(side, ast.Name) and side.id in params:
                    out.add(side.id)
        if isinstance(node, ast.Call) and callee(node).split(".")[-1] in (
            "make_block_ptr",
            "make_tensor_descriptor",
        ):
            base = (
                node.args[0]
                if node.args
                else next((k.value for k in node.keywords if k.arg in ("base", "base_ptr")), None)
            )
            if isinstance(base, ast.Name) and base.id in params:
                out.add(base.id)
    return out - compared


def _addressed(kernel: ast.FunctionDef) -> set[str]:
    """Parameters (not constexprs) a `tl.load`, `tl.store` or atomic takes as its pointer as
    they are (`tl.atomic_add(count_ptr, 1)`)."""
    params = {a.arg for a in kernel.args.args} - set(constexpr_params(kernel))
    out: set[str] = set()
    for call in ast.walk(kernel):
        name = callee(call) if isinstance(call, ast.Call) else ""
        if name.split(".")[-1] in ("load", "store") and name.startswith(("tl.", "triton.")) \
                or name.startswith(ATOMICS_PREFIX):
            ptr = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg in ("pointer", "ptr")), None)
            if isinstance(ptr, ast.Name) and ptr.id in params:
                out.add(ptr.id)
    return out


def _pointer_uses(kernel: ast.FunctionDef) -> tuple[set[str], set[str], set[str]]:
    """(pointer parameters loaded, stored, updated by an atomic) in the kernel. A parameter
    given as it is as the pointer of one of these (`tl.atomic_add(count_ptr, 1)`, a scalar
    `tl.store(out_ptr, total)`) is a pointer too, with no address arithmetic on it."""
    params = _ptr_like(kernel) | _addressed(kernel)
    loaded: set[str] = set()
    stored: set[str] = set()
    atomic: set[str] = set()
    assigns = assignments(kernel, augmented=True)

    def bases(expr: ast.AST) -> set[str]:
        return reached(names_in(expr), assigns) & params

    for call in ast.walk(kernel):
        if isinstance(call, ast.Call) and call.args:
            name = callee(call)
            tail = name.split(".")[-1]
            target = call.args[0]
            if (
                isinstance(call.func, ast.Attribute)
                and tail in ("load", "store")
                and not name.startswith(("tl.", "triton."))
            ):
                target = call.func.value  # a tensor descriptor: `desc.load([..])`
            if tail == "load":
                loaded |= bases(target)
            elif tail == "store":
                stored |= bases(target)
            elif name.startswith(ATOMICS_PREFIX):
                atomic |= bases(target)
    return loaded, stored, atomic


def _restored(mod: PyModule, kernel: ast.FunctionDef, launches: Sequence[Launch]) -> list[str]:
    """Pointer parameters the autotuner must restore between its trial runs (`restore_value`):
    those the kernel both loads and stores (an in-place update), those it updates with
    atomics (each trial would add into the buffer again), and those it stores into where a
    launch passes the same host tensor to a parameter it loads (`k[grid](y, y, ...)`)."""
    loaded, stored, atomic = _pointer_uses(kernel)
    out = (loaded & stored) | atomic
    for launch in launches:
        given = {name: mod.text(node) for name, node in launch.values().items()}
        for p in stored - out:
            if any(given.get(q) == given.get(p) for q in loaded - {p} if p in given):
                out.add(p)
    return sorted(out)


def sweep_edit(
    ir: KernelIR, kernel_name: str, configs: Sequence[Mapping[str, Any]],
    fits: Callable[[Mapping[str, int]], bool] | None = None,
) -> tuple[list[ByteEdit], list[dict[str, int]]] | SweepRefusal:
    """Byte edits that make `kernel_name` autotune over `configs` (role-keyed, see
    `fit_configs`), and the fitted configs. Refused (with the reason) where the launch cannot
    take tuned parameters (a tile the kernel does not bounds-check only shrinks, to a divisor of
    its value: `unchecked_tiles`): a launch a host helper makes for other kernels too
    (`PyModule.shared_launch`), a launch that passes a tile positionally before other arguments, a
    grid that cannot be rewritten to read the tuned tiles. A tile the host reads beyond the
    launch (`_host_pinned`), or whose block count a host grid cannot be made to follow
    (`_grid_unfollowed`), keeps its written value; refused only when nothing else is left to
    tune. A tile of a role that shapes the grid which a grid of the meta-parameters does not
    read keeps its value in every configuration (`_grid_unread`); refused only when nothing
    else is left to tune. Buffers the autotuner's trial runs would change (atomics, in-place
    updates, a tensor passed as both input and output) are restored between them
    (`_restored`). Tuned
    values a launch spreads from a dict or binds in a partial are taken out of that dict or
    partial (its other entries kept); refused then where the dict is read beyond the kernel's
    launches (and the grid reads the rewrite replaces), where the partial is used other than
    called, or where a `**` argument's keys cannot be read. With `fits`, the fitted
    configurations it refuses (parameter name -> value, launch keys too) are left out."""
    inlined = _grid_counts_inlined(ir, kernel_name)
    # the same program with each host count written into its grid, in one form
    counted = _grid_counts_canonical(inlined or ir, kernel_name) or inlined
    if counted is not None:
        made = sweep_edit(counted, kernel_name, configs, fits)
        if isinstance(made, SweepRefusal):
            return made
        from kir import Edit, Span  # noqa: PLC0415

        text = counted.apply(Edit(Span(e.start, e.end), e.text) for e in made[0]).unparse()
        return [ByteEdit(0, len(ir.source), text)], made[1]
    mod = PyModule(ir)
    kernel = next((k for k in mod.kernels() if k.name == kernel_name), None)
    if kernel is None:
        return SweepRefusal("no such kernel", {"kernel": kernel_name})
    current = kernel_config(mod, kernel)
    launches = kernel_launches(mod, kernel)
    shared = mod.sharing(kernel_name)
    if shared is not None:
        return SweepRefusal(shared, {"kernel": kernel_name})
    pinned = _host_pinned(mod, launches, current)
    # the host needs these tiles as they are, or the grid cannot count their blocks: the sweep
    # tunes the rest around them
    while True:
        current = dataclasses.replace(current, params=tuple(
            dataclasses.replace(p, value=None) if p.name in pinned else p for p in current.params))
        unfollowed = _grid_unfollowed(mod, kernel, launches, current)
        if not unfollowed:
            break
        pinned = {**pinned, **unfollowed}
    fitted = _within_unchecked(fit_configs(current, configs),
                               joined_caps(unchecked_caps(mod, kernel, current),
                                            grouped_caps(mod, kernel, current)))
    fitted = _host_steps_whole(fitted, current, unchecked_tiles(kernel) | set(pinned))
    unread = _grid_unread(mod, launches, current)
    # a tile the grid does not read keeps its value, or one of the values the kernel's own
    # autotune list gives it (the gate checked every entry): the sweep tunes the rest around it
    fitted = _held(fitted, {p.name: p.value for p in current.params
                            if p.name in unread and p.value is not None},
                   _listed_values(autotune_entries(mod, kernel), unread))
    if fits is not None:
        fitted = [c for c in fitted if fits(c)]
    if not fitted:
        return SweepRefusal("no configuration to set", {"kernel": kernel_name})
    if pinned and fitted == fit_configs(current, [{}]):  # nothing but the pinned tiles changed
        return next(iter(pinned.values()))
    if unread and fitted == fit_configs(current, [{}]):  # nothing but the held tiles changed
        return SweepRefusal("the launch grid does not read the tiles that shape it",
                            {"tiles": ",".join(unread)})
    tuned = [n for n in fitted[0] if n not in LAUNCH_KEYS]
    if not launches:
        uses = _host_uses(mod, kernel_name)
        if uses:
            return SweepRefusal(
                f"the kernel is launched through a name the sweep cannot follow (line "
                f"{uses[0].lineno}: a dict, a partial, an alias of `{kernel_name}` or a helper "
                "that does not launch it as `param[grid](...)`)",
                {"kernel": kernel_name},
            )
        return SweepRefusal("the kernel is never launched in this module", {"kernel": kernel_name})
    if fitted == fit_configs(current, [{}]):  # e.g. every tile unchecked and kept
        return SweepRefusal("the sweep holds the kernel's own configuration alone",
                            {"kernel": kernel_name})
    edits: list[ByteEdit] = []
    dec = mod.decorator(kernel, "autotune")
    params = _positional_params(kernel)
    spread_reads: list[ast.AST] = []  # reads of a launch dict the rewrite accounts for
    dropped: set[tuple[int, str]] = set()  # launch dicts losing keys: (id(scope), name)
    for launch in launches:
        if launch.opaque:
            return SweepRefusal(
                f"the launch passes **{mod.text(launch.opaque[0].value)}, whose keys the sweep "
                f"cannot read (line {launch.opaque[0].lineno})",
                {"kernel": kernel_name, "line": launch.opaque[0].lineno},
            )
        if launch.bound is not None:
            stray = _partial_reuse(mod, launch)
            if stray is not None:
                return SweepRefusal(
                    f"the launch partial {launch.bound} is used beyond its calls (line "
                    f"{stray.lineno})",
                    {"kernel": kernel_name, "line": stray.lineno},
                )
        args = launch.values()
        removed: list[Passed] = []
        for name in [*tuned, *LAUNCH_KEYS]:
            for place in launch.passed.get(name, ()):
                if place.item in launch.positional:
                    # only a trailing run of positional arguments can be dropped
                    idx = launch.positional.index(place.item)
                    if any(params[j] not in tuned for j in range(idx, len(launch.positional))):
                        return SweepRefusal(
                            f"the launch passes {name} positionally before other arguments",
                            {"kernel": kernel_name},
                        )
                removed.append(place)
                if place.spread is not None:
                    spread = next(sp for sp in launch.spreads if sp.holder is place.holder)
                    dropped.add((id(spread.scope), place.spread))
        spread_reads.extend(sp.keyword.value for sp in launch.spreads)
        grid_edit = _grid_rewrite(mod, kernel, launch, tuned, args, held=unread)
        if isinstance(grid_edit, SweepRefusal):
            return grid_edit
        target = sweep_grid(mod, launch.site)
        if target is not None and not isinstance(target, (ast.Lambda, ast.FunctionDef)):
            spread_reads.extend(node for node, _ in _spread_reads(launch, target, tuned))
        edits.extend(grid_edit)
        holders: dict[int, tuple[ast.AST, list[ast.AST]]] = {}
        for place in removed:
            holders.setdefault(id(place.holder), (place.holder, []))[1].append(place.item)
        for holder, items in holders.values():
            edits.extend(_removals(mod, holder, items))
    stray_use = _spread_reuse(launches, dropped, spread_reads)
    if stray_use is not None:
        return SweepRefusal(
            f"the launch dict {stray_use[0]} is used beyond the launch (line {stray_use[1]})",
            {"kernel": kernel_name, "dict": stray_use[0], "line": stray_use[1]},
        )
    hook = _descriptor_hook(mod, kernel, launches, tuned)
    if isinstance(hook, SweepRefusal):
        return hook
    table, heuristics = heuristic_entries(mod, kernel)
    if table is not None:  # a heuristic's constant would override every tuned value
        edits.extend(_removals(mod, table, [k for k in table.keys if isinstance(k, ast.Constant)
                                            and k.value in tuned and k.value in heuristics]))
    text = _decorator_text(mod, kernel, fitted, dec, hook, _restored(mod, kernel, launches))
    if dec is not None:
        start = line_start(mod.source, mod.start(dec))
        following = (
            kernel.decorator_list[kernel.decorator_list.index(dec) + 1]
            if kernel.decorator_list.index(dec) + 1 < len(kernel.decorator_list)
            else kernel
        )
        edits.append(ByteEdit(start, line_start(mod.source, mod.start(following)), text))
    else:
        at = line_start(mod.source, mod.stmt_span(kernel)[0])
        edits.append(ByteEdit(at, at, text))
    # two launches sharing one grid variable rewrite it once
    try:
        return _disjoint(list(dict.fromkeys(edits))), fitted
    except ValueError:
        return SweepRefusal("the rewrites of the launches overlap", {"kernel": kernel_name})


def _host_uses(mod: PyModule, name: str) -> list[ast.Name]:
    """The reads of `name` outside every jit function (the host code's), in `ast.walk` order."""
    kernels = {id(k) for k in mod.kernels()}
    return [
        n
        for n in ast.walk(mod.tree)
        if isinstance(n, ast.Name)
        and n.id == name
        and not any(id(f) in kernels for f in [mod.enclosing(n, ast.FunctionDef)] if f)
    ]


def unlaunched(ir: KernelIR) -> tuple[str, ...]:
    """One line per jit kernel of `ir` that no host code launches (`kernel_launches`, a host
    helper's launch included) and no jit function calls (a device function is not launched):
    no pass can read or tune its launch configuration, so it has no launch-parameter site.
    The line names where the host hands the kernel on, when it does, to something the launch
    analysis does not follow (an alias, a dict, a helper two levels down)."""
    mod = PyModule(ir)
    kernels = mod.kernels()
    called = {c.func.id for k in kernels for c in ast.walk(k)
              if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    out: list[str] = []
    for kernel in kernels:
        if kernel.name in called or kernel_launches(mod, kernel):
            continue
        line = f"kernel `{kernel.name}`: no launch of it found in the module's host code"
        uses = _host_uses(mod, kernel.name)
        if uses:
            line += (f" (line {min(n.lineno for n in uses)} hands it to something the launch "
                     "analysis does not follow)")
        out.append(line)
    return tuple(out)


def unchecked_caps(mod: PyModule, kernel: ast.FunctionDef, current: KernelConfig) -> dict[str, int]:
    """Each tile the kernel does not bounds-check (`unchecked_tiles`) -> the largest value its
    author runs it with: the current one, or a larger one an entry of the author's autotune
    list sets (the author's sizes are multiples of every one of those)."""
    unchecked = unchecked_tiles(kernel)
    caps = {p.name: p.value for p in current.params if p.value is not None and p.name in unchecked}
    for call in autotune_entries(mod, kernel):
        for key, val in zip(call.args[0].keys, call.args[0].values):
            name = key.value if isinstance(key, ast.Constant) else None
            if name in caps and literal_int(val):
                caps[name] = max(caps[name], literal_int(val))
    return caps


def grouped_caps(mod: PyModule, kernel: ast.FunctionDef, current: KernelConfig) -> dict[str, int]:
    """Each tile that must stay a divisor of a group -> the value it may only be a divisor of:
    G, where the kernel is run with a known G, else the tile's own value.
    - A tile that steps a loop whose counter, or a scalar index built from it, the kernel
      divides (`//`) or takes modulo (`%`) by another value G (`s_ptr + (k // GROUP) * N`:
      one row of a group-wise table per trip). A larger tile, or one G is not a multiple of,
      reads one row for a trip that spans several groups, masked or not. The tile is the
      loop's step (`range(0, K, BK)`, or what a `while` loop's counter is advanced by:
      `k += BK`) or a tile the index multiplies the counter by (`(i * BK) // G`); a division
      by the tile itself (`k // BK`) counts trips and is free, and an index that holds a
      `tl.arange` is divided element by element and is free too.
    - A tile that divides a known value (`GROUP // BK`, the K tiles of one group): the
      quotient is a whole count only where the tile divides G, and 0 where it is larger
      (`kb // (GROUP // BK)` then divides by zero)."""
    values = {p.name: p.value for p in current.params if p.value is not None}
    tiles = set(values)
    ranges = _range_derived(kernel)
    caps: dict[str, int] = {}

    def known(node: ast.AST) -> int | None:
        """The value of a literal, or of a name the kernel is run with a known value of."""
        value = literal_int(node)
        if value is None and isinstance(node, ast.Name):
            value = values.get(node.id) or param_values(mod, kernel, [node.id]).get(node.id)
        return value

    def cap(tile: str, group: int | None) -> None:
        value = group if group and group > 0 else values[tile]
        caps[tile] = math.gcd(caps.get(tile, value), value)

    for loop, counter, step in _loop_counters(kernel):
        trip = _trip_values(loop, counter)
        stepped = names_in(step) & tiles if step is not None else set()
        body = ast.Module(body=loop.body, type_ignores=[])
        made = {a.targets[0].id: _dividend_names(a.value) for a in ast.walk(body)
                if isinstance(a, ast.Assign) and len(a.targets) == 1
                and isinstance(a.targets[0], ast.Name)}
        for node in ast.walk(body):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod))):
                continue
            left = _dividend_names(node.left)
            if not left & trip or left & set(ranges) or any(
                    isinstance(c, ast.Call) and callee(c) in ARANGE for c in ast.walk(node.left)):
                continue
            built = set(left)  # the names the index is computed from, through the body's
            while grown := set().union(*(made.get(n, set()) for n in built & trip)) - built:
                built |= grown
            by = names_in(node.right)
            bounded = (stepped | (built & tiles)) - by
            if not bounded or by & stepped:
                continue
            group = known(node.right) if isinstance(node.right, (ast.Constant, ast.Name)) else None
            for tile in bounded:
                cap(tile, group)
    for node in ast.walk(kernel):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)
                and isinstance(node.right, ast.Name) and node.right.id in tiles
                and not names_in(node.left) & tiles and (group := known(node.left))):
            cap(node.right.id, group)
    return caps


def _loop_counters(kernel: ast.FunctionDef) -> list[tuple[ast.For | ast.While, str, ast.AST | None]]:
    """(loop, counter, step) of each loop of `kernel` that counts: a `for` over a range call
    (its target; the range's step, None where it has none) and a `while` loop whose test reads
    a name its body advances (`k += BK`, `k = k + BK`: that name; what it is advanced by)."""
    out: list[tuple[ast.For | ast.While, str, ast.AST | None]] = []
    for loop in ast.walk(kernel):
        if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) \
                and isinstance(loop.iter, ast.Call):
            step = loop.iter.args[2] if len(loop.iter.args) >= 3 else next(
                (k.value for k in loop.iter.keywords if k.arg == "step"), None)
            out.append((loop, loop.target.id, step))
        elif isinstance(loop, ast.While):
            tested = names_in(loop.test)
            for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                        and isinstance(node.target, ast.Name) and node.target.id in tested:
                    out.append((loop, node.target.id, node.value))
                elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                      and isinstance(node.targets[0], ast.Name) and node.targets[0].id in tested
                      and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add)):
                    sides = (node.value.left, node.value.right)
                    name = node.targets[0].id
                    other = [s for s in sides if not (isinstance(s, ast.Name) and s.id == name)]
                    if len(other) == 1:
                        out.append((loop, name, other[0]))
    return out


def _dividend_names(node: ast.AST) -> set[str]:
    """The names `node` is computed from, a divisor's left out: in `a // b`, `a % b` and
    `cdiv(a, b)` only `a`'s. An index is built from what it scales with: a count it is divided
    by (`tile % (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N))`, a persistent walk's row of tiles) is
    no tile it spans."""
    out: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.FloorDiv, ast.Mod)):
            todo.append(n.left)
        elif is_cdiv(n):
            todo += n.args[:1]
        elif isinstance(n, ast.Name):
            out.add(n.id)
        else:
            todo += list(ast.iter_child_nodes(n))
    return out


def joined_caps(*caps: Mapping[str, int]) -> dict[str, int]:
    """The caps of every mapping together: a tile in several may only be a divisor of each
    of its caps (their greatest common divisor)."""
    out: dict[str, int] = {}
    for one in caps:
        for name, cap in one.items():
            out[name] = math.gcd(out.get(name, cap), cap)
    return out


def _within_unchecked(fitted: list[dict[str, int]], caps: Mapping[str, int]) -> list[dict[str, int]]:
    """`fitted` with each tile of `caps` (`unchecked_caps`) kept at a divisor of its cap (a
    value that is not one goes back to the cap); duplicates this makes go, first kept."""
    out: list[dict[str, int]] = []
    for cfg in fitted:
        cfg = {k: (caps[k] if k in caps and (v > caps[k] or caps[k] % v) else v)
               for k, v in cfg.items()}
        if cfg not in out:
            out.append(cfg)
    return out


def _host_steps_whole(fitted: list[dict[str, int]], current: KernelConfig,
                      kept: set[str]) -> list[dict[str, int]]:
    """`fitted` with each loop step the host computes (`fit_configs`) left to the host unless
    every configuration sets it and it is not in `kept` (a step the kernel does not mask, or
    one the host reads beyond the launch); duplicates this makes go, first kept."""
    host = {p.name for p in current.params if p.value is None}
    drop = {n for n in host if n in kept or not all(n in cfg for cfg in fitted)}
    out: list[dict[str, int]] = []
    for cfg in fitted:
        cfg = {k: v for k, v in cfg.items() if k not in drop}
        if cfg not in out:
            out.append(cfg)
    return out


def _host_pinned(mod: PyModule, launches: Sequence[Launch],
                 current: KernelConfig) -> dict[str, SweepRefusal]:
    """Tiles a launch passes from a host value the host also reads beyond the launch (`assert K
    % tk == 0`, a descriptor's block shape, a buffer sized by it; see `_host_reuse`), with the
    reason: they keep their value, and a sweep tunes the other parameters around them."""
    out: dict[str, SweepRefusal] = {}
    kernel = next((k for k in mod.kernels() if k.name == current.kernel), None)
    rewritten = _grid_nodes(mod, kernel) if kernel is not None else frozenset()
    for launch in launches:
        target = sweep_grid(mod, launch.site)
        if target is None:
            continue
        args = launch.values()
        tiles = [p.name for p in current.params
                 if (p.value is not None or p.role == "loop") and p.name in args]
        blocks = _descriptor_block_reads(mod, launch)
        for name in tiles:  # the launch's other tile arguments may read the same host value
            reused = None if name in out else _host_reuse(mod, launch.site, target, [name], args,
                                                          tiles, blocks | rewritten)
            if reused is not None:
                out[name] = reused
        if kernel is not None and not isinstance(target, (ast.Tuple, ast.List, ast.Lambda,
                                                          ast.FunctionDef)):
            # a grid some call computes (`grid_of(M, N, 32, 32)`): the sweep cannot make its
            # count follow a tile that scales a program id, so such a tile keeps its value
            for name in sorted(set(tiles) & set(_tile_axes(kernel)) - set(out)):
                out[name] = SweepRefusal(
                    f"the launch grid {mod.text(target)} is not a tuple the sweep can make "
                    f"count {name}'s blocks: {name} keeps its value", {"tile": name})
        for sub in ast.walk(target) if kernel is not None else ():
            if literal_int(sub) is None or _dividend(target, sub) is None:
                continue
            if _literal_owners(mod, kernel, target, sub, args) is None:
                for name in tiles:
                    if literal_int(args[name]) == literal_int(sub) and name not in out:
                        out[name] = SweepRefusal(
                            f"the grid divides by {literal_int(sub)} (line {sub.lineno}) and "
                            f"which tile's block count that is cannot be told: {name} keeps "
                            f"its value", {"tile": name, "line": sub.lineno})
    return out


def _grid_unfollowed(mod: PyModule, kernel: ast.FunctionDef, launches: Sequence[Launch],
                     current: KernelConfig) -> dict[str, SweepRefusal]:
    """Tunable tiles whose block count a launch's host grid cannot be made to follow
    (`_grid_rewrite` refuses them: `cdiv(n, 256 * 4)` for BLOCK=256, a literal several tiles
    share), with the reason: at their written value the grid is right, so they keep it."""
    tunable = [p.name for p in current.params if p.value is not None]
    unread = _grid_unread(mod, launches, current)
    for launch in launches:
        made = _grid_rewrite(mod, kernel, launch, tunable, launch.values(), held=unread)
        if isinstance(made, SweepRefusal):
            named = made.detail.get("tiles", made.detail.get("tile", ""))
            names = [t for t in str(named).split(",") if t in tunable]
            return {t: made for t in names}
    return {}


def _grid_nodes(mod: PyModule, kernel: ast.FunctionDef) -> frozenset[int]:
    """The nodes of every launch grid of `kernel`: a sweep rewrites each of them, so a division
    in one launch's grid is no host use of a tile another launch passes."""
    grids = (launch_grid(mod, launch.site) for launch in kernel_launches(mod, kernel))
    return frozenset(id(n) for g in grids if g is not None for n in ast.walk(g))


def _host_descriptors(mod: PyModule, launch: Launch) -> list[tuple[str, ast.List | ast.Tuple]]:
    """(kernel parameter, block shape as written) of each tensor descriptor the launching
    function builds on the host (`TensorDescriptor.from_tensor(t, [BM, BK])`,
    `TensorDescriptor(t, shape, strides, [BM, BK])`, bound once to a name) and passes to the
    kernel."""
    host = mod.enclosing(launch.site, ast.FunctionDef)
    if host is None:
        return []
    made: dict[str, list[ast.AST]] = {}
    for node in ast.walk(host):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        value, block = node.value, None
        if isinstance(value, ast.IfExp) and isinstance(value.orelse, ast.Constant) \
                and value.orelse.value is None:  # built where the tensors fit, else None
            value = value.body
        if isinstance(value, ast.Call):
            name = callee(value)
            position = 1 if name.endswith("TensorDescriptor.from_tensor") else (
                3 if name.split(".")[-1] == "TensorDescriptor" else None)
            if position is not None:
                block = value.args[position] if len(value.args) > position else next(
                    (k.value for k in value.keywords if k.arg == "block_shape"), None)
        made.setdefault(node.targets[0].id, []).append(block)
    out = []
    for param, value in launch.values().items():
        blocks = made.get(value.id, []) if isinstance(value, ast.Name) else []
        if len(blocks) == 1 and isinstance(blocks[0], (ast.List, ast.Tuple)):
            out.append((param, blocks[0]))
    return out


def _descriptor_block_reads(mod: PyModule, launch: Launch) -> frozenset[int]:
    """The names read in the block shapes of the host descriptors a launch passes: a sweep sets
    those blocks per configuration (`_descriptor_hook`), so they are not a host reuse."""
    return frozenset(id(n) for _, block in _host_descriptors(mod, launch)
                     for n in ast.walk(block) if isinstance(n, ast.Name))


def _descriptor_hook(mod: PyModule, kernel: ast.FunctionDef, launches: Sequence[Launch],
                     tuned: Sequence[str]) -> list[str] | SweepRefusal:
    """The statements of an autotune `pre_hook` that give each host-built descriptor a launch
    passes the block shape of the configuration being run (`nargs["a_desc"].block_shape =
    [nargs["BM"], nargs["BK"]]`); empty where no descriptor block reads a tuned tile."""
    lines: list[str] = []
    for launch in launches:
        args = launch.values()
        host = {args[t].id: t for t in tuned if isinstance(args.get(t), ast.Name)}
        for param, block in _host_descriptors(mod, launch):
            if not any(isinstance(e, ast.Name) and e.id in host for e in block.elts):
                continue  # no tuned tile sizes it
            # a name the launch passes for a parameter it keeps (`HD=D`) is read from nargs too
            kept = {v.id: p for p, v in args.items() if isinstance(v, ast.Name) and p not in tuned}
            known = {**kept, **host}
            if not all((isinstance(e, ast.Name) and e.id in known) or literal_int(e) is not None
                       for e in block.elts):
                return SweepRefusal(
                    f"the block shape of the host descriptor passed as {param} cannot be "
                    f"written per configuration", {"kernel": kernel.name, "param": param})
            dims = [f'nargs["{known[e.id]}"]' if isinstance(e, ast.Name) and e.id in known
                    else mod.text(e) for e in block.elts]
            line = f'nargs["{param}"].block_shape = [{", ".join(dims)}]'
            if _maybe_none(mod, launch, param):
                line = f'if nargs["{param}"] is not None: {line}'
            if line not in lines:
                lines.append(line)
    return lines


def _maybe_none(mod: PyModule, launch: Launch, param: str) -> bool:
    """The host descriptor a launch passes as `param` is built as `TensorDescriptor(...) if
    fit else None` (`_host_descriptors`)."""
    value = launch.values().get(param)
    host = mod.enclosing(launch.site, ast.FunctionDef)
    return isinstance(value, ast.Name) and host is not None and any(
        isinstance(n, ast.Assign) and isinstance(n.value, ast.IfExp)
        and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)
        for n in ast.walk(host))


def _removals(mod: PyModule, holder: ast.AST, nodes: Sequence[ast.AST]) -> list[ByteEdit]:
    """Remove several items of one call's arguments (or of a dict literal's entries, named by
    their keys), with their separators: a dropped run after a kept item goes with the comma
    before it, a leading run with the comma after it, and all of them up to the bracket."""
    if isinstance(holder, ast.Dict):
        spans = [
            (mod.start(k), mod.end(v), id(k))
            for k, v in zip(holder.keys, holder.values)
            if k is not None
        ]
    else:
        items = mod.arguments(holder)  # type: ignore[arg-type]
        spans = [(mod.start(n), mod.end(n), id(n)) for n in items]
    drop = {id(n) for n in nodes}
    kept = [i for i, span in enumerate(spans) if span[2] not in drop]
    if not kept:
        return [ByteEdit(spans[0][0], mod.end(holder) - 1, "")] if spans else []
    edits: list[ByteEdit] = []
    i = 0
    while i < len(spans):
        if spans[i][2] not in drop:
            i += 1
            continue
        j = i
        while j + 1 < len(spans) and spans[j + 1][2] in drop:
            j += 1
        if i > 0:
            edits.append(ByteEdit(spans[i - 1][1], spans[j][1], ""))
        else:
            edits.append(ByteEdit(spans[0][0], spans[j + 1][0], ""))
        i = j + 1
    return edits


def _spread_reads(
    launch: Launch, grid: ast.AST, tuned: Sequence[str]
) -> list[tuple[ast.AST, str]]:
    """(`NAME["P"]`, P) in a host-computed grid, for each tuned P the launch spreads from the
    dict NAME: the grid rewrite reads them from the meta-parameters instead."""
    by_dict: dict[str, set[str]] = {}
    for name in tuned:
        for place in launch.passed.get(name, ()):
            if place.spread is not None:
                by_dict.setdefault(place.spread, set()).add(name)
    out: list[tuple[ast.AST, str]] = []
    for sub in ast.walk(grid):
        if (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.value, ast.Name)
            and isinstance(sub.slice, ast.Constant)
            and sub.slice.value in by_dict.get(sub.value.id, ())
        ):
            out.append((sub, str(sub.slice.value)))
    return out


def _spread_reuse(
    launches: Sequence[Launch],
    dropped: set[tuple[int, str]],
    allowed: Sequence[ast.AST],
) -> tuple[str, int] | None:
    """(name, line) of a launch dict losing keys to the autotuner that the module reads
    anywhere but in the kernel's launches (`**NAME`) and the grid reads the rewrite replaces:
    another launch, a buffer sized by it, a copy would no longer see the keys."""
    ok = {id(n) for node in allowed for n in ast.walk(node)}
    seen: set[tuple[int, str]] = set()
    for launch in launches:
        for spread in launch.spreads:
            key = (id(spread.scope), str(spread.name))
            if spread.scope is None or key not in dropped or key in seen:
                continue
            seen.add(key)
            for n in ast.walk(spread.scope):
                if (
                    isinstance(n, ast.Name)
                    and n.id == spread.name
                    and isinstance(n.ctx, ast.Load)
                    and id(n) not in ok
                ):
                    return spread.name, n.lineno
    return None


def _partial_reuse(mod: PyModule, launch: Launch) -> ast.AST | None:
    """A read of the name a launch partial is bound to that does not call it."""
    assert launch.partial is not None and launch.bound is not None
    scope = _binding_scope(mod, launch.partial, launch.bound)
    for n in ast.walk(scope or mod.tree):
        if isinstance(n, ast.Name) and n.id == launch.bound and isinstance(n.ctx, ast.Load):
            parent = mod.parents.get(n)
            if not (isinstance(parent, ast.Call) and parent.func is n):
                return n
    return None


def _disjoint(edits: list[ByteEdit]) -> list[ByteEdit]:
    """Merge overlapping deletions (adjacent removed arguments share a separator)."""
    edits = sorted(edits, key=lambda e: (e.start, e.end))
    out: list[ByteEdit] = []
    for e in edits:
        if out and e.start < out[-1].end:
            last = out.pop()
            if last.text and e.text:
                raise ValueError("overlapping edits")
            out.append(ByteEdit(last.start, max(last.end, e.end), last.text or e.text))
        else:
            out.append(e)
    return out


def _decorator_text(
    mod: PyModule, kernel: ast.FunctionDef, fitted: Sequence[Mapping[str, int]],
    dec: ast.expr | None = None, hook: Sequence[str] = (), restore: Sequence[str] = (),
) -> str:
    """The `@triton.autotune` over `fitted`. Where the kernel had one (`dec`), what its author
    wrote beside the configurations stays: its keywords other than `configs` (the cache key,
    config pruning, restore / reset lists) and every keyword all its configs share other than
    the launch keys (a `pre_hook` that sizes host-built descriptors for the config's tiles).
    Where the author's configs have no `pre_hook` and `hook` has statements, a function of
    them is written before the decorator and every config runs it first."""
    indent = indent_of(mod.source, mod.start(kernel))
    own, shared = _decorator_keywords(mod, dec)
    before = ""
    if hook and "pre_hook" not in shared:
        name = f"_{kernel.name.strip('_')}_descriptor_blocks"
        shared = {**shared, "pre_hook": name}
        body = "".join(f"{indent}    {line}\n" for line in hook)
        before = (f"{indent}def {name}(nargs):\n{indent}    \"\"\"The host-built tensor descriptors "
                  f"take the configuration's tiles as their blocks.\"\"\"\n{body}\n\n")
    per_config = "".join(f", {k}={v}" for k, v in shared.items())
    # meta-parameters the author's first configuration sets that the sweep does not tune (a
    # split count with no tile role) keep that configuration's value
    authored = autotune_entries(mod, kernel)
    untuned = [(mod.text(k), mod.text(v)) for k, v in zip(authored[0].args[0].keys,
                                                          authored[0].args[0].values)
               if isinstance(k, ast.Constant) and k.value not in fitted[0]] if authored else []
    lines = []
    for cfg in fitted:
        meta = ", ".join([f'"{k}": {v}' for k, v in cfg.items() if k not in LAUNCH_KEYS]
                         + [f"{k}: {v}" for k, v in untuned])
        lines.append(
            f"{indent}        triton.Config({{{meta}}}, num_warps={cfg['num_warps']}, "
            f"num_stages={cfg['num_stages']}{per_config}),"
        )
    extra = "".join(f",\n{indent}    {k}={v}" for k, v in own.items() if k != "key")
    if restore and "restore_value" not in own:
        extra += f",\n{indent}    restore_value={restore!r}"
    keys = own.get("key") or repr(_dimension_keys(kernel))
    return before + (
        f"{indent}@triton.autotune(\n{indent}    configs=[\n" + "\n".join(lines) + "\n"
        f"{indent}    ],\n{indent}    key={keys}{extra},\n{indent})\n"
    )


def _decorator_keywords(mod: PyModule, dec: ast.expr | None) -> tuple[dict[str, str], dict[str, str]]:
    """(the autotune decorator's keywords but `configs`, the keywords every one of its literal
    `triton.Config` calls passes with the same text, launch keys and the config dict aside), as
    source text; empty where there is no decorator call."""
    if not isinstance(dec, ast.Call):
        return {}, {}
    own = {k.arg: mod.text(k.value) for k in dec.keywords if k.arg and k.arg != "configs"}
    configs = next((k.value for k in dec.keywords if k.arg == "configs"),
                   dec.args[0] if dec.args else None)
    calls = [c for c in ast.walk(configs) if isinstance(c, ast.Call)
             and callee(c).split(".")[-1] == "Config"] if configs is not None else []
    texts = [{k.arg: mod.text(k.value) for k in c.keywords
              if k.arg and k.arg not in LAUNCH_KEYS and k.arg not in ("kwargs", "num_ctas", "maxnreg")}
             for c in calls]
    shared = {k: v for k, v in texts[0].items() if all(t.get(k) == v for t in texts)} if texts else {}
    return own, shared


def launch_grid(mod: PyModule, call: ast.Call | ast.Subscript) -> ast.AST | None:
    """The grid of a launch `kernel[grid](...)` (or of its `kernel[grid]`): its expression, or
    what the name it passes is bound to (once in the launching function, or a module-level
    def); None when that name is not bound once."""
    site = call.func if isinstance(call, ast.Call) else call
    grid = site.slice  # type: ignore[attr-defined]
    host_fn = mod.enclosing(site, ast.FunctionDef)
    if not isinstance(grid, ast.Name) or host_fn is None:
        return grid
    bound = [
        n
        for n in ast.walk(host_fn)
        if (isinstance(n, ast.FunctionDef) and n.name == grid.id)
        or (
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == grid.id for t in n.targets)
        )
    ]
    if len(bound) != 1:
        bound = [n for n in mod.tree.body if isinstance(n, ast.FunctionDef) and n.name == grid.id]
    if len(bound) != 1:
        return None
    return bound[0] if isinstance(bound[0], ast.FunctionDef) else bound[0].value


def sweep_grid(mod: PyModule, call: ast.Call | ast.Subscript) -> ast.AST | None:
    """`launch_grid`, where a grid that `functools.partial` makes of a def by binding all its
    parameters but the last (`functools.partial(grid_of, n)` of `def grid_of(n, meta)`) is
    that def: a grid of the meta-parameters like a `def grid(meta)`."""
    target = launch_grid(mod, call)
    if not (isinstance(target, ast.Call) and callee(target) in _partial_callees(mod)
            and target.args and isinstance(target.args[0], ast.Name) and not target.keywords
            and not any(isinstance(a, ast.Starred) for a in target.args)):
        return target
    name = target.args[0].id
    scope = mod.enclosing(call, ast.FunctionDef)
    defs = [n for n in ast.walk(scope) if isinstance(n, ast.FunctionDef) and n.name == name] \
        if scope is not None else []
    defs = defs or [n for n in mod.tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(defs) != 1:
        return target
    fn = defs[0]
    positional = [*fn.args.posonlyargs, *fn.args.args]
    if fn.args.vararg or fn.args.kwonlyargs or len(positional) != len(target.args):
        return target  # the def takes something besides the bound values and the meta
    return fn


def _meta_grid_reads(mod: PyModule, target: ast.Lambda | ast.FunctionDef,
                     shaping: Sequence[str], args: Mapping[str, ast.AST]
                     ) -> tuple[list[ByteEdit], list[str]]:
    """How a grid of the meta-parameters (`lambda meta: ...`, a def) reads the tiles of
    `shaping`: the edits that make it read `meta["P"]` where it reads the host value the
    launch passes for P (a variable: `lambda meta: (triton.cdiv(M, BLOCK_M), ...)`, or an
    entry of a dict: `cfg["BLOCK"]`), and the tiles it does not read at all (neither as a key
    of its meta argument nor through that host value). A key of another dict (`lambda meta:
    (triton.cdiv(n, CFG["BLOCK"]),)`) is no read of the meta-parameters: that count stays at
    the host's value whatever the autotuner picks."""
    positional = [*target.args.posonlyargs, *target.args.args]
    meta = positional[-1].arg if positional else None  # the launcher passes it last
    strings = {name for name, read in _meta_reads(target, shaping)
               if isinstance(owner := read.value if isinstance(read, ast.Subscript)
                             else read.func.value, ast.Name) and owner.id == meta}
    missing = [t for t in shaping if t not in strings]
    edits: list[ByteEdit] = []
    if isinstance(target, ast.Lambda) and meta is not None:
        for t in list(missing):
            host = args.get(t)
            entry = isinstance(host, ast.Subscript) and _dict_entry(mod, target, host) is not None
            reads = [n for n in ast.walk(target.body)
                     if isinstance(host, ast.Name) and isinstance(n, ast.Name) and n.id == host.id
                     or entry and isinstance(n, ast.Subscript) and ast.dump(n) == ast.dump(host)]
            if reads:
                edits += [ByteEdit(*mod.span(n), f'{meta}["{t}"]') for n in reads]
                missing.remove(t)
    return edits, missing


def _meta_floors_rounded(mod: PyModule, target: ast.Lambda | ast.FunctionDef,
                         shaping: Sequence[str], shrinking: Collection[str]) -> list[ByteEdit]:
    """The edits that round up a grid of the meta-parameters' floor counts of tuned tiles'
    blocks (`lambda meta: (n // meta["BLOCK"],)` -> `((n + meta["BLOCK"] - 1) //
    meta["BLOCK"],)`): the author's sizes are whole blocks of the written tile, not of a larger
    one, whose last partial block the floor would leave unwritten. A tile that only shrinks to
    a divisor of its value (`unchecked_tiles`) keeps the floor; a count already rounded up
    (`cdiv`, `(n + meta["BLOCK"] - 1) // ...`, `n // meta["BLOCK"] + (n % meta["BLOCK"] > 0)`)
    is not a floor (`_count_copies`)."""
    edits: list[ByteEdit] = []
    for node in ast.walk(target):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)):
            continue
        read = node.right
        key = (read.slice if isinstance(read, ast.Subscript) else
               read.args[0] if isinstance(read, ast.Call) and isinstance(read.func, ast.Attribute)
               and read.func.attr == "get" and read.args else None)
        tile = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if tile in shaping and tile not in shrinking and _count_copies(target, read) == "floor":
            edits += [ByteEdit(mod.start(node.left), mod.start(node.left), "("),
                      ByteEdit(mod.end(node.left), mod.end(node.left), f" + {mod.text(read)} - 1)")]
    return edits


def _grid_unread(mod: PyModule, launches: Sequence[Launch],
                 current: KernelConfig) -> dict[str, SweepRefusal]:
    """Tunable tiles of a role that shapes the grid (`grid`, `m`, `n`) that a launch's grid of
    the meta-parameters does not read (`_meta_grid_reads`), with the reason: the program count
    the kernel runs with does not follow them (the role is wrong, or the grid is right at
    their value alone), so they keep their value and a sweep tunes the rest around them."""
    shaping = [p.name for p in current.params
               if p.value is not None and p.role in ("grid", "m", "n")]
    out: dict[str, SweepRefusal] = {}
    for launch in launches:
        target = sweep_grid(mod, launch.site)
        if not isinstance(target, (ast.Lambda, ast.FunctionDef)):
            continue
        for name in _meta_grid_reads(mod, target, shaping, launch.values())[1]:
            out.setdefault(name, SweepRefusal(
                "the launch grid does not read the tiles that shape it", {"tiles": name}))
        for name, read in _meta_reads(target, shaping):
            if name not in out and _counts_no_blocks(target, read, read):
                out[name] = SweepRefusal(
                    f"the launch grid's count over {mod.text(read)} (line {read.lineno}) is "
                    f"no count of {name}'s blocks: {name} keeps its value", {"tiles": name})
    return out


def _meta_reads(target: ast.AST, names: Collection[str]) -> list[tuple[str, ast.AST]]:
    """(P, read) of each read `meta["P"]` or `meta.get("P", ...)` of one of `names` in a grid
    of the meta-parameters."""
    out: list[tuple[str, ast.AST]] = []
    for read in ast.walk(target):
        key = (read.slice if isinstance(read, ast.Subscript) else
               read.args[0] if isinstance(read, ast.Call) and isinstance(read.func, ast.Attribute)
               and read.func.attr == "get" and read.args else None)
        if isinstance(key, ast.Constant) and key.value in names:
            out.append((str(key.value), read))
    return out


def _held(fitted: list[dict[str, int]], values: Mapping[str, int],
          listed: Mapping[str, Collection[int]] | None = None) -> list[dict[str, int]]:
    """`fitted` with each tile of `values` at its value, unless the configuration gives it one
    of its `listed` values; duplicates this makes go, first kept."""
    out: list[dict[str, int]] = []
    for cfg in fitted:
        cfg = {k: v if k not in values or v in (listed or {}).get(k, ()) else values[k]
               for k, v in cfg.items()}
        if cfg not in out:
            out.append(cfg)
    return out


def _listed_values(entries: Sequence[ast.Call], names: Collection[str]) -> dict[str, set[int]]:
    """The int literals each of `names` takes in a literal autotune list's entries (their
    first argument, a dict of meta-parameters)."""
    out: dict[str, set[int]] = {}
    for entry in entries:
        meta = entry.args[0] if entry.args else None
        if not isinstance(meta, ast.Dict):
            continue
        for key, value in zip(meta.keys, meta.values):
            name = key.value if isinstance(key, ast.Constant) else None
            number = literal_int(value)
            if name in names and number is not None:
                out.setdefault(name, set()).add(number)
    return out


def _grid_rewrite(
    mod: PyModule,
    kernel: ast.FunctionDef,
    launch: Launch,
    tuned: Sequence[str],
    args: Mapping[str, ast.AST],
    held: Collection[str] = (),
) -> list[ByteEdit] | SweepRefusal:
    """Make the launch grid read the tuned tiles from the autotuner's meta-parameters.

    A grid that is already a function of the meta-parameters (`lambda meta: ...`, a def) is
    kept when it reads every tuned tile that maps programs to output blocks (a tile it does not
    read must not change the program count: `grid`-role and `m`/`n` tiles are refused then,
    except those `held`, `_grid_unread`: at one value, or at the values the kernel's own
    checked list gives them, `_held`). A
    grid expression computed on the host (`(triton.cdiv(M, BM), N // 64)`) becomes a lambda:
    each host value of a tuned tile in it (the literal or the variable the launch passes) is
    replaced by `meta["P"]`, and so is a read `NAME["P"]` of the dict the launch spreads P
    from. A host variable of a tuned tile that is used elsewhere in the host function (to size
    a buffer, say) is refused: the tile cannot change under it."""
    roles = tile_roles(kernel, jit_functions(mod))
    shaping = [t for t in tuned if roles.get(t) in ("grid", "m", "n") and t not in held]
    grid = launch.site.slice
    target = sweep_grid(mod, launch.site)
    if target is None:
        return SweepRefusal(
            "the launch grid is not bound once where the kernel is launched",
            {"grid": dotted(grid)},
        )
    reused = _host_reuse(mod, launch.site, target, tuned, args,
                         extra=_descriptor_block_reads(mod, launch) | _grid_nodes(mod, kernel))
    if reused is not None:
        return reused
    if isinstance(target, (ast.Lambda, ast.FunctionDef)):
        edits, missing = _meta_grid_reads(mod, target, shaping, args)
        if missing:
            return SweepRefusal(
                "the launch grid does not read the tiles that shape it",
                {"tiles": ",".join(missing)},
            )
        return edits + _meta_floors_rounded(mod, target, shaping, unchecked_tiles(kernel))
    # a host expression: replace the tuned tiles' host values by meta lookups
    replace: list[tuple[ast.AST, str]] = _spread_reads(launch, target, tuned)
    for name in shaping:
        node = args.get(name)
        if node is None:
            continue
        for sub in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(sub, ast.Name) and sub.id == node.id:
                replace.append((sub, name))
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(sub, ast.Attribute)
                and dotted(sub)
                and dotted(sub) == dotted(node)
            ):
                replace.append((sub, name))
            elif (
                _dict_entry(mod, launch.site, node) is not None
                and isinstance(sub, ast.Subscript)
                and ast.dump(sub) == ast.dump(node)
            ):
                replace.append((sub, name))
            elif (
                literal_int(node) is not None
                and literal_int(sub) == literal_int(node)
                and _dividend(target, sub) is not None
            ):
                # a literal is the tile's copy only where data flow ties it to the tile: the
                # size it divides or the program axis it counts (`_literal_owners`)
                owners = _literal_owners(mod, kernel, target, sub, args)
                if owners == {name}:
                    replace.append((sub, name))
                elif owners is None:
                    return SweepRefusal(
                        f"the grid divides by {literal_int(sub)} (line {sub.lineno}), and which "
                        f"tile's block count that is cannot be told: {name} cannot be tuned",
                        {"tile": name, "line": sub.lineno},
                    )
    unpassed = _unpassed_grid_divisors(mod, kernel, launch, target, shaping, args)
    if isinstance(unpassed, SweepRefusal):
        return unpassed
    replace += unpassed
    names_at: dict[int, set[str]] = {}
    nodes: dict[int, ast.AST] = {}
    for sub, name in replace:
        names_at.setdefault(id(sub), set()).add(name)
        nodes[id(sub)] = sub
    pairs = _tile_dims(kernel)
    replace = []
    for key, names in names_at.items():
        if len(names) > 1:  # one literal for several tiles: the size it divides tells which
            dividend = _dividend(target, nodes[key])
            host = host_form(mod, dividend) if dividend is not None else None
            by_size = {
                n
                for n in names
                if host is not None
                and any(d in args and host_form(mod, args[d]) == host for d in pairs.get(n, ()))
            }
            if len(by_size) != 1:  # else by the grid axis whose program id the tile scales
                axis = _grid_axis(target, nodes[key])
                axes = _tile_axes(kernel)
                by_size = {n for n in names if axis is not None and axis in axes.get(n, ())}
            names = by_size
            if len(names) != 1:
                return SweepRefusal(
                    "the host-computed grid uses one literal for several tiles",
                    {"tiles": ",".join(shaping)},
                )
        replace.append((nodes[key], next(iter(names))))
    found = {name for _, name in replace}
    if set(shaping) - found and shaping:
        absent = sorted(set(shaping) - found)
        # a tile passed but absent from the grid does not shape the program count
        if (
            any(roles.get(t) == "grid" for t in absent)
            or not found
            and any(isinstance(args.get(t), (ast.Name, ast.Attribute)) for t in absent)
        ):
            return SweepRefusal(
                "cannot find the tuned tiles in the host-computed grid", {"tiles": ",".join(absent)}
            )
    # every program axis a tuned tile scales, where the grid counts blocks on it, must count
    # that tile's: an axis left at the written count would launch too many programs (all
    # masked) or too few (rows never written) once the tile changes. A grid that is no tuple
    # (a helper's result) may count them anywhere.
    axes = _tile_axes(kernel)
    for name in sorted(set(shaping)):
        for axis in sorted(axes.get(name, ())):
            tupled = isinstance(target, (ast.Tuple, ast.List))
            element = target.elts[axis] if tupled and axis < len(target.elts) else None
            if tupled and element is None:
                continue
            counts = element if element is not None else target
            if element is not None and _constant_count(element) == 1:
                continue  # one program along the axis whatever the tile (`cdiv(1, 64)`)
            if ((any(_division(n) is not None for n in ast.walk(counts))
                 or _host_division(mod, launch.site, counts) is not None
                 or not tupled and any(isinstance(n, ast.Call) for n in ast.walk(counts)))
                    and not any(n is sub for sub, t in replace if t == name
                                for n in ast.walk(counts))):
                where = f"axis {axis}" if tupled else "count"
                return SweepRefusal(
                    f"the grid's {where} counts blocks of something other than {name}, "
                    f"whose program id it scales (line {counts.lineno})",
                    {"tile": name, "axis": axis, "line": counts.lineno},
                )
    if not replace:  # the grid reads none of the tuned tiles: it stays as written
        return []
    base = mod.start(target)
    shrinking = unchecked_tiles(kernel)
    pieces: list[tuple[int, int, str]] = []
    for n, name in replace:
        pieces.append((mod.start(n) - base, mod.end(n) - base, f'meta["{name}"]'))
        # the count around the tile's copy follows it: a name's floor `n // B` too
        follows = _count_follows(mod, target, n, name, name in shrinking)
        if isinstance(follows, SweepRefusal):
            return follows
        pieces += [(a - base, b - base, t) for a, b, t in follows]
    text = mod.text(target)
    pieces.sort(reverse=True)
    raw = text.encode()
    for a, b, new in pieces:
        raw = raw[:a] + new.encode() + raw[b:]
    new_text = "lambda meta: " + raw.decode()
    if isinstance(grid, ast.Name):
        return [ByteEdit(mod.start(target), mod.end(target), new_text)]
    return [ByteEdit(mod.start(grid), mod.end(grid), new_text)]


def _constant_count(node: ast.AST) -> int | None:
    """The value of a grid element written with integer literals alone (`cdiv(1, 64)`,
    `(1 + 63) // 64`: `_py.int_value` with no names known); None where it reads a name or
    anything else."""
    if is_cdiv(node, 2):
        a, b = int_value(node.args[0], {}), int_value(node.args[1], {})
        return -(-a // b) if a is not None and b else None
    return int_value(node, {})


def _literal_owners(
    mod: PyModule, kernel: ast.FunctionDef, grid: ast.AST, node: ast.AST,
    args: Mapping[str, ast.AST],
) -> set[str] | None:
    """The tile constexprs a literal divisor `node` of a host-computed `grid` is the copy of,
    told by data flow, never by equal values: the launch passes the tile the same literal, and
    the literal divides the host value of a size the tile tiles in the kernel (`_tile_dims`:
    `cdiv(H, 64)` where the launch passes H as the N that `offs_n < N` compares) or sits in the
    grid axis whose program id the tile scales (`_tile_axes`), with neither fact against it.
    Empty: the literal counts blocks of no tile passed that value (a chunk count of another
    size). None: it cannot be told (a tile with that value and no fact either way, or several
    tiles that fit equally), so no tile of that value may be tuned by rewriting it."""
    value = literal_int(node)
    candidates = [t for t, a in args.items() if value is not None and literal_int(a) == value
                  and t in constexpr_params(kernel)]
    dividend = _dividend(grid, node)
    host = mod.text(dividend) if dividend is not None else None
    axis = _grid_axis(grid, node)
    dims, axes = _tile_dims(kernel), _tile_axes(kernel)
    tied: set[str] = set()
    counted: set[str] = set()  # tied ones that scale the program id of the literal's axis
    unknown = False
    for t in candidates:
        sizes = {host_form(mod, args[d]) for d in dims.get(t, ()) if d in args}
        by_size = _tiles_size(mod, dividend, sizes) if sizes and dividend is not None else None
        by_axis = (axis in axes[t]) if t in axes and axis is not None else None
        if by_size is None and by_axis is None:
            unknown = True
        elif by_size is not False and by_axis is not False:
            tied.add(t)
            if by_axis:
                counted.add(t)
    # Several tiles may tile the size the literal divides (an attention kernel's query and
    # key tiles both tile the sequence); the one that scales the axis's program id is the
    # block that axis counts, where no other tied tile scales a program id at all.
    if len(counted) == 1 and not any(t in axes for t in tied - counted):
        tied = counted
    if len(tied) > 1 or (unknown and not tied):
        return None
    return tied


def _tiles_size(mod: PyModule, dividend: ast.AST | None, sizes: set[str]) -> bool:
    """Whether a grid's `dividend` is the host value of a size a tile tiles (`sizes`: the host
    values the launch passes for the kernel's size parameters, each in its `host_form`): one
    of them, or a product of them (`cdiv(oh * ow, 64)` where the kernel compares the tile's
    offsets with `OH * OW`). `cdiv(x.shape[0], 32)` beside a launch that passes `M` from
    `M, N = x.shape` divides M."""
    if dividend is None:
        return False
    if host_form(mod, dividend) in sizes:
        return True
    if not (isinstance(dividend, ast.BinOp) and isinstance(dividend.op, ast.Mult)):
        return False
    terms: list[ast.AST] = []
    todo: list[ast.AST] = [dividend]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            todo += [node.left, node.right]
        else:
            terms.append(node)
    return all(host_form(mod, t) in sizes for t in terms)


def _unpassed_grid_divisors(
    mod: PyModule,
    kernel: ast.FunctionDef,
    launch: Launch,
    grid: ast.AST,
    shaping: Sequence[str],
    args: Mapping[str, ast.AST],
) -> list[tuple[ast.AST, str]] | SweepRefusal:
    """The host copies, in a host-computed grid, of shaping tiles the launch does not pass (a
    signature default): a divisor of the grid (`cdiv(M, TM)`, `N // 32`) whose host value is
    the tile's default. Several tiles sharing one value are told apart by the caller. Refused
    when a tile has no such copy but the grid divides its size or its program axis by
    something else: that part of the program count would not follow the tile."""
    defaults = dict(zip([a.arg for a in kernel.args.args][-len(kernel.args.defaults):],
                        kernel.args.defaults)) if kernel.args.defaults else {}
    divisors = [found[1] for n in ast.walk(grid) if (found := _division(n)) is not None]
    dims = _tile_dims(kernel)
    axes = _tile_axes(kernel)
    out: list[tuple[ast.AST, str]] = []
    for name in shaping:
        value = literal_int(defaults.get(name)) if name not in args else None
        if value is None:
            continue
        sizes = {host_form(mod, args[d]) for d in dims.get(name, ()) if d in args}
        # the divisors of this tile's size or of the grid axis its program id comes from
        shaped = [d for d in divisors
                  if _tiles_size(mod, _dividend(grid, d), sizes)
                  or _grid_axis(grid, d) in axes.get(name, ())]
        found = [d for d in (shaped if shaped else divisors)
                 if _host_literal(mod, launch.site, d) == value]
        allowed = {id(n) for n in ast.walk(grid)}
        stray = _divides_elsewhere(mod, launch.site, allowed, value) if found else None
        reads = [n for d in found for base in [d.value if isinstance(d, ast.Attribute) else d]
                 if isinstance(base, ast.Name) for n in ast.walk(mod.tree)
                 if isinstance(n, ast.Name) and n.id == base.id and isinstance(n.ctx, ast.Load)
                 and id(n) not in allowed and mod.kernel_of(n) is None]
        if stray is not None or reads:
            line = (stray or reads[0]).lineno
            return SweepRefusal(f"the host also uses the grid's copy of {name} (line {line}): "
                                f"{name} cannot be tuned", {"tile": name, "line": line})
        out += [(d, name) for d in found]
        if shaped and not found:
            return SweepRefusal(
                f"the launch grid divides by {mod.text(shaped[0])}, not by {name}'s default "
                f"{value}: the program count would not follow {name}",
                {"tile": name, "line": shaped[0].lineno},
            )
        hidden = None if found or divisors else _host_division(mod, launch.site, grid)
        if hidden is not None:
            return SweepRefusal(
                f"the launch grid's program count comes from a division on the host (line "
                f"{hidden.lineno}) the sweep cannot follow to {name}",
                {"tile": name, "line": hidden.lineno},
            )
    return out


def constexpr_globals_lifted(ir: KernelIR) -> KernelIR | None:
    """`ir` with each module-level constexpr a jit kernel reads (`BLOCK = tl.constexpr(32)`,
    `BLOCK: tl.constexpr = 32`) also declared as that kernel's constexpr parameter with the
    same value as its default (`..., BLOCK: tl.constexpr = 32)`): the same program, whose
    tiles now have roles and can be tuned (the host's reads of the global stay its copy of the
    default). A kernel with `*args`, keyword-only parameters or one binding the name itself is
    left as it is; None when no kernel reads such a global."""
    mod = PyModule(ir)
    consts: dict[str, tuple[int, str]] = {}
    for st in mod.tree.body:
        target, value, note = None, None, None
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            target, value = st.targets[0].id, st.value
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            target, value, note = st.target.id, st.value, st.annotation
        if target is None or value is None:
            continue
        number = _constexpr_literal(value)
        wrapped = isinstance(value, ast.Call) and number is not None
        annotated = note is not None and dotted(note).split(".")[-1] == "constexpr"
        if number is not None and (wrapped or annotated):
            prefix = dotted(value.func if wrapped else note)
            consts[target] = (number, prefix)
    consts = {k: v for k, v in consts.items() if len(_bindings(mod.tree.body, k)) == 1}
    edits: list[ByteEdit] = []
    for kernel in mod.kernels():
        args = kernel.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or not args.args:
            continue
        bound = {a.arg for a in args.args} | {n.id for n in ast.walk(kernel)
                                              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        used = sorted({n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)
                       and n.id in consts and n.id not in bound})
        if not used:
            continue
        last = args.args[-1]
        end = max([mod.end(last)] + [mod.end(d) for d in args.defaults])
        text = "".join(f", {n}: {consts[n][1]} = {consts[n][0]}" for n in used)
        edits.append(ByteEdit(end, end, text))
    if not edits:
        return None
    from kir import Edit, Span  # noqa: PLC0415
    from kir.errors import KLineageError  # noqa: PLC0415

    try:
        return ir.apply(Edit(Span(e.start, e.end), e.text) for e in edits)
    except KLineageError:
        return None


def _grid_counts_inlined(ir: KernelIR, kernel_name: str) -> KernelIR | None:
    """`ir` with each host variable a launch grid of `kernel_name` reads that holds a program
    count (`n_tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)` before `kernel[(n_tiles,)]`)
    written into the grid in its place, and its assignment removed: the same program, whose
    grid a sweep can then rewrite to read the tuned tiles. Only a variable bound once, by a
    plain assignment in the launching function, to a value with a division, and read nowhere
    else; None when no grid reads one."""
    mod = PyModule(ir)
    kernel = next((k for k in mod.kernels() if k.name == kernel_name), None)
    if kernel is None:
        return None
    edits: dict[tuple[int, int], str] = {}
    constexprs = set(constexpr_params(kernel))
    for launch in kernel_launches(mod, kernel):
        grid = launch_grid(mod, launch.site)
        scope = mod.enclosing(launch.site, ast.FunctionDef)
        if grid is None or scope is None or isinstance(grid, (ast.Lambda, ast.FunctionDef)):
            continue
        inside = {id(n) for n in ast.walk(grid)}
        for name in sorted(names_in(grid)):
            stmts = [st for st in ast.walk(scope) if isinstance(st, (ast.Assign, ast.AugAssign,
                                                                       ast.AnnAssign, ast.For))
                     and name in {t.id for t in ast.walk(st.target if not isinstance(st, ast.Assign)
                                                        else ast.Tuple(st.targets))
                                  if isinstance(t, ast.Name)}]
            if len(stmts) != 1 or not isinstance(stmts[0], ast.Assign) \
                    or len(stmts[0].targets) != 1 or not isinstance(stmts[0].targets[0], ast.Name) \
                    or name in _parameters(scope):
                continue
            value = stmts[0].value
            # a count of blocks: divided by a literal or constant, or by what a tile is given
            passed = {mod.text(v) for k, v in launch.values().items() if k in constexprs}
            divisors = [found[1] for n in ast.walk(value) if (found := _division(n)) is not None]
            if not any(_host_literal(mod, launch.site, d) is not None or mod.text(d) in passed
                       and not isinstance(d, ast.Call) for d in divisors):
                continue
            reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name
                     and isinstance(n.ctx, ast.Load)]
            if any(id(n) not in inside for n in reads):
                continue
            for n in reads:
                edits[mod.span(n)] = f"({mod.text(value)})"
            edits[mod.stmt_span(stmts[0])] = ""
    if not edits:
        return None
    from kir import Edit, Span  # noqa: PLC0415
    from kir.errors import KLineageError  # noqa: PLC0415

    try:
        return ir.apply(Edit(Span(a, b), t) for (a, b), t in edits.items())
    except KLineageError:
        return None


def _grid_counts_canonical(ir: KernelIR, kernel_name: str) -> KernelIR | None:
    """`ir` with each element of a host grid of `kernel_name` that counts the blocks of a tile
    the launch passes over one size, however written (`-(n // -256)`, `len(range(0, n,
    256))`, `q + (r > 0)` after `q, r = divmod(n, 256)`: `host_counts.counts_blocks`, told by
    evaluating it), written in one form: `triton.cdiv(n, 256)` rounded up, `n // 256` down;
    a host binding only that element read is removed, and a tile argument the launch computes
    from literals alone (`BLOCK=2 * 128`) is written as its value. The same program, whose
    counts the sweep then rewrites to read the tuned tiles. An element already in that form,
    one that counts no passed tile's blocks, or one of several sizes is left as it is; None
    when nothing changes."""
    mod = PyModule(ir)
    kernel = next((k for k in mod.kernels() if k.name == kernel_name), None)
    if kernel is None:
        return None
    constexprs = set(constexpr_params(kernel))
    tiles = set(tile_roles(kernel, jit_functions(mod)))
    cdiv = "triton.cdiv" if any(isinstance(n, ast.Import) and any(
        a.name == "triton" and a.asname is None for a in n.names) for n in mod.tree.body) else None
    edits: dict[tuple[int, int], str] = {}
    followed: list[tuple[ast.FunctionDef, ast.Assign]] = []
    rewritten: list[ast.AST] = []
    for launch in kernel_launches(mod, kernel):
        grid = launch_grid(mod, launch.site)
        scope = mod.enclosing(launch.site, ast.FunctionDef)
        if not isinstance(grid, (ast.Tuple, ast.List)) or scope is None:
            continue
        args = launch.values()
        values = {n: _host_literal(mod, launch.site, v) for n, v in args.items() if n in tiles}
        for name, value in values.items():  # `BLOCK=2 * 128` -> `BLOCK=256`
            node = args[name]
            if value is not None and literal_int(node) is None and constant(node) is not None:
                edits[mod.span(node)] = str(value)
        defaults = dict(zip([a.arg for a in kernel.args.args][-len(kernel.args.defaults):],
                            kernel.args.defaults)) if kernel.args.defaults else {}
        blocks = {v for v in values.values() if v} | {
            v for n, d in defaults.items() if n in tiles and n in constexprs and n not in args
            and (v := constant(d))}
        follow = _follower(mod, scope, grid)
        # tiles passed from a host value (`BLOCK=block`): counts of them are told with the
        # tile at several values, and written with that host value
        named = [(args[n], v) for n, v in values.items() if v and literal_int(args[n]) is None
                 and constant(args[n]) is None]
        for element in grid.elts:
            found = None
            for node, value in named:
                shown = ast.dump(node)
                size = size_of(element, follow, fixed=(shown,))
                kind = rounding(element, size, node, follow, written=value) if size else None
                if kind in (Rounding.CEIL, Rounding.FLOOR):
                    found = size, mod.text(node), kind
                    break
            if found is None:
                counted = counts_blocks(element, blocks, follow)
                found = counted and (counted[0], str(counted[1]), counted[2])
            if not found:
                continue
            size, block, kind = found
            division = _division(element)
            if (division is not None and ast.dump(division[0]) == ast.dump(size)
                    and mod.text(division[1]) == block
                    and (kind is Rounding.FLOOR and isinstance(element, ast.BinOp)
                         or kind is Rounding.CEIL and is_cdiv(element))):
                continue  # already in the one form
            text = mod.text(size)
            wrapped = text if isinstance(size, (ast.Name, ast.Attribute, ast.Call,
                                                ast.Subscript)) else f"({text})"
            if kind is Rounding.FLOOR:
                edits[mod.span(element)] = f"{wrapped} // {block}"
            elif cdiv is not None:
                edits[mod.span(element)] = f"{cdiv}({text}, {block})"
            else:
                edits[mod.span(element)] = f"({wrapped} + {block} - 1) // {block}"
            rewritten.append(element)
            followed += [(scope, st) for st in follow.statements]  # type: ignore[attr-defined]
    if not any(mod.source[a:b].decode() != text for (a, b), text in edits.items()):
        return None
    # a binding followed that only the rewritten counts (and bindings gone) read goes with them
    inside = {id(n) for e in rewritten for n in ast.walk(e)}
    gone: set[int] = set()
    while True:
        dead = [(scope, st) for scope, st in followed if id(st) not in gone and all(
            id(n) in inside for n in ast.walk(scope) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load) and n.id in bound_names(st))]
        if not dead:
            break
        for _, st in dead:
            gone.add(id(st))
            inside |= {id(n) for n in ast.walk(st.value)}
            edits[mod.stmt_span(st)] = ""
    from kir import Edit, Span  # noqa: PLC0415
    from kir.errors import KLineageError  # noqa: PLC0415

    try:
        return ir.apply(Edit(Span(a, b), t) for (a, b), t in edits.items())
    except KLineageError:
        return None


def _follower(mod: PyModule, scope: ast.FunctionDef, grid: ast.AST
              ) -> Callable[[ast.Name], ast.AST | None]:
    """`host_counts.Follow` for a host `grid` in the function `scope`: a name bound once there
    by a plain assignment (not a parameter) to its value, or to its element `i` of an unpacked
    value (`value[i]`, the element itself of a tuple written out), where the grid and the
    values followed to are all that read it: a count the host uses elsewhere too (a buffer of
    `nt` entries beside a grid of `(nt,)`) is a host value the grid cannot change alone."""
    params = set(_parameters(scope))

    def binding(name: str) -> tuple[ast.Assign, ast.AST] | None:
        if name in params:
            return None
        stores = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name
                  and isinstance(n.ctx, ast.Store)]
        if len(stores) != 1:
            return None
        statement = mod.parents.get(stores[0])
        if isinstance(statement, (ast.Tuple, ast.List)):
            statement = mod.parents.get(statement)
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        target = statement.targets[0]
        if target is stores[0]:
            return statement, statement.value
        if isinstance(target, (ast.Tuple, ast.List)) and stores[0] in target.elts:
            at = target.elts.index(stores[0])
            if isinstance(statement.value, (ast.Tuple, ast.List)):
                elts = statement.value.elts
                return (statement, elts[at]) if at < len(elts) else None
            return statement, ast.Subscript(statement.value, ast.Constant(at), ast.Load())
        return None

    bound: dict[str, tuple[ast.Assign, ast.AST]] = {}
    todo = sorted(names_in(grid))
    while todo:  # every name the grid reads through bindings
        name = todo.pop()
        found = binding(name) if name not in bound else None
        if found is not None:
            bound[name] = found
            todo += sorted(names_in(found[0].value) - set(bound))
    reads = {name: [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name
                    and isinstance(n.ctx, ast.Load)] for name in bound}
    while True:  # drop those read beyond the grid and what is followed
        allowed = {id(n) for n in ast.walk(grid)} | {
            id(n) for st, _ in bound.values() for n in ast.walk(st.value)}
        stray = [name for name in bound if any(id(n) not in allowed for n in reads[name])]
        if not stray:
            break
        for name in stray:
            del bound[name]

    def follow(name: ast.Name) -> ast.AST | None:
        return bound[name.id][1] if name.id in bound else None

    follow.statements = [st for st, _ in bound.values()]  # type: ignore[attr-defined]
    return follow


def _host_division(mod: PyModule, call: ast.AST, grid: ast.AST) -> ast.AST | None:
    """A division (`cdiv`, `//`) in what a host grid's names are bound to in the launching
    function (`n_tiles = cdiv(M, BM) * cdiv(N, BN)` read as `grid = (n_tiles,)`), two bindings
    deep. A grid of no division (`(NUM_SMS,)`) does not depend on a tile."""
    scope = mod.enclosing(call, ast.FunctionDef)
    if scope is None:
        return None
    todo, seen = list(names_in(grid)), set()
    for _ in range(2):
        nxt: list[str] = []
        for name in todo:
            if name in seen:
                continue
            seen.add(name)
            for value in _bindings(ast.walk(scope), name):
                for node in ast.walk(value):
                    if _division(node) is not None:
                        return node
                nxt.extend(names_in(value))
        todo = nxt
    return None


def _host_reuse(
    mod: PyModule,
    call: ast.AST,
    grid: ast.AST,
    tuned: Sequence[str],
    args: Mapping[str, ast.AST],
    passed: Sequence[str] | None = None,
    extra: frozenset[int] = frozenset(),
) -> SweepRefusal | None:
    """Refused when the host reads the variable (or `self` attribute) it passes a tuned tile
    anywhere but in the launch's grid and the launch's tile arguments (those of `passed`,
    default `tuned`): a buffer sized by it, another launch, a method that reads it would no
    longer agree with the tile the autotuner picks. A variable is looked for in the launching
    function; an attribute in its class (and as `obj.attr` anywhere outside it)."""
    allowed = {id(n) for n in ast.walk(grid)} | extra
    for t in (tuned if passed is None else passed):
        if t in args:
            allowed |= {id(n) for n in ast.walk(args[t])}
    launched = dotted(call.value) if isinstance(call, ast.Subscript) else None
    kernel = next((k for k in mod.kernels() if k.name == launched), None)
    dims = _tile_dims(kernel) if kernel is not None else {}
    unchecked = unchecked_tiles(kernel) if kernel is not None else set()
    for name in tuned:
        node = args.get(name)
        value = literal_int(node)
        sizes = {host_form(mod, args[d]) for d in dims.get(name, ()) if d in args}
        # a tile the kernel never compares with a size (`unchecked_tiles`) tiles no size we
        # know: any host division by its value beyond the launch is its copy
        stray_div = _divides_elsewhere(mod, call, allowed, value, sizes or None) \
            if value is not None and (sizes or name in unchecked) else None
        if stray_div is not None:
            return SweepRefusal(
                f"the host divides by {value} beyond the launch (line {stray_div.lineno}): "
                f"{name} cannot be tuned",
                {"tile": name, "line": stray_div.lineno},
            )
        if isinstance(node, ast.Name):
            # read wherever the name the launch passes is read: in the function that binds it
            # (the launching one, or one around it), or for a module-level name anywhere in the
            # host, a helper that sizes a buffer by it included
            binder = _binder(mod, call, node.id)
            uses = [
                n
                for n in (_host_nodes(mod) if binder is mod.tree else ast.walk(binder))
                if isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Load)
                and _binder(mod, n, node.id) is binder
            ]
        elif _dict_entry(mod, call, node) is not None:
            # the dict a tile's value is read from: any read of it beyond the launch
            scope = mod.enclosing(call, ast.FunctionDef)
            uses = [n for n in ast.walk(scope) if isinstance(n, ast.Name)
                    and n.id == node.value.id and isinstance(n.ctx, ast.Load)]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            cls = mod.enclosing(call, ast.ClassDef)
            inside = {id(n) for n in ast.walk(cls)} if cls is not None else set()
            uses = [
                n
                for n in ast.walk(mod.tree)
                if isinstance(n, ast.Attribute)
                and n.attr == node.attr
                and isinstance(n.ctx, ast.Load)
                and (dotted(n) == dotted(node) if id(n) in inside else dotted(n) != dotted(node))
            ]
        else:
            continue
        stray = next((u for u in uses if id(u) not in allowed), None)
        if stray is not None:
            return SweepRefusal(
                f"the host uses {dotted(node)} beyond the launch (line {stray.lineno}): "
                f"{name} cannot be tuned",
                {"tile": name, "line": stray.lineno},
            )
    return None


def _host_nodes(mod: PyModule) -> list[ast.AST]:
    """Every node of the module outside its `@triton.jit` functions: the host code."""
    inside = {id(n) for k in mod.kernels() for n in ast.walk(k)}
    return [n for n in ast.walk(mod.tree) if id(n) not in inside]


def _binder(mod: PyModule, at: ast.AST, name: str) -> ast.AST:
    """The innermost function around `at` that binds `name` (a parameter, an assignment),
    else the module."""
    scope = mod.enclosing(at, ast.FunctionDef)
    while scope is not None:
        if name in _parameters(scope) or _bindings(ast.walk(scope), name):
            return scope
        scope = mod.enclosing(scope, ast.FunctionDef)
    return mod.tree


def _divides_elsewhere(mod: PyModule, call: ast.AST, allowed: set[int], value: int,
                       sizes: set[str] | None = None) -> ast.AST | None:
    """A division (`cdiv(X, d)`, `X // d`) in the host code of the module (the function
    launching `call`, a helper it calls to size a buffer) by a host value `d` equal to
    `value` that is not among `allowed` (the grid's and the tile arguments'
    nodes), of one of `sizes` (the host values of the sizes the tile tiles; any size when
    None; compared in their `host_form`, so `cdiv(x.numel(), 256)` divides the `n` of
    `n = x.numel()`): the literal tile also sizes something else (`parts =
    torch.empty(cdiv(n, 256))` beside a launch with `BLOCK=256`). A chunk count of another
    size (`cdiv(seq, 64)` beside a 64-wide tile of the value dimension) is not."""
    for node in _host_nodes(mod):
        found = _division(node)
        if found is None:
            continue
        dividend, divisor = found
        if id(divisor) not in allowed and (sizes is None or host_form(mod, dividend) in sizes) \
                and _host_literal(mod, call, divisor) == value:
            return divisor
    return None


def _division(node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(dividend, divisor) of a block count: `cdiv(X, d)`, `X // d` or `ceil(X / d)`. Of a
    count rounded up by hand the dividend is the size alone: X of `(X + 31) // 32`,
    `(X + 32 - 1) // 32`, `(X + BM - 1) // BM` and `-(-X // 32)`."""
    if is_cdiv(node, 2):
        return node.args[0], node.args[1]
    if (isinstance(node, ast.Call) and callee(node).split(".")[-1] == "ceil"
            and len(node.args) == 1 and isinstance(node.args[0], ast.BinOp)
            and isinstance(node.args[0].op, ast.Div)):
        return node.args[0].left, node.args[0].right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
        left = node.left
        if isinstance(left, ast.UnaryOp) and isinstance(left.op, ast.USub):
            return left.operand, node.right
        sizes = [(t, sign) for t, sign in _sum_terms(left) if literal_int(t) is None
                 and ast.dump(t) != ast.dump(node.right)]
        return (sizes[0][0] if len(sizes) == 1 and sizes[0][1] > 0 else left), node.right
    return None


def _sum_terms(node: ast.AST) -> list[tuple[ast.AST, int]]:
    """The terms of a sum written with `+` and `-`, each with its sign (1 or -1)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        sign = 1 if isinstance(node.op, ast.Add) else -1
        return _sum_terms(node.left) + [(t, s * sign) for t, s in _sum_terms(node.right)]
    return [(node, 1)]


def _count_copies(grid: ast.AST, divisor: ast.AST) -> list[tuple[ast.AST, int]] | str | None:
    """The literals beyond `divisor` (a tile's copy dividing a block count of a host grid: a
    literal, or the host name or meta read the tile is passed from) that copy the tile, each
    with what it is less than the tile: the 32 of `(X + 32 - 1) // 32` (0), the 31 of
    `(X + 31) // 32` (1) and the 32 of the remainder check of `X // 32 + (X % 32 > 0)` (0).
    Empty where none is (a count rounded up by `cdiv`, `ceil`, negation `-(-X // 32)` or
    `(X - 1) // 32 + 1`; a divisor that is no literal, whose copies are its own name); "floor"
    for a floor `X // 32` or `X // BLOCK`, whose count a larger tile leaves short; None where
    the sum's constants round by another amount (`(X + 32) // 32`, one block more than whole
    ones) or by the tile's value less one not written as one term (`(X + 15 + 16) // 32`; the
    sweep writes such a count in one form first: `_grid_counts_canonical`), and where the
    element, evaluated, is no function of the number of the tile's blocks at all
    (`_counts_no_blocks`: `X // 256 + (X % 128 > 0)`)."""
    division = next((n for n in ast.walk(grid) if isinstance(n, ast.BinOp)
                     and isinstance(n.op, ast.FloorDiv) and n.right is divisor), None)
    value = literal_int(divisor)
    if division is None or (
            isinstance(division.left, ast.UnaryOp) and isinstance(division.left.op, ast.USub)):
        return []
    if _counts_no_blocks(grid, division, divisor):
        return None
    terms = _sum_terms(division.left)
    consts = [(t, sign, literal_int(t)) for t, sign in terms if literal_int(t) is not None]
    rounding = sum(sign * v for _, sign, v in consts)
    if value is None:  # a name: its copies are rewritten with it; only a floor is told here
        shown = ast.dump(divisor)
        if any(ast.dump(n) == shown for n in ast.walk(division.left)) \
                or _remainder_checks(grid, division) or rounding != 0:
            return []
        return "floor"
    if rounding == 0 or len(consts) == len(terms):  # a floor (of a size, or a constant one)
        # `X // 32 + (X % 32 > 0)` rounds up by its remainder: that 32 is the tile's copy
        checks = _remainder_checks(grid, division)
        return [(c, 0) for c in checks] if checks and len(consts) < len(terms) else "floor"
    if rounding == -1:  # (X - 1) // 32 + 1
        return []
    if rounding == value - 1:
        whole = [t for t, sign, v in consts if sign > 0 and v == value]
        if whole:  # (X + 32 - 1) // 32
            return [(whole[0], 0)]
        if len(consts) == 1:  # (X + 31) // 32
            return [(consts[0][0], 1)]
    return None


def _grid_element(grid: ast.AST, node: ast.AST) -> ast.AST | None:
    """The program count of one axis that holds `node` in a grid: the element of the innermost
    tuple (or list) around it, else the lambda's body or the def's returned value; None where
    a def computes it in a statement before."""
    tuples = [t for t in ast.walk(grid) if isinstance(t, (ast.Tuple, ast.List))
              and any(n is node for n in ast.walk(t))]
    if tuples:
        inner = min(tuples, key=lambda t: sum(1 for _ in ast.walk(t)))
        return next(e for e in inner.elts if any(n is node for n in ast.walk(e)))
    if isinstance(grid, ast.Lambda):
        return grid.body
    returned = [r.value for r in ast.walk(grid) if isinstance(r, ast.Return) and r.value
                is not None and any(n is node for n in ast.walk(r.value))]
    return returned[0] if returned else grid if isinstance(grid, ast.expr) else None


def _counts_no_blocks(grid: ast.AST, division: ast.BinOp, divisor: ast.AST) -> bool:
    """Whether the grid element holding `division` (`X // d`), evaluated over its one size with
    the tile at `divisor` (a literal, or the name or meta read a tile is passed as, at several
    values), is no function of the number of the tile's blocks over it (`host_counts.rounding`
    is OTHER): `n // 256 + (n % 128 > 0)` leaves the blocks of a size 128 past a multiple of 256
    uncounted, `(n + 32) // 32` counts one block more than whole ones. Rewritten to follow the
    tile, such a count would launch idle programs or too few."""
    element = _grid_element(grid, division)
    if element is None:
        return False
    value = literal_int(divisor)
    fixed = () if value is not None else (ast.dump(divisor),)
    size = size_of(element, fixed=fixed)
    if size is None:
        return False
    return rounding(element, size, value if value is not None else divisor) is Rounding.OTHER


def _remainder_checks(grid: ast.AST, division: ast.BinOp) -> list[ast.AST]:
    """The divisors of the remainders `X % d` in the grid element that holds the floor
    `division` (`X // d`), of the same X by a copy of the same d (the literal's value, or the
    same name): `X // 256 + (X % 256 > 0)` and `X // B + int(X % B != 0)` count the partial
    block by its remainder, so the floor is a count rounded up."""
    elements = grid.elts if isinstance(grid, (ast.Tuple, ast.List)) else [grid]
    element = next((e for e in elements if any(n is division for n in ast.walk(e))), grid)
    size, value, shown = ast.dump(division.left), literal_int(division.right), ast.dump(division.right)
    return [n.right for n in ast.walk(element)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
            and ast.dump(n.left) == size
            and (literal_int(n.right) == value if value is not None else ast.dump(n.right) == shown)]


def _count_follows(mod: PyModule, grid: ast.AST, divisor: ast.AST, tile: str,
                   shrinks_only: bool) -> list[tuple[int, int, str]] | SweepRefusal:
    """The edits (byte spans in the module, text) beyond `divisor` -> `meta[tile]` that keep a
    block count of a host grid counting the tile's blocks (`_count_copies`): its copies in the
    sum resized with it (`meta[tile] - 1` for the 31 of `(X + 31) // 32`); a floor `X // 32`
    rounded up (`(X + meta[tile] - 1) // meta[tile]`), unless the tile only shrinks to a
    divisor of its value (`unchecked_tiles`: whole blocks stay whole). Refused where the count
    rounds in a way the tile cannot take along."""
    copies = _count_copies(grid, divisor)
    meta = f'meta["{tile}"]'
    if copies is None:
        line = getattr(divisor, "lineno", 0)
        return SweepRefusal(
            f"the grid rounds its count of {tile}'s blocks up by constants the sweep cannot "
            f"resize with {tile}, or counts no blocks of {tile} (line {line})",
            {"tile": tile, "line": line})
    if copies == "floor":
        if shrinks_only:
            return []
        left = next(n.left for n in ast.walk(grid) if isinstance(n, ast.BinOp)
                    and isinstance(n.op, ast.FloorDiv) and n.right is divisor)
        return [(mod.start(left), mod.start(left), "("),
                (mod.end(left), mod.end(left), f" + {meta} - 1)")]
    return [(mod.start(t), mod.end(t), f"({meta} - {off})" if off else meta)
            for t, off in copies]


def _dividend(grid: ast.AST, node: ast.AST) -> ast.AST | None:
    """What a grid literal divides: `cdiv(X, lit)` or `X // lit` -> X."""
    for parent in ast.walk(grid):
        found = _division(parent)
        if found is not None and found[1] is node:
            return found[0]
    return None


def _grid_axis(grid: ast.AST, node: ast.AST) -> int | None:
    """The index of the grid tuple's (or list's) element holding `node` (None: neither)."""
    if not isinstance(grid, (ast.Tuple, ast.List)):
        return None
    for i, element in enumerate(grid.elts):
        if any(sub is node for sub in ast.walk(element)):
            return i
    return None


def _pid_axis(node: ast.AST, axis_of: Mapping[str, int]) -> int | None:
    """The grid axis whose program id `node` is a part of: `tl.program_id(a)`, a name bound to
    one, that value cast (`.to(tl.int64)`), or a 1-D program id split by `//` or `%` (`pid %
    q_blocks`, `pid // tiles_n`: the divisor read no other axis's id); None for anything else."""
    if isinstance(node, ast.Call) and callee(node) in PID_CALLS:
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
        return literal_int(arg) if arg is not None else None
    if isinstance(node, ast.Name):
        return axis_of.get(node.id)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to"):
        return _pid_axis(node.func.value, axis_of)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
        ax = _pid_axis(node.left, axis_of)
        others = {axis_of[n] for n in names_in(node.right) if n in axis_of}
        return ax if ax is not None and others <= {ax} else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        # `tl.num_programs(a) - 1 - pid`: the ids of the axis relabeled, the last first
        ax = _pid_axis(node.right, axis_of)
        ids = names_in(node.left) & set(axis_of) or any(
            isinstance(c, ast.Call) and callee(c) in PID_CALLS for c in ast.walk(node.left))
        return ax if ax is not None and not ids else None
    return None


def _tile_axes(kernel: ast.FunctionDef) -> dict[str, frozenset[int]]:
    """Tile constexpr -> the grid axes whose program ids it scales (`tl.program_id(1) * T`,
    or through a name assigned from that program id alone: `_pid_axis`). One tile may scale
    several (a square tile for both rows and columns: `i * TILE`, `j * TILE`)."""
    axis_of: dict[str, int] = {}
    assigns = sorted((a for a in ast.walk(kernel) if isinstance(a, ast.Assign)),
                     key=lambda a: (a.lineno, a.col_offset))
    for a in assigns:
        ax = _pid_axis(a.value, axis_of)
        for t in a.targets:
            if isinstance(t, ast.Name) and ax is not None:
                axis_of[t.id] = ax
    constexprs = set(constexpr_params(kernel))
    out: dict[str, set[int]] = {}
    for node in ast.walk(kernel):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            continue
        for side, other in ((node.left, node.right), (node.right, node.left)):
            if not (isinstance(side, ast.Name) and side.id in constexprs):
                continue
            ax = _pid_axis(other, axis_of)
            if ax is not None:
                out.setdefault(side.id, set()).add(ax)
    return {t: frozenset(a) for t, a in out.items()}


def _arange_origins(kernel: ast.FunctionDef) -> dict[str, set[str]]:
    """Local name -> the tile constexprs whose `tl.arange(0, T)` its value carries."""
    constexprs = set(constexpr_params(kernel))
    assigns = [
        (t.id, a.value)
        for a in ast.walk(kernel)
        if isinstance(a, ast.Assign)
        for t in a.targets
        if isinstance(t, ast.Name)
    ]
    origin: dict[str, set[str]] = {}  # local name -> tile constexprs whose arange it carries
    for _ in range(4):
        for name, value in assigns:
            tiles = set()
            for c in ast.walk(value):
                if isinstance(c, ast.Call) and callee(c) in ARANGE and len(c.args) >= 2:
                    tiles |= names_in(c.args[1]) & constexprs
            for n in names_in(value):
                tiles |= origin.get(n, set())
            if tiles:
                origin[name] = origin.get(name, set()) | tiles
    return origin


def unchecked_tiles(kernel: ast.FunctionDef) -> set[str]:
    """Tiles whose block offsets the kernel never compares with anything (no `offs < N` mask
    or `tl.where` on a value built from their `tl.arange`), in a kernel that reads and writes
    through pointers (no block pointers or tensor descriptors, which check bounds themselves).
    Such a kernel is correct only on sizes its author made multiples of the tile: the tile may
    shrink to a divisor of its value, never grow."""
    for c in ast.walk(kernel):
        if not isinstance(c, ast.Call):
            continue
        name = callee(c)
        if name.split(".")[-1] in ("make_block_ptr", "make_tensor_descriptor") or (
                isinstance(c.func, ast.Attribute) and c.func.attr in ("load", "store")
                and not name.startswith(("tl.", "triton."))):  # `desc.load([..])`
            return set()
    origin = _arange_origins(kernel)
    tiles = {t for ts in origin.values() for t in ts}
    checked: set[str] = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.Compare):
            for n in names_in(node):
                checked |= origin.get(n, set())
            for c in ast.walk(node):
                if isinstance(c, ast.Call) and callee(c) in ARANGE and len(c.args) >= 2:
                    checked |= names_in(c.args[1])
    return tiles - checked


def _tile_dims(kernel: ast.FunctionDef) -> dict[str, set[str]]:
    """Tile constexpr -> the kernel's size parameters it tiles: `tl.cdiv(D, T)`, or offsets
    built from `tl.arange(0, T)` compared against D (`offs_m < M`)."""
    constexprs = set(constexpr_params(kernel))
    sizes = {a.arg for a in kernel.args.args} - constexprs
    origin = _arange_origins(kernel)
    out: dict[str, set[str]] = {}
    for node in ast.walk(kernel):
        if is_cdiv(node, 2):
            for t in names_in(node.args[1]) & constexprs:
                out.setdefault(t, set()).update(names_in(node.args[0]) & sizes)
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            left, right = names_in(node.left), names_in(node.comparators[0])
            tiles = set().union(*(origin.get(n, set()) for n in left)) if left else set()
            for t in tiles:
                out.setdefault(t, set()).update(right & sizes)
    return out
