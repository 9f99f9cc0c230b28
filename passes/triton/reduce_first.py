"""A GEMM whose product is only summed along N (or M): that operand summed first.

Where a host module's product T = A @ B (a `tl.dot` loop's accumulator) reaches the rest of
the program only through sums over T's columns (the product's N axis), linearity gives
`sum_n T[m, n] = A[m, :] . (sum_n B[:, n])`: B is summed along N first (a reduction kernel the
rule adds to the module, `_REDUCE`), and the user's own GEMM kernel runs on the sum with N = 1,
a matrix-vector product whose output has one column. Everything after the dot runs as
before: its epilogue, and the consumer, which now sums a single column. The M x N x K product
becomes a read of B and an M x K product. Where the launch passes the accumulator's N tile,
it passes 16 (`N_TILE`, the least a dot takes): a wider tile would compute columns the masks
drop. The mirror case, sums over T's rows (`sum_m T = (sum_m A) . B`), sums A along M and runs
the GEMM with M = 1 the same way.

At N = 1 the user's GEMM is a matrix-vector product, and the tiles it was launched with (its
own, or the generic GEMM list's: 64-256 wide) launch too few programs to read A at the
memory's rate (M / 64 on a GPU of 100+ multiprocessors) and compute columns the masks drop.
The rewritten launch is autotuned over a list of its own in place of the tiles the launch
passed (or the kernel's own list). Where the dot's result is fp32 into an fp32 accumulator
(its precision option aside), the dot is written as what it computes, the fp32 products summed
over K (`tl.sum(a[:, :, None] * b[None, :, :], axis=1)`: exact fp32 products where a TF32
dot rounds its operands), which takes a tile of 1 along the summed extent; the list
(`UNIT_CONFIGS`) runs 2-16 rows a program (M / 2 - M / 16 programs) over K tiles of 256-2048.
Otherwise the dot stays, and both its output tiles are 16, the least a dot takes
(`GEMV_CONFIGS`: M / 16 programs, K tiles 64-512 at 1-8 warps). Where the launch cannot take a
list (`passes.triton.roles.sweep_edit` refuses), it keeps its tiles, the summed extent's at
`N_TILE`, and its dot.

Two forms are taken, recognized by what the accumulator's values flow into:
- *fused*: the GEMM's epilogue sums its tile over N (`tl.sum(acc, axis=1)`) and stores or
  atomically adds the row sums at addresses that do not depend on the N tile (a program per
  N tile adding into one row sum; a tile's partial sums stored apart are refused);
- *stored*: the GEMM stores its tile into a host buffer that only one other kernel (the
  consumer) reads, and the consumer sums that buffer's rows whole: each load of it feeds a
  `tl.sum` over the axis its unit-stride index runs (directly, or through an accumulator that
  starts at zero), and that index does not depend on the program id (a program summing a slice
  of a row is refused). The buffer is allocated with one column, and the consumer is launched
  with N = 1 as well; what the consumer does with a row's sum (scale it, divide it by N) is its
  own.

A kernel parameter that receives N at a rewritten launch is passed 1 where it bounds the
product (a mask, a loop's range, a `tl.cdiv`, the pointer arithmetic); where the kernel also
reads it as a value (`tl.sum(x) / N`: a mean), those reads take a new parameter that the launch
passes the real N. The reduction reads B as the GEMM does: element (k, n) at `k * sk + n * sn`,
with the strides the kernel applies (a literal, a parameter as the launch passes it, one where
none is written), accumulated in fp32 over N in a fixed order (no atomics), written as a
contiguous vector of K elements in B's dtype; the GEMM then reads it with its K stride 1.

Refused with the reason (`Skipped`): an epilogue that is not linear in the accumulator before
the sum (a bias added, `tl.maximum`, a sigmoid: only a scalar's product or quotient, a sign, a
cast), a sum over both axes or a `tl.max`, the product's tile stored as well as summed, partial
sums (above), a buffer read anywhere but by its consumer (returned, read by the host), a
consumer that reads the buffer other than through sums along one axis, an operand whose loads
are not bounds-checked along the summed extent (launched with 1 they would read past the
vector), a block-pointer or batched operand, a K stride the rule cannot set to one, a kernel
launched more than once or through a helper other kernels share, a grid the rule cannot read.

The rule is one way: its de-optimization refuses (the start it came from is the lineage's).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_start, make_site
from passes.base import Applied, Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, dotted, fresh_name, is_cdiv, names_in, normalized
from passes.triton.affine import Scope, broadcast_times_stride
from passes.triton.host_layout import HostArgs, stride_of
from passes.triton.launch import TRITON
from passes.triton.layout import (LOAD, _after_imports, _def_text, _imports, _kw, _new_params,
                                  _terms, _unwrap)
from passes.triton.roles import (DOT, PID_CALLS, RANGE_CALLS, SweepRefusal, accumulators,
                                 constexpr_params, dot_loops, launch_grid, pid_names, sweep_edit)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

SINKS = frozenset({"tl.store", "triton.language.store", "tl.atomic_add", "triton.language.atomic_add"})
WRITES = SINKS | frozenset({"tl.atomic_xchg", "tl.atomic_max", "tl.atomic_min", "tl.atomic_cas",
                            "triton.language.atomic_xchg", "triton.language.atomic_max",
                            "triton.language.atomic_min", "triton.language.atomic_cas"})
SUM = frozenset({"tl.sum", "triton.language.sum"})
OTHER_REDUCE = frozenset({"tl.max", "tl.min", "tl.argmax", "tl.argmin", "tl.reduce",
                          "triton.language.max", "triton.language.min", "triton.language.reduce"})
WHERE = frozenset({"tl.where", "triton.language.where"})
ZEROS = frozenset({"tl.zeros", "triton.language.zeros", "tl.zeros_like", "triton.language.zeros_like"})
FULL = frozenset({"tl.full", "triton.language.full"})
BLOCK_PTR = frozenset({"tl.make_block_ptr", "triton.language.make_block_ptr"})
FACTORIES = frozenset({"torch.empty", "torch.zeros", "torch.ones", "torch.full"})
N_TILE = 16
"""The N tile of the product at N = 1 where the launch passes it: the least a `tl.dot` takes."""
# The autotune list the rewritten GEMM gets, (K tile, warps, stages): at N = 1 (or M = 1) the
# product is a matrix-vector product, a read of the other operand. Both tiles of the output
# are 16, the least a `tl.dot` takes: the summed extent's tile computes 15 columns the masks
# drop whatever the other tile is, so the other's smallest tile costs no more work per output
# and makes the most programs (M / 16: 64 at M = 1024, where the GEMM's own 64-128 tiles make
# 8-16 on a GPU of 100+ multiprocessors). Each program walks K in long tiles (64-512) with 1-8
# warps; the autotuner picks one on the device. Every shape has K tiles that fit in shared
# memory at their stages for 4-byte operands.
GEMV_CONFIGS: tuple[tuple[int, int, int], ...] = (
    (256, 4, 3),
    (512, 4, 2),
    (128, 4, 4),
    (128, 2, 4),
    (256, 2, 3),
    (64, 1, 4),
    (512, 8, 2),
    (64, 2, 5),
)


# Where the product is made without a dot (`ReduceBeforeContract._dot_free`): (the other
# extent's tile, K tile, warps, stages), the summed extent's tile 1. A program reads its rows
# of A (columns of B) once, K in long coalesced tiles, and sums each tile across its threads:
# 2-16 rows a program make M / 2 - M / 16 programs (512-64 at M = 1024), 4-32 KB of A read per
# program and step (for 4-byte operands), so that a multiprocessor holding one or a few
# programs keeps enough loads in flight; the longer K tiles take fewer of the cross-warp sums.
UNIT_CONFIGS: tuple[tuple[int, int, int, int], ...] = (
    (4, 512, 4, 3),
    (2, 1024, 4, 2),
    (4, 1024, 4, 2),
    (2, 2048, 8, 2),
    (8, 256, 4, 3),
    (8, 512, 8, 2),
    (16, 256, 4, 3),
    (4, 256, 2, 4),
)


def gemv_configs(side: str = "n", unit: bool = False) -> list[dict[str, int]]:
    """The matrix-vector list keyed by role (`passes.triton.roles.fit_configs`) for a product
    summed over N (`side` "n") or M: `GEMV_CONFIGS` (both output tiles 16) for a `tl.dot`,
    `UNIT_CONFIGS` (the summed extent's tile 1) for a product made without one (`unit`)."""
    summed, other = ("n", "m") if side == "n" else ("m", "n")
    if unit:
        return [{summed: 1, other: t, "k": k, "num_warps": w, "num_stages": s}
                for t, k, w, s in UNIT_CONFIGS]
    return [{"m": N_TILE, "n": N_TILE, "k": k, "num_warps": w, "num_stages": s}
            for k, w, s in GEMV_CONFIGS]

# The reduction the rule adds: {kernel} and {helper} are the module's fresh names for them. A
# first launch sums slices of the extent E (N, or M) into fp32 partial rows, a second sums those
# rows (the same kernel, reading the partials with unit K stride): a fixed order, no atomics.
_REDUCE = '''

@triton.jit
def {kernel}(src, dst, K, E, sk, se, chunk, BLOCK_K: tl.constexpr, BLOCK_E: tl.constexpr):
    """dst[part, k] = sum over e in part's slice of E (`chunk` wide) of src[k * sk + e * se]."""
    ks = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    part = tl.program_id(1)
    end = tl.minimum(part * chunk + chunk, E)
    acc = tl.zeros((BLOCK_E, BLOCK_K), tl.float32)
    for e0 in range(part * chunk, end, BLOCK_E):
        es = e0 + tl.arange(0, BLOCK_E)
        inside = (es[:, None] < end) & (ks[None, :] < K)
        acc += tl.load(src + ks[None, :].to(tl.int64) * sk + es[:, None].to(tl.int64) * se,
                       mask=inside, other=0.0).to(tl.float32)
    tl.store(dst + part.to(tl.int64) * K + ks, tl.sum(acc, axis=0).to(dst.dtype.element_ty),
             mask=ks < K)


def {helper}(x, K, E, sk, se):
    """The vector v of K elements, x's dtype, contiguous: v[k] = sum over e < E of x's element
    k * sk + e * se (strides in elements), accumulated in fp32."""
    K, E = int(K), int(E)
    parts = max(1, min(64, triton.cdiv(E, 512)))
    chunk = triton.cdiv(triton.cdiv(E, parts), 64) * 64
    parts = triton.cdiv(E, chunk) if E > 0 else 1
    partial = torch.empty((parts, K), device=x.device, dtype=torch.float32)
    if E == 0:
        partial.zero_()
    else:
        grid = (triton.cdiv(K, 128), parts)
        {kernel}[grid](x, partial, K, E, sk, se, chunk, BLOCK_K=128, BLOCK_E=64)
    out = torch.empty((K,), device=x.device, dtype=x.dtype)
    {kernel}[(triton.cdiv(K, 128), 1)](partial, out, K, parts, 1, K, parts, BLOCK_K=128, BLOCK_E=64)
    return out
'''


@dataclass(slots=True)
class _Gemm:
    """A dot loop's kernel read for the rule: B's pointer parameter, the parameters that bound
    N and K, B's per-axis strides (None: unit), the form, and the stored product's parameter."""

    kernel: ast.FunctionDef
    op_param: str = ""
    ext_param: str = ""
    k_param: str = ""
    k_stride: ast.AST | None = None
    ext_stride: ast.AST | None = None
    form: str = ""
    """"fused" (the epilogue sums over N) | "stored" (the tile is stored for a consumer)."""
    t_param: str = ""
    t_store: ast.Call | None = None
    ext_tile: str = ""
    other_param: str = ""
    """The parameter bounding the product's other extent (M where N is summed), if masked."""
    side: str = "n"
    """"n": the product is summed over N (B is summed) | "m": over M (A is summed)."""
    """The constexpr sizing the accumulator's N axis ("" where it is not one parameter)."""


@dataclass(slots=True)
class _Flow:
    """Where values linear in a seed go: the `tl.sum` calls that take them (with the axis), the
    stores / atomics that write them (unsummed, summed), or why they go elsewhere."""

    sums: list[tuple[ast.Call, int | None]] = field(default_factory=list)
    tiles: list[ast.Call] = field(default_factory=list)
    rows: list[ast.Call] = field(default_factory=list)
    why: str = ""


def _axis(call: ast.Call) -> int | None | str:
    """The literal axis of a reduction call (None: all axes; "?" not a literal)."""
    node = next((k.value for k in call.keywords if k.arg == "axis"), call.args[1] if len(call.args) > 1 else None)
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -int(node.operand.value)
    return "?"


def _zero(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == 0 and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _zero(node.operand)
    return False


def _zero_init(value: ast.AST) -> bool:
    """`tl.zeros(..)`, `tl.full(shape, 0, ..)`, `0`, `0.0`."""
    if _zero(value):
        return True
    if isinstance(value, ast.Call) and callee(value) in ZEROS:
        return True
    return isinstance(value, ast.Call) and callee(value) in FULL and len(value.args) > 1 and _zero(value.args[1])


def _inside(mod: PyModule, node: ast.AST, region: ast.AST) -> bool:
    return mod.start(region) <= mod.start(node) and mod.end(node) <= mod.end(region)


def _flow(mod: PyModule, kernel: ast.FunctionDef, scope: Scope, seeds: list[ast.AST],
          skip: ast.AST | None, free_after: list[ast.AST] | None) -> _Flow:
    """Follow values linear in `seeds` (expression nodes, or Name reads outside `skip`): a
    product or quotient by a scalar, a sign, a cast, a sum of two such values, `tl.where(c, x,
    0)`, a name bound to one (a `+=` accumulator starting at zero). A `tl.sum` of one is
    recorded and followed on as summed; a summed value read outside every loop of
    `free_after` is the caller's to use freely (None: summed values stay linear to a store)."""
    out = _Flow()
    state: dict[str, bool] = {}  # name -> summed
    todo: list[tuple[ast.AST, bool]] = [(s, False) for s in seeds]
    seen: set[int] = set()

    def bind(name: str, summed: bool, stmt: ast.stmt) -> None:
        inits = [n.value for n in ast.walk(kernel) if isinstance(n, ast.Assign) and n is not stmt
                 and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
        if isinstance(stmt, ast.AugAssign) and not all(_zero_init(v) for v in inits):
            out.why = out.why or f"the sum into {name} does not start from zero"
        prev = state.get(name)
        if prev is not None and prev == summed:
            return
        state[name] = summed
        for use in ast.walk(kernel):
            if isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load) \
                    and (skip is None or not _inside(mod, use, skip)):
                todo.append((use, summed))

    while todo and not out.why:
        node, summed = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if summed and free_after is not None and not any(_inside(mod, node, loop) for loop in free_after):
            continue  # a finished sum: what the kernel makes of it is its own
        parent = mod.parents.get(node)
        text = mod.text(parent) if parent is not None and hasattr(parent, "lineno") else ""
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Mult, ast.Div)):
            other = parent.right if node is parent.left else parent.left
            if isinstance(parent.op, ast.Div) and node is parent.right:
                out.why = f"a value of the product divides: `{text}`"
            elif _scalar(scope, kernel, other):
                todo.append((parent, summed))
            else:
                out.why = f"a value of the product is scaled by a block, not a scalar: `{text}`"
        elif isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub)):
            other = parent.right if node is parent.left else parent.left
            if not any(isinstance(n, ast.Name) and n.id in state for n in ast.walk(other)) \
                    and not any(n is s for s in seeds for n in ast.walk(other)):
                out.why = f"a value of the product has a term added that is not linear in it: `{text}`"
            else:
                todo.append((parent, summed))
        elif isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.USub, ast.UAdd)):
            todo.append((parent, summed))
        elif isinstance(parent, ast.Attribute) and parent.attr == "to" \
                and isinstance(mod.parents.get(parent), ast.Call):
            cast = mod.parents[parent]
            if any("int" in ast.unparse(a) for a in cast.args):  # type: ignore[attr-defined]
                out.why = f"a value of the product is cast to an integer: `{mod.text(cast)}`"
            todo.append((cast, summed))
        elif isinstance(parent, ast.Call) and callee(parent) in WHERE and len(parent.args) == 3 \
                and node is parent.args[1] and _zero(parent.args[2]):
            todo.append((parent, summed))
        elif isinstance(parent, ast.Call) and callee(parent) in SUM and parent.args and node is parent.args[0]:
            if summed:
                out.why = f"the product is summed twice: `{text}`"
            else:
                axis = _axis(parent)
                out.sums.append((parent, None if axis == "?" else axis))  # type: ignore[arg-type]
                if axis == "?":
                    out.why = f"the sum's axis is not a literal: `{text}`"
                todo.append((parent, True))
        elif isinstance(parent, ast.Call) and callee(parent) in OTHER_REDUCE:
            out.why = f"the product is reduced by {callee(parent)}, not summed: `{text}`"
        elif isinstance(parent, ast.Call) and callee(parent) in SINKS and len(parent.args) > 1 \
                and node is parent.args[1]:
            (out.rows if summed else out.tiles).append(parent)
        elif isinstance(parent, ast.Assign) and node is parent.value and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Name):
            bind(parent.targets[0].id, summed, parent)
        elif isinstance(parent, ast.AugAssign) and node is parent.value and isinstance(parent.op, ast.Add) \
                and isinstance(parent.target, ast.Name):
            bind(parent.target.id, summed, parent)
        else:
            where = f": `{text}`" if text else ""
            out.why = f"a value of the product goes into an operation that is not linear in it{where}"
    return out


