"""What the constructs of a CUDA C++ kernel *do*, found from their use, never their names.

The roles below are read from the tree-sitter IR (`kir.cuda`) of a translation unit; the names
a user chose (`As`, `tile`, `sdata`, `acc`, `TILE`) play no part. Each finder returns the roles
it recognized and, for a construct that looks like a role but cannot be told, a `Refusal`
saying why (`refusals(ir)` collects them).

- `shared_arrays`: `__shared__` arrays with their element type and constant extents (an
  extent over a template's parameters has its value where every call of the template agrees).
- `stagings`: a global -> shared copy (`Staging`) in a kernel or a `__device__` helper every
  thread of the block calls alike: a store into a shared array whose value is a
  read of a global pointer parameter, written directly (`sh[i] = g[j]`), through a guarded
  register temporary (`T v = 0; if (ok) v = g[j]; sh[i] = v;`), as a ternary
  (`sh[i] = ok ? g[j] : 0`, or its two branches `if (ok) sh[i] = g[j]; else sh[i] = 0;`),
  or as a vector copy (`*(float4*)&sh[i] = *(const float4*)&g[j]`),
  a conversion call or a load intrinsic (`__ldg(&g[j])`) around the read allowed, the read
  possibly spelled by a function-like macro that expands to one subscript (`AT(g, r, c)`; the
  expansion is the copy's source). A fill named by a constant bound once (`const T zero =
  T(0);`) is that constant. A barrier must follow it in the function.
- `micro_kernels`: a GEMM micro-kernel (`MicroKernel`): a loop over K whose body stages tiles
  of two operands in shared memory and runs a constant-trip inner loop of scalar multiply-adds
  of the two tiles into a per-thread register tile (a scalar or a local array), then an
  epilogue storing the accumulators to global memory. It carries the block tile (BM, BN, BK),
  the thread tile (TM, TN), the warp tile where the launch's block is known, each operand's
  layout in shared memory, the element and accumulator types, and the spans a rewrite replaces.
- `reduction_trees`: a shared-memory reduction tree (`ReductionTree`): a `for` loop whose
  stride is halved (`s >>= 1`, `s /= 2`, `s = s / 2`) or doubled around a barrier (or a
  `while` loop over a stride declared or assigned right before it and updated once in its
  body after its other uses there; one variable may be the stride of several loops, each
  setting it first, and is read nowhere else),
  combining `sh[t] (op)= sh[t + s]` under `if (t < s)` (with `&& t + s < extent`, or
  `t % (2*s) == 0`), or the same steps unrolled with constant strides (each possibly under
  `if (E >= K) { ... }`, E the tree's extent); the combine is a sum, a
  max or a min (`+=`, `fmaxf`, `max`, a comparison ternary), over one or several arrays in the
  same steps, the slots possibly copied to locals first (`a = sh[t]; b = sh[t + s]; sh[t] = a +
  b;`). The array is a shared array, a shared pointer parameter or a local pointer bound once
  into one (`float* red = smem + n;`). The extent is the block (`blockDim.x`, or a local
  bound to it), a constant, or a template parameter (its value where every instantiation in
  the unit names the same one). A tree per row of threads folds the last index of a 2-D
  array whose first index is threadIdx.y (`sh[ty][tx] += sh[ty][tx + s]`: `ReductionTree.rows`);
  a fold along another index is refused. The barrier may be a cooperative-groups thread
  block's `sync()`, the slot its `thread_rank()` and the extent its `size()` where the
  launch's block is one-dimensional. A step may also fold two arrays jointly as a maximum
  and a sum rescaled to it (online softmax, log-sum-exp: `_merge.online_merge`, read by
  running the step's statements over its slots; `ReductionTree.merge`).
- `shuffle_reductions`: a block reduction through warp shuffles (`ShuffleReduction`): a fold
  over strides 16..1 per warp, lane 0 of each warp storing to a shared slot per warp, a barrier,
  the first warp folding the slots, thread 0 using the value.
- `stride_loops`: loops whose index starts at the thread's global (or in-block) index and
  steps by the grid's (block's) thread count (`StrideLoop.kind` grid | block), or at its lane
  and by 32 (a literal, `warpSize` or a named constant: warp); a constant or
  template-parameter step counts as the block's where the launch's block proves it. Loops of
  kernels and of `__device__` helpers every thread of a block calls alike (`block_helpers`).
- `row_reductions`: a block-stride loop that folds a row into a register (`acc += x[...]`,
  `m = fmaxf(m, x[...])`) and the tree or shuffles that combine the threads' partials.
- `register_blocks`: per-thread local arrays of constant extent (register tiles).
- `launch_block`: the launch's block size as the host sets it: the kernel's host module beside
  the `.cu` (`experts.cudahost.launch(func, grid, block, ...)`, `cuLaunchKernel(...)` with its
  six dimensions, a CuPy `kernel(grid, block, args)` / `block=(...)` keyword), or a
  `<<<grid, block>>>` launch in the translation unit (of a template too: `k<256><<<g, b>>>`); names are resolved to integer literals
  bound once in the module or as a parameter default.
- `constant_trip(loop)`: whether a `for` loop's trip count is known at compile time (literal,
  macro, `constexpr`/`const` integer or template parameter bounds and steps).

Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from passes.cuda._c import code_view, pointer_fields
from passes.cuda._tree import (
    Scope,
    _evaluate,
    block_items,
    callee,
    children,
    declared_names,
    if_parts,
    key,
    loop_body,
    subtree,
    text,
)

if TYPE_CHECKING:
    from kir import KernelIR

_TRIVIA = frozenset({"comment", "preproc_call"})
VECTOR_BYTES = {"float4": 16, "int4": 16, "uint4": 16, "double2": 16, "float2": 8, "int2": 8,
                "uint2": 8, "half2": 4, "__half2": 4, "__nv_bfloat162": 4, "nv_bfloat162": 4}
ELEMENT_BYTES = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "double": 8,
                 "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "char": 1,
                 "signed char": 1, "unsigned char": 1, "short": 2, "long long": 8, "int8_t": 1,
                 "uint8_t": 1, "int16_t": 2, "int32_t": 4, "uint32_t": 4, "int64_t": 8}
# conversions a load or a product may be wrapped in (they do not change which element is read)
_CONVERSION = re.compile(r"^(?:__\w+2float|__float2\w+|__\w+_as_\w+|static_cast|float|double|"
                         r"__ldg|__ldca|__ldcg|__ldcs|__ldlu|__ldcv|convert\w*|to_float)$")
_SYNC = re.compile(r"^__syncthreads(?:_count|_and|_or)?$")
_LOOP_TYPES = frozenset({"for_statement", "while_statement", "do_statement"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """A construct that looks like `role` but whose role cannot be told: `reason` says why."""

    role: str
    reason: str
    span: tuple[int, int]
    kernel: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "reason": self.reason, "span": list(self.span),
                "kernel": self.kernel}


@dataclass(frozen=True, slots=True)
class SharedArray:
    """A `__shared__` array: element type, extents (None: not a compile-time constant;
    `dynamic`: an `extern __shared__` array of unknown size)."""

    name: str
    element: str
    extents: tuple[int | None, ...]
    decl: tuple[int, int]
    dynamic: bool = False
    align: int | None = None

    @property
    def element_bytes(self) -> int | None:
        return element_bytes(self.element)


@dataclass(frozen=True, slots=True)
class Staging:
    """A global -> shared copy. `form`: direct | temporary | ternary | vector. `store` is the
    statement writing the shared array, `span` every statement of the copy (the temporary's
    declaration and guard included); `guard` is the condition under which global memory is
    read (None: always) and `fill` what the element is otherwise; `dst` / `src` are the
    shared and global element expressions (`&dst` / `&src` are their addresses); `width` the
    elements one copy moves (1, or a vector's lanes)."""

    kernel: str
    array: str
    source: str
    form: str
    store: tuple[int, int]
    span: tuple[int, int]
    dst: str
    src: str
    guard: str | None
    fill: str | None
    element: str
    width: int = 1
    vector: str | None = None
    loop: tuple[int, int] | None = None
    """The innermost loop holding the copy (the K loop of a tiled kernel), or None."""
    converted: bool = False
    """The copy converts what it reads (a conversion call or cast, or a global element type
    other than the shared one): it moves values, not bytes."""
    parts: tuple[tuple[int, int], ...] = ()
    """The statements of the copy in order (a temporary's declaration, its guard, the store
    last); others may stand between them (`span` runs from the first to the store)."""

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "array": self.array, "source": self.source,
                "form": self.form, "dst": self.dst, "src": self.src, "guard": self.guard,
                "fill": self.fill, "element": self.element, "width": self.width,
                "vector": self.vector, "converted": self.converted, "span": list(self.span)}


@dataclass(frozen=True, slots=True)
class Operand:
    """One operand of a micro-kernel as the inner loop reads it from shared memory.

    `index`: the subscripts of the read (one per dimension; a flattened read has one),
    `k_position`: which subscript carries the reduction index (for a flattened read: 0), and
    `layout`: "k-contiguous" when consecutive k are adjacent in shared memory (an A tile
    stored M x K, a B tile stored N x K), "k-strided" otherwise."""

    array: str
    index: tuple[str, ...]
    k_position: int
    layout: str
    extents: tuple[int | None, ...]
    read: str
    """The read's expression text as the product uses it (before any conversion)."""


@dataclass(frozen=True, slots=True)
class MicroKernel:
    """A GEMM micro-kernel: per thread, `acc[TM][TN] += A[m][k] * B[k][n]` over a shared tile.

    Sizes are None where they are not compile-time constants. `k_loop` is the loop over K
    (staging + inner loop + barriers), `inner` the constant-trip loop over the tile's k (its
    variable `k`), `update` the multiply-add statement, `epilogue` the statements after the
    K loop that read the accumulator and store to `output` (a global pointer)."""

    kernel: str
    a: Operand
    b: Operand
    accumulator: str
    acc_type: str
    acc_extents: tuple[int, ...]
    acc_index: tuple[str, ...]
    """The subscripts of the accumulator in the multiply-add (empty for a scalar)."""
    element: str
    block_tile: tuple[int | None, int | None, int | None]
    thread_tile: tuple[int, int]
    warp_tile: tuple[int, int] | None
    k_var: str
    k_loop: tuple[int, int]
    k_step: str
    k_extent: str
    inner: tuple[int, int]
    update: tuple[int, int]
    stagings: tuple[Staging, ...]
    epilogue: tuple[tuple[int, int], ...]
    output: str | None
    block: tuple[int, int, int] | None
    fma: str
    """`mul-add` (`acc += a * b`), `fma` (`acc = fmaf(a, b, acc)`) or `assign-add`
    (`acc = acc + a * b`)."""

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "a": _operand_json(self.a), "b": _operand_json(self.b),
                "accumulator": self.accumulator, "acc_type": self.acc_type,
                "acc_extents": list(self.acc_extents), "acc_index": list(self.acc_index),
                "element": self.element,
                "block_tile": list(self.block_tile), "thread_tile": list(self.thread_tile),
                "warp_tile": list(self.warp_tile) if self.warp_tile else None,
                "k": self.k_var, "k_step": self.k_step, "k_extent": self.k_extent,
                "stagings": [s.to_json() for s in self.stagings], "output": self.output,
                "block": list(self.block) if self.block else None, "fma": self.fma}


def _operand_json(op: Operand) -> dict[str, Any]:
    return {"array": op.array, "index": list(op.index), "k_position": op.k_position,
            "layout": op.layout, "extents": list(op.extents), "read": op.read}


@dataclass(frozen=True, slots=True)
class Combine:
    """One array a reduction tree combines: `op` is sum | max | min, `statement` the combine's
    text, `element` the array's element type."""

    array: str
    op: str
    statement: str
    element: str


@dataclass(frozen=True, slots=True)
class ReductionTree:
    """A shared-memory reduction tree: after `span`, slot 0 of each combined array holds the
    reduction of its first `extent` slots, which thread `t` (the expression `tid`) wrote.

    `extent` is "blockDim.x" or a constant; `stride` the stride variable (None: unrolled);
    `form`: halving | doubling | unrolled. `span` covers the loop (or the unrolled steps) and
    the barrier closing it; `store` the statements writing each thread's value into the
    arrays before the tree (with the barrier after them), when found right before it."""

    kernel: str
    combines: tuple[Combine, ...]
    tid: str
    extent: str
    extent_value: int | None
    stride: str | None
    form: str
    span: tuple[int, int]
    store: tuple[int, int] | None
    values: tuple[str, ...]
    """Per combined array, the value each thread stored into its slot (from `store`)."""
    block: tuple[int, int, int] | None
    rows: tuple[str, ...] = ()
    """The indices before the slot's of a tree per row of threads (`sh[threadIdx.y][t]`: each
    row of the block folds its own row of the array), as written; () for one tree over the
    block."""
    merge: str = ""
    """A step folding its arrays jointly (`_merge.online_merge`: a maximum and a sum rescaled
    to it), as one statement over placeholders `klO_<array>` (own slot, written) and
    `klP_<array>` (the partner's); "" where each combine folds its array alone."""

    def slot(self, array: str, index: str) -> str:
        """The text of slot `index` of `array` in the row of the thread running it."""
        return array + "".join(f"[{r}]" for r in self.rows) + f"[{index}]"

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "tid": self.tid, "extent": self.extent, "rows": list(self.rows),
                "extent_value": self.extent_value, "stride": self.stride, "form": self.form,
                "combines": [{"array": c.array, "op": c.op, "element": c.element}
                             for c in self.combines],
                "values": list(self.values), "span": list(self.span),
                "block": list(self.block) if self.block else None}


@dataclass(frozen=True, slots=True)
class StrideLoop:
    """A loop stepping by the grid's (`grid`), the block's (`block`) or a warp's (`warp`)
    thread count."""

    kernel: str
    kind: str
    var: str
    span: tuple[int, int]
    start: str
    bound: str
    step: str


@dataclass(frozen=True, slots=True)
class RowReduction:
    """A block-stride loop folding a row into register `acc` with `op`, and how the threads'
    partials are combined (`tree`: a shared-memory tree; `shuffle`: warp shuffles; None)."""

    kernel: str
    acc: str
    op: str
    loop: StrideLoop
    combine: str | None


@dataclass(frozen=True, slots=True)
class RegisterBlock:
    """A per-thread local array of constant extents (a register tile)."""

    kernel: str
    name: str
    element: str
    extents: tuple[int, ...]
    decl: tuple[int, int]


@dataclass(frozen=True, slots=True)
class LaunchBlock:
    """The block size a launch uses: `dims` (x, y, z) or None with `reason`; `where` says
    which launch form it was read from."""

    dims: tuple[int, int, int] | None
    where: str
    reason: str = ""

    @property
    def threads(self) -> int | None:
        return None if self.dims is None else self.dims[0] * self.dims[1] * self.dims[2]


# ---------------------------------------------------------------------------------------------
# the translation unit


def element_bytes(element: str) -> int | None:
    """Bytes of a scalar or vector element type by its spelling (None: unknown)."""
    name = " ".join(element.replace("const", " ").replace("volatile", " ").split())
    return VECTOR_BYTES.get(name) or ELEMENT_BYTES.get(name)