def _scalar(scope: Scope, kernel: ast.FunctionDef, node: ast.AST) -> bool:
    """A scalar of the kernel (`Scope.scalar`), or a name the kernel never binds (a module
    constant), or arithmetic of those."""
    if scope.scalar(node) or isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        bound = {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return node.id not in bound and node.id not in {a.arg for a in kernel.args.args}
    if isinstance(node, ast.BinOp):
        return _scalar(scope, kernel, node.left) and _scalar(scope, kernel, node.right)
    return isinstance(node, ast.Attribute) and _scalar(scope, kernel, node.value)


def _reads_param(scope: Scope, node: ast.AST, params: set[str]) -> str | None:
    """The one pointer parameter a pointer expression adds to (base terms), None otherwise."""
    terms = _terms(scope, node, [])
    if terms is None:
        return None
    found = {t.id for t in terms if isinstance(t, ast.Name) and t.id in params}
    return next(iter(found)) if len(found) == 1 else None


def _bound_param(scope: Scope, mask: ast.AST | None, index: ast.AST, params: set[str],
                 depth: int = 0) -> str | None:
    """The parameter a mask compares an index against (`n < N`, `n[None, :] < N`, through
    names assigned once): the index is matched by the local names it reads, or by its text."""
    if mask is None or depth > 20:
        return None
    if isinstance(mask, ast.Name):
        value = scope.value(mask)
        return _bound_param(scope, value, index, params, depth + 1) if value is not None else None
    own = _local_names(scope, index)
    for cmp in (n for n in ast.walk(mask) if isinstance(n, ast.Compare) and len(n.comparators) == 1):
        left, right = cmp.left, cmp.comparators[0]
        if isinstance(right, ast.Name) and right.id in params and (
                (own and _local_names(scope, left) & own)
                or any(ast.dump(n) == ast.dump(index) for n in ast.walk(left))):
            return right.id
    for name in (n for n in ast.walk(mask) if isinstance(n, ast.Name) and n.id not in params):
        value = scope.value(name)
        if value is not None and value is not mask:
            got = _bound_param(scope, value, index, params, depth + 1)
            if got:
                return got
    return None


def _accumulates(mod: PyModule, read: ast.Name) -> bool:
    """A read of the accumulator inside its dot loop that only accumulates: the dot's `acc`
    argument, or `acc + <a dot>` assigned back to it."""
    parent = mod.parents.get(read)
    if isinstance(parent, ast.keyword) and parent.arg == "acc":
        parent = mod.parents.get(parent)
        return isinstance(parent, ast.Call) and callee(parent) in DOT
    if isinstance(parent, ast.Call) and callee(parent) in DOT and read in parent.args[2:]:
        return True
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add):
        other = parent.right if read is parent.left else parent.left
        stmt = mod.parents.get(parent)
        return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == read.id
                                                    for t in stmt.targets) \
            and (any(isinstance(c, ast.Call) and callee(c) in DOT for c in ast.walk(other))
                 or isinstance(other, ast.Name))
    return False