def struct_bytes(unit: Unit, name: str) -> int | None:
    """Bytes of a `struct` / `class` the unit defines once whose fields are scalars or
    vectors of known size (or arrays of them with constant extents), laid out as the compiler
    lays them out: each field at a multiple of its own size, the whole a multiple of its largest
    field. None for any other type (a member function, an alignment, a nested type...)."""
    code = code_view(unit.ir.text)
    found = re.findall(rf"\b(?:struct|class)\s+{re.escape(name)}\s*\{{([^{{}}]*)\}}\s*;", code)
    if len(found) != 1 or re.search(r"[()]|\b(?:static|__align__|alignas|public|private)\b",
                                    found[0]):
        return None
    size = largest = 0
    for field_ in filter(None, (f.strip() for f in found[0].split(";"))):
        m = re.fullmatch(r"((?:const\s+)?(?:unsigned\s+|signed\s+)?(?:long\s+)?[\w:]+)\s+(.+)",
                         " ".join(field_.split()))
        if m is None:
            return None
        element = element_bytes(m.group(1))
        for declarator in m.group(2).split(","):
            d = re.fullmatch(r"\s*[A-Za-z_]\w*\s*((?:\[[^\]]+\]\s*)*)(?:=.*)?", declarator)
            if element is None or d is None:
                return None
            count = 1
            for extent in re.findall(r"\[([^\]]+)\]", d.group(1)):
                value = unit.value(extent)
                if value is None or value <= 0:
                    return None
                count *= value
            size = -(-size // element) * element + element * count
            largest = max(largest, element)
    return -(-size // largest) * largest if largest else None


class Unit:
    """One translation unit read once: its kernels, constants and shared arrays. Finders take
    a `Unit` (or build one from the IR)."""

    def __init__(self, ir: KernelIR) -> None:
        self.ir = ir
        self.scope = Scope(ir)
        self.constants: dict[str, str] = dict(self.scope.macros)
        self.templates: set[str] = set()
        for nid in range(len(ir)):
            gtype = ir.grammar_type_of(nid)
            if gtype == "declaration" and re.match(r"\s*(?:static\s+)?(?:constexpr|const)\b",
                                                  text(ir, nid)):
                for name, _ident, init in declared_names(ir, nid):
                    if init is not None and self._int(text(ir, init)) is not None:
                        self.constants.setdefault(name, text(ir, init))
            elif gtype == "template_parameter_list":
                for p in children(ir, nid):
                    if ir.grammar_type_of(p) in ("parameter_declaration",
                                                 "optional_parameter_declaration"):
                        ident = [c for c in subtree(ir, p) if ir.grammar_type_of(c) == "identifier"]
                        if ident:
                            self.templates.add(ir.name_of(ident[0]) or "")
        self.kernels: dict[str, int] = {}
        self.functions: dict[str, int] = {}
        for n in ir.walk():
            if ir.grammar_type_of(n.id) != "function_definition":
                continue
            name = _function_name(ir, n.id)
            if not name:
                continue
            self.functions.setdefault(name, n.id)
            if "__global__" in text(ir, n.id).split("{", 1)[0]:
                self.kernels.setdefault(name, n.id)
        self._launch: LaunchBlock | None = None
        self._helpers: dict[str, int] | None = None
        self._shared: dict[int | None, dict[str, SharedArray]] = {}  # `shared_arrays`, by fn
        self._calls: dict[str, list[int]] | None = None  # call expressions, by callee

    def _int(self, expr: str) -> int | None:
        return _evaluate(expr, self.constants, 0)

    def value(self, expr: str) -> int | None:
        """The integer value of a compile-time constant expression (literals, macros,
        `constexpr`/`const` integers), or None."""
        expr = re.sub(r"\b(?:static_cast|int|unsigned)\s*<?\s*(?:int|unsigned)?\s*>?\s*\(", "(",
                      expr)
        return _evaluate(expr, self.constants, 0)

    def compile_time(self, expr: str) -> bool:
        """Whether `expr` is known when the kernel is compiled (a constant or an expression of
        template parameters and constants)."""
        if self.value(expr) is not None:
            return True
        names = set(re.findall(r"[A-Za-z_]\w*", expr)) - {"sizeof"}
        return bool(names) and all(n in self.templates or n in self.constants for n in names) \
            and not re.search(r"[\[\].]|->", expr)

    def template_value(self, fn: int, expr: str) -> int | None:
        """The value of `expr` over function `fn`'s template parameters where every call of
        `fn` in the unit passes the same constant template arguments (`f<256>(...)`), or
        None (no such call, or calls that differ). Type parameters (`typename T`) take any
        argument: only the values matter (`f<256, float>` and `f<256, __half>` agree)."""
        ir = self.ir
        decl = ir.parent_of(fn)
        if decl is None or ir.grammar_type_of(decl) != "template_declaration":
            return None
        params: list[str | None] = []  # None: a type parameter
        for plist in children(ir, decl, "template_parameter_list"):
            for p in children(ir, plist):
                if ir.grammar_type_of(p) in _TRIVIA or ir.grammar_type_of(p) in ("<", ">", ","):
                    continue
                ident = [c for c in subtree(ir, p) if ir.grammar_type_of(c) == "identifier"]
                if ir.grammar_type_of(p) in ("parameter_declaration",
                                             "optional_parameter_declaration") and ident:
                    params.append(ir.name_of(ident[-1]) or "")
                elif "type_parameter" in ir.grammar_type_of(p):
                    params.append(None)
                else:
                    return None
        name = _function_name(ir, fn)
        seen: set[tuple[int | None, ...]] = set()
        for c in range(len(ir)):
            if ir.grammar_type_of(c) != "call_expression" or callee(ir, c) != name:
                continue
            targs = [a for a in subtree(ir, children(ir, c)[0])
                     if ir.grammar_type_of(a) == "template_argument_list"]
            if not targs:
                return None
            args = [a for a in children(ir, targs[0]) if ir.grammar_type_of(a) not in _TRIVIA]
            if len(args) != len(params):
                return None
            seen.add(tuple(self.value(text(ir, a)) for a, p in zip(args, params) if p is not None))
        if len(seen) != 1:
            return None
        values = seen.pop()
        if None in values:
            return None
        named = [p for p in params if p is not None]
        bound = dict(self.constants) | {p: str(v) for p, v in zip(named, values)}
        return _evaluate(expr, bound, 0)

    def block_helpers(self) -> dict[str, int]:
        """The kernels and the `__device__` functions that every thread of a block calls
        alike: each call of one in the unit is a statement of a kernel's (or such a helper's)
        body outside any branch or loop, no `return` comes before it there, and its arguments
        are the same for every thread of the block. A block-wide loop in one is a loop of the
        block, as in the kernel."""
        if self._helpers is None:
            from passes.cuda._tree import UNIFORM  # noqa: PLC0415

            ir = self.ir
            found = dict(self.kernels)
            calls: dict[str, list[int]] = {}
            for c in range(len(ir)):
                if ir.grammar_type_of(c) == "call_expression" and callee(ir, c) in self.functions:
                    calls.setdefault(callee(ir, c), []).append(c)
            changed = True
            while changed:
                changed = False
                for name, fn in self.functions.items():
                    if name in found or not calls.get(name):
                        continue
                    if all(self._uniform_call(c, found, UNIFORM) for c in calls[name]):
                        found[name] = fn
                        changed = True
            self._helpers = found
        return self._helpers

    def _uniform_call(self, call: int, callers: Mapping[str, int], uniform: int) -> bool:
        ir = self.ir
        fn = next((a for a in ir.ancestors(call) if ir.grammar_type_of(a) == "function_definition"),
                  None)
        if fn is None or (_function_name(ir, fn) or "") not in callers:
            return False
        body = children(ir, fn, "compound_statement")
        for a in ir.ancestors(call):
            if a == (body[0] if body else None):
                break
            if ir.grammar_type_of(a) not in ("compound_statement", "expression_statement",
                                             "declaration", "init_declarator",
                                             "assignment_expression", "parenthesized_expression"):
                return False
        start = ir.span_of(call).start
        if any(ir.grammar_type_of(r) == "return_statement" and ir.span_of(r).start < start
               for r in subtree(ir, fn)):
            return False
        self.scope.enter(fn)
        args = [a for a in children(ir, children(ir, call)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
        return all(self.scope.threads(a) == uniform for a in args)

    def kernel_of(self, nid: int) -> str:
        for a in self.ir.ancestors(nid):
            if self.ir.grammar_type_of(a) == "function_definition":
                return _function_name(self.ir, a) or ""
        return ""

    def _extent(self, decl: int, expr: str) -> int | None:
        """An array extent's value: a constant's, or over the template parameters of the
        function declaring it where every call of that function agrees on them
        (`template_value`)."""
        value = self.value(expr)
        if value is None and not self.compile_time(expr):
            return None
        if value is None:
            fn = next((a for a in self.ir.ancestors(decl)
                       if self.ir.grammar_type_of(a) == "function_definition"), None)
            value = self.template_value(fn, expr) if fn is not None else None
        return value

    def shared_arrays(self, fn: int | None = None) -> dict[str, SharedArray]:
        """The shared arrays declared in function `fn` (all, file scope too, when None): a new
        dict each call, read from the unit once per `fn`."""
        if fn not in self._shared:
            self._shared[fn] = self._read_shared_arrays(fn)
        return dict(self._shared[fn])

    def calls_to(self, name: str) -> list[int]:
        """The call expressions of the unit whose callee is `name`, in node order."""
        if self._calls is None:
            ir, found = self.ir, {}
            for c in range(len(ir)):
                if ir.grammar_type_of(c) == "call_expression":
                    found.setdefault(callee(ir, c), []).append(c)
            self._calls = found
        return list(self._calls.get(name, ()))

    def _read_shared_arrays(self, fn: int | None) -> dict[str, SharedArray]:
        ir = self.ir
        out: dict[str, SharedArray] = {}
        nodes = subtree(ir, fn) if fn is not None else range(len(ir))
        for nid in nodes:
            if ir.grammar_type_of(nid) != "declaration" or "__shared__" not in \
                    text(ir, nid).split("[", 1)[0].split("=", 1)[0]:
                continue
            decl_text = text(ir, nid)
            element = _declared_type(ir, nid)
            align = re.search(r"__align__\s*\(\s*(\d+)\s*\)", decl_text)
            for name, ident, _init in declared_names(ir, nid):
                dims = re.findall(r"\[([^\]]*)\]", _declarator_text(ir, ident, nid))
                extents = tuple(self._extent(nid, d) if d.strip() else None for d in dims)
                out[name] = SharedArray(name, element, extents, _span(ir, nid),
                                        dynamic="extern" in decl_text.split("__shared__")[0] or
                                        any(not d.strip() for d in dims),
                                        align=int(align.group(1)) if align else None)
        return out

    def shared_views(self, fn: int, aliases: bool = False) -> dict[str, SharedArray]:
        """The shared arrays function `fn` sees: its own, the unit's, and its pointer
        parameters that every call in the unit passes a shared array for (a `__device__`
        helper reducing through `float* buf`). With `aliases`, also its local pointers bound
        once into one of those (`float* red = smem + n;`, `&buf[k]`): their extents and
        alignment are unknown (None, dynamic)."""
        out = self.shared_arrays() | self.shared_arrays(fn)
        ir = self.ir
        if aliases:
            out |= self._shared_aliases(fn, out)
        name = _function_name(ir, fn) or ""
        params = [p for p in _parameter_names(ir, fn)]
        calls = self.calls_to(name)
        for i, param in enumerate(params):
            if param not in _pointer_params(ir, fn) or not calls:
                continue
            passed = set()
            for c in calls:
                caller = next((a for a in ir.ancestors(c)
                               if ir.grammar_type_of(a) == "function_definition"), None)
                args = [a for a in children(ir, children(ir, c)[-1])
                        if ir.grammar_type_of(a) not in _TRIVIA]
                seen = self.shared_arrays() | (self.shared_arrays(caller) if caller else {})
                arg = text(ir, args[i]).strip() if i < len(args) else ""
                passed.add(seen[arg] if arg in seen else None)
            if len(passed) == 1 and None not in passed:
                view = passed.pop()
                out[param] = SharedArray(param, view.element, view.extents, view.decl,
                                         view.dynamic, view.align)
        return out

    def _shared_aliases(self, fn: int, views: Mapping[str, SharedArray]) -> dict[str, SharedArray]:
        ir = self.ir
        written = written_names(ir, fn)
        out: dict[str, SharedArray] = {}
        for nid in subtree(ir, fn):
            if ir.grammar_type_of(nid) != "declaration" or "__shared__" in text(ir, nid) or \
                    "*" not in text(ir, nid).split("=", 1)[0]:
                continue
            for name, _ident, init in declared_names(ir, nid):
                if init is None or name in written or name in views:
                    continue
                m = re.fullmatch(r"\(?\s*(?:&\s*)?([A-Za-z_]\w*)\b(.*?)\)?", " ".join(text(ir, init).split()))
                if m is None or m.group(1) not in views or "[" in m.group(1):
                    continue
                rest = m.group(2).strip()
                if rest and not (re.fullmatch(r"\+.+", rest) and "&" not in text(ir, init)) and \
                        not (re.fullmatch(r"\[[^\[\]]+\]", rest) and "&" in text(ir, init)):
                    continue
                element = _declared_type(ir, nid)
                if _plain_type(element) != _plain_type(views[m.group(1)].element):
                    continue
                out[name] = SharedArray(name, element, (None,), _span(ir, nid), True, None)
        return out

    def launch_block(self) -> LaunchBlock:
        """The block size of the kernel's launches (see `launch_block`)."""
        if self._launch is None:
            self._launch = launch_block(self.ir)
        return self._launch


def _function_name(ir: KernelIR, fn: int) -> str | None:
    for c in subtree(ir, fn):
        if ir.grammar_type_of(c) == "function_declarator":
            for k in children(ir, c):
                if ir.grammar_type_of(k) in ("identifier", "field_identifier",
                                             "qualified_identifier", "template_function"):
                    return re.split(r"::|<", text(ir, k))[-1 if "::" in text(ir, k) else 0]
            return None
    return None


def _parameter_names(ir: KernelIR, fn: int) -> list[str]:
    plist = next((c for c in subtree(ir, fn) if ir.grammar_type_of(c) == "parameter_list"), None)
    if plist is None:
        return []
    out = []
    for p in children(ir, plist):
        if ir.grammar_type_of(p) in ("parameter_declaration", "optional_parameter_declaration"):
            idents = [c for c in subtree(ir, p) if ir.grammar_type_of(c) == "identifier"]
            out.append(ir.name_of(idents[-1]) or "" if idents else "")
    return out


def _declared_type(ir: KernelIR, decl: int) -> str:
    parts = []
    for c in children(ir, decl):
        gtype = ir.grammar_type_of(c)
        if gtype in ("primitive_type", "type_identifier", "sized_type_specifier",
                     "qualified_identifier", "template_type"):
            parts.append(text(ir, c))
    return " ".join(parts) or "int"


def _declarator_text(ir: KernelIR, ident: int, decl: int) -> str:
    """The text of the array declarator around `ident` (its extents)."""
    node = ident
    while True:
        parent = ir.parent_of(node)
        if parent is None or parent == decl or ir.grammar_type_of(parent) not in (
                "array_declarator", "pointer_declarator", "parenthesized_declarator"):
            break
        node = parent
    return text(ir, node)


def _span(ir: KernelIR, nid: int) -> tuple[int, int]:
    s = ir.span_of(nid)
    return (s.start, s.end)


def _strip(ir: KernelIR, nid: int) -> int:
    """`nid` without enclosing parentheses and value-preserving conversions (a cast, a
    conversion call of one argument)."""
    while True:
        gtype = ir.grammar_type_of(nid)
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        if gtype == "parenthesized_expression" and kids:
            nid = kids[0]
        elif gtype == "cast_expression" and kids:
            nid = kids[-1]
        elif gtype == "call_expression" and _CONVERSION.match(callee(ir, nid)):
            args = children(ir, kids[-1]) if kids else []
            args = [a for a in args if ir.grammar_type_of(a) not in _TRIVIA]
            if len(args) != 1:
                return nid
            if callee(ir, nid).startswith("__ld"):  # a load of the element at an address
                arg = _strip(ir, args[0])
                if ir.grammar_type_of(arg) != "pointer_expression" or ir.name_of(arg) != "&":
                    return nid
                args = [children(ir, arg)[-1]]
            nid = args[0]
        else:
            return nid


def subscript(ir: KernelIR, nid: int) -> tuple[str | None, list[int]]:
    """(base variable, index nodes outermost first) of `a[i][j]`; (None, []) otherwise."""
    idx: list[int] = []
    while ir.grammar_type_of(nid) == "subscript_expression":
        kids = children(ir, nid)
        args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA]
        if len(args) != 1:
            return None, []
        idx.insert(0, args[0])
        nid = kids[0]
    if ir.grammar_type_of(nid) == "identifier" and idx:
        return ir.name_of(nid), idx
    return None, []


def _statements(ir: KernelIR, nid: int) -> list[int]:
    return [it.node for it in block_items(ir, nid)]


def _is_sync(ir: KernelIR, nid: int) -> bool:
    """Whether statement `nid` is (or holds, at its top level) a block barrier call:
    `__syncthreads()` (and its counting forms), or the `sync` of a cooperative-groups
    thread block (`block.sync()`, `cg::sync(block)`, `this_thread_block().sync()`)."""
    for c in subtree(ir, nid):
        if ir.grammar_type_of(c) == "call_expression" and (
                _SYNC.match(callee(ir, c)) or _block_group_sync(ir, c)):
            return True
    return False


def _block_group_sync(ir: KernelIR, call: int) -> bool:
    """Whether `call` syncs a cooperative-groups thread block: the group is
    `this_thread_block()` itself or a name declared with it as its value."""
    if callee(ir, call) != "sync":
        return False
    func, args = children(ir, call)[0], children(ir, call)[-1]
    if ir.grammar_type_of(func) == "field_expression":
        group = children(ir, func)[0]
    else:
        group_args = [a for a in children(ir, args) if ir.grammar_type_of(a) not in _TRIVIA]
        if len(group_args) != 1:
            return False
        group = group_args[0]
    group_text = re.sub(r"\s+", "", text(ir, group))
    if re.fullmatch(r"\(?(?:\w+::)*this_thread_block\(\)\)?", group_text):
        return True
    fn = next((a for a in ir.ancestors(call) if ir.grammar_type_of(a) == "function_definition"), None)
    if fn is None or not re.fullmatch(r"[A-Za-z_]\w*", group_text):
        return False
    inits = [v for d in subtree(ir, fn) if ir.grammar_type_of(d) == "declaration"
             for n, _i, v in declared_names(ir, d) if n == group_text]
    return len(inits) == 1 and inits[0] is not None and re.fullmatch(
        r"\(?(?:\w+::)*this_thread_block\(\)\)?", re.sub(r"\s+", "", text(ir, inits[0]))) is not None


def _names(ir: KernelIR, nid: int) -> set[str]:
    return {ir.name_of(c) or "" for c in subtree(ir, nid) if ir.grammar_type_of(c) == "identifier"}


def _pointer_params(ir: KernelIR, fn: int) -> dict[str, str]:
    """Pointer parameters of function `fn` -> their element type."""
    out: dict[str, str] = {}
    plist = next((c for c in subtree(ir, fn) if ir.grammar_type_of(c) == "parameter_list"), None)
    if plist is None:
        return out
    for p in children(ir, plist):
        if ir.grammar_type_of(p) != "parameter_declaration":
            continue
        if not any(ir.grammar_type_of(c) == "pointer_declarator" for c in subtree(ir, p)):
            continue
        name = ir.name_of(p) or ""
        if not name:
            idents = [c for c in subtree(ir, p) if ir.grammar_type_of(c) == "identifier"]
            name = ir.name_of(idents[-1]) if idents else ""
        if name:
            out[name] = _declared_type(ir, p)
    return out


def global_pointers(unit: Unit, fn: int) -> dict[str, str]:
    """Pointer parameters of `fn` and local pointers derived from them (`const T* row = x +
    off;`, or from a pointer field of a structure passed by value: `const T* row = p.x +
    off;`) -> element type."""
    ir = unit.ir
    out = _pointer_params(ir, fn)
    fields = struct_pointer_fields(unit, fn)
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) != "declaration" or "__shared__" in text(ir, nid):
            continue
        if not any(ir.grammar_type_of(c) == "pointer_declarator" for c in children(ir, nid)) \
                and "*" not in text(ir, nid).split("=")[0]:
            continue
        for name, _ident, init in declared_names(ir, nid):
            if init is not None and (_names(ir, init) & set(out) or any(
                    re.sub(r"\s", "", text(ir, c)) in fields for c in subtree(ir, init)
                    if ir.grammar_type_of(c) == "field_expression")):
                out.setdefault(name, _declared_type(ir, nid))
    return out


def struct_pointer_fields(unit: Unit, fn: int) -> dict[str, str]:
    """`p.f` -> element type, for each parameter `p` of `fn` passed by value whose type is a
    `struct` / `class` the unit defines, and each of its fields `f` declared as a pointer
    (`_c.pointer_fields`)."""
    ir = unit.ir
    plist = next((c for c in subtree(ir, fn) if ir.grammar_type_of(c) == "parameter_list"), None)
    if plist is None:
        return {}
    structs = pointer_fields(ir.text)
    out: dict[str, str] = {}
    for p in children(ir, plist):
        if ir.grammar_type_of(p) != "parameter_declaration" or any(
                ir.grammar_type_of(c) in ("pointer_declarator", "reference_declarator")
                for c in subtree(ir, p)):
            continue
        kinds = [c for c in children(ir, p) if ir.grammar_type_of(c) in ("type_identifier",
                                                                          "struct_specifier")]
        names = [c for c in children(ir, p) if ir.grammar_type_of(c) == "identifier"]
        if len(kinds) != 1 or len(names) != 1:
            continue
        kind = re.sub(r"^(?:struct|class)\s+", "", text(ir, kinds[0]).strip())
        for field_, element in structs.get(kind, {}).items():
            out[f"{ir.name_of(names[0])}.{field_}"] = element
    return out


def _global_read(unit: Unit, fn: int, nid: int, pointers: Mapping[str, str]
                 ) -> tuple[str, str, int] | None:
    """(pointer, element expression, lanes) when `nid` reads one element (or one vector) of
    global memory through a pointer of `pointers`: `p[i]`, `*(p + i)`, `__ldg(&p[i])`,
    `*reinterpret_cast<const float4*>(&p[i])`, `reinterpret_cast<const float4*>(p)[i]`."""
    ir = unit.ir
    node = _strip(ir, nid)
    gtype = ir.grammar_type_of(node)
    if gtype == "call_expression" and callee(ir, node) in unit.scope.function_macros:
        return _macro_read(unit, node, pointers)
    if gtype == "call_expression" and callee(ir, node).startswith("__ld"):
        args = [a for a in children(ir, children(ir, node)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
        if len(args) == 1:
            inner = _strip(ir, args[0])
            if ir.grammar_type_of(inner) == "pointer_expression" and ir.name_of(inner) == "&":
                return _global_read(unit, fn, children(ir, inner)[-1], pointers)
            base = _names(ir, inner) & set(pointers)
            if len(base) == 1:
                p = base.pop()
                return p, f"*({text(ir, inner)})", 1
        return None
    vec = _vector_cast(ir, node)
    if vec is not None:
        lanes, addr_node = vec
        base = _names(ir, addr_node) & set(pointers)
        if len(base) == 1:
            return base.pop(), text(ir, addr_node), lanes
        return None
    base, idx = subscript(ir, node)
    if base in pointers and len(idx) == 1:
        return base, text(ir, node), 1
    if gtype == "subscript_expression" and ir.grammar_type_of(children(ir, node)[0]) == \
            "field_expression":  # `p.f[i]`: a pointer field of a structure passed by value
        field_ = re.sub(r"\s", "", text(ir, children(ir, node)[0]))
        if field_ in pointers:
            return field_, text(ir, node), 1
    if gtype == "pointer_expression" and ir.name_of(node) == "*":
        inner = children(ir, node)[-1]
        names = _names(ir, inner) & set(pointers)
        if len(names) == 1 and "[" not in text(ir, inner):
            return names.pop(), text(ir, node), 1
    return None


def _macro_read(unit: Unit, node: int, pointers: Mapping[str, str]) -> tuple[str, str, int] | None:
    """(pointer, element expression, 1) when the call of a function-like macro `node` expands
    to one subscript of a pointer of `pointers` (`AT(A, r, c, ld)` -> `A[(r) * (ld) + (c)]`);
    the element expression is the expansion."""
    ir = unit.ir
    args = [text(ir, a) for a in children(ir, children(ir, node)[-1])
            if ir.grammar_type_of(a) not in _TRIVIA]
    expanded = unit.scope.expansion(callee(ir, node), args)
    if expanded is None:
        return None
    e = expanded
    while e != _unparen(e):
        e = _unparen(e).strip()
    m = re.match(r"\(?\s*([A-Za-z_]\w*)\s*\)?\s*\[", e)
    if m is None or m.group(1) not in pointers:
        return None
    depth = 0
    for i in range(m.end() - 1, len(e)):
        depth += e[i] == "["
        depth -= e[i] == "]"
        if depth == 0:
            break
    if depth or i != len(e) - 1 or "[" in e[m.end():i]:
        return None
    return m.group(1), f"{m.group(1)}{e[m.end() - 1:]}", 1


_VEC_CAST = re.compile(r"^\*?\s*\(?\s*(?:reinterpret_cast\s*<\s*(?:const\s+)?(\w+)\s*\*\s*>|"
                       r"\(\s*(?:const\s+)?(\w+)\s*\*\s*\))")


def _vector_cast(ir: KernelIR, node: int) -> tuple[int, int] | None:
    """(lanes, address node) of a vector access through a cast pointer: `*reinterpret_cast<
    V*>(addr)`, `reinterpret_cast<V*>(addr)[0]`, `*(V*)(addr)`, `((V*)addr)[0]`."""
    t = text(ir, node)
    m = _VEC_CAST.match(t.strip())
    if m is None:
        return None
    vec = m.group(1) or m.group(2)
    if vec not in VECTOR_BYTES:
        return None
    lanes = {"float4": 4, "int4": 4, "uint4": 4, "double2": 2, "float2": 2, "int2": 2,
             "uint2": 2, "half2": 2, "__half2": 2, "__nv_bfloat162": 2, "nv_bfloat162": 2}[vec]
    # the address: the operand of the cast
    for c in subtree(ir, node):
        if ir.grammar_type_of(c) in ("cast_expression",):
            return lanes, children(ir, c)[-1]
        if ir.grammar_type_of(c) == "call_expression" and "reinterpret_cast" in text(ir, c)[:20]:
            args = [a for a in children(ir, children(ir, c)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
            if len(args) == 1:
                return lanes, args[0]
    return None


# ---------------------------------------------------------------------------------------------
# staging


def stagings(ir: KernelIR | Unit) -> tuple[list[Staging], list[Refusal]]:
    """Every global -> shared copy of the unit (see the module docstring), and the stores into
    shared memory that read global memory in a way not told apart (with the reason)."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    out: list[Staging] = []
    refused: list[Refusal] = []
    # a kernel's, or a `__device__` helper's every thread of the block calls alike (a tiled
    # body written once as `template <int BM, int BN> __device__ void tile(...)`)
    for name, fn in unit.block_helpers().items():
        found, why = _kernel_stagings(unit, name, fn)
        out += found
        refused += why
    return out, refused


def _kernel_stagings(unit: Unit, kernel: str, fn: int) -> tuple[list[Staging], list[Refusal]]:
    ir = unit.ir
    shared = unit.shared_arrays(fn) | {k: v for k, v in unit.shared_arrays().items()
                                       if k not in unit.shared_arrays(fn)}
    pointers = global_pointers(unit, fn) | struct_pointer_fields(unit, fn)
    out: list[Staging] = []
    refused: list[Refusal] = []
    syncs = [ir.span_of(c).start for c in subtree(ir, fn)
             if ir.grammar_type_of(c) == "call_expression" and _SYNC.match(callee(ir, c))]
    aliases: dict[str, SharedArray] | None = None  # pointers into shared memory, read once
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) != "expression_statement":
            continue
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        if not kids or ir.grammar_type_of(kids[0]) != "assignment_expression" or \
                ir.name_of(kids[0]) != "=" and "=" not in _op(ir, kids[0]):
            continue
        assign = kids[0]
        if _op(ir, assign) != "=":
            continue
        lhs, rhs = children(ir, assign)[0], children(ir, assign)[-1]
        array, dst, lanes_dst = _shared_target(unit, lhs, shared)
        if array is None:
            if aliases is None:
                aliases = {k: v for k, v in unit.shared_views(fn, aliases=True).items()
                           if k not in shared}
            view = _shared_target(unit, lhs, aliases)[0] if aliases else None
            if view is not None and any(s > ir.span_of(nid).end for s in syncs) and \
                    _names(ir, rhs) & set(pointers):
                refused.append(Refusal("staging", f"a copy into {view}, a pointer into shared "
                                       "memory (a buffer cut into tiles), not an array of "
                                       "compile-time extents", _span(ir, nid), kernel))
            continue
        if not any(s > ir.span_of(nid).end for s in syncs):
            continue
        staged = _staged_value(unit, fn, nid, rhs, pointers)
        if staged is None:
            if _filled_from_global(unit, fn, nid, rhs, pointers):
                refused.append(Refusal("staging", "a temporary filled from global memory in a "
                                       "form not told (nested conditions or several writes)",
                                       _span(ir, nid), kernel))
            elif _names(ir, rhs) & set(pointers):
                refused.append(Refusal("staging", "a store into shared memory whose value "
                                       "reads global memory in a form not recognized "
                                       f"({' '.join(text(ir, rhs).split())[:60]})",
                                       _span(ir, nid), kernel))
            continue
        form, source, src, guard, fill, lanes, parts = staged
        whole = nid  # the statement the copy ends with: the store, or the `if` holding it
        branches = _branch_staging(ir, nid, lhs, pointers) if form == "direct" else None
        if branches is not None:  # `if (ok) s[i] = g[j]; else s[i] = fill;`
            whole, guard, fill = branches
            form = "ternary"
        fill = _bound_value(unit, fn, fill, pointers)
        if lanes != lanes_dst:
            refused.append(Refusal("staging", "the shared store and the global read move "
                                   "different widths", _span(ir, nid), kernel))
            continue
        vector = None
        if lanes > 1:
            vector = re.search(r"(\w+)\s*\*", text(ir, lhs)).group(1)  # type: ignore[union-attr]
            form = "vector" if form == "direct" else form
        loop = next((a for a in ir.ancestors(nid) if ir.grammar_type_of(a) in _LOOP_TYPES), None)
        nodes = (*parts, whole)
        start = min(ir.span_of(n).start for n in nodes)
        converted = any(_converts(ir, n, src) for n in nodes) or \
            _plain_type(pointers[source]) != _plain_type(shared[array].element)
        out.append(Staging(kernel, array, source, form, _span(ir, nid),
                           (start, ir.span_of(whole).end), dst, src, guard, fill,
                           shared[array].element, lanes, vector,
                           _span(ir, loop) if loop is not None else None, converted,
                           tuple(_span(ir, n) for n in nodes)))
    return out, refused


def _bound_value(unit: Unit, fn: int, expr: str | None, pointers: Mapping[str, str]) -> str | None:
    """`expr`, or where it is a variable bound once and never written (`const T zero =
    T(0);`) to a value that reads no global memory, that value."""
    if expr is None or not re.fullmatch(r"\s*[A-Za-z_]\w*\s*", expr):
        return expr
    init = _single_init(unit, fn, expr.strip())
    if init is None or set(re.findall(r"[A-Za-z_]\w*", init)) & set(pointers):
        return expr
    return " ".join(init.split())


def _plain_type(name: str) -> str:
    return " ".join(name.replace("const", " ").replace("volatile", " ").split())


_POINTER_CAST = re.compile(r"^(?:reinterpret_cast\s*<[^<>]*\*\s*>|\(\s*(?:const\s+)?"
                           r"(?:volatile\s+)?\w+\s*\*\s*\))")


def _converts(ir: KernelIR, stmt: int, src: str) -> bool:
    """Whether a statement of a copy wraps its global read in a conversion (a call or a cast
    taking the read as its argument). A cast of the address to another pointer type (a
    vector move, `*reinterpret_cast<const uint4*>(&p[i])`) reads the bytes as they are: the
    width it moves is checked against the shared store's, so it is no conversion."""
    flat = re.sub(r"\s+", "", src)
    for nid in subtree(ir, stmt):
        if ir.grammar_type_of(nid) in ("call_expression", "cast_expression") and \
                re.sub(r"\s+", "", text(ir, nid)) != flat and flat in re.sub(r"\s+", "", text(ir, nid)):
            if ir.grammar_type_of(nid) == "call_expression" and callee(ir, nid).startswith("__ld"):
                continue
            if _POINTER_CAST.match(text(ir, nid).strip()):
                continue
            return True
    return False


def _op(ir: KernelIR, assign: int) -> str:
    lhs, rhs = children(ir, assign)[0], children(ir, assign)[-1]
    between = ir.source[ir.span_of(lhs).end:ir.span_of(rhs).start].decode()
    return between.strip()


def _shared_target(unit: Unit, lhs: int, shared: Mapping[str, SharedArray]
                   ) -> tuple[str | None, str, int]:
    """(shared array, element expression, lanes) that an assignment's left side writes."""
    ir = unit.ir
    base, idx = subscript(ir, lhs)
    if base in shared:
        return base, text(ir, lhs), 1
    vec = _vector_cast(ir, lhs)
    if vec is not None:
        lanes, addr = vec
        names = _names(ir, addr) & set(shared)
        if len(names) == 1:
            return names.pop(), text(ir, addr), lanes
    if ir.grammar_type_of(lhs) == "pointer_expression" and ir.name_of(lhs) == "*":
        names = _names(ir, lhs) & set(shared)
        if len(names) == 1:
            return names.pop(), text(ir, lhs), 1
    return None, "", 1


def _staged_value(unit: Unit, fn: int, stmt: int, rhs: int, pointers: Mapping[str, str]
                  ) -> tuple[str, str, str, str | None, str | None, int, tuple[int, ...]] | None:
    """How the value stored into shared memory comes from global memory: (form, pointer,
    element expression, guard, fill, lanes, the statements of the copy before the store)."""
    ir = unit.ir
    node = _strip(ir, rhs)
    read = _global_read(unit, fn, node, pointers)
    if read is not None:
        return "direct", read[0], read[1], None, None, read[2], ()
    if ir.grammar_type_of(node) == "conditional_expression":
        kids = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA]
        cond, yes, no = kids[0], kids[1], kids[2]
        for take, other, negate in ((yes, no, False), (no, yes, True)):
            read = _global_read(unit, fn, take, pointers)
            if read is not None and not (_names(ir, other) & set(pointers)):
                guard = text(ir, cond)
                guard = f"!({guard})" if negate else guard
                return "ternary", read[0], read[1], guard, text(ir, other), read[2], ()
        return None
    if ir.grammar_type_of(node) == "identifier":
        return _temporary(unit, fn, stmt, ir.name_of(node) or "", pointers)
    return None


def _temporary(unit: Unit, fn: int, stmt: int, name: str, pointers: Mapping[str, str]
               ) -> tuple[str, str, str, str | None, str | None, int, tuple[int, ...]] | None:
    """A register temporary filled from global memory in the statements right before `stmt`
    of the same block: `T v = g[i];`, `T v = fill; if (ok) v = g[i];`, `T v; if (ok) v = g[i];
    else v = fill;`."""
    ir = unit.ir
    block = ir.parent_of(stmt)
    if block is None:
        return None
    items = _statements(ir, block)
    if stmt not in items:
        return None
    at = items.index(stmt)
    guard = fill = None
    read = None
    guarded: int | None = None
    for prev in reversed(items[:at]):
        gtype = ir.grammar_type_of(prev)
        if gtype == "if_statement" and read is None and name in written_names(ir, prev):
            cond, then, alt = if_parts(ir, prev)
            value = _assigned_value(ir, then, name)
            if value is None:
                return None
            read = _global_read(unit, fn, value, pointers)
            if read is None:
                return None
            guard = text(ir, cond)
            if alt is not None:
                other = _assigned_value(ir, alt, name)
                if other is None or _names(ir, other) & set(pointers):
                    return None
                fill = text(ir, other)
            guarded = prev
            continue
        if gtype == "declaration" and name in [n for n, _, _ in declared_names(ir, prev)]:
            init = next(i for n, _, i in declared_names(ir, prev) if n == name)
            if read is None:
                if init is None:
                    return None
                direct = _global_read(unit, fn, init, pointers)
                if direct is not None:
                    return "temporary", direct[0], direct[1], None, None, direct[2], (prev,)
                if ir.grammar_type_of(_strip(ir, init)) == "conditional_expression":
                    value = _staged_value(unit, fn, prev, init, pointers)
                    if value is not None:
                        return ("temporary", value[1], value[2], value[3], value[4], value[5],
                                (prev,))
                return None
            if fill is None:
                if init is None:
                    return None
                if _names(ir, init) & set(pointers):
                    return None
                fill = text(ir, init)
            return ("temporary", read[0], read[1], guard, fill, read[2],
                    (prev,) if guarded is None else (prev, guarded))
        if name in written_names(ir, prev):
            return None
    return None


def _filled_from_global(unit: Unit, fn: int, stmt: int, rhs: int,
                        pointers: Mapping[str, str]) -> bool:
    """Whether the value stored (a variable) is assigned a global read somewhere before the
    store in its block."""
    ir = unit.ir
    node = _strip(ir, rhs)
    if ir.grammar_type_of(node) != "identifier":
        return False
    name = ir.name_of(node)
    block = ir.parent_of(stmt)
    for prev in _statements(ir, block) if block is not None else []:
        if prev == stmt:
            break
        for c in subtree(ir, prev):
            if ir.grammar_type_of(c) == "assignment_expression" and _op(ir, c) == "=" and \
                    text(ir, children(ir, c)[0]).strip() == name and \
                    name not in _names(ir, children(ir, c)[-1]) and \
                    _global_read(unit, fn, children(ir, c)[-1], pointers) is not None:
                return True
    return False


def written_names(ir: KernelIR, nid: int) -> set[str]:
    out = set()
    for c in subtree(ir, nid):
        if ir.grammar_type_of(c) in ("assignment_expression", "update_expression"):
            target = children(ir, c)[0]
            if ir.grammar_type_of(target) == "identifier":
                out.add(ir.name_of(target) or "")
    return out


def _branch_staging(ir: KernelIR, store: int, lhs: int, pointers: Mapping[str, str]
                    ) -> tuple[int, str, str] | None:
    """(the `if` statement, guard, fill) where the store `store` is the one statement of a
    branch of an `if` whose other branch is one plain store of a value that reads no global
    memory into the same element (`if (ok) s[i] = g[j]; else s[i] = 0;`, either order): the
    ternary copy `s[i] = ok ? g[j] : 0;` spelled as two branches. None otherwise."""
    node = ir.parent_of(store)
    if node is not None and ir.grammar_type_of(node) == "compound_statement":
        if len(_statements(ir, node)) != 1:
            return None
        node = ir.parent_of(node)
    if node is not None and ir.grammar_type_of(node) == "else_clause":
        node = ir.parent_of(node)
    if node is None or ir.grammar_type_of(node) != "if_statement":
        return None
    cond, then, alt = if_parts(ir, node)
    if alt is None:
        return None
    taken = ir.span_of(then).start <= ir.span_of(store).start < ir.span_of(then).end
    other = _stored_value(ir, alt if taken else then, " ".join(text(ir, lhs).split()))
    if other is None or _names(ir, other) & set(pointers):
        return None
    guard = text(ir, cond)
    return node, guard if taken else f"!({guard})", text(ir, other)


def _plain_assignment(ir: KernelIR, stmt: int) -> tuple[int, int] | None:
    """(target, value) of the one plain assignment `target = value;` that statement `stmt` is
    (or a block holding only it)."""
    items = _statements(ir, stmt)
    if len(items) != 1 or ir.grammar_type_of(items[0]) != "expression_statement":
        return None
    kids = [c for c in children(ir, items[0]) if ir.grammar_type_of(c) not in _TRIVIA]
    if not kids or ir.grammar_type_of(kids[0]) != "assignment_expression" or _op(ir, kids[0]) != "=":
        return None
    parts = children(ir, kids[0])
    return parts[0], parts[-1]


def _stored_value(ir: KernelIR, stmt: int, target: str) -> int | None:
    """The value of the one plain store `target = value;` that statement `stmt` is (or a block
    holding only it); `target` compared as text, blanks collapsed."""
    found = _plain_assignment(ir, stmt)
    if found is None or " ".join(text(ir, found[0]).split()) != target:
        return None
    return found[1]


def _assigned_value(ir: KernelIR, stmt: int, name: str) -> int | None:
    """The value of the one plain assignment `name = value;` that statement `stmt` is (or a
    block holding only it)."""
    found = _plain_assignment(ir, stmt)
    if found is None or ir.grammar_type_of(found[0]) != "identifier" or ir.name_of(found[0]) != name:
        return None
    return found[1]


# ---------------------------------------------------------------------------------------------
# GEMM micro-kernels

_FMA_CALLS = re.compile(r"^(?:fmaf?|__fmaf?_r[nzud]|__fma_r[nzud]|__hfma|__hfma2)$")


def micro_kernels(ir: KernelIR | Unit) -> tuple[list[MicroKernel], list[Refusal]]:
    """Every GEMM micro-kernel of the unit (see `MicroKernel`), and the multiply-adds over
    shared tiles that were not told apart as one (with the reason)."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    out: list[MicroKernel] = []
    refused: list[Refusal] = []
    staged, _ = stagings(unit)
    for name, fn in unit.kernels.items():
        seen: set[tuple[int, int]] = set()
        for nid in subtree(unit.ir, fn):
            update = _multiply_add(unit, nid)
            if update is None:
                continue
            found = _micro_kernel(unit, name, fn, nid, update, staged)
            if found is None:
                continue
            if isinstance(found, Refusal):
                refused.append(found)
            elif found.k_loop not in seen:
                seen.add(found.k_loop)
                out.append(found)
    return out, refused


def _assignment(ir: KernelIR, stmt: int) -> int | None:
    """The assignment expression that the expression statement `stmt` is, else None."""
    if ir.grammar_type_of(stmt) != "expression_statement":
        return None
    kids = [c for c in children(ir, stmt) if ir.grammar_type_of(c) not in _TRIVIA]
    if not kids or ir.grammar_type_of(kids[0]) != "assignment_expression":
        return None
    return kids[0]


def _multiply_add(unit: Unit, stmt: int) -> tuple[int, int, int, str] | None:
    """(accumulator lvalue, x, y, form) of a statement `acc += x * y;`, `acc = acc + x * y;`
    or `acc = fmaf(x, y, acc);`."""
    ir = unit.ir
    assign = _assignment(ir, stmt)
    if assign is None:
        return None
    lhs, rhs = children(ir, assign)[0], _strip(ir, children(ir, assign)[-1])
    op = _op(ir, assign)
    product = None
    form = ""
    if op == "+=":
        product, form = rhs, "mul-add"
    elif op == "=" and ir.grammar_type_of(rhs) == "binary_expression" and ir.name_of(rhs) == "+":
        left, right = children(ir, rhs)[0], children(ir, rhs)[-1]
        if key(ir, left) == key(ir, lhs):
            product, form = _strip(ir, right), "assign-add"
        elif key(ir, right) == key(ir, lhs):
            product, form = _strip(ir, left), "assign-add"
    elif op == "=" and ir.grammar_type_of(rhs) == "call_expression" and \
            _FMA_CALLS.match(callee(ir, rhs)):
        args = [a for a in children(ir, children(ir, rhs)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
        if len(args) == 3 and key(ir, args[2]) == key(ir, lhs):
            return lhs, args[0], args[1], "fma"
        return None
    if product is None:
        return None
    product = _strip(ir, product)
    if ir.grammar_type_of(product) == "binary_expression" and ir.name_of(product) == "*":
        x, y = children(ir, product)[0], children(ir, product)[-1]
        return lhs, x, y, form
    if ir.grammar_type_of(product) == "call_expression" and callee(ir, product) in ("__hmul", "__fmul_rn"):
        args = [a for a in children(ir, children(ir, product)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
        if len(args) == 2:
            return lhs, args[0], args[1], form
    return None


def _loops_around(ir: KernelIR, nid: int, fn: int) -> list[int]:
    """The loops holding `nid` inside function `fn`, innermost first."""
    out = []
    for a in ir.ancestors(nid):
        if a == fn:
            break
        if ir.grammar_type_of(a) in _LOOP_TYPES:
            out.append(a)
    return out


def for_parts(ir: KernelIR, loop: int) -> tuple[int | None, int | None, int | None]:
    """(initializer, condition, update) nodes of a `for` loop's header (None where empty)."""
    init = cond = update = None
    head = [c for c in children(ir, loop) if ir.grammar_type_of(c) not in _TRIVIA][:-1]
    src = ir.source
    body = loop_body(ir, loop)
    semis = [i for i in range(ir.span_of(loop).start, ir.span_of(body).start)
             if src[i:i + 1] == b";"]
    for c in head:
        s = ir.span_of(c)
        before = sum(1 for i in semis if i < s.start)
        if ir.grammar_type_of(c) == "declaration":
            init = c
        elif before == 0:
            init = c
        elif before == 1:
            cond = c
        else:
            update = c
    return init, cond, update


def loop_init(ir: KernelIR, loop: int) -> tuple[str, int | None] | None:
    """(variable, start value node) a `for` loop's header initializes (declared or assigned)."""
    init, _cond, _update = for_parts(ir, loop)
    if init is not None and ir.grammar_type_of(init) == "declaration":
        names = declared_names(ir, init)
        return (names[0][0], names[0][2]) if len(names) == 1 else None
    if init is not None and ir.grammar_type_of(init) == "assignment_expression":
        target = children(ir, init)[0]
        if ir.grammar_type_of(target) == "identifier":
            return ir.name_of(target) or "", children(ir, init)[-1]
    return None


def loop_var(ir: KernelIR, loop: int) -> str | None:
    """The variable a `for` loop's header initializes (declared or assigned)."""
    found = loop_init(ir, loop)
    return found[0] if found else None


def _loop_start(ir: KernelIR, loop: int) -> int | None:
    found = loop_init(ir, loop)
    return found[1] if found else None


def constant_trip(unit: Unit, loop: int) -> tuple[bool, str]:
    """Whether the `for` loop's trip count is known at compile time, and why not."""
    ir = unit.ir
    if ir.grammar_type_of(loop) != "for_statement":
        return False, "not a counted for loop"
    var = loop_var(ir, loop)
    init, cond, update = for_parts(ir, loop)
    start = _loop_start(ir, loop)
    if var is None or start is None or cond is None or update is None:
        return False, "the loop's header does not count one variable"
    if not unit.compile_time(text(ir, start)):
        return False, f"the start {text(ir, start)!r} is not a compile-time constant"
    m = re.fullmatch(rf"\s*{re.escape(var)}\s*(<=|<|>=|>|!=)\s*(.+?)\s*", text(ir, cond), re.S) or \
        re.fullmatch(rf"\s*(.+?)\s*(<=|<|>=|>|!=)\s*{re.escape(var)}\s*", text(ir, cond), re.S)
    if m is None:
        return False, f"the condition {text(ir, cond)!r} does not bound the variable"
    bound = m.group(2) if m.group(1) in ("<=", "<", ">=", ">", "!=") else m.group(1)
    if not unit.compile_time(bound):
        return False, f"the bound {bound.strip()!r} is not a compile-time constant"
    step = re.fullmatch(rf"\s*(?:\+\+|--)\s*{re.escape(var)}\s*|\s*{re.escape(var)}\s*(?:\+\+|--)\s*"
                        rf"|\s*{re.escape(var)}\s*(?:[-+*/]=|<<=|>>=)\s*(.+?)\s*", text(ir, update), re.S)
    if step is None or (step.group(1) is not None and not unit.compile_time(step.group(1))):
        return False, f"the step {text(ir, update)!r} is not a compile-time constant"
    if var in written_names(ir, loop_body(ir, loop)):
        return False, f"the body writes the loop variable {var}"
    return True, ""


def _trip_count(unit: Unit, loop: int) -> int | None:
    """The trip count of a `for (v = a; v < b; v += c)` loop with constant a, b, c."""
    ir = unit.ir
    var = loop_var(ir, loop)
    _init, cond, update = for_parts(ir, loop)
    start = _loop_start(ir, loop)
    if var is None or start is None or cond is None or update is None:
        return None
    a = unit.value(text(ir, start))
    m = re.fullmatch(rf"\s*{re.escape(var)}\s*(<|<=)\s*(.+?)\s*", text(ir, cond), re.S)
    if a is None or m is None:
        return None
    b = unit.value(m.group(2))
    upd = text(ir, update).replace(" ", "")
    c = 1 if upd in (f"++{var}", f"{var}++") else None
    sm = re.fullmatch(rf"{re.escape(var)}\+=(.+)", upd)
    if sm:
        c = unit.value(sm.group(1))
    if b is None or not c or c < 0:
        return None
    b += 1 if m.group(1) == "<=" else 0
    return max(0, -(-(b - a) // c))


def _shared_read(unit: Unit, nid: int, shared: Mapping[str, SharedArray], fn: int,
                 limit: int) -> tuple[str, list[int], int] | None:
    """(array, index nodes, read node) of the shared element an operand of a product reads:
    directly (`As[i][k]`) or through a register the enclosing loops fill from one
    (`a_frag[i] = As[..][k]` before the product, inside node `limit`)."""
    ir = unit.ir
    node = _strip(ir, nid)
    base, idx = subscript(ir, node)
    if base in shared:
        return base, idx, node
    if ir.grammar_type_of(node) == "pointer_expression" and ir.name_of(node) == "*":
        inner = _strip(ir, children(ir, node)[-1])
        names = _names(ir, inner) & set(shared)
        if len(names) == 1:
            return names.pop(), [inner], node
    name = base if base is not None else (ir.name_of(node) if ir.grammar_type_of(node) == "identifier" else None)
    if name is None or name in shared:
        return None
    fills = []
    for c in subtree(ir, limit):
        if ir.grammar_type_of(c) != "assignment_expression" or _op(ir, c) != "=":
            continue
        target = children(ir, c)[0]
        t_base, _ = subscript(ir, target)
        t_name = t_base or (ir.name_of(target) if ir.grammar_type_of(target) == "identifier" else None)
        if t_name == name:
            fills.append(c)
    if len(fills) != 1:
        for c in subtree(ir, limit):
            if ir.grammar_type_of(c) == "init_declarator" and \
                    ir.name_of(children(ir, c)[0]) == name:
                fills.append(c)
        if len(fills) != 1:
            return None
    value = _strip(ir, children(ir, fills[0])[-1])
    base, idx = subscript(ir, value)
    if base in shared:
        target = children(ir, fills[0])[0]
        if ir.grammar_type_of(target) == "subscript_expression" and \
                len(subscript(ir, target)[1]) != len(subscript(ir, node)[1]):
            return None
        return base, idx, value
    return None


def _micro_kernel(unit: Unit, kernel: str, fn: int, stmt: int,
                  update: tuple[int, int, int, str], staged: Sequence[Staging]
                  ) -> MicroKernel | Refusal | None:
    ir = unit.ir
    lhs, x, y, form = update
    shared = unit.shared_arrays(fn)
    where = _span(ir, stmt)
    loops = _loops_around(ir, stmt, fn)
    k_loops = [lp for lp in loops if any(_is_sync(ir, c) for c in _statements(ir, loop_body(ir, lp)))]
    if not (_names(ir, x) | _names(ir, y)) & set(shared) and \
            _shared_read(unit, x, shared, fn, loops[-1] if loops else fn) is None:
        return None
    if not k_loops:
        return Refusal("micro-kernel", "the multiply-add is in no loop with a block barrier "
                       "(no K loop over staged tiles)", where, kernel)
    k_loop = k_loops[0]
    ra = _shared_read(unit, x, shared, fn, k_loop)
    rb = _shared_read(unit, y, shared, fn, k_loop)
    if ra is None or rb is None:
        return Refusal("micro-kernel", "a factor of the multiply-add is not read from a shared "
                       "tile (directly or through a register filled from one)", where, kernel)
    if ra[0] == rb[0]:
        return Refusal("micro-kernel", "both factors read the same shared array", where, kernel)
    acc_base, acc_idx = subscript(ir, lhs)
    acc = acc_base or (ir.name_of(lhs) if ir.grammar_type_of(lhs) == "identifier" else None)
    if acc is None or acc in shared or acc in _pointer_params(ir, fn):
        return Refusal("micro-kernel", "the accumulator is not a register of the thread",
                       where, kernel)
    inner_loops = [lp for lp in loops if lp != k_loop and ir.span_of(lp).start > ir.span_of(k_loop).start]
    k_var = None
    inner = None
    for lp in inner_loops:
        var = loop_var(ir, lp)
        if var and any(var in _names(ir, i) for i in ra[1]) and any(var in _names(ir, i) for i in rb[1]):
            k_var, inner = var, lp
            break
    if inner is None:
        return Refusal("micro-kernel", "no loop inside the K loop runs over an index both "
                       "tiles are read at", where, kernel)
    ok, why = constant_trip(unit, inner)
    if not ok:
        return Refusal("micro-kernel", f"the loop over the tile's k: {why}", where, kernel)
    op_a = _operand(unit, ra, shared, k_var, x)
    op_b = _operand(unit, rb, shared, k_var, y)
    if op_a is None or op_b is None:
        return Refusal("micro-kernel", "the reduction index is in several subscripts of a tile",
                       where, kernel)
    if len(acc_idx) >= 1:  # A is the operand whose other index shares names with acc's first
        first = _names(ir, acc_idx[0])
        a_other = set().union(*(_names(ir, i) for n, i in enumerate(ra[1]) if n != op_a.k_position)) \
            if len(ra[1]) > 1 else set()
        b_other = set().union(*(_names(ir, i) for n, i in enumerate(rb[1]) if n != op_b.k_position)) \
            if len(rb[1]) > 1 else set()
        if first & b_other and not first & a_other:
            op_a, op_b = op_b, op_a
    bk = _trip_count(unit, inner)
    bm = _other_extent(op_a)
    bn = _other_extent(op_b)
    acc_decl = _local_array(unit, fn, acc)
    acc_extents = acc_decl[1] if acc_decl else ()
    acc_type = acc_decl[0] if acc_decl else _local_type(unit, fn, acc)
    if len(acc_extents) >= 2:
        thread_tile = (acc_extents[0], acc_extents[1])
    elif len(acc_extents) == 1:
        thread_tile = (acc_extents[0], 1)
    else:
        thread_tile = (1, 1)
    if bm is not None and bk is not None and len(op_a.extents) == 1 and op_a.extents[0]:
        bm = op_a.extents[0] // bk
    if bn is not None and bk is not None and len(op_b.extents) == 1 and op_b.extents[0]:
        bn = op_b.extents[0] // bk
    block = unit.launch_block().dims
    warp = _warp_tile(block, bn, thread_tile)
    parts = for_parts(ir, k_loop)
    k_step = k_extent = ""
    if parts[1] is not None:
        m = re.search(r"(<=|<|!=)\s*(.+)$", text(ir, parts[1]), re.S)
        k_extent = m.group(2).strip() if m else text(ir, parts[1])
    if parts[2] is not None:
        m = re.search(r"(?:\+=)\s*(.+)$", text(ir, parts[2]), re.S)
        k_step = m.group(1).strip() if m else text(ir, parts[2])
    feeds = tuple(s for s in staged if s.kernel == kernel and s.array in (op_a.array, op_b.array)
                  and ir.span_of(k_loop).start <= s.store[0] < ir.span_of(k_loop).end)
    epilogue, output = _epilogue(unit, fn, k_loop, acc)
    return MicroKernel(kernel, op_a, op_b, acc, acc_type, tuple(e or 0 for e in acc_extents),
                       tuple(text(ir, i) for i in acc_idx),
                       shared[op_a.array].element, (bm, bn, bk), thread_tile, warp, k_var,
                       _span(ir, k_loop), k_step, k_extent, _span(ir, inner), where, feeds,
                       epilogue, output, block, form)


def _operand(unit: Unit, read: tuple[str, list[int], int], shared: Mapping[str, SharedArray],
             k_var: str, used: int) -> Operand | None:
    ir = unit.ir
    array, idx, node = read
    holders = [n for n, i in enumerate(idx) if k_var in _names(ir, i)]
    if len(holders) != 1:
        return None
    pos = holders[0]
    if len(idx) > 1:
        layout = "k-contiguous" if pos == len(idx) - 1 else "k-strided"
    else:
        layout = "k-contiguous" if _k_unit_stride(ir, idx[0], k_var) else "k-strided"
    return Operand(array, tuple(text(ir, i) for i in idx), pos, layout, shared[array].extents,
                   text(ir, used))


def _k_unit_stride(ir: KernelIR, index: int, k_var: str) -> bool:
    """Whether `k_var` enters a flattened index as a plain addend (not scaled)."""
    node = _strip(ir, index)
    if ir.grammar_type_of(node) == "identifier":
        return ir.name_of(node) == k_var
    if ir.grammar_type_of(node) == "binary_expression" and ir.name_of(node) in ("+", "-"):
        return any(_k_unit_stride(ir, c, k_var) for c in children(ir, node)
                   if ir.grammar_type_of(c) not in _TRIVIA)
    return False


def _other_extent(op: Operand) -> int | None:
    if len(op.extents) == 2:
        return op.extents[1 - op.k_position]
    if len(op.extents) == 1:
        return op.extents[0]
    return None


def _warp_tile(block: tuple[int, int, int] | None, bn: int | None,
               thread_tile: tuple[int, int]) -> tuple[int, int] | None:
    """The output tile of one warp when the block's threads are laid out over N first (x)."""
    if block is None or bn is None or not thread_tile[1]:
        return None
    across = bn // thread_tile[1]
    if across <= 0 or 32 % across and across % 32:
        return None
    if across >= 32:
        return (thread_tile[0], 32 * thread_tile[1])
    return ((32 // across) * thread_tile[0], across * thread_tile[1])


def _local_array(unit: Unit, fn: int, name: str) -> tuple[str, tuple[int | None, ...]] | None:
    ir = unit.ir
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) != "declaration" or "__shared__" in text(ir, nid):
            continue
        for n, ident, _init in declared_names(ir, nid):
            if n == name:
                dims = re.findall(r"\[([^\]]*)\]", _declarator_text(ir, ident, nid))
                if not dims:
                    return None
                return _declared_type(ir, nid), tuple(unit.value(d) for d in dims)
    return None


def _local_type(unit: Unit, fn: int, name: str) -> str:
    ir = unit.ir
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) == "declaration" and name in [n for n, _, _ in declared_names(ir, nid)]:
            return _declared_type(ir, nid)
    return ""


def _epilogue(unit: Unit, fn: int, k_loop: int, acc: str) -> tuple[tuple[tuple[int, int], ...], str | None]:
    """The statements after the K loop (in its block and the blocks around it) that read the
    accumulator, and the global pointer they store to."""
    ir = unit.ir
    pointers = _pointer_params(ir, fn)
    out: list[tuple[int, int]] = []
    output = None
    node = k_loop
    while node != fn and node is not None:
        parent = ir.parent_of(node)
        if parent is None:
            break
        if ir.grammar_type_of(parent) == "compound_statement":
            items = _statements(ir, parent)
            for later in items[items.index(node) + 1:] if node in items else []:
                if acc in _names(ir, later):
                    out.append(_span(ir, later))
                    for c in subtree(ir, later):
                        if ir.grammar_type_of(c) == "assignment_expression":
                            target = children(ir, c)[0]
                            base = subscript(ir, target)[0] or next(
                                iter(_names(ir, target) & set(pointers)), None)
                            if base in pointers:
                                output = output or base
            if out:
                break
        node = parent
    return tuple(out), output


# ---------------------------------------------------------------------------------------------
# the launch's block size, as the host sets it

_CHEVRON = re.compile(r"(\w+)\s*(?:<[^<>;(){}]*>)?\s*<<<\s*([^<>]*?)>>>")  # `k<256><<<...>>>` too


def launch_block(ir: KernelIR, kernel: str | None = None, host: str | None = None) -> LaunchBlock:
    """The block size the launches of `kernel` (or of the unit's only kernel) use: read from
    the host module `host` (text; by default the `.py` beside the IR's path) and from
    `<<<grid, block>>>` launches in the unit. A launch whose block is not a literal bound once,
    or launches that disagree, give dims None and the reason."""
    unit = Unit(ir)
    kernels = sorted(unit.kernels)
    launches: list[tuple[str | None, tuple[int, int, int] | None, str]] = []
    for m in _CHEVRON.finditer(ir.text):
        args = _split_args(m.group(2))
        if len(args) < 2:
            continue
        launches.append((m.group(1), _dim3_text(unit, args[1]), "<<<grid, block>>>"))
    if host is None and ir.path:
        beside = Path(ir.path).with_suffix(".py")
        host = beside.read_text(encoding="utf-8") if beside.is_file() else None
    if host is not None:
        # a `<<<...>>>` launch in a source string of the host is the unit's own as it was
        # written: where the unit has its launches, they are the ones it runs (edited or not)
        own = bool(launches)
        launches += [e for e in host_launches(host) if not (own and e[2] == "<<<grid, block>>>")]
    wanted = kernel or (kernels[0] if len(kernels) == 1 else None)
    mine = [entry for entry in launches if entry[0] == wanted]
    if not mine:
        mine = [entry for entry in launches if entry[0] is None or entry[0] not in kernels]
        if len(kernels) > 1 and len({e[1] for e in mine}) > 1:
            return LaunchBlock(None, "host", "the host launches several kernels and which one "
                               "a launch runs is not told")
    if not mine:
        return LaunchBlock(None, "", "no launch of the kernel was found (no host module "
                           "beside it, no <<<grid, block>>>)")
    dims = {e[1] for e in mine}
    if None in dims:
        return LaunchBlock(None, mine[0][2], "a launch's block is not a literal bound once")
    if len(dims) > 1:
        return LaunchBlock(None, mine[0][2], f"the launches use different blocks {sorted(dims)}")
    block = dims.pop()
    from kir.hostlaunch import directives  # noqa: PLC0415

    for d in directives(ir.text):  # the source asks its host's launches for another block
        if d.kernel == wanted and d.block is not None and d.block_from == block:
            return LaunchBlock(d.block, "host launch line")
    return LaunchBlock(block, mine[0][2])


def _split_args(body: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(body[start:i].strip())
            start = i + 1
    if body[start:].strip():
        out.append(body[start:].strip())
    return out


def _dim3_text(unit: Unit, expr: str) -> tuple[int, int, int] | None:
    expr = expr.strip()
    m = re.fullmatch(r"(?:dim3\s*)?[({]\s*(.*?)\s*[)}]", expr, re.S)
    parts = _split_args(m.group(1)) if m and "," in m.group(1) or (m and expr.startswith("dim3")) \
        else [expr]
    values = [unit.value(p) for p in parts]
    if not values or None in values or len(values) > 3:
        return _local_dim3(unit, expr)
    dims = [int(v) for v in values] + [1, 1]  # type: ignore[arg-type]
    return dims[0], dims[1], dims[2]


def _local_dim3(unit: Unit, name: str) -> tuple[int, int, int] | None:
    """A `dim3 name(x, y)` / `dim3 name = ...` / `int name = N` bound once in the unit."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return None
    hits = re.findall(rf"\bdim3\s+{name}\s*(?:\(([^()]*)\)|\{{([^{{}}]*)\}}|=\s*([^;]+));", unit.ir.text)
    if len(hits) == 1:
        body = next(h for h in hits[0] if h)
        return _dim3_text(unit, f"({body})" if "," in body else body)
    ints = re.findall(rf"\b(?:const\s+)?(?:int|unsigned|size_t)\s+{name}\s*=\s*([^;,]+)[;,]", unit.ir.text)
    if len(ints) == 1 and unit.value(ints[0]) is not None:
        return (int(unit.value(ints[0])), 1, 1)  # type: ignore[arg-type]
    return None


def host_launches(source: str) -> list[tuple[str | None, tuple[int, int, int] | None, str]]:
    """(kernel name or None, block dims or None, form) of each launch a Python host module
    makes: `*.launch(func, grid, block, ...)` (the project's cudahost), `cuLaunchKernel(func,
    gx, gy, gz, bx, by, bz, ...)`, a CuPy kernel called as `k(grid, block, args)` or with
    `block=`, and a `<<<grid, block>>>` launch inside a source string (`load_inline`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    binds = _host_bindings(tree)
    kernel_vars = _kernel_variables(tree)
    out: list[tuple[str | None, tuple[int, int, int] | None, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "<<<" in node.value:
            for m in _CHEVRON.finditer(node.value):
                args = _split_args(m.group(2))
                if len(args) >= 2:
                    value = _c_int_tuple(args[1], node.value)
                    out.append((m.group(1), value, "<<<grid, block>>>"))
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node.func)
        block_kw = next((k.value for k in node.keywords if k.arg == "block"), None)
        args = _driver_args(node.args) if name.endswith("cuLaunchKernel") else node.args
        if name.endswith("cuLaunchKernel") and len(args) >= 7:
            dims = [_host_int(a, binds) if a is not None else None for a in args[4:7]]
            value = None if None in dims else tuple(dims)  # type: ignore[assignment]
            out.append((_kernel_of(node.args[0], kernel_vars), value, "cuLaunchKernel"))
        elif name.split(".")[-1] == "launch" and (len(node.args) >= 3 or block_kw is not None):
            expr = block_kw if block_kw is not None else node.args[2]
            out.append((_kernel_of(node.args[0], kernel_vars) if node.args else None,
                        _host_dim3(expr, binds), "launch"))
        elif isinstance(node.func, ast.Name) and node.func.id in kernel_vars and \
                (len(node.args) >= 2 or block_kw is not None):
            expr = block_kw if block_kw is not None else node.args[1]
            out.append((kernel_vars[node.func.id], _host_dim3(expr, binds), "kernel call"))
    return out


def _driver_args(args: Sequence[ast.AST]) -> list[ast.AST | None]:
    """`cuLaunchKernel`'s arguments with a starred grid or block (`*grid`) spread into its
    three dimensions (unknown values: None)."""
    out: list[ast.AST | None] = []
    for a in args:
        if isinstance(a, ast.Starred):
            value = a.value
            if isinstance(value, (ast.Tuple, ast.List)):
                out += list(value.elts)
            else:
                out += [None, None, None]
        else:
            out.append(a)
    return out


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return _call_name(func.value) + "." + func.attr
    return ""


def _kernel_variables(tree: ast.AST) -> dict[str, str | None]:
    """Variables bound to a compiled kernel: `k = cp.RawKernel(src, "name")`,
    `k = module.get_function("name")`, `k = host.get_function(compiled, "name")` -> name."""
    out: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call):
            name = _call_name(node.value.func).split(".")[-1]
            if name in ("RawKernel", "get_function"):
                literal = [a.value for a in node.value.args
                           if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                out[node.targets[0].id] = literal[-1] if literal else None
    return out


def _kernel_of(expr: ast.AST, kernel_vars: Mapping[str, str | None]) -> str | None:
    if isinstance(expr, ast.Name):
        return kernel_vars.get(expr.id)
    if isinstance(expr, ast.Call) and _call_name(expr.func).endswith("get_function"):
        literal = [a.value for a in expr.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return literal[-1] if literal else None
    return None


def _host_bindings(tree: ast.AST) -> dict[str, list[ast.AST]]:
    """Every value a name is bound to anywhere in the module (assignments, tuple unpacking,
    parameter defaults)."""
    out: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(node.value)
                elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and \
                        len(t.elts) == len(node.value.elts):
                    for name, value in zip(t.elts, node.value.elts):
                        if isinstance(name, ast.Name):
                            out.setdefault(name.id, []).append(value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + \
                list(node.args.defaults) + list(node.args.kw_defaults)
            for a, d in zip(args, defaults):
                out.setdefault(a.arg, []).append(d if d is not None else ast.Name("?"))
    return out


def _host_int(expr: ast.AST, binds: Mapping[str, list[ast.AST]], depth: int = 0) -> int | None:
    if depth > 8:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.Name):
        values = binds.get(expr.id, [])
        return _host_int(values[0], binds, depth + 1) if len(values) == 1 else None
    if isinstance(expr, ast.BinOp):
        left, right = _host_int(expr.left, binds, depth + 1), _host_int(expr.right, binds, depth + 1)
        if left is None or right is None:
            return None
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
               ast.FloorDiv: int.__floordiv__, ast.LShift: int.__lshift__}
        fn = ops.get(type(expr.op))
        return fn(left, right) if fn and (right or not isinstance(expr.op, ast.FloorDiv)) else None
    if isinstance(expr, ast.Call) and _call_name(expr.func) == "int" and len(expr.args) == 1:
        return _host_int(expr.args[0], binds, depth + 1)
    return None


def _host_dim3(expr: ast.AST, binds: Mapping[str, list[ast.AST]], depth: int = 0
               ) -> tuple[int, int, int] | None:
    if isinstance(expr, ast.Name) and depth < 8:
        values = binds.get(expr.id, [])
        if len(values) == 1 and isinstance(values[0], (ast.Tuple, ast.List)):
            return _host_dim3(values[0], binds, depth + 1)
    if isinstance(expr, (ast.Tuple, ast.List)):
        dims = [_host_int(e, binds) for e in expr.elts]
        if not dims or None in dims or len(dims) > 3:
            return None
        full = [int(d) for d in dims] + [1, 1]  # type: ignore[arg-type]
        return full[0], full[1], full[2]
    value = _host_int(expr, binds)
    return None if value is None else (value, 1, 1)


def _c_int_tuple(expr: str, source: str) -> tuple[int, int, int] | None:
    """A block written in C++ inside a host string: a literal, `dim3(x, y)`, or a name bound
    once in the string to one of those."""
    expr = expr.strip()
    m = re.fullmatch(r"(?:dim3\s*)?\(\s*([^()]*)\)", expr)
    parts = _split_args(m.group(1)) if m else [expr]
    values = [_evaluate(p, {}, 0) for p in parts]
    if values and None not in values and len(values) <= 3:
        full = [int(v) for v in values] + [1, 1]  # type: ignore[arg-type]
        return full[0], full[1], full[2]
    if re.fullmatch(r"[A-Za-z_]\w*", expr):
        hits = re.findall(rf"\b(?:dim3|const\s+int|int|constexpr\s+int)\s+{expr}\s*(?:\(([^()]*)\)|=\s*([^;]+));",
                          source)
        if len(hits) == 1:
            body = hits[0][0] or hits[0][1]
            if hits[0][0]:
                body = f"({body})"
            return _c_int_tuple(body, "")
    return None


# ---------------------------------------------------------------------------------------------
# shared-memory reduction trees

_HALVE = re.compile(r"^\s*(\w+)\s*(?:>>=\s*1|/=\s*2|=\s*\1\s*(?:>>\s*1|/\s*2))\s*$")
_DOUBLE = re.compile(r"^\s*(\w+)\s*(?:<<=\s*1|\*=\s*2|=\s*(?:\1\s*(?:<<\s*1|\*\s*2)|2\s*\*\s*\1)|\+=\s*\1)\s*$")
_MAX_CALLS = re.compile(r"^(?:fmaxf?|max|__hmax|::max|std::max|cuda::std::max)$")
_MIN_CALLS = re.compile(r"^(?:fminf?|min|__hmin|::min|std::min|cuda::std::min)$")


def reduction_trees(ir: KernelIR | Unit) -> tuple[list[ReductionTree], list[Refusal]]:
    """Every shared-memory reduction tree of the unit (see `ReductionTree`) and the loops that
    halve or double a stride around a barrier but were not told apart as one (with why)."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    out: list[ReductionTree] = []
    refused: list[Refusal] = []
    for name, fn in unit.functions.items():
        shared = unit.shared_views(fn, aliases=True)
        for nid in subtree(unit.ir, fn):
            if unit.ir.grammar_type_of(nid) in ("for_statement", "while_statement", "do_statement"):
                finder = {"for_statement": _tree_loop, "while_statement": _while_tree,
                          "do_statement": _do_tree}[unit.ir.grammar_type_of(nid)]
                found = finder(unit, name, fn, nid, shared)
                if isinstance(found, ReductionTree):
                    out.append(found)
                elif found is not None:
                    refused.append(found)
            elif unit.ir.grammar_type_of(nid) == "compound_statement":
                found_u = _unrolled_tree(unit, name, fn, nid, shared)
                if isinstance(found_u, ReductionTree):
                    out.append(found_u)
                elif found_u is not None:
                    refused.append(found_u)
    return out, refused


def _combine(unit: Unit, stmt: int, shared: Mapping[str, SharedArray], rows: bool = False
             ) -> tuple[str, str, str, str] | None:
    """(array, op, own index, partner index) of a combine statement `sh[i] += sh[j];`,
    `sh[i] = sh[i] + sh[j];`, `sh[i] = fmaxf(sh[i], sh[j]);`, `sh[i] = a > b ? a : b;`. With
    `rows`, the slots may be of an array of more dimensions whose other indices are the same
    (`sh[r][i] += sh[r][j]`): the indices are then the last ones (`slot_rows` gives the rest)."""
    ir = unit.ir
    assign = _assignment(ir, stmt)
    if assign is None:
        return None
    lhs, rhs = children(ir, assign)[0], _strip(ir, children(ir, assign)[-1])
    base, idx = subscript(ir, lhs)
    if base not in shared or not idx or (len(idx) != 1 and not rows):
        return None
    own = flat_code(ir, idx[-1])
    lead = [flat_code(ir, i) for i in idx[:-1]]
    op = _op(ir, assign)

    def partner_of(node: int) -> str | None:
        b, i = subscript(ir, _strip(ir, node))
        return flat_code(ir, i[-1]) if b == base and len(i) == len(idx) and \
            [flat_code(ir, k) for k in i[:-1]] == lead else None

    def own_and_partner(a: int, b: int) -> str | None:
        pa, pb = partner_of(a), partner_of(b)
        if pa == own and pb is not None and pb != own:
            return pb
        if pb == own and pa is not None and pa != own:
            return pa
        return None

    if op == "+=":
        p = partner_of(rhs)
        return (base, "sum", own, p) if p is not None and p != own else None
    if op != "=":
        return None
    gtype = ir.grammar_type_of(rhs)
    parts = [c for c in children(ir, rhs) if ir.grammar_type_of(c) not in _TRIVIA]
    if gtype == "binary_expression" and ir.name_of(rhs) == "+":
        p = own_and_partner(parts[0], parts[-1])
        return (base, "sum", own, p) if p else None
    if gtype == "call_expression":
        args = [a for a in children(ir, parts[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
        name = callee(ir, rhs)
        kind = "max" if _MAX_CALLS.match(name) else "min" if _MIN_CALLS.match(name) else \
            _helper_kind(unit, name)
        if kind and len(args) == 2:
            p = own_and_partner(args[0], args[1])
            return (base, kind, own, p) if p else None
        return None
    if gtype == "conditional_expression":
        cond, yes, no = parts[0], parts[1], parts[2]
        cond = _strip(ir, cond)
        if ir.grammar_type_of(cond) != "binary_expression" or ir.name_of(cond) not in (">", ">=", "<", "<="):
            return None
        c = [k for k in children(ir, cond) if ir.grammar_type_of(k) not in _TRIVIA]
        if {flat_code(ir, c[0]), flat_code(ir, c[-1])} != {flat_code(ir, yes), flat_code(ir, no)}:
            return None
        p = own_and_partner(yes, no)
        if p is None:
            return None
        picks_left_when_greater = flat_code(ir, yes) == flat_code(ir, c[0])
        greater = ir.name_of(cond) in (">", ">=")
        return (base, "max" if picks_left_when_greater == greater else "min", own, p)
    return None


def slot_rows(ir: KernelIR, stmt: int) -> tuple[str, ...]:
    """The indices before the last of the slot a combine statement writes (`sh[r][t] += ...`
    -> ("r",)), as written; () for a slot of one index."""
    assign = _assignment(ir, stmt)
    idx = subscript(ir, children(ir, assign)[0])[1] if assign is not None else []
    return tuple(" ".join(text(ir, i).split()) for i in idx[:-1])


def _fold_kind(unit: Unit, name: str) -> str | None:
    """"max" / "min" for a callee that takes a maximum / minimum, else `_helper_kind`'s."""
    return "max" if _MAX_CALLS.match(name) else "min" if _MIN_CALLS.match(name) else \
        _helper_kind(unit, name)


def _joint_step(unit: Unit, then: int, shared: Mapping[str, SharedArray], var: str
                ) -> tuple[list[tuple[str, str, str, str]], tuple[str, ...], str] | str | None:
    """A tree's step that folds two arrays jointly (`_merge.online_merge`), read by running
    its statements (locals with values, plain or compound assignments of locals and of the
    own slots) over placeholders of the slots: the combines as `_combine` gives them, the
    slots' row indices and the merge statement; or why it is not such a merge (None: the
    step is not a run of such statements over slots at the own index and own + stride)."""
    from passes.cuda._merge import online_merge  # noqa: PLC0415 — only for joint steps

    ir = unit.ir
    items = _flat_items(ir, then) if ir.grammar_type_of(then) == "compound_statement" else [then]
    refs = [n for s in items for n in subtree(ir, s)
            if ir.grammar_type_of(n) == "subscript_expression" and subscript(ir, n)[0] in shared
            and not (ir.grammar_type_of(ir.parent_of(n)) == "subscript_expression" and  # type: ignore[arg-type]
                     children(ir, ir.parent_of(n))[0] == n)]  # type: ignore[arg-type]
    shapes = {(tuple(flat_code(ir, i) for i in subscript(ir, n)[1][:-1]),
               flat_code(ir, subscript(ir, n)[1][-1])) for n in refs}
    if len({lead for lead, _i in shapes}) != 1:
        return None
    indices = {i for _lead, i in shapes}
    own = next((i for i in indices if indices == {i, f"{i}+{var}"} or
                indices == {i, f"{var}+{i}"}), None)
    if own is None:
        return None
    env: dict[str, str] = {}
    after: dict[str, str] = {}

    def render(nid: int) -> str:
        cuts = []
        for n in subtree(ir, nid):
            if n in refs:
                base, idx = subscript(ir, n)
                at_own = flat_code(ir, idx[-1]) == own
                cuts.append((_span(ir, n), f"({after[base]})" if at_own and base in after
                             else f"kl{'O' if at_own else 'P'}_{base}"))
            elif ir.grammar_type_of(n) == "identifier" and ir.name_of(n) in env and \
                    not any(a <= ir.span_of(n).start < b for (a, b), _t in cuts):
                cuts.append((_span(ir, n), f"({env[ir.name_of(n)]})"))  # type: ignore[index]
        out, at = [], ir.span_of(nid).start
        for (a, b), t in sorted(cuts):
            if a < at:
                continue
            out += [ir.source[at:a].decode(), t]
            at = b
        return "".join(out) + ir.source[at:ir.span_of(nid).end].decode()

    elements = {shared[subscript(ir, n)[0]].element for n in refs}  # type: ignore[index]
    for s in items:
        if ir.grammar_type_of(s) == "declaration":
            declared = re.sub(r"\b(?:const|constexpr|register)\b|\s+", " ",
                              _declared_type(ir, s)).strip()
            if declared != "auto" and declared not in elements:
                return (f"a local of the step is a {declared}, not the slots' "
                        f"{' / '.join(sorted(elements))}")
            for name, _ident, init in declared_names(ir, s):
                if init is None:
                    return None
                env[name] = render(init)
            continue
        assign = _assignment(ir, s)
        if assign is None:
            return None
        lhs, op = children(ir, assign)[0], _op(ir, assign)
        value = render(children(ir, assign)[-1])
        if op not in ("=", "+=", "-=", "*=", "/="):
            return None
        if ir.grammar_type_of(lhs) == "identifier" and ir.name_of(lhs) in env:
            name = ir.name_of(lhs) or ""
            env[name] = value if op == "=" else f"({env[name]}) {op[0]} ({value})"
        elif lhs in refs and flat_code(ir, subscript(ir, lhs)[1][-1]) == own:
            base = subscript(ir, lhs)[0] or ""
            now = after.get(base, f"klO_{base}")
            after[base] = value if op == "=" else f"({now}) {op[0]} ({value})"
        else:
            return None
    fn = next(a for a in ir.ancestors(then) if ir.grammar_type_of(a) == "function_definition")
    params = set(_parameter_names(ir, fn)) - written_names(ir, fn) \
        if fn in unit.kernels.values() else set()  # a helper's parameters may differ by thread
    merged = online_merge(after, lambda name: _fold_kind(unit, name),
                          lambda name: name in params or unit.compile_time(name))
    if isinstance(merged, str):
        return merged
    m_array, s_array, statement = merged
    partner = next(i for i in indices if i != own)
    rows = next(tuple(" ".join(text(ir, i).split()) for i in subscript(ir, n)[1][:-1])
                for n in refs)
    return ([(m_array, "max", own, partner), (s_array, "rescaled-sum", own, partner)], rows,
            statement)


def _helper_kind(unit: Unit, name: str) -> str | None:
    """"sum", "max" or "min" where `name` is a function of the unit of two parameters `a`, `b`
    whose body is one `return` of `a + b`, a max / min call of them, or `a > b ? a : b` (any
    comparison, either order); else None."""
    ir = unit.ir
    fn = unit.functions.get(name)
    params = _parameter_names(ir, fn) if fn is not None else []
    if fn is None or len(params) != 2:
        return None
    body = _flat_items(ir, _function_body(ir, fn))
    if len(body) != 1 or ir.grammar_type_of(body[0]) != "return_statement":
        return None
    e = re.sub(r"^return|;$", "", flat_code(ir, body[0]))
    a, b = params
    if e in (f"{a}+{b}", f"{b}+{a}"):
        return "sum"
    call = re.fullmatch(r"([\w:]+)\((\w+),(\w+)\)", e)
    if call and {call.group(2), call.group(3)} == {a, b}:
        return "max" if _MAX_CALLS.match(call.group(1)) else \
            "min" if _MIN_CALLS.match(call.group(1)) else None
    pick = re.fullmatch(r"\(?(\w+)([<>]=?)(\w+)\)?\?(\w+):(\w+)", e)
    if pick is None or {pick.group(1), pick.group(3)} != {a, b} or \
            {pick.group(4), pick.group(5)} != {a, b}:
        return None
    left_when_greater = pick.group(4) == pick.group(1)
    return "max" if left_when_greater == (pick.group(2) in (">", ">=")) else "min"


def _slot_locals_inlined(unit: Unit, items: list[int], shared: Mapping[str, SharedArray]
                         ) -> list[tuple[Unit, int, str]]:
    """The statements of a tree's step as (unit, statement, text), with locals that only copy
    a slot (`float a = sh[t]; float b = sh[t + s]; sh[t] = a + b;`) put back in place of their
    uses (`sh[t] = sh[t] + sh[t + s];`, parsed on its own); without such locals, the
    statements as they are."""
    ir = unit.ir
    copies: dict[str, str] = {}
    rest = []
    for s in items:
        names = declared_names(ir, s) if ir.grammar_type_of(s) == "declaration" else []
        if not rest and len(names) == 1 and names[0][2] is not None:
            base, idx = subscript(ir, _strip(ir, names[0][2]))
            if base in shared and len(idx) == 1:
                copies[names[0][0]] = text(ir, _strip(ir, names[0][2]))
                continue
        rest.append(s)
    if not copies:
        return [(unit, s, text(ir, s)) for s in items]
    if any(set(copies) & written_names(ir, s) for s in rest):
        return [(unit, s, text(ir, s)) for s in items]  # a copy written again: told as is
    from kir import parse  # noqa: PLC0415 — kir is below passes; parsed only for this form

    out = []
    for s in rest:
        inlined = re.sub(r"(?<![.\w])[A-Za-z_]\w*\b(?!\s*\()",
                         lambda m: f"({copies[m.group(0)]})" if m.group(0) in copies else m.group(0),
                         text(ir, s))
        sub = Unit(parse("void kl_step() { " + inlined + " }", "cuda"))
        stmt = next((n for n in range(len(sub.ir))
                     if sub.ir.grammar_type_of(n) == "expression_statement"), None)
        if stmt is None:
            return [(unit, s, text(ir, s)) for s in items]
        out.append((sub, stmt, inlined))
    return out


def _thread_index(unit: Unit, fn: int, expr: str) -> bool:
    """Whether `expr` is the thread's index in the block's x dimension (`threadIdx.x` or a
    variable bound once to it)."""
    e = re.sub(r"\s+", "", expr)
    e = re.sub(r"^\((?:int|unsigned|unsignedint)\)", "", e)
    e = re.sub(r"^(?:static_cast<(?:int|unsigned|unsignedint)>)\((.*)\)$", r"\1", e)
    if e == "threadIdx.x" or "thread_rank" in e and _unparen(re.sub(
            r"\s+", "", block_group_terms(unit, expand_locals(unit, fn, e)))) == "threadIdx.x":
        return True  # a thread block's rank in a one-dimensional launch
    if not re.fullmatch(r"[A-Za-z_]\w*", e):
        return False
    ir = unit.ir
    inits = []
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) == "declaration":
            for n, _i, init in declared_names(ir, nid):
                if n == e:
                    inits.append(init)
        elif ir.grammar_type_of(nid) in ("assignment_expression", "update_expression"):
            t = children(ir, nid)[0]
            if ir.grammar_type_of(t) == "identifier" and ir.name_of(t) == e:
                return False
    return len(inits) == 1 and inits[0] is not None and _thread_index(unit, fn, text(ir, inits[0]))


def _linear_thread_index(unit: Unit, fn: int, expr: str) -> bool:
    """Whether `expr` (locals expanded) is the thread's linear index in a block of two or
    three dimensions (`threadIdx.y * blockDim.x + threadIdx.x`, ...): `threadIdx.x` in a
    one-dimensional block, which a tree's shuffle form checks (`reduction.tree_guard`)."""
    e = re.sub(r"[\s()]|\b(?:int|unsigned)\b", "", expand_locals(unit, fn, expr))
    xy = {"threadIdx.y*blockDim.x", "blockDim.x*threadIdx.y"}
    terms = e.split("+")
    return len(terms) == 2 and "threadIdx.x" in terms and bool(set(terms) & xy)


def _whole_block(unit: Unit, fn: int, expr: str) -> bool:
    """Whether `expr` (locals expanded) is the block's thread count as a product of its
    dimensions (`blockDim.x * blockDim.y`, with `* blockDim.z`): `blockDim.x` in a
    one-dimensional block, which a tree's shuffle form checks at run time."""
    e = re.sub(r"[\s()]|\b(?:int|unsigned)\b", "", expand_locals(unit, fn, expr))
    factors = sorted(e.split("*"))
    return factors in (["blockDim.x", "blockDim.y"], ["blockDim.x", "blockDim.y", "blockDim.z"])


def _tree_loop(unit: Unit, kernel: str, fn: int, loop: int,
               shared: Mapping[str, SharedArray]) -> ReductionTree | Refusal | None:
    """A `for` loop over a halving or doubling stride as a tree (with a `#pragma unroll`
    right before it, that line too)."""
    ir = unit.ir
    _init, cond, update = for_parts(ir, loop)
    var = loop_var(ir, loop)
    start = _loop_start(ir, loop)
    if var is None or update is None or cond is None or start is None:
        return None
    where = _span(ir, loop)
    pragma = _pragma_before(ir, loop)
    if pragma is not None:
        where = (ir.span_of(pragma).start, where[1])
    found = _tree_parts(unit, kernel, fn, loop, shared, var, start, cond, text(ir, update),
                        _statements(ir, loop_body(ir, loop)), where, loop)
    if isinstance(found, ReductionTree) and _init is not None and \
            ir.grammar_type_of(_init) != "declaration":  # a stride declared outside the loop
        elsewhere = _stride_read_elsewhere(unit, fn, var, where)[0]
        if elsewhere:
            return Refusal("reduction-tree", f"the stride {var} is read outside the tree "
                           f"({elsewhere})", where, kernel)
    return found


def _pragma_before(ir: KernelIR, node: int) -> int | None:
    """The `#pragma unroll` line right before statement `node`, if there is one."""
    parent = ir.parent_of(node)
    if parent is None:
        return None
    kids = children(ir, parent)
    at = kids.index(node) if node in kids else 0
    prev = kids[at - 1] if at > 0 else None
    if prev is not None and ir.grammar_type_of(prev) == "preproc_call" and \
            re.match(r"\s*#\s*pragma\s+unroll\b", text(ir, prev)):
        return prev
    return None


def _while_tree(unit: Unit, kernel: str, fn: int, loop: int,
                shared: Mapping[str, SharedArray]) -> ReductionTree | Refusal | None:
    """`s = start; while (s > 0) { ...; s >>= 1; }` as a tree: the stride declared or assigned
    by the statement right before the loop, updated once in the loop's body after every other
    use of it there; the stride read nowhere else but by loops that set it first
    (`_stride_read_elsewhere`: one variable may serve several trees)."""
    ir = unit.ir
    kids = [c for c in children(ir, loop) if ir.grammar_type_of(c) not in _TRIVIA]
    clause, body = kids[0], kids[-1]
    cond = next((c for c in children(ir, clause) if ir.grammar_type_of(c) not in _TRIVIA), None)
    found = _stride_set_before(ir, loop, body, cond)
    if found is None:
        return None
    decl, var, start, items = found
    updates = [s for s in items if ir.grammar_type_of(s) == "expression_statement" and
               (_HALVE.match(text(ir, s).strip().rstrip(";")) or
                _DOUBLE.match(text(ir, s).strip().rstrip(";")))]
    update_stmt = next((s for s in updates if var in written_names(ir, s)), None)
    if update_stmt is None:
        return None
    update = text(ir, update_stmt).strip().rstrip(";")
    where = (ir.span_of(decl).start, ir.span_of(loop).end)
    rest = [s for s in items if s != update_stmt]
    if any(var in written_names(ir, s) for s in rest):
        return Refusal("reduction-tree", f"the tree's body writes its stride {var} besides "
                       "its update", where, kernel)
    after = rest[items.index(update_stmt):]
    if any(var in _names(ir, s) for s in after):
        return Refusal("reduction-tree", f"the tree's body uses its stride {var} after "
                       "updating it", where, kernel)
    elsewhere, shared_stride = _stride_read_elsewhere(unit, fn, var, where)
    if elsewhere:
        return Refusal("reduction-tree", f"the stride {var} is read outside the tree "
                       f"({elsewhere})", where, kernel)
    if shared_stride and ir.grammar_type_of(decl) == "declaration":
        where = _span(ir, loop)  # the declaration stays: other loops set the same variable
    return _tree_parts(unit, kernel, fn, loop, shared, var, start, cond, update, rest,
                       where, decl)


def _do_tree(unit: Unit, kernel: str, fn: int, loop: int,
             shared: Mapping[str, SharedArray]) -> ReductionTree | Refusal | None:
    """A tree written as a do-while loop over a stride set by the statement right before it:
    `s = E; do { s >>= 1; ...; } while (s > 1);` (halved first: strides E/2 ... 1, the tree
    of `s = E / 2; while (s > 0)`) or `s = E / 2; do { ...; s >>= 1; } while (s > 0);`
    (halved last: `while`'s form, its first trip taken for granted, which a stride of at
    least 1 is). Other conditions, doubling strides, a stride written besides or read after
    the loop are refused or no tree, as `_while_tree` tells them."""
    ir = unit.ir
    kids = [c for c in children(ir, loop) if ir.grammar_type_of(c) not in _TRIVIA]
    body = next((c for c in kids if ir.grammar_type_of(c) == "compound_statement"), None)
    clause = next((c for c in reversed(kids) if ir.grammar_type_of(c) == "parenthesized_expression"),
                  None)
    cond = next((c for c in children(ir, clause) if ir.grammar_type_of(c) not in _TRIVIA),
                None) if clause is not None else None
    found = _stride_set_before(ir, loop, body, cond)
    if found is None:
        return None
    decl, var, start, items = found
    where = (ir.span_of(decl).start, ir.span_of(loop).end)

    def halves(stmt: int) -> bool:
        m = ir.grammar_type_of(stmt) == "expression_statement" and \
            _HALVE.match(text(ir, stmt).strip().rstrip(";"))
        return bool(m) and m.group(1) == var

    if not any(halves(st) for st in items) or not any(_is_sync(ir, st) for st in items):
        return None
    first, last = halves(items[0]), halves(items[-1])
    if not (first or last) or first and last:
        return Refusal("reduction-tree", f"the do-while tree halves its stride {var} other than "
                       "first or last in its body", where, kernel)
    update_stmt = items[0] if first else items[-1]
    rest = items[1:] if first else items[:-1]
    if any(var in written_names(ir, st) for st in rest):
        return Refusal("reduction-tree", f"the tree's body writes its stride {var} besides "
                       "its update", where, kernel)
    loop_cond = flat_code(ir, cond)
    stops = (f"{var}>1", f"{var}>=2", f"1<{var}") if first else (f"{var}>0", f"{var}>=1", f"0<{var}")
    if loop_cond not in stops:
        return Refusal("reduction-tree", f"the do-while tree stops at {text(ir, cond)}, not at "
                       f"{'stride 1 (its last trip halves to 1)' if first else 'stride 0'}",
                       where, kernel)
    elsewhere, shared_stride = _stride_read_elsewhere(unit, fn, var, where)
    if elsewhere:
        return Refusal("reduction-tree", f"the stride {var} is read outside the tree "
                       f"({elsewhere})", where, kernel)
    if shared_stride and ir.grammar_type_of(decl) == "declaration":
        where = _span(ir, loop)
    whole = flat_code(ir, start)
    half = None if not first else (whole if re.fullmatch(r"[\w.]+", whole) else f"({whole})") + "/2"
    return _tree_parts(unit, kernel, fn, loop, shared, var, start, cond,
                       text(ir, update_stmt).strip().rstrip(";"), rest, where, decl,
                       start_text=half, loop_cond=f"{var}>0")


def _stride_set_before(ir: KernelIR, loop: int, body: int | None, cond: int | None
                       ) -> tuple[int, str, int, list[int]] | None:
    """(the statement setting the stride, the stride, its first value, the body's statements)
    of a loop (its `body` and condition `cond`) whose stride the statement right before it in
    the same block sets; None where there is no such statement or the body is not a block of
    two statements or more."""
    parent = ir.parent_of(loop)
    if parent is None or ir.grammar_type_of(parent) != "compound_statement" or cond is None \
            or body is None or ir.grammar_type_of(body) != "compound_statement":
        return None
    items = _statements(ir, body)
    siblings = _statements(ir, parent)
    if len(items) < 2 or loop not in siblings or siblings.index(loop) == 0:
        return None
    decl = siblings[siblings.index(loop) - 1]
    init = _stride_init(ir, decl)
    return None if init is None else (decl, init[0], init[1], items)


def _stride_init(ir: KernelIR, stmt: int) -> tuple[str, int] | None:
    """(variable, value) of a statement `T s = value;` or `s = value;` (value not reading s)."""
    if ir.grammar_type_of(stmt) == "declaration":
        names = declared_names(ir, stmt)
        if len(names) != 1 or names[0][2] is None:
            return None
        var, value = names[0][0], names[0][2]
    elif ir.grammar_type_of(stmt) == "expression_statement":
        assign = _assignment(ir, stmt)
        if assign is None or _op(ir, assign) != "=" or \
                ir.grammar_type_of(children(ir, assign)[0]) != "identifier":
            return None
        var, value = ir.name_of(children(ir, assign)[0]) or "", children(ir, assign)[-1]
    else:
        return None
    return None if var in _names(ir, value) else (var, value)


def _only_written(ir: KernelIR, ident: int) -> bool:
    """Whether identifier `ident` is only written where it stands: the name a declaration
    declares, or the target of a plain `=` (not `+=`, `>>=`, ...)."""
    parent = ir.parent_of(ident)
    if parent is None:
        return False
    gtype = ir.grammar_type_of(parent)
    if gtype in ("init_declarator", "declaration"):
        return children(ir, parent)[0] == ident or gtype == "declaration"
    return gtype == "assignment_expression" and children(ir, parent)[0] == ident and \
        _op(ir, parent) == "="


def _stride_read_elsewhere(unit: Unit, fn: int, var: str, region: tuple[int, int]
                           ) -> tuple[str, bool]:
    """A statement of function `fn` outside `region` (a tree's loop over stride `var`) that may
    read the value the loop leaves in `var`, as text ('' if none). A read is safe where every
    path to it since the loop sets `var` first: it lies in a `for` loop whose header sets `var`,
    or after a statement setting `var` (`s = v;`, `T s = v;`, v not reading it) in the same
    block, where that loop or block does not hold the tree. A parameter or a variable not
    declared in `fn` is read past the function. Second: whether `var` occurs outside
    `region` at all."""
    ir = unit.ir
    regions = []
    declared = False
    for nid in subtree(ir, fn):
        gtype = ir.grammar_type_of(nid)
        if gtype == "declaration" and var in [n for n, _i, _v in declared_names(ir, nid)]:
            declared = True
        if gtype == "for_statement":
            init = loop_init(ir, nid)
            if init is not None and init[0] == var and init[1] is not None and \
                    var not in _names(ir, init[1]):
                regions.append(_span(ir, nid))
        elif gtype in ("declaration", "expression_statement"):
            parent = ir.parent_of(nid)
            init = _stride_init(ir, nid)
            if init is not None and init[0] == var and parent is not None and \
                    ir.grammar_type_of(parent) == "compound_statement":
                regions.append((ir.span_of(nid).start, ir.span_of(parent).end))
    if not declared or var in _parameter_names(ir, fn):
        return f"{var} is not a local of the function", True
    loops = [_span(ir, n) for n in subtree(ir, fn) if ir.grammar_type_of(n) in _LOOP_TYPES]
    kept = []
    for a, b in regions:
        if (a, b) in loops and a <= region[0] < b:
            continue  # a loop around the tree: its header and body run again after the tree
        if a <= region[0] < b:  # up to the tree, or to a loop after the set that holds it
            b = min([la for la, lb in loops if a < la <= region[0] < lb] + [region[0]])
        kept.append((a, b))
    regions = kept
    outside = False
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) != "identifier" or ir.name_of(nid) != var:
            continue
        at = ir.span_of(nid).start
        if region[0] <= at < region[1]:
            continue
        outside = True
        if any(a <= at < b for a, b in regions) or _only_written(ir, nid):
            continue
        stmt = next((a for a in ir.ancestors(nid) if ir.grammar_type_of(a) in (
            "expression_statement", "declaration", "return_statement", "if_statement",
            "for_statement", "while_statement")), nid)
        return " ".join(text(ir, stmt).split())[:80], True
    return "", outside


def _tree_parts(unit: Unit, kernel: str, fn: int, loop: int, shared: Mapping[str, SharedArray],
                var: str, start: int, cond: int, update: str, items: list[int],
                where: tuple[int, int], first: int, start_text: str | None = None,
                loop_cond: str | None = None) -> ReductionTree | Refusal | None:
    """The tree a loop over stride `var` (from `start`, while `cond`, stepped by `update`;
    body statements `items`, the update excluded) makes; `first`: its first statement (the
    thread's stores into the arrays come right before it). `start_text` / `loop_cond`: the
    first stride and the condition of the `while` loop the loop runs as, where they are not
    `start` and `cond` as written (a do-while loop halving first)."""
    ir = unit.ir
    halving = _HALVE.match(update)
    doubling = _DOUBLE.match(update)
    if not (halving or doubling) or (halving or doubling).group(1) != var:  # type: ignore[union-attr]
        return None
    if not any(_is_sync(ir, s) for s in items):
        return None

    def refuse(why: str) -> Refusal:
        return Refusal("reduction-tree", why, where, kernel)

    guarded = [s for s in items if ir.grammar_type_of(s) == "if_statement"]
    rest = [s for s in items if s not in guarded and not _is_sync(ir, s)]
    index_var = None
    if rest:  # the strided-index form: `int i = 2 * s * tid; if (i < n) sh[i] += sh[i + s];`
        if len(rest) == 1 and ir.grammar_type_of(rest[0]) == "declaration" and \
                len(declared_names(ir, rest[0])) == 1:
            index_var = declared_names(ir, rest[0])[0]
        else:
            return refuse("the tree's loop does more than combine under a condition and "
                          "synchronize")
    if len(guarded) != 1 or _is_sync(ir, guarded[0]):
        return refuse("the tree's loop is not one guarded combine followed by a barrier")
    cond_node, then, alt = if_parts(ir, guarded[0])
    if alt is not None:
        return refuse("the tree's combine has an else branch")
    steps = _slot_locals_inlined(unit, _statements(ir, then), shared)
    combines = [_combine(u, s, shared, rows=True) for u, s, _t in steps]
    joint = _joint_step(unit, then, shared, var) \
        if not combines or None in combines else None
    merge = ""
    if isinstance(joint, tuple):
        combines, rows_joint, merge = joint[0], joint[1], joint[2]  # type: ignore[assignment]
    elif not combines or None in combines:
        if isinstance(joint, str):
            return refuse("a statement of the tree's step is not a sum, max or min of two "
                          f"slots of a shared array, nor a merge of a maximum and a sum: {joint}")
        for u, stmt, _t in steps:
            assign = _assignment(u.ir, stmt)
            target = subscript(u.ir, children(u.ir, assign)[0]) if assign is not None else (None, [])
            if target[0] in shared and len(target[1]) > 1:
                return refuse(f"the tree combines slots of {target[0]}, an array of "
                              f"{len(target[1])} dimensions, other than as a sum, max or min "
                              "of two slots that differ in the last index only (one tree per "
                              "row of threads; a tree along threadIdx.y is not told)")
        return refuse("a statement of the tree's step is not a sum, max or min of two slots "
                      "of a shared array")
    owns = {c[2] for c in combines}  # type: ignore[index]
    if len(owns) != 1:
        return refuse("the tree's combines write different slots")
    own = owns.pop()
    prefixes = {slot_rows(u.ir, st) for u, st, _t in steps} if not merge else {rows_joint}
    rows = prefixes.pop() if len(prefixes) == 1 else None
    if rows is None:
        return refuse("the tree's combines write slots of different rows")
    if len(rows) > 1 or rows and not _row_index(unit, fn, rows[0]):
        return refuse(f"the tree's rows [{']['.join(rows)}] are not picked by threadIdx.y: "
                      "only one tree per row of threads (threadIdx.y) is told")
    for c in combines:
        if c[3] not in (f"{own}+{var}", f"{var}+{own}"):  # type: ignore[index]
            return refuse(f"the partner slot {c[3]} is not the own slot plus the stride")  # type: ignore[index]
    cond_text = _unparen(flat_code(ir, cond_node))
    start_text = start_text if start_text is not None else flat_code(ir, start)
    if halving:
        tid = own
        heads = (f"{tid}<{var}", f"{var}>{tid}")
        # `t < s && t + s < n`: the second bound holds for every t < s where n is the extent
        bounded = [_unparen(c) for c in cond_text.split("&&")]
        if cond_text not in heads and not (len(bounded) == 2 and bounded[0] in heads and
                                           re.fullmatch(rf"{re.escape(tid)}\+{re.escape(var)}<.+",
                                                        bounded[1])):
            return refuse(f"the tree's step runs under {text(ir, cond_node)}, not own slot < stride")
        loop_cond = loop_cond if loop_cond is not None else flat_code(ir, cond)
        tail_end = None
        if loop_cond in (f"{var}>32", f"{var}>warpSize"):
            half = re.fullmatch(r"(.+?)(?:/2|>>1)", start_text)
            tail = _warp_tail(unit, fn, loop, tid, {c[0] for c in combines}, shared,  # type: ignore[index]
                              _unparen(half.group(1)) if half else None)
            if isinstance(tail, str):
                return refuse(f"the tree stops at {text(ir, cond)} and ends with a warp-"
                              f"synchronous stage that is not told: {tail}")
            tail_end = tail
        elif loop_cond not in (f"{var}>0", f"{var}>=1", f"{var}!=0", f"0<{var}", var):
            return refuse(f"the tree stops at {text(ir, cond)} (a last warp-synchronous stage "
                          "is not read)")
        m = re.fullmatch(r"(.+?)(?:/2|>>1)", start_text)
        if m is not None:
            extent = _unparen(m.group(1))
        else:
            half = unit.value(text(ir, start))
            if half is None:
                return refuse(f"the tree's first stride {text(ir, start)} is neither half the "
                              "block nor a constant")
            extent = str(2 * half)
        if extent != "blockDim.x" and _unparen(re.sub(r"\s+", "", block_group_terms(
                unit, expand_locals(unit, fn, extent)))) == "blockDim.x":
            extent = "blockDim.x"  # `const int n = blockDim.x;` ... `n / 2`, `block.size()`
        if len(bounded) == 2 and cond_text not in heads and \
                bounded[1] != f"{tid}+{var}<{extent}":
            return refuse(f"the tree's step runs under {text(ir, cond_node)}, a bound other "
                          "than the tree's extent")
        form = "halving"
    else:
        if start_text != "1":
            return refuse("a doubling tree that does not start at stride 1")
        loop_cond = re.fullmatch(rf"{re.escape(var)}<(.+)", flat_code(ir, cond))
        if loop_cond is None:
            return refuse(f"the doubling tree's condition {text(ir, cond)} is not stride < n")
        extent = loop_cond.group(1)
        tid = own
        if index_var is not None:
            name, _i, init_node = index_var
            if own != name or init_node is None:
                return refuse("the strided index is not the combined slot")
            factors = sorted(flat_code(ir, init_node).replace("(", "").replace(")", "").split("*"))
            if len(factors) != 3 or "2" not in factors or var not in factors:
                return refuse(f"the strided index {text(ir, init_node)} is not 2 * stride * thread")
            tid = next(f for f in factors if f not in ("2", var))
            if cond_text != f"{own}<{extent}":
                return refuse(f"the strided tree's step runs under {text(ir, cond_node)}")
        else:
            allowed = {f"{tid}%(2*{var})==0", f"{tid}%({var}*2)==0",
                       f"({tid}&(2*{var}-1))==0", f"({tid}&({var}*2-1))==0"}
            head = _unparen(cond_text.split("&&")[0])
            bounded = cond_text.split("&&")[1:]
            if head not in allowed or any(_unparen(b) != f"{tid}+{var}<{extent}" for b in bounded):
                return refuse(f"the doubling tree's step runs under {text(ir, cond_node)}")
        form = "doubling"
    if not _thread_index(unit, fn, tid) and (rows or not _linear_thread_index(unit, fn, tid)):
        return refuse(f"the tree's slot index {tid} is not the thread's index threadIdx.x")
    extent_value = unit.value(extent)
    if extent != "blockDim.x" and extent_value is None:
        if not unit.compile_time(extent) and (rows or not _whole_block(unit, fn, extent)):
            return refuse(f"the tree's extent {extent} is neither blockDim.x nor a constant")
        extent_value = unit.template_value(fn, extent)
    tail_end = tail_end if halving else None
    if rows and tail_end is not None:
        return refuse("a tree per row of threads ends with a warp-synchronous stage")
    last = tail_end if tail_end is not None else loop
    after = _later_slot_reads(unit, fn, last, {c[0] for c in combines},  # type: ignore[index]
                              len(rows))
    if after:
        return refuse(f"a slot other than 0 is read after the tree ({after})")
    cs = tuple(Combine(c[0], c[1], merge or " ".join(t.split()),  # type: ignore[index]
                       shared[c[0]].element)  # type: ignore[index]
               for c, (_u, _s, t) in zip(combines, steps if not merge else [(0, 0, "")] * 2))
    store, values = _tree_stores(unit, first, cs, tid, rows)
    if tail_end is not None:
        where = (where[0], ir.span_of(tail_end).end)
    return ReductionTree(kernel, cs, tid, extent, extent_value, var, form, where, store,
                         values, unit.launch_block().dims, rows, merge)


def _warp_tail(unit: Unit, fn: int, loop: int, tid: str, arrays: set[str],
               shared: Mapping[str, SharedArray], extent: str | None = None) -> int | str:
    """The statement right after a tree loop that stops at stride 32 when it finishes the tree
    within the first warp: `if (t < 32) { ...; a[t] += a[t + 32]; ... a[t] += a[t + 1]; }`
    (through a volatile alias of the array, or in a device function called as `f(a, t)`),
    each step combining like the loop. A step may run under `if (E >= K)`, E the tree's
    `extent` (in a helper, the template parameter it is passed as) and K at most twice the
    step's stride: where that fails the step's partners lie past the extent, so the step adds
    nothing the shuffles would. Returns the statement, or why it is not told."""
    ir = unit.ir
    parent = ir.parent_of(loop)
    items = _statements(ir, parent) if parent is not None else []
    if loop not in items or items.index(loop) + 1 >= len(items):
        return "nothing follows the loop"
    nxt = items[items.index(loop) + 1]
    if ir.grammar_type_of(nxt) != "if_statement":
        return "the loop is not followed by a branch of the first warp"
    cond, then, alt = if_parts(ir, nxt)
    if alt is not None or _unparen(flat_code(ir, cond)) not in (f"{tid}<32", f"{tid}<warpSize"):
        return f"the branch after the loop runs under {text(ir, cond)}"
    body = _flat_items(ir, then)
    own, views = tid, dict(shared)
    if len(body) == 1 and ir.grammar_type_of(body[0]) == "expression_statement":
        call = next((c for c in children(ir, body[0]) if ir.grammar_type_of(c) == "call_expression"), None)
        target = unit.functions.get(callee(ir, call)) if call is not None else None
        if target is None:
            return "the first warp's stage is not a call of a function of the unit"
        args = [flat_code(ir, a) for a in children(ir, children(ir, call)[-1])
                if ir.grammar_type_of(a) not in _TRIVIA]
        params = _parameter_names(ir, target)
        if tid not in args or len(args) != len(params):
            return "the first warp's stage is not given the thread's index"
        own = params[args.index(tid)]
        views = unit.shared_views(target)
        arrays = {params[i] for i, a in enumerate(args) if a in arrays}
        body = _flat_items(ir, _function_body(ir, target))
        extent_names = {t for t, a in _template_arguments(unit, target, call).items()
                        if extent is not None and a == re.sub(r"\s+", "", extent)}
    else:
        extent_names = {re.sub(r"\s+", "", extent)} if extent is not None else set()
    for s in body:  # a volatile alias of the array: `volatile float* v = sdata;`
        if ir.grammar_type_of(s) == "declaration":
            for name, _i, init in declared_names(ir, s):
                if init is None or flat_code(ir, init) not in arrays:
                    return "the first warp's stage declares something other than an alias"
                views[name] = views[flat_code(ir, init)]
                arrays = arrays | {name}
    steps = [s for s in body if ir.grammar_type_of(s) != "declaration"]
    strides, needs = [], []
    for s in steps:
        need = None
        if ir.grammar_type_of(s) == "if_statement" and if_parts(ir, s)[2] is None:
            guard = re.fullmatch(r"(.+)>=(.+)", _unparen(flat_code(ir, if_parts(ir, s)[0])))
            inner = _flat_items(ir, if_parts(ir, s)[1])
            if guard is None or guard.group(1) not in extent_names or len(inner) != 1 or \
                    unit.value(guard.group(2)) is None:
                return f"the first warp's step runs under {text(ir, if_parts(ir, s)[0])}"
            s, need = inner[0], unit.value(guard.group(2))
        c = _combine(unit, s, views)
        if c is None or c[0] not in arrays or c[2] != own:
            return "a statement of the first warp's stage is not a combine of the array"
        m = re.fullmatch(rf"{re.escape(own)}\+(\w+)|(\w+)\+{re.escape(own)}", c[3])
        stride = unit.value((m.group(1) or m.group(2))) if m else None
        if stride is None:
            return f"the partner {c[3]} is not the own slot plus a constant"
        if need is not None and need > 2 * stride:
            return f"the first warp's step of stride {stride} runs only where the extent is {need}"
        strides.append(stride)
    if strides != [32, 16, 8, 4, 2, 1]:
        return f"the first warp's strides are {strides}, not 32 down to 1"
    return nxt


def _template_arguments(unit: Unit, fn: int, call: int) -> dict[str, str]:
    """Function `fn`'s template parameters and the flat texts `call` passes for them
    (`warp_tail<BLOCK>(...)` -> {"BLOCK": "BLOCK"}); empty where `fn` is no template."""
    ir = unit.ir
    decl = ir.parent_of(fn)
    if decl is None or ir.grammar_type_of(decl) != "template_declaration":
        return {}
    params = []
    for plist in children(ir, decl, "template_parameter_list"):
        for p in children(ir, plist):
            ident = [c for c in subtree(ir, p) if ir.grammar_type_of(c) == "identifier"]
            if ident:
                params.append(ir.name_of(ident[-1]) or "")
    targs = [a for a in subtree(ir, children(ir, call)[0])
             if ir.grammar_type_of(a) == "template_argument_list"]
    args = [flat_code(ir, a) for a in children(ir, targs[0])
            if ir.grammar_type_of(a) not in _TRIVIA] if targs else []
    return dict(zip(params, args)) if len(args) == len(params) else {}


def _function_body(ir: KernelIR, fn: int) -> int:
    return next(c for c in children(ir, fn) if ir.grammar_type_of(c) == "compound_statement")


def flat_code(ir: KernelIR, nid: int) -> str:
    """A node's code without whitespace and comments (equal for the same code)."""
    return re.sub(r"\s+", "", code_view(text(ir, nid)))


def _unparen(t: str) -> str:
    """Flat text without one pair of enclosing parentheses."""
    if t.startswith("(") and t.endswith(")"):
        depth = 0
        for i, ch in enumerate(t):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(t) - 1:
                return t
        return t[1:-1]
    return t


def _declared_inside(ir: KernelIR, name: str, node: int) -> bool:
    return any(ir.grammar_type_of(c) == "declaration" and
               name in [n for n, _, _ in declared_names(ir, c)] for c in subtree(ir, node))


def _later_slot_reads(unit: Unit, fn: int, loop: int, arrays: set[str], rows: int = 0) -> str:
    """A read of an array of `arrays` at a slot other than 0 after `loop`, or a use of it as a
    pointer there (`q = sh`, `f(sh)`, `&sh[1]`: any slot may be read through it), as text;
    '' when there is none before the threads fill their own slots again (`sh[tid] = ...` at
    the tree's level of branching: a new use of the array; a store of one slot is not). With
    `rows` indices before the slot's (a tree per row of threads), the slot is the last index
    (any row's slot 0 holds that row's result), and a row used as a pointer counts as the
    array's."""
    ir = unit.ir
    end = ir.span_of(loop).end
    level = {a for a in ir.ancestors(loop) if ir.grammar_type_of(a) in ("if_statement",
                                                                        "conditional_expression")}
    for nid in subtree(ir, fn):
        if ir.span_of(nid).start < end:
            continue
        parent = ir.parent_of(nid)
        if ir.grammar_type_of(nid) == "identifier" and ir.name_of(nid) in arrays and \
                (parent is None or ir.grammar_type_of(parent) != "subscript_expression" or
                 children(ir, parent)[0] != nid):
            return text(ir, next((a for a in ir.ancestors(nid) if ir.grammar_type_of(a) in (
                "expression_statement", "declaration", "return_statement")), nid)).strip()
        if ir.grammar_type_of(nid) != "subscript_expression" or (
                parent is not None and ir.grammar_type_of(parent) == "subscript_expression" and
                children(ir, parent)[0] == nid):
            continue  # only whole subscripts: `sh[r][t]`, not its `sh[r]`
        base, idx = subscript(ir, nid)
        if base not in arrays or len(idx) > rows + 1:
            continue
        if len(idx) < rows + 1:
            return text(ir, nid)  # a row as a pointer
        if parent is not None and ir.grammar_type_of(parent) == "pointer_expression":
            return text(ir, parent)  # its address taken
        if parent is not None and ir.grammar_type_of(parent) == "assignment_expression" and \
                children(ir, parent)[0] == nid:
            if _thread_index(unit, fn, text(ir, idx[-1])) and \
                    all(_row_index(unit, fn, text(ir, i)) for i in idx[:-1]) and not any(
                    ir.grammar_type_of(a) in ("if_statement", "conditional_expression") and
                    a not in level for a in ir.ancestors(nid)):
                return ""  # every thread fills its slot again: a new use of the array
            continue
        if unit.value(text(ir, idx[-1])) != 0:
            return text(ir, nid)
    return ""


def _row_index(unit: Unit, fn: int, expr: str) -> bool:
    """Whether `expr` (locals expanded, casts dropped) is the thread's index threadIdx.y."""
    return _unparen(re.sub(r"\s+|\((?:int|unsigned|unsignedint)\)", "",
                           expand_locals(unit, fn, expr))) == "threadIdx.y"


def _tree_stores(unit: Unit, loop: int, combines: Sequence[Combine], tid: str,
                 rows: tuple[str, ...] = ()) -> tuple[tuple[int, int] | None, tuple[str, ...]]:
    """The statements right before the tree that store each thread's value into its slot of
    every combined array (in its row `rows`), then a barrier: their span and the stored
    values."""
    ir = unit.ir
    parent = ir.parent_of(loop)
    if parent is None or ir.grammar_type_of(parent) != "compound_statement":
        return None, ()
    items = _statements(ir, parent)
    at = items.index(loop)
    if at < 2 or not _is_sync(ir, items[at - 1]):
        return None, ()
    values: dict[str, str] = {}
    first = at - 1
    for s in reversed(items[:at - 1]):
        if ir.grammar_type_of(s) != "expression_statement":
            break
        kids = [c for c in children(ir, s) if ir.grammar_type_of(c) not in _TRIVIA]
        if not kids or ir.grammar_type_of(kids[0]) != "assignment_expression" or _op(ir, kids[0]) != "=":
            break
        base, idx = subscript(ir, children(ir, kids[0])[0])
        if base not in {c.array for c in combines} or base in values or \
                len(idx) != len(rows) + 1 or flat_code(ir, idx[-1]) != tid or \
                [flat_code(ir, i) for i in idx[:-1]] != [re.sub(r"\s+", "", r) for r in rows]:
            break
        values[base] = text(ir, children(ir, kids[0])[-1])
        first = items.index(s)
    if set(values) != {c.array for c in combines}:
        return None, ()
    return ((ir.span_of(items[first]).start, ir.span_of(items[at - 1]).end),
            tuple(values[c.array] for c in combines))


def _unrolled_step(unit: Unit, items: list[int], j: int, shared: Mapping[str, SharedArray]
                   ) -> tuple[int, int, int, list, tuple[str, int] | None, int] | None:
    """The step of an unrolled tree at `items[j]`: `if (t < C) combine; __syncthreads();`, or
    the same pair as the block of `if (E >= K) { ... }` (a step the block's size decides) as
    (first statement, the `if (t < C)`, C, combines, (E, K) or None, index after the step)."""
    ir = unit.ir
    guard = None
    node, pair, after = items[j], items[j:j + 2], j + 2
    if ir.grammar_type_of(node) == "if_statement" and _is_sync(ir, node) and \
            if_parts(ir, node)[2] is None:
        m = re.fullmatch(r"(\w+)>=(.+)", _unparen(flat_code(ir, if_parts(ir, node)[0])))
        inner = _flat_items(ir, if_parts(ir, node)[1])
        if m is not None and unit.value(m.group(2)) is not None and len(inner) == 2:
            guard, pair, after = (m.group(1), unit.value(m.group(2))), inner, j + 1
    if len(pair) != 2 or ir.grammar_type_of(pair[0]) != "if_statement" or \
            not _is_sync(ir, pair[1]) or _is_sync(ir, pair[0]):
        return None
    cond, then, alt = if_parts(ir, pair[0])
    combines = [_combine(unit, st, shared) for st in _statements(ir, then)]
    m = re.fullmatch(r"(\w+(?:\.\w+)?)<(.+)", _unparen(flat_code(ir, cond)))
    if alt is not None or not combines or None in combines or m is None:
        return None
    stride = unit.value(m.group(2))
    own = m.group(1)
    if stride is None or any(c[2] != own or c[3] not in (f"{own}+{m.group(2)}",
                                                          f"{m.group(2)}+{own}")
                             for c in combines):  # type: ignore[index]
        return None
    return node, pair[0], stride, combines, guard, after  # type: ignore[return-value]


def _unrolled_tree(unit: Unit, kernel: str, fn: int, block: int,
                   shared: Mapping[str, SharedArray]) -> ReductionTree | Refusal | None:
    """Constant strides halving down to 1 (or to 64 and a last warp's steps), one
    `if (t < C) combine; __syncthreads();` each, possibly inside `if (E >= K) { ... }` with
    K at most 2C, E the extent (a constant, or a template parameter of one value in the unit:
    for a power-of-two E, where K > E the step's partners lie past the extent)."""
    ir = unit.ir
    items = _statements(ir, block)
    i = 0
    while i < len(items):
        steps: list[tuple[int, int, int, list, tuple[str, int] | None, int]] = []
        j = i
        while j < len(items):
            step = _unrolled_step(unit, items, j, shared)
            if step is None:
                break
            steps.append(step)
            j = step[5]
        if len(steps) >= 2:
            strides = [s[2] for s in steps]
            where = (ir.span_of(steps[0][0]).start, ir.span_of(items[j - 1]).end)

            def refuse(why: str) -> Refusal:
                return Refusal("reduction-tree", why, where, kernel)  # noqa: B023
            guards = {s[4][0] for s in steps if s[4] is not None}
            extent, extent_value = str(2 * strides[0]), 2 * strides[0]
            if guards:
                if len(guards) != 1:
                    return refuse(f"the unrolled tree's steps are guarded by {sorted(guards)}")
                extent = guards.pop()
                extent_value = unit.value(extent) or unit.template_value(fn, extent)  # type: ignore[assignment]
                if extent_value is None or extent_value & (extent_value - 1) or \
                        extent_value > 2 * strides[0]:
                    return refuse(f"the unrolled tree's extent {extent} is not a power of two "
                                  f"up to {2 * strides[0]} that the unit tells")
                for _n, _i, stride, _c, guard, _a in steps:
                    if guard is None and stride >= extent_value or \
                            guard is not None and guard[1] > 2 * stride:
                        return refuse(f"the step of stride {stride} runs where the extent "
                                      f"{extent} does not reach its partners")
            last: int | str = items[j - 1]
            if strides[-1] == 64:  # a last warp finishing the tree without barriers
                last = _warp_tail(unit, fn, items[j - 1], steps[0][3][0][2],
                                  {c[0] for c in steps[0][3]}, shared, extent)
                if isinstance(last, str):
                    return refuse("the unrolled tree stops at stride 64 and ends with a "
                                  f"warp-synchronous stage that is not told: {last}")
            if all(a == 2 * b for a, b in zip(strides, strides[1:])) and \
                    (strides[-1] == 1 or last != items[j - 1]):
                tid_text = steps[0][3][0][2]
                if not _thread_index(unit, fn, tid_text):
                    return Refusal("reduction-tree", f"the unrolled tree's slot index {tid_text} "
                                   "is not threadIdx.x", _span(ir, steps[0][1]), kernel)
                arrays = {c[0] for c in steps[0][3]}
                span = (ir.span_of(steps[0][0]).start, ir.span_of(last).end)
                after = _later_slot_reads(unit, fn, last, arrays)
                if after:
                    return Refusal("reduction-tree", f"a slot other than 0 is read after the "
                                   f"tree ({after})", span, kernel)
                then = if_parts(ir, steps[0][1])[1]
                cs = tuple(Combine(c[0], c[1], " ".join(text(ir, s).split()), shared[c[0]].element)
                           for c, s in zip(steps[0][3], _statements(ir, then)))
                store, values = _tree_stores(unit, steps[0][0], cs, tid_text)
                return ReductionTree(kernel, cs, tid_text, extent, extent_value, None,
                                     "unrolled", span, store, values, unit.launch_block().dims)
            if strides[-1] != 1:
                return refuse(f"the unrolled tree stops at stride {strides[-1]} (its last "
                              "warp-synchronous steps are not read)")
        i = max(j, i + 1)
    return None


# ---------------------------------------------------------------------------------------------
# stride loops, row reductions, register blocks


_LANE = re.compile(r"threadIdx\.x(?:&(?:31|0x1[fF]|warpSize-1)|%(?:32|warpSize))")
"""The thread's lane in its warp (parentheses and casts removed)."""


def _stride_kind(unit: Unit, fn: int, step: str, start: str) -> str | None:
    if "(" in step:  # a group's size (`block.size()`)
        step = block_group_terms(unit, expand_locals(unit, fn, step))
    s = re.sub(r"\s+", "", step)
    s = re.sub(r"\(\w+\)", "", s)
    grid = {"blockDim.x*gridDim.x", "gridDim.x*blockDim.x"}
    if s in grid:
        return "grid"
    if s == "blockDim.x":
        return "block"
    scaled = re.fullmatch(r"(.+)\*gridDim\.x|gridDim\.x\*(.+)", s)
    if scaled and "gridDim" not in (scaled.group(1) or scaled.group(2)) and \
            _stride_kind(unit, fn, scaled.group(1) or scaled.group(2), start) == "block":
        return "grid"  # the block's thread count (proven from the launch) times the grid's
    def thirty_two(m: re.Match[str]) -> str:  # a named constant of the warp's size
        return "32" if m.group(0) in unit.constants and unit.value(m.group(0)) == 32 else m.group(0)
    if (s in ("32", "warpSize") or unit.value(s) == 32) and _LANE.fullmatch(re.sub(
            r"(?<![.\w])[A-Za-z_]\w*(?![\w(])", thirty_two, re.sub(
                r"\(\w+\)|\s+", "", expand_locals(unit, fn, start))).replace("(", "").replace(")", "")):
        return "warp"
    launch = unit.launch_block().dims
    value = unit.value(step)
    if value is None and unit.compile_time(step):  # a template parameter: its instantiation's
        value = unit.template_value(fn, step)
    if value is not None and launch is not None and value == launch[0] and "threadIdx.x" in \
            expand_locals(unit, fn, start):
        return "block"
    if re.fullmatch(r"[A-Za-z_]\w*", s):
        bound = _single_init(unit, fn, s)
        if bound is not None:
            return _stride_kind(unit, fn, bound, start)
    return None


_BLOCK_GROUP = r"\(?\s*(?:\w+\s*::\s*)*this_thread_block\s*\(\s*\)\s*\)?\s*\.\s*"


def block_group_terms(unit: Unit, expr: str) -> str:
    """`expr` (locals expanded) with the cooperative-groups block's thread rank and size
    (`cg::this_thread_block().thread_rank()`, `.size()`, `.num_threads()`) written as
    `threadIdx.x` and `blockDim.x`: the same values where the launch's block is known and
    one-dimensional (elsewhere `expr` is returned as it is)."""
    if "this_thread_block" not in expr:
        return expr
    dims = unit.launch_block().dims
    if dims is None or dims[1:] != (1, 1):
        return expr
    expr = re.sub(_BLOCK_GROUP + r"thread_rank\s*\(\s*\)", "threadIdx.x", expr)
    return re.sub(_BLOCK_GROUP + r"(?:size|num_threads)\s*\(\s*\)", "blockDim.x", expr)


def _single_init(unit: Unit, fn: int, name: str) -> str | None:
    ir = unit.ir
    inits = []
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) == "declaration":
            inits += [init for n, _i, init in declared_names(ir, nid) if n == name]
    if len(inits) == 1 and inits[0] is not None and name not in written_names(ir, fn):
        return text(ir, inits[0])
    return None


def expand_locals(unit: Unit, fn: int, expr: str, depth: int = 0) -> str:
    """`expr` with variables bound once replaced by their initializers (a few levels deep)."""
    if depth > 4:
        return expr
    def sub(m: re.Match[str]) -> str:
        init = _single_init(unit, fn, m.group(0))
        return f"({expand_locals(unit, fn, init, depth + 1)})" if init else m.group(0)
    return re.sub(r"(?<![.\w])[A-Za-z_]\w*(?![\w(])", sub, expr)


def stride_loops(ir: KernelIR | Unit) -> list[StrideLoop]:
    """Grid-stride loops (start at the global thread index, step by the grid's thread count),
    block-stride loops (start at the thread's index in the block, step by the block) and
    warp-stride loops (start at the thread's lane, step by 32)."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    ir_ = unit.ir
    out: list[StrideLoop] = []
    for name, fn in unit.block_helpers().items():
        for nid in subtree(ir_, fn):
            if ir_.grammar_type_of(nid) != "for_statement":
                continue
            var = loop_var(ir_, nid)
            start = _loop_start(ir_, nid)
            _init, cond, update = for_parts(ir_, nid)
            if var is None or start is None or update is None:
                continue
            m = re.fullmatch(rf"\s*{re.escape(var)}\s*\+=\s*(.+?)\s*", text(ir_, update), re.S)
            if m is None:
                continue
            start_text = block_group_terms(unit, expand_locals(unit, fn, text(ir_, start)))
            if "threadIdx.x" not in start_text:
                continue
            kind = _stride_kind(unit, fn, m.group(1), start_text)
            if kind == "grid" and "blockIdx.x" not in start_text:
                continue
            if kind is None:
                continue
            bound = ""
            if cond is not None:
                cm = re.search(r"(<=|<|!=)\s*(.+)$", text(ir_, cond), re.S)
                bound = cm.group(2).strip() if cm else text(ir_, cond)
            out.append(StrideLoop(name, kind, var, _span(ir_, nid), text(ir_, start), bound,
                                  m.group(1).strip()))
    return out


# calls through which a thread's partial result reaches the other threads of its block
_EXCHANGE_CALL = re.compile(r"__shfl\w*|__reduce_\w+_sync|atomic\w+|reduce|shfl(?:_up|_down|_xor)?")


def _carried(ir: KernelIR, loop: int) -> set[str]:
    """Variables declared outside `loop` whose value after it tells how many or which elements
    the thread visited, not only what they fold to: a count (`++c`, `n += 1.f`: a term that
    reads no memory) or a value overwritten (`last = x[i]`, not under a condition reading it,
    as a running max is). A whole variable or a struct of which one field is such."""
    out = set()
    for c in subtree(ir, loop_body(ir, loop)):
        if ir.grammar_type_of(c) not in ("assignment_expression", "update_expression"):
            continue
        kids = children(ir, c)
        target = next((k for k in kids if ir.grammar_type_of(k) in (
            "identifier", "field_expression", "subscript_expression", "pointer_expression")), None)
        field = target
        while target is not None and ir.grammar_type_of(target) == "field_expression":
            target = children(ir, target)[0]
        if target is None or ir.grammar_type_of(target) != "identifier":
            continue
        name = ir.name_of(target) or ""
        if _declared_inside(ir, name, loop):
            continue
        if ir.grammar_type_of(c) == "update_expression":
            out.add(name)
            continue
        rhs = kids[-1]
        op = ir.source[ir.span_of(kids[0]).end:ir.span_of(rhs).start].decode().strip()
        own = flat_code(ir, field) if field is not None else name
        inits = {n: flat_code(ir, i) for d in subtree(ir, loop)
                 if ir.grammar_type_of(d) == "declaration"
                 for n, _k, i in declared_names(ir, d) if i is not None}
        rhs_text = flat_code(ir, rhs) + "".join(  # a running max through a local (`m = nm`)
            inits.get(ir.name_of(k) or "", "") for k in subtree(ir, rhs)
            if ir.grammar_type_of(k) == "identifier")
        reads_own = re.search(rf"(?<![\w.]){re.escape(own)}(?![\w])", rhs_text)
        varying = any(ir.grammar_type_of(k) in ("subscript_expression", "pointer_expression",
                                                "call_expression") or
                      ir.grammar_type_of(k) == "identifier" and (
                          _declared_inside(ir, ir.name_of(k) or "", loop) or
                          ir.name_of(k) in written_names(ir, loop)) for k in subtree(ir, rhs))
        if op in ("+=", "-=") and not varying:
            out.add(name)  # a count
        elif op == "=" and not reads_own and not any(
                ir.grammar_type_of(a) == "if_statement" and re.search(
                    rf"(?<![\w.]){re.escape(own)}(?![\w])", flat_code(ir, if_parts(ir, a)[0]))
                for a in ir.ancestors(c) if ir.span_of(a).start >= ir.span_of(loop).start):
            out.add(name)  # the last value the thread saw
    return out


def _exchanged(unit: Unit, fn: int, use: int) -> bool:
    """Whether identifier `use` (a thread's partial result, or its struct) is read where it
    goes to the other threads: stored into shared memory, passed to a shuffle, a reduction, an
    atomic or a function of the unit (a warp reduction, a merge), or assigned the result of
    such a call that reads it (`v += __shfl_down_sync(m, v, o)`, `v = warp_sum(v)`)."""
    ir = unit.ir
    name = ir.name_of(use)
    node = use
    parent = ir.parent_of(node)
    while parent is not None and ir.grammar_type_of(parent) == "field_expression" and \
            children(ir, parent)[0] == node:
        node, parent = parent, ir.parent_of(parent)

    def passed(call: int) -> bool:
        return _EXCHANGE_CALL.fullmatch(callee(ir, call)) is not None or \
            callee(ir, call) in unit.functions

    if parent is None:
        return False
    if ir.grammar_type_of(parent) == "argument_list":
        call = ir.parent_of(parent)
        return call is not None and passed(call)
    if ir.grammar_type_of(parent) != "assignment_expression":
        return False
    lhs, rhs = children(ir, parent)[0], children(ir, parent)[-1]
    if rhs == node:
        base, _idx = subscript(ir, lhs)
        return base is not None and base in unit.shared_views(fn, aliases=True)
    if lhs != node:
        return False
    return any(ir.grammar_type_of(c) == "call_expression" and passed(c) and any(
        ir.grammar_type_of(a) == "identifier" and ir.name_of(a) == name
        for a in subtree(ir, children(ir, c)[-1])) for c in subtree(ir, rhs))


def _folds_more(ir: KernelIR, use: int) -> bool:
    """Whether identifier `use` is read or written by a statement that folds more into the
    variable (`v += e`, `v = v + e`, `v = fmaxf(v, e)`: another loop of the same partial)."""
    name = ir.name_of(use)
    assign = next((a for a in ir.ancestors(use)
                   if ir.grammar_type_of(a) == "assignment_expression"), None)
    if assign is None:
        return False
    lhs, rhs = children(ir, assign)[0], children(ir, assign)[-1]
    if ir.grammar_type_of(lhs) != "identifier" or ir.name_of(lhs) != name:
        return False
    op = ir.source[ir.span_of(lhs).end:ir.span_of(rhs).start].decode().strip()
    reads = [c for c in subtree(ir, rhs) if ir.grammar_type_of(c) == "identifier" and
             ir.name_of(c) == name]
    flat = re.sub(r"\s+", "", code_view(text(ir, rhs)))
    if op in ("+=", "-=", "*=") and not reads:
        return True
    name_ = re.escape(name or "")
    return op == "=" and len(reads) == 1 and bool(
        re.fullmatch(rf"{name_}\+(?!.*\b{name_}\b).+|(?:fmaxf|fminf|fmax|fmin|max|min)\({name_},"
                     rf"(?!.*\b{name_}\b).+\)", flat))


def partial_computed_with(unit: Unit, fn: int, loop: int) -> str | None:
    """The statement after stride loop `loop` that first computes with a partial result the
    loop folds per thread (`acc`, `count`, a struct) before it goes to the other threads
    (`_exchanged`), as text; None where every partial goes to them first. Such a statement
    depends on which elements each thread visited: a rule that hands a thread other elements
    (vectors, fewer threads) changes its result, not only the order of a sum."""
    ir = unit.ir
    end = ir.span_of(loop).end
    for name in sorted(_carried(ir, loop)):
        uses = sorted((ir.span_of(c).start, c) for c in subtree(ir, fn)
                      if ir.grammar_type_of(c) == "identifier" and ir.name_of(c) == name and
                      ir.span_of(c).start >= end)
        first = next((c for _s, c in uses if not _folds_more(ir, c)), None)
        if first is not None and not _exchanged(unit, fn, first):
            stmt = next((a for a in ir.ancestors(first) if ir.grammar_type_of(a) in (
                "expression_statement", "declaration", "return_statement", "if_statement",
                "for_statement", "while_statement")), first)
            head = text(ir, stmt).strip().split("\n")[0]
            return head if len(head) <= 80 else head[:77] + "..."
    return None


def repartition_refusal(unit: Unit, kernel: str, spans: Sequence[tuple[int, int]]) -> str | None:
    """Why the stride loops at `spans` of `kernel` (a kernel or a block helper, by name) may
    not hand their threads other elements (vectors of a row, a smaller block's share), or
    None: a statement computes with a partial result a thread folded before the block
    combines it (`partial_computed_with`)."""
    ir = unit.ir
    fn = unit.block_helpers().get(kernel, unit.functions.get(kernel))
    if fn is None:
        return None
    for span in spans:
        node = next((n.id for n in ir.walk() if (n.span.start, n.span.end) == tuple(span) and
                     ir.grammar_type_of(n.id) == "for_statement"), None)
        stmt = partial_computed_with(unit, fn, node) if node is not None else None
        if stmt is not None:
            return (f"`{stmt}` computes with what a thread folded in its loop before the block "
                    "combines it: the result depends on which elements each thread visits")
        start = _infinite_partial(unit, fn, node) if node is not None else None
        if start is not None:
            return (f"`{start}` starts one of the partials a thread folds together at an "
                    "infinity: a thread handed no element keeps it, and merging two such pairs "
                    "(inf - inf) gives NaN where vectors or a smaller block leave threads empty")
    return None


_INFINITY = re.compile(r"INFINITY|HUGE_VALF?\b|CUDART_INF|\binf(?:inity)?f?\s*\(|"
                       r"__int_as_float\s*\(\s*0x[7fF][fF]800000|"
                       r"__longlong_as_double\s*\(\s*0x[7fF][fF][fF]0|"
                       r"\b1(?:\.0*)?f?\s*/\s*0(?:\.0*)?f?\b")


def _infinite_partial(unit: Unit, fn: int, loop: int) -> str | None:
    """The declaration of a partial that stride loop `loop` folds, starting at an infinity
    (`-INFINITY`, `__int_as_float(0xff800000)`, a macro of one), where the loop folds two or
    more partials together (a running max and a sum relative to it): a merge of two threads
    that saw no element computes `inf - inf`. None where there is no such partial."""
    ir = unit.ir
    body = loop_body(ir, loop)
    partials = {n for n in written_names(ir, body) if not _declared_inside(ir, n, body)}
    if len(partials) < 2:
        return None
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) != "declaration" or ir.span_of(nid).start >= ir.span_of(loop).start:
            continue
        for name, _i, init in declared_names(ir, nid):
            if name not in partials or init is None:
                continue
            value = re.sub(r"(?<![.\w])[A-Za-z_]\w*(?![\w(])",
                           lambda m: unit.constants.get(m.group(0), m.group(0)),
                           expand_locals(unit, fn, text(ir, init)))
            if _INFINITY.search(value):
                return " ".join(text(ir, nid).split())
    return None


def row_reductions(ir: KernelIR | Unit) -> list[RowReduction]:
    """Block-stride loops folding a row into a register (`acc += x[..]`, `m = fmaxf(m, ..)`),
    with how the block combines the partials afterwards."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    ir_ = unit.ir
    out: list[RowReduction] = []
    trees, _ = reduction_trees(unit)
    for loop in stride_loops(unit):
        if loop.kind != "block":
            continue
        fn = unit.block_helpers()[loop.kernel]
        node = next(n for n in subtree(ir_, fn) if _span(ir_, n) == loop.span
                    and ir_.grammar_type_of(n) == "for_statement")
        for s in subtree(ir_, loop_body(ir_, node)):
            if ir_.grammar_type_of(s) != "assignment_expression":
                continue
            target = children(ir_, s)[0]
            if ir_.grammar_type_of(target) != "identifier":
                continue
            acc = ir_.name_of(target) or ""
            op = _op(ir_, s)
            rhs = _strip(ir_, children(ir_, s)[-1])
            kind = None
            if op in ("+=",):
                kind = "sum"
            elif op == "=" and ir_.grammar_type_of(rhs) == "call_expression" and \
                    acc in _names(ir_, rhs):
                name = callee(ir_, rhs)
                kind = "max" if _MAX_CALLS.match(name) else "min" if _MIN_CALLS.match(name) else None
            elif op == "=" and ir_.grammar_type_of(rhs) == "binary_expression" and \
                    ir_.name_of(rhs) == "+" and acc in _names(ir_, rhs):
                kind = "sum"
            if kind is None or _declared_inside(ir_, acc, node):
                continue
            later = [t for t in trees if t.kernel == loop.kernel and t.span[0] > loop.span[1]]
            shuffles = any(ir_.grammar_type_of(c) == "call_expression" and
                           callee(ir_, c).startswith("__shfl") and ir_.span_of(c).start > loop.span[1]
                           for c in subtree(ir_, fn))
            combine = "tree" if later else "shuffle" if shuffles else None
            out.append(RowReduction(loop.kernel, acc, kind, loop, combine))
    return out


def register_blocks(ir: KernelIR | Unit) -> list[RegisterBlock]:
    """Per-thread local arrays of constant extents in the unit's kernels."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    ir_ = unit.ir
    out = []
    for name, fn in unit.kernels.items():
        for nid in subtree(ir_, fn):
            if ir_.grammar_type_of(nid) != "declaration" or "__shared__" in text(ir_, nid) \
                    or re.match(r"\s*(?:static|extern)\b", text(ir_, nid)):
                continue
            for var, ident, _init in declared_names(ir_, nid):
                dims = re.findall(r"\[([^\]]*)\]", _declarator_text(ir_, ident, nid))
                if not dims:
                    continue
                values = tuple(unit.value(d) for d in dims)
                if None in values:
                    continue
                out.append(RegisterBlock(name, var, _declared_type(ir_, nid),
                                         tuple(int(v) for v in values), _span(ir_, nid)))  # type: ignore[arg-type]
    return out


def refusals(ir: KernelIR) -> list[Refusal]:
    """Every refusal of the finders: constructs that look like a role that cannot be told."""
    unit = Unit(ir)
    return stagings(unit)[1] + micro_kernels(unit)[1] + reduction_trees(unit)[1]


def roles(ir: KernelIR) -> dict[str, Any]:
    """Every role of the unit as JSON (what `klineage`'s reports and the tests read)."""
    unit = Unit(ir)
    staged, why_s = stagings(unit)
    mks, why_m = micro_kernels(unit)
    trees, why_t = reduction_trees(unit)
    launch = unit.launch_block()
    return {
        "kernels": sorted(unit.kernels),
        "launch": {"block": list(launch.dims) if launch.dims else None, "from": launch.where,
                   "reason": launch.reason},
        "stagings": [s.to_json() for s in staged],
        "micro_kernels": [m.to_json() for m in mks],
        "reduction_trees": [t.to_json() for t in trees],
        "stride_loops": [{"kernel": s.kernel, "kind": s.kind, "var": s.var, "step": s.step}
                         for s in stride_loops(unit)],
        "row_reductions": [{"kernel": r.kernel, "acc": r.acc, "op": r.op, "combine": r.combine}
                           for r in row_reductions(unit)],
        "register_blocks": [{"kernel": b.kernel, "name": b.name, "extents": list(b.extents)}
                            for b in register_blocks(unit)],
        "refusals": [r.to_json() for r in why_s + why_m + why_t],
    }


def tree_combine_text(combine: Combine, own: str, other: str) -> str:
    """The combine statement of a reduction tree applied to registers: its own slot read and
    written as `own`, its partner slot read as `other` (`sh[t] = fmaxf(sh[t], sh[t + s]);` ->
    `v = fmaxf(v, w);`)."""
    from kir import parse  # noqa: PLC0415 — kir is below passes; parse only when rewriting

    head = "void f() { "
    stmt_ir = parse(head + combine.statement + " }", "cuda")
    stmt = next(n for n in range(len(stmt_ir))
                if stmt_ir.grammar_type_of(n) == "expression_statement")
    assign = _assignment(stmt_ir, stmt)
    if assign is None:
        return combine.statement
    own_index = flat_code(stmt_ir, subscript(stmt_ir, children(stmt_ir, assign)[0])[1][-1])
    reads = []
    for nid in subtree(stmt_ir, stmt):
        parent = stmt_ir.parent_of(nid)
        if stmt_ir.grammar_type_of(nid) != "subscript_expression" or (
                stmt_ir.grammar_type_of(parent) == "subscript_expression" and  # type: ignore[arg-type]
                children(stmt_ir, parent)[0] == nid):  # type: ignore[arg-type]
            continue
        base, idx = subscript(stmt_ir, nid)
        if base == combine.array and idx:
            name = own if flat_code(stmt_ir, idx[-1]) == own_index else other
            reads.append((_span(stmt_ir, nid), name))
    out = stmt_ir.source
    for (start, end), name in sorted(reads, reverse=True):
        out = out[:start] + name.encode() + out[end:]
    return out.decode()[len(head):-2].strip()


# ---------------------------------------------------------------------------------------------
# block reductions with warp shuffles (what the tree rule makes, and what people write)


@dataclass(frozen=True, slots=True)
class ShuffleReduction:
    """A block reduction through warp shuffles: each warp folds its values with
    `__shfl_down_sync` over strides 16..1, lane 0 of each warp stores to a shared slot per warp,
    a barrier, then the first warp folds the slots and thread 0 runs `result` (the statements
    using the block's value). `values` are the registers reduced, `combines` their fold
    statements with the register written `{own}` and the partner's value `{other}`, `elements`
    their types; `span` covers the whole reduction (a closing barrier included)."""

    kernel: str
    tid: str
    values: tuple[str, ...]
    elements: tuple[str, ...]
    combines: tuple[str, ...]
    result: str
    span: tuple[int, int]
    closing_barrier: bool


def shuffle_reductions(ir: KernelIR | Unit) -> list[ShuffleReduction]:
    """Every block reduction through warp shuffles in the unit (see `ShuffleReduction`)."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    out = []
    for name, fn in unit.functions.items():
        for nid in subtree(unit.ir, fn):
            if unit.ir.grammar_type_of(nid) == "compound_statement":
                out += _shuffle_reductions_in(unit, name, fn, nid)
    return out


def _flat_items(ir: KernelIR, nid: int) -> list[int]:
    """The statements of a block, nested plain blocks flattened."""
    out = []
    for s in _statements(ir, nid):
        out += _flat_items(ir, s) if ir.grammar_type_of(s) == "compound_statement" else [s]
    return out


def _warp_fold(unit: Unit, loop: int, first: bool) -> list[tuple[str, str]] | None:
    """(register, combine template) of each value a loop `for (o = 16; o > 0; o >>= 1)` folds
    with `__shfl_down_sync` (the first phase starts at 16; the second at any stride)."""
    ir = unit.ir
    if ir.grammar_type_of(loop) != "for_statement":
        return None
    var, start = loop_var(ir, loop), _loop_start(ir, loop)
    _i, cond, update = for_parts(ir, loop)
    if var is None or start is None or cond is None or update is None or \
            not _HALVE.match(text(ir, update)) or flat_code(ir, cond) not in (f"{var}>0", f"{var}>=1"):
        return None
    if first and unit.value(flat_code(ir, start).replace("warpSize", "32")) != 16:
        return None
    items = _flat_items(ir, loop_body(ir, loop))
    folds = []
    pending: dict[str, str] = {}  # a partner register -> the register it shuffles
    for s in items:
        if ir.grammar_type_of(s) == "declaration" and len(declared_names(ir, s)) == 1:
            name, _ident, init = declared_names(ir, s)[0]
            shfl = _shfl_of(ir, init, var) if init is not None else None
            if shfl is None:
                return None
            pending[name] = shfl
            continue
        assign = _assignment(ir, s)
        if assign is None:
            return None
        target = children(ir, assign)[0]
        if ir.grammar_type_of(target) != "identifier":
            return None
        own = ir.name_of(target) or ""
        template = text(ir, s)
        calls = [c for c in subtree(ir, s) if ir.grammar_type_of(c) == "call_expression"
                 and _shfl_of(ir, c, var) == own]
        partner = next((p for p, v in pending.items() if v == own and p in _names(ir, s)), None)
        if calls:
            span = ir.span_of(calls[0])
            base = ir.span_of(s).start
            template = template[:span.start - base] + "{other}" + template[span.end - base:]
        elif partner is not None:
            template = re.sub(rf"\b{re.escape(partner)}\b", "{other}", template)
        else:
            return None
        template = re.sub(rf"(?<![\w.]){re.escape(own)}\b", "{own}", template)
        folds.append((own, template))
    return folds or None


def _shfl_of(ir: KernelIR, node: int, stride: str) -> str | None:
    """The register `__shfl_down_sync(mask, v, stride)` shuffles, when `node` is that call."""
    node = _strip(ir, node)
    if ir.grammar_type_of(node) != "call_expression" or callee(ir, node) != "__shfl_down_sync":
        return None
    args = [a for a in children(ir, children(ir, node)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
    if len(args) not in (3, 4) or flat_code(ir, args[2]) != stride or \
            ir.grammar_type_of(args[1]) != "identifier":
        return None
    return ir.name_of(args[1])


def _shuffle_reductions_in(unit: Unit, kernel: str, fn: int, block: int) -> list[ShuffleReduction]:
    ir = unit.ir
    items = _statements(ir, block)
    found = []
    for at, first in enumerate(items):
        folds = _warp_fold(unit, first, True)
        if folds is None or at + 3 >= len(items):
            continue
        store, barrier, second = items[at + 1], items[at + 2], items[at + 3]
        if ir.grammar_type_of(store) != "if_statement" or not _is_sync(ir, barrier) or \
                ir.grammar_type_of(second) != "if_statement" or _is_sync(ir, store):
            continue
        cond, then, _alt = if_parts(ir, store)
        lane_zero = flat_code(ir, cond)
        tid = next((t for t in _thread_names(unit, fn) if lane_zero in (
            f"({t}&31)==0", f"{t}%32==0", f"({t}%32)==0") or lane_zero in
            {f"{lane}==0" for lane in _lane_names(unit, fn, t)}), None)
        if tid is None:
            continue
        slots = {}
        for s in _flat_items(ir, then):
            assign = _assignment(ir, s)
            base, idx = subscript(ir, children(ir, assign)[0]) if assign is not None else (None, [])
            value = flat_code(ir, children(ir, assign)[-1]) if assign is not None else ""
            if base is None or len(idx) != 1 or value not in dict(folds):
                break
            slots[value] = base
        if set(slots) != {v for v, _ in folds}:
            continue
        cond2, then2, alt2 = if_parts(ir, second)
        warps = {f"{tid}>>5", f"{tid}/32"} | _bound_to(unit, fn, {f"{tid}>>5", f"{tid}/32"})
        if alt2 is not None or not (flat_code(ir, cond2) in (f"{tid}<32", f"{tid}<warpSize") or
                                    any(flat_code(ir, cond2) == f"{w}==0" for w in warps)):
            continue
        inner = _flat_items(ir, then2)
        fold_at = next((i for i, s in enumerate(inner) if _warp_fold(unit, s, False)), None)
        if fold_at is None or fold_at + 1 != len(inner) - 1:
            continue
        tail = inner[-1]
        if ir.grammar_type_of(tail) != "if_statement":
            continue
        cond3, result, alt3 = if_parts(ir, tail)
        lanes = {f"{tid}==0"} | {f"{lane}==0" for lane in _lane_names(unit, fn, tid)}
        if alt3 is not None or flat_code(ir, cond3) not in lanes:
            continue
        closing = at + 4 < len(items) and _is_sync(ir, items[at + 4])
        end = ir.span_of(items[at + 4 if closing else at + 3]).end
        values = tuple(v for v, _ in folds)
        found.append(ShuffleReduction(
            kernel, tid, values, tuple(_local_type(unit, fn, v) or "float" for v in values),
            tuple(t for _, t in folds), _block_text(ir, result), (ir.span_of(first).start, end),
            closing))
    return found


def _block_text(ir: KernelIR, nid: int) -> str:
    t = text(ir, nid).strip()
    return t[1:-1].strip() if ir.grammar_type_of(nid) == "compound_statement" else t


def _thread_names(unit: Unit, fn: int) -> list[str]:
    """`threadIdx.x` and the variables bound once to it in function `fn`."""
    ir = unit.ir
    names = ["threadIdx.x"]
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) == "declaration":
            names += [n for n, _i, init in declared_names(ir, nid)
                      if init is not None and _thread_index(unit, fn, n)]
    return names


def _bound_to(unit: Unit, fn: int, exprs: set[str]) -> set[str]:
    """Variables of `fn` bound once to one of `exprs` (flat texts)."""
    ir = unit.ir
    out = set()
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) == "declaration":
            for n, _i, init in declared_names(ir, nid):
                if init is not None and _unparen(flat_code(ir, init)) in exprs and \
                        n not in written_names(ir, fn):
                    out.add(n)
    return out


def _lane_names(unit: Unit, fn: int, tid: str) -> set[str]:
    return _bound_to(unit, fn, {f"{tid}&31", f"{tid}%32", f"{tid}&(warpSize-1)",
                                f"{tid}%warpSize"})