def _sources(scope: Scope, node: ast.AST, depth: int = 0) -> set[str]:
    """What an index is made from, through names assigned once: the kernel's local names it
    reads and `program_id(a)` for each program axis it reads."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and callee(n) in PID_CALLS:
            axis = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "axis"), None)
            out.add(f"program_id({ast.unparse(axis) if axis is not None else 0})")
        if isinstance(n, ast.Name) and n.id not in scope.params and (
                n.id in scope.values or n.id in scope.loop_vars):
            out.add(n.id)
            value = scope.values.get(n.id)
            if value is not None and depth < 12:
                out |= _sources(scope, value, depth + 1)
    return out


def _local_names(scope: Scope, node: ast.AST) -> set[str]:
    """The names an expression reads that the kernel binds (not parameters, not modules)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and (n.id in scope.values or n.id in scope.loop_vars) and n.id not in scope.params}


def _names_of_index(scope: Scope, node: ast.AST, depth: int = 0) -> set[str]:
    """The names an index expression reads, through names assigned once."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
            value = scope.value(n)
            if value is not None and depth < 8:
                out |= _names_of_index(scope, value, depth + 1)
    return out


def _extent_uses(mod: PyModule, kernel: ast.FunctionDef, param: str) -> tuple[list[ast.Name], list[ast.Name]]:
    """(reads of `param` that bound or address the product: in a comparison, a range, a
    `cdiv`, a `(x + B - 1) // B`, a pointer; every other read)."""
    bound, value = [], []
    for use in ast.walk(kernel):
        if isinstance(use, ast.Name) and use.id == param and isinstance(use.ctx, ast.Load):
            (bound if _bounds(mod, kernel, use, 0) else value).append(use)
    return bound, value


def _bounds(mod: PyModule, kernel: ast.FunctionDef, node: ast.AST, depth: int) -> bool:
    """Whether a value (through arithmetic, and names bound to it) only bounds loops, masks and
    tile counts or addresses memory."""
    if depth > 6:
        return False
    while True:
        parent = mod.parents.get(node)
        if isinstance(parent, ast.Compare) or (isinstance(parent, ast.Call) and (
                callee(parent) in RANGE_CALLS or is_cdiv(parent))):
            return True
        if isinstance(parent, ast.Call) and (callee(parent) in LOAD or callee(parent) in WRITES) \
                and parent.args and node is parent.args[0]:
            return True
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.FloorDiv) and node is parent.left:
            return True
        if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Subscript)):
            node = parent
            continue
        if isinstance(parent, (ast.Assign, ast.AugAssign)) and node is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            reads = [n for n in ast.walk(kernel) if isinstance(n, ast.Name) and n.id in names
                     and isinstance(n.ctx, ast.Load)]
            return bool(names) and bool(reads) and all(_bounds(mod, kernel, r, depth + 1) for r in reads)
        return False


def _statement(mod: PyModule, node: ast.AST) -> ast.stmt:
    stmt = node
    while not isinstance(mod.parents.get(stmt), (ast.FunctionDef, ast.For, ast.If, ast.While,
                                                  ast.With, ast.Module, ast.Try)):
        stmt = mod.parents[stmt]
    return stmt  # type: ignore[return-value]


def _same_expr(node: ast.AST, text: str) -> list[ast.expr]:
    """The outermost expressions under `node` that read as `text`."""
    out: list[ast.expr] = []
    todo: list[ast.AST] = [node]
    while todo:
        cur = todo.pop()
        if isinstance(cur, ast.expr) and ast.unparse(cur) == text:
            out.append(cur)
        else:
            todo.extend(ast.iter_child_nodes(cur))
    return out


def _helpers(mod: PyModule) -> set[str]:
    """The host functions of the module that are this rule's reduction (its text up to
    formatting and the two names)."""
    kernels = {k.name: k for k in mod.kernels()}
    out = set()
    for fn in mod.functions():
        if fn.name in kernels or len(fn.args.args) != 5:
            continue
        launched = {dotted(c.func.value) for c in ast.walk(fn) if isinstance(c, ast.Call)
                    and isinstance(c.func, ast.Subscript)} & set(kernels)
        if len(launched) != 1:
            continue
        kernel = kernels[next(iter(launched))]
        want = _REDUCE.format(kernel=kernel.name, helper=fn.name)
        if normalized(_def_text(mod, kernel) + "\n" + _def_text(mod, fn)) == normalized(want):
            out.add(fn.name)
    return out


@dataclass(frozen=True, slots=True)
class ReduceBeforeContract(Pass):
    """A GEMM whose product is only summed over N -> B summed over N first, the GEMM at N = 1."""

    name: ClassVar[str] = "reduce-before-contract"
    category: ClassVar[Category] = Category.ALGORITHMIC
    summary: ClassVar[str] = ("a GEMM whose product is only summed over its N axis -> the right "
                              "operand summed over N first and the GEMM run with N = 1")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("reduced-operand",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # The rewrite removes a factor of N from the product's work and leaves a read of B: where
    # it applies, the M x N x K product it removes is the kernel's bulk (N is a GEMM's width, in
    # the hundreds at least), so even a memory-bound remainder is several times faster. The
    # figure stays below the gain a read of B instead of 2MNK flops gives at any N worth a
    # GEMM, and above every other rule's, so that the search tries it first where it applies;
    # a run's measurements correct it where it does not pay.
    prior: ClassVar[float] = 4.0

    # -- analysis ------------------------------------------------------------------------
    def _gemm(self, mod: PyModule, kernel: ast.FunctionDef, side: str = "n") -> _Gemm | str:
        """The kernel read as a GEMM whose product is summed over N (`side` "n") or over M
        ("m"), or why not."""
        ext, op = ("N", "right") if side == "n" else ("M", "left")
        loops = dot_loops(kernel)
        if len(loops) != 1:
            return "the kernel has no single dot loop"
        loop = loops[0]
        dots = mod.calls(loop, DOT)
        accs = accumulators(loop)
        if len(dots) != 1 or len(dots[0].args) < 2 or len(accs) != 1:
            return "the dot loop has more than one product"
        params = {a.arg for a in kernel.args.args}
        g = _Gemm(kernel, side=side)
        scope = Scope(mod, kernel, region=loop)
        load, flip, _ = _unwrap(scope, dots[0].args[1 if side == "n" else 0])
        if load is None or not load.args:
            return f"the dot's {op} operand is not read by a load the rule can follow"
        if any(isinstance(n, ast.Call) and callee(n) in BLOCK_PTR for n in ast.walk(kernel)):
            return "the operand is read through a block pointer"
        k_axis = (0 if side == "n" else 1) ^ int(flip)
        terms = _terms(scope, load.args[0], [])
        if terms is None:
            return f"the {op} operand's pointer is not a sum the rule can read"
        base = [t for t in terms if scope.scalar(t)]
        if len(base) != 1 or not (isinstance(base[0], ast.Name) and base[0].id in scope.params):
            return f"the {op} operand's base is not one pointer parameter (a batched operand?)"
        g.op_param = base[0].id
        axes: dict[int, tuple[ast.AST, ast.AST | None]] = {}
        for t in terms:
            if t in base:
                continue
            found = broadcast_times_stride(t, scope)
            if found is None or found[0][0] in axes:
                return f"a term of the {op} operand's pointer is not one axis's index times a stride: {mod.text(t)}"
            axes[found[0][0]] = (found[0][1], found[1])
        if set(axes) != {0, 1}:
            return f"the {op} operand's pointer does not index both axes of its tile"
        n_index, g.ext_stride = axes[1 - k_axis]
        k_index, g.k_stride = axes[k_axis]
        other, other_load = self._other_index(scope, dots[0].args[0 if side == "n" else 1], side)
        if other is not None and other_load is not None:
            g.other_param = _bound_param(scope, _kw(other_load, "mask", 1), other, params) or ""
        mask = _kw(load, "mask", 1)
        g.ext_param = _bound_param(scope, mask, n_index, params) or ""
        if not g.ext_param:
            return (f"the {op} operand's loads are not bounds-checked along {ext}: launched with "
                    f"{ext} = 1 they would read past the summed operand")
        fill = _kw(load, "other", 2)
        g.k_param = _bound_param(scope, mask, k_index, params) or \
            self._loop_bound(loop, params, set(constexpr_params(kernel))) or ""
        if not g.k_param:
            return "cannot tell which parameter is the product's K"
        if g.k_stride is not None and not (isinstance(g.k_stride, ast.Name) and g.k_stride.id in params):
            return f"the {op} operand's K stride `{mod.text(g.k_stride)}` cannot be set to one"
        if isinstance(g.k_stride, ast.Name) and g.k_stride.id != g.ext_param:
            owners = {id(n) for n in ast.walk(load.args[0])}
            for assign in ast.walk(kernel):
                if isinstance(assign, (ast.Assign, ast.AugAssign)) and any(
                        n is t for t in terms for n in ast.walk(assign)):
                    owners |= {id(n) for n in ast.walk(assign)}
            for name in scope.walked:
                for adv in scope.advances.get(name, ()):
                    owners |= {id(n) for n in ast.walk(adv)}
            if any(isinstance(u, ast.Name) and u.id == g.k_stride.id and id(u) not in owners
                   for u in ast.walk(kernel)):
                return f"the {op} operand's K stride {g.k_stride.id} is read by another access too"
        if g.ext_stride is not None and not (isinstance(g.ext_stride, (ast.Name, ast.Constant))):
            return f"the {op} operand's {ext} stride `{mod.text(g.ext_stride)}` is not a parameter"
        whole = Scope(mod, kernel)
        acc = next(iter(accs))
        inits = [n.value for n in ast.walk(kernel) if isinstance(n, ast.Assign) and _zero_init(n.value)
                 and any(isinstance(t, ast.Name) and t.id == acc for t in n.targets)]
        shape = inits[0].args[0] if len(inits) == 1 and isinstance(inits[0], ast.Call) and inits[0].args else None
        tiles = set(constexpr_params(kernel))
        at = 1 if side == "n" else 0
        if isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) == 2 \
                and isinstance(shape.elts[at], ast.Name) and shape.elts[at].id in tiles \
                and not (isinstance(shape.elts[1 - at], ast.Name) and shape.elts[1 - at].id == shape.elts[at].id):
            g.ext_tile = shape.elts[at].id
        seeds = [n for n in ast.walk(kernel) if isinstance(n, ast.Name) and n.id == acc
                 and isinstance(n.ctx, ast.Load) and not _inside(mod, n, loop)]
        stray = next((n for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == acc
                      and isinstance(n.ctx, ast.Load) and not _accumulates(mod, n)), None)
        if stray is not None:
            return f"the accumulator is read in the dot loop beyond the dot: `{mod.text(_statement(mod, stray))}`"
        flow = _flow(mod, kernel, whole, seeds, loop, None)
        if flow.why:
            return flow.why
        if any(axis not in (at, at - 2) for _, axis in flow.sums):
            other = "N (its columns)" if side == "m" else "M (its rows)"
            return (f"the epilogue sums the product over {other}, not over {ext}"
                    if any(axis is not None for _, axis in flow.sums) else "the epilogue sums the product over both axes")
        if flow.rows and flow.tiles:
            return "the product's tile is stored as well as summed"
        if flow.rows:
            if fill is None or not _zero(fill):
                return (f"the {op} operand's masked lanes are not loaded as zero: the epilogue's "
                        f"sum over the tile would take them at {ext} = 1")
            if other is None:
                return f"cannot tell which program ids walk the product's {'M' if side == 'n' else 'N'}"
            tile_ids = _sources(whole, n_index) - _sources(whole, other)
            for sink in flow.rows:
                if _sources(whole, sink.args[0]) & tile_ids:
                    return (f"the epilogue writes each {ext} tile's sums apart (partial sums another "
                            "kernel would add): one tile would leave the others unwritten")
            g.form = "fused"
            return g
        if len(flow.tiles) != 1 or callee(flow.tiles[0]) not in ("tl.store", "triton.language.store"):
            return "the product is not stored once"
        g.form, g.t_store = "stored", flow.tiles[0]
        store_mask = _kw(g.t_store, "mask", 2)
        if store_mask is None or g.ext_param not in _names_of_index(whole, store_mask):
            return (f"the product's store is not bounds-checked along {ext}: launched with {ext} = 1 "
                    "it would write past the buffer")
        g.t_param = _reads_param(whole, g.t_store.args[0], params) or ""
        if not g.t_param:
            return "the product's store does not write through one pointer parameter"
        return g

    @staticmethod
    def _other_index(scope: Scope, operand: ast.AST, side: str) -> tuple[ast.AST | None, ast.Call | None]:
        """The non-K index of the dot's other operand (the product's M index where N is
        summed, its N index where M is) and its load, or None where it cannot be read."""
        load, flip, _ = _unwrap(scope, operand)
        if load is None or not load.args:
            return None, None
        k_axis = (1 if side == "n" else 0) ^ int(flip)
        for t in _terms(scope, load.args[0], []) or ():
            found = broadcast_times_stride(t, scope)
            if found is not None and found[0][0] == 1 - k_axis:
                return found[0][1], load
        return None, load

    @staticmethod
    def _loop_bound(loop: ast.stmt, params: set[str], constexprs: set[str]) -> str | None:
        if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and loop.iter.args:
            stop = loop.iter.args[1] if len(loop.iter.args) > 1 else loop.iter.args[0]
            found = (names_in(stop) & params) - constexprs
            return next(iter(found)) if len(found) == 1 else None
        return None

    # -- sites ---------------------------------------------------------------------------
    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        whole = (0, len(mod.source))
        helpers = _helpers(mod)
        out = []
        for kernel in mod.kernels():
            launches = mod.launches(kernel.name)
            if not launches:
                continue
            present = any(isinstance(v, ast.Name) and self._reduced(mod, launches[0], v.id, helpers)
                          for v in HostArgs(mod, kernel, launches[0]).args.values())
            if len(dot_loops(kernel)) != 1 and not present:  # a product made without a dot: the rule's
                continue
            out.append(make_site(self.name, ir, index, whole, present, {"kernel": kernel.name},
                                 mod.span(kernel)))
        return out

    @staticmethod
    def _reduced(mod: PyModule, launch: ast.Call, name: str, helpers: set[str]) -> bool:
        host = mod.enclosing(launch, ast.FunctionDef)
        return host is not None and bool(helpers) and any(
            isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
            and isinstance(n.value, ast.Call) and callee(n.value) in helpers for n in ast.walk(host))

    # -- optimization --------------------------------------------------------------------
    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        found = [self._gemm(mod, kernel, side) for side in ("n", "m")]
        tried = [self._rewrite(ir, mod, kernel, g, site) if isinstance(g, _Gemm)
                 else Skipped(g, {"kernel": kernel.name}) for g in found]
        done = next((r for r in tried if isinstance(r, Applied)), None)
        if done is not None:
            return done
        # the refusal of the side that read further: a kernel read as a GEMM summed over M
        # (and refused later) says why that failed, not that it does not sum over N
        n, m = tried
        if any(w in getattr(n, "reason", "") for w in ("over M (its rows)", "along its rows")) \
                or (isinstance(found[1], _Gemm) and not isinstance(found[0], _Gemm)):
            return m
        return n

    def _rewrite(self, ir: KernelIR, mod: PyModule, kernel: ast.FunctionDef, g: _Gemm,
                 site: Site) -> PassResult:
        """The module with the product made on the summed operand (`g`), or why not."""
        launches = mod.launches(kernel.name)
        if len(launches) != 1 or not isinstance(launches[0].func, ast.Subscript) or mod.sharing(kernel.name):
            return Skipped("the GEMM is launched more than once or through a shared helper",
                           {"kernel": kernel.name})
        launch = launches[0]
        fn = mod.enclosing(launch, ast.FunctionDef)
        if fn is None:
            return Skipped("the GEMM is launched outside a host function", {"kernel": kernel.name})
        host = HostArgs(mod, kernel, launch)
        if self._reduced(mod, launch, ast.unparse(host.args.get(g.op_param, ast.Constant(0))), _helpers(mod)):
            return Skipped("the operand is summed already", {"kernel": kernel.name})
        missing = [p for p in (g.op_param, g.ext_param, g.k_param) if p not in host.args]
        if missing:
            return Skipped(f"the launch does not pass {missing[0]} where the rule can read it",
                           {"kernel": kernel.name})
        ext_text = ast.unparse(host.args[g.ext_param])
        same = [p for p in (g.k_param, g.other_param) if p and p in host.args
                and ast.unparse(host.args[p]) == ext_text]
        if same:
            return Skipped(f"the launch passes {ext_text} as {same[0]} too: the rule cannot set the "
                           "summed extent to 1 alone", {"kernel": kernel.name})
        foreign = _foreign(mod, kernel, _passed(host, {ext_text}), {g.op_param, g.t_param})
        if foreign:
            return Skipped(foreign, {"kernel": kernel.name})
        taken = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} | \
            {f.name for f in mod.functions()} | {a.arg for f in mod.functions() for a in f.args.args}
        edits: list[ByteEdit] = []
        launch_edits = self._launch(mod, kernel, launch, host, ext_text, taken)
        if isinstance(launch_edits, str):
            return Skipped(launch_edits, {"kernel": kernel.name})
        edits += launch_edits
        tile = host.args.get(g.ext_tile) if g.ext_tile else None
        if tile is not None and not (isinstance(tile, ast.Constant) and isinstance(tile.value, int)
                                     and tile.value <= N_TILE) \
                and not any(e.start <= mod.start(tile) < e.end or e.start == mod.start(tile) for e in edits):
            edits.append(ByteEdit(*mod.span(tile), str(N_TILE)))
        b_arg = host.args[g.op_param]
        k_stride = self._stride_text(g.k_stride, host)
        ext_stride = self._stride_text(g.ext_stride, host)
        if k_stride is None or ext_stride is None:
            return Skipped("the launch does not pass the summed operand's strides where the rule can read them",
                           {"kernel": kernel.name})
        if isinstance(g.k_stride, ast.Name) and g.k_stride.id != g.ext_param:
            arg = host.args.get(g.k_stride.id)
            if arg is None:
                return Skipped("the launch does not pass the summed operand's K stride where the rule can set it",
                               {"kernel": kernel.name})
            if ast.unparse(arg) != ext_text:  # an argument read as N passes 1 already
                edits.append(ByteEdit(*mod.span(arg), "1"))
        if g.form == "stored":
            more = self._consumer(mod, kernel, launch, fn, host, g, ext_text, taken)
            if isinstance(more, str):
                return Skipped(more, {"kernel": kernel.name})
            edits += more
        helper = next(iter(_helpers(mod)), "")
        if not helper:
            helper = fresh_name("_sum_along", taken)
            reduce_kernel = fresh_name("_sum_along_kernel", taken | {helper})
            taken |= {helper, reduce_kernel}
            at = _after_imports(mod)
            edits.append(ByteEdit(at, at, _imports(mod) + _REDUCE.format(kernel=reduce_kernel, helper=helper)))
        summed = fresh_name(f"{_stem(mod, b_arg)}_summed", taken)
        stmt = _statement(mod, launch)
        at = line_start(mod.source, mod.start(stmt))
        indent = indent_of(mod.source, mod.start(stmt))
        k_text = ast.unparse(host.args[g.k_param])
        edits.append(ByteEdit(at, at, f"{indent}{summed} = {helper}({mod.text(b_arg)}, {k_text}, "
                                      f"{ext_text}, {k_stride}, {ext_stride})\n"))
        edits.append(ByteEdit(*mod.span(b_arg), summed))
        edits = sorted(set(edits), key=lambda e: (e.start, e.end))
        if any(a.end > b.start for a, b in zip(edits, edits[1:])):
            return Skipped("the rewrite's edits overlap (an argument read in two roles)", {"kernel": kernel.name})
        done = finish(ir, site, edits)
        if not isinstance(done, Applied):
            return done
        tile = g.ext_tile if self._dot_free(done.ir, kernel.name) is not None else ""
        listed = self._gemv_listed(done.ir, kernel.name, g.side, bool(tile))
        if listed is None:
            return done
        if tile:
            from kir import parse  # noqa: PLC0415

            listed = self._dot_free(parse(listed, "triton"), kernel.name) or listed
        return finish(ir, site, [ByteEdit(0, len(mod.source), listed)])

    @staticmethod
    def _gemv_listed(ir: KernelIR, name: str, side: str, unit: bool) -> str | None:
        """The rewritten module with the GEMM `name` autotuned over the matrix-vector list
        (`gemv_configs`; `unit`: the summed extent's tile 1, the product made without a dot)
        in place of the tiles its launch (or its own list) gave it, or None where its launch
        cannot take a list (`sweep_edit`'s refusals): it keeps them then."""
        from kir import Edit, Span  # noqa: PLC0415

        made = sweep_edit(ir, name, gemv_configs(side, unit))
        if isinstance(made, SweepRefusal):
            return None
        return ir.apply(Edit(Span(e.start, e.end), e.text) for e in made[0]).unparse()

    @staticmethod
    def _dot_free(ir: KernelIR, name: str) -> str | None:
        """The module with the GEMM `name`'s `tl.dot(a, b)` written as the fp32 products summed
        over K (`tl.sum(a[:, :, None] * b[None, :, :], axis=1)`, operands cast to fp32), which
        takes a tile of 1 along the summed extent where a dot takes 16; None where the dot passes
        an option beyond its precision (an `out_dtype` other than fp32, a fused accumulator the
        rule cannot read) or the accumulator is not fp32."""
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == name), None)
        loops = dot_loops(kernel) if kernel is not None else []
        if kernel is None or len(loops) != 1:
            return None
        dots = mod.calls(loops[0], DOT)
        accs = accumulators(loops[0])
        if len(dots) != 1 or len(dots[0].args) < 2 or len(accs) != 1:
            return None
        dot = dots[0]
        acc = next(iter(accs))
        inits = [n.value for n in ast.walk(kernel) if isinstance(n, ast.Assign) and _zero_init(n.value)
                 and any(isinstance(t, ast.Name) and t.id == acc for t in n.targets)]
        if len(inits) != 1 or "float32" not in ast.unparse(inits[0]):
            return None
        fused = dot.args[2] if len(dot.args) > 2 else _kw(dot, "acc", 99)
        if len(dot.args) > 3 or any(k.arg not in ("acc", "input_precision", "allow_tf32", "out_dtype",
                                                  "max_num_imprecise_acc") for k in dot.keywords):
            return None
        out = _kw(dot, "out_dtype", 99)
        if out is not None and "float32" not in ast.unparse(out):
            return None
        lang = callee(dot).rsplit(".", 1)[0]
        a, b = (f"{mod.text(x) if isinstance(x, (ast.Name, ast.Attribute, ast.Call)) else f'({mod.text(x)})'}"
                f".to({lang}.float32)" for x in dot.args[:2])
        text = f"{lang}.sum({a}[:, :, None] * {b}[None, :, :], axis=1)"
        if fused is not None:
            text = f"({mod.text(fused)} + {text})"
        from kir import Edit, Span  # noqa: PLC0415

        return ir.apply([Edit(Span(*mod.span(dot)), text)]).unparse()

    @staticmethod
    def _stride_text(node: ast.AST | None, host: HostArgs) -> str | None:
        """A stride of the summed operand as the host evaluates it before the rewrite."""
        if node is None:
            return "1"
        if isinstance(node, ast.Constant):
            return repr(node.value)
        if isinstance(node, ast.Name) and node.id in host.args:
            return f"({ast.unparse(host.args[node.id])})"
        return None

    def _launch(self, mod: PyModule, kernel: ast.FunctionDef, launch: ast.Call, host: HostArgs,
                ext_text: str, taken: set[str]) -> list[ByteEdit] | str:
        """A launch's edits for N = 1: each argument that reads as N passes 1 (where its
        parameter is also read as a value, a new parameter takes those reads and the real N),
        and the grid's reads of N read 1."""
        edits: list[ByteEdit] = []
        split: list[tuple[str, str]] = []
        for param, arg in host.args.items():
            if ast.unparse(arg) != ext_text:
                continue
            edits.append(ByteEdit(*mod.span(arg), "1"))
            _, values = _extent_uses(mod, kernel, param)
            if values:
                full = fresh_name(f"{param}_full", taken)
                taken.add(full)
                split.append((full, ext_text))
                edits += [ByteEdit(*mod.span(v), full) for v in values]
        grid = launch_grid(mod, launch)
        if grid is None or isinstance(grid, ast.FunctionDef):
            return "the launch's grid is not an expression the rule can read"
        grid_stmt = _statement(mod, grid)
        if not _inside(mod, grid, launch) and grid_stmt is not None:
            name = launch.func.slice  # type: ignore[attr-defined]
            fn = mod.enclosing(launch, ast.FunctionDef)
            reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(name, ast.Name)
                     and n.id == name.id and isinstance(n.ctx, ast.Load)]
            if len(reads) != 1:
                return "the launch's grid is shared with another launch"
        edits += [ByteEdit(*mod.span(n), "1") for n in _same_expr(grid, ext_text)]
        if split:
            edits.append(_new_params(mod, kernel, [f for f, _ in split]))
            close = mod.end(launch) - 1
            before = mod.source[:close].rstrip()
            lead = "" if before.endswith(b",") or before.endswith(b"(") else ", "
            edits.append(ByteEdit(close, close, lead + ", ".join(f"{f}={t}" for f, t in split)))
        return edits

    def _consumer(self, mod: PyModule, kernel: ast.FunctionDef, launch: ast.Call, fn: ast.AST,
                  host: HostArgs, g: _Gemm, ext_text: str, taken: set[str]) -> list[ByteEdit] | str:
        """The stored form's edits beyond the GEMM's launch: the buffer allocated with one
        column (one row where M is summed), and its consumer launched with the extent 1, after
        checking that the consumer reads the buffer only through sums along that extent."""
        ext = "N" if g.side == "n" else "M"
        buf = host.args.get(g.t_param)
        if not isinstance(buf, ast.Name):
            return "the product's buffer is not passed as a name the rule can follow"
        reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == buf.id
                 and isinstance(n.ctx, ast.Load)]
        binds = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                 and any(isinstance(t, ast.Name) and t.id == buf.id
                         for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
        if len(binds) != 1 or not isinstance(binds[0], ast.Assign) \
                or not (isinstance(binds[0].value, ast.Call) and callee(binds[0].value) in FACTORIES):
            return "the product's buffer is not allocated once in the host function"
        alloc = binds[0].value
        shape = alloc.args[0] if alloc.args and isinstance(alloc.args[0], (ast.Tuple, ast.List)) else None
        dims = list(shape.elts) if shape is not None else [a for a in alloc.args if not isinstance(a, ast.Starred)]
        ext_dims = [d for d in dims if ast.unparse(d) == ext_text]
        at = -1 if g.side == "n" else -2
        if len(dims) != 2 or len(ext_dims) != 1 or dims[at] is not ext_dims[0]:
            return f"the product's buffer is not sized (M, N) by the {ext} the launch passes"
        pitch = ast.unparse(dims[-1])  # a fresh buffer's row stride
        consumers = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Subscript)
                     and c is not launch and any(_inside(mod, r, c) for r in reads)]
        if len(consumers) != 1:
            return "the product is read by more than one kernel, or by none"
        consumer = consumers[0]
        outside = [r for r in reads if not _inside(mod, r, launch) and not _inside(mod, r, consumer)]
        if outside:
            return f"the product is also read outside its consumer (line {outside[0].lineno})"
        ckernel = next((k for k in mod.kernels() if k.name == dotted(consumer.func.value)), None)  # type: ignore[attr-defined]
        if ckernel is None or mod.sharing(ckernel.name) or len(mod.launches(ckernel.name)) != 1:
            return "the product's consumer is not a kernel of the module launched once"
        chost = HostArgs(mod, ckernel, consumer)
        passed = [p for p, a in chost.args.items() if isinstance(a, ast.Name) and a.id == buf.id]
        if len(passed) != 1:
            return "the consumer does not take the product as one parameter"
        # the GEMM's own store must address the buffer by the extents or by its strides
        why = self._addresses(mod, kernel, g.t_store.args[0], _passed(host, {ext_text, pitch}),  # type: ignore[union-attr]
                              host, buf.id)
        if why:
            return why
        why = self._sums_along(mod, ckernel, passed[0], chost, g.side, ext_text, pitch, buf.id)
        if why:
            return why
        edits = [ByteEdit(*mod.span(ext_dims[0]), "1")]
        more = self._launch(mod, ckernel, consumer, chost, ext_text, taken)
        if isinstance(more, str):
            return f"the consumer: {more}"
        return edits + more

    @staticmethod
    def _addresses(mod: PyModule, kernel: ast.FunctionDef, ptr: ast.AST, allowed: set[str],
                   host: HostArgs, buf: str) -> str:
        """Why a pointer into the buffer would not address the buffer with its extent 1 ("" if
        it would): each stride is one, a parameter passed an extent of the buffer (`allowed`),
        or one passed the buffer's own stride."""
        scope = Scope(mod, kernel)
        terms = _terms(scope, ptr, [])
        if terms is None:
            return "the product's pointer is not a sum the rule can read"
        nodes: list[ast.AST] = []
        todo: list[tuple[ast.AST, int]] = [(t, 0) for t in terms]
        while todo:
            cur, depth = todo.pop()
            for n in ast.walk(cur):
                nodes.append(n)
                value = scope.value(n) if isinstance(n, ast.Name) else None
                if value is not None and depth < 8:
                    todo.append((value, depth + 1))
        tiles = set(constexpr_params(kernel))
        for node in nodes:
            if isinstance(node, ast.Name) and node.id in host.args and node.id not in allowed | tiles:
                got = host.dims.get(node.id) or stride_of(host.args[node.id])
                if isinstance(node.ctx, ast.Load) and got is None and _is_stride(mod, node):
                    return f"the product is addressed with a stride ({node.id}) the rule cannot follow"
                if got is not None and got[0] != buf:
                    return f"the product is addressed with another tensor's stride ({node.id})"
        return ""

    def _sums_along(self, mod: PyModule, kernel: ast.FunctionDef, param: str, host: HostArgs,
                    side: str, ext_text: str, pitch: str, buf: str) -> str:
        """Why the consumer does not read `param` only through sums along the product's N
        axis (`side` "n"; its M axis for "m"), "" if it does."""
        scope = Scope(mod, kernel)
        params = {a.arg for a in kernel.args.args}
        allowed = _passed(host, {ext_text, pitch})
        loads = [c for c in mod.calls(kernel, LOAD) if c.args and _reads_param(scope, c.args[0], params) == param]
        writes = [c for c in mod.calls(kernel, WRITES) if c.args and _reads_param(scope, c.args[0], params) == param]
        if writes:
            return "the consumer writes the product"
        if not loads or any(isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Load)
                            and not any(_inside(mod, n, ld) for ld in loads) and not _assigned_pointer(mod, scope, n, loads)
                            for n in ast.walk(kernel)):
            return "the consumer reads the product other than by loads the rule can follow"
        loops = [n for n in ast.walk(kernel) if isinstance(n, (ast.For, ast.While))]
        wrong = ("the consumer sums the product over M (its rows), not over N" if side == "n" else
                 "the consumer sums the product over N (its columns), not over M")
        for ld in loads:
            other = _kw(ld, "other", 2)
            if other is not None and not _zero(other):
                return f"the consumer's load of the product fills masked lanes with {mod.text(other)}, not zero"
            why = self._addresses(mod, kernel, ld.args[0], allowed, host, buf)
            if why:
                return f"the consumer: {why}"
            got = self._summed_axis(mod, scope, ld.args[0], side, _passed(host, {pitch}), host, buf)
            if isinstance(got, str):
                return got
            axis_of, index = got
            if _sources(scope, index) & (pid_names(kernel) | {f"program_id({a})" for a in range(3)}):
                return (f"the consumer sums a slice of {'N' if side == 'n' else 'M'} per program "
                        "(partial sums): launched with one program there the others go unwritten")
            walks = _sources(scope, index)
            around = [lp for lp in loops if _inside(mod, ld, lp) and isinstance(lp, ast.For)
                      and names_in(lp.target) & walks]
            flow = _flow(mod, kernel, scope, [ld], None, around)
            if flow.why:
                return f"the consumer: {flow.why}"
            if not flow.sums:
                return "the consumer does not sum the product"
            if flow.rows:
                return ("the consumer stores a sum per chunk of the summed axis (partial sums): "
                        "launched with one chunk the others go unwritten")
            for _, axis in flow.sums:
                if axis_of == -1 and axis not in (None, 0, -1):
                    return wrong
                if axis_of >= 0 and axis not in (axis_of, axis_of - 2):
                    return wrong if axis is not None else "the consumer sums the product over both axes"
            if flow.tiles:
                return "the consumer stores the product's values unsummed"
        foreign = _foreign(mod, kernel, _passed(host, {ext_text}), {param})
        return f"the consumer: {foreign}" if foreign else ""

    @staticmethod
    def _summed_axis(mod: PyModule, scope: Scope, ptr: ast.AST, side: str, pitches: set[str],
                     host: HostArgs, buf: str) -> tuple[int, ast.AST] | str:
        """The tile axis of a load's index along the summed extent (-1: a 1-D load), or why
        there is none. Along N (`side` "n") the index with unit stride or the buffer's last
        stride; along M the one whose stride is the buffer's row pitch (a parameter passed the
        buffer's last extent, `pitches`, or the buffer's first stride)."""
        def kind(stride: ast.AST | None) -> str:
            if stride is None:
                return "n"
            if isinstance(stride, ast.Name):
                got = host.dims.get(stride.id) or stride_of(host.args.get(stride.id, ast.Constant(0)))
                if got in ((buf, 1), (buf, -1)):
                    return "n"
                if got in ((buf, 0), (buf, -2)) or stride.id in pitches:
                    return "m"
            return "?"

        terms = _terms(scope, ptr, [])
        if terms is None:
            return "the consumer's pointer is not a sum the rule can read"
        vector = [t for t in terms if not scope.scalar(t)]
        across = ("the consumer reads the product along its rows (the M axis), not its columns" if side == "n"
                  else "the consumer reads the product along its columns (the N axis), not its rows")
        if all(broadcast_times_stride(t, scope) is None for t in vector):
            if len(vector) != 1:
                return "the consumer reads the product one element at a time" if not vector else across
            term = vector[0]
            if scope.index(term) is not None:
                found = "n"
            elif isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult):
                found = next((kind(s) for v, s in ((term.left, term.right), (term.right, term.left))
                              if scope.index(v) is not None and scope.scalar(s)), "?")
            else:
                found = "?"
            if found != side:
                return across
            # the scalar terms beside the index that step along the summed axis carry its
            # offset (`start` of `row * N + start + arange`; `r0 * N` of a walk down the rows)
            def along_rows(t: ast.AST) -> bool:
                return isinstance(t, ast.BinOp) and isinstance(t.op, ast.Mult) and "m" in (
                    kind(t.left), kind(t.right))
            offsets = [t for t in terms if scope.scalar(t) and along_rows(t) == (side == "m")]
            return -1, ast.Tuple([term, *offsets], ast.Load())
        axes = []
        for t in vector:
            got = broadcast_times_stride(t, scope)
            if got is None:
                return f"a term of the consumer's pointer is not one axis's index times a stride: {mod.text(t)}"
            (axis, inner), stride = got
            if kind(stride) == side:
                axes.append((axis, inner))
        if len(axes) != 1:
            return across
        return axes[0]

    # -- de-optimization -----------------------------------------------------------------
    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("reduce-before-contract is one way: the start it came from is the lineage's",
                       {"site": site.anchor})


def _foreign(mod: PyModule, kernel: ast.FunctionDef, extents: set[str], own: set[str]) -> str:
    """Why a kernel's parameters passed the summed extent cannot all take 1: an access to a
    tensor other than `own` (the summed operand, the product) addresses or bounds itself by
    one of them ("" if none does)."""
    scope = Scope(mod, kernel)
    params = {a.arg for a in kernel.args.args}
    for call in mod.calls(kernel, LOAD | WRITES):
        if not call.args or _reads_param(scope, call.args[0], params) in own:
            continue
        mask = _kw(call, "mask", 2 if callee(call) in WRITES else 1)
        loops = [lp.iter for lp in ast.walk(kernel) if isinstance(lp, ast.For) and _inside(mod, call, lp)]
        hit = sorted({n for node in [call.args[0], mask, *loops] if node is not None
                      for n in _extent_reads(scope, node, extents)})
        if hit:
            return (f"another tensor's access is sized by {hit[0]} (line {call.lineno}): the rule "
                    "cannot set the summed extent to 1 there")
    return ""


def _extent_reads(scope: Scope, node: ast.AST, extents: set[str], depth: int = 0) -> set[str]:
    """The `extents` an expression reads, through names assigned once, except inside a tile
    count (`tl.cdiv(N, B)`, `(N + B - 1) // B`): a count of programs the grid agrees with."""
    if depth > 12:
        return set()
    if is_cdiv(node) or (
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)):
        return set()
    if isinstance(node, ast.Name):
        if node.id in extents:
            return {node.id}
        value = scope.values.get(node.id) if node.id not in scope.params else None
        return _extent_reads(scope, value, extents, depth + 1) if value is not None else set()
    return {n for child in ast.iter_child_nodes(node) for n in _extent_reads(scope, child, extents, depth)}


def _stem(mod: PyModule, node: ast.AST) -> str:
    """A name for what a host expression reads: `weight` of `weight.contiguous()` or of
    `self.weight` (an attribute that is not a method called)."""
    for n in ast.walk(node):
        parent = mod.parents.get(n)
        if isinstance(n, ast.Attribute) and not (isinstance(parent, ast.Call) and parent.func is n):
            return n.attr
        if isinstance(n, ast.Name) and n.id != "self":
            return n.id
    return "operand"


def _passed(host: HostArgs, texts: set[str]) -> set[str]:
    """The parameters a launch passes one of `texts` (as the source reads)."""
    return {p for p, a in host.args.items() if ast.unparse(a) in texts}


def _is_stride(mod: PyModule, node: ast.Name) -> bool:
    parent = mod.parents.get(node)
    return isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult)


def _assigned_pointer(mod: PyModule, scope: Scope, node: ast.Name, loads: list[ast.Call]) -> bool:
    """A read of the parameter inside a pointer name's value that a followed load expands."""
    stmt = _statement(mod, node)
    if not (isinstance(stmt, (ast.Assign, ast.AugAssign))):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    names = {t.id for t in targets if isinstance(t, ast.Name)}
    return any(isinstance(n, ast.Name) and n.id in names for ld in loads for n in ast.walk(ld.args[0]))
