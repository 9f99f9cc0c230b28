"""A GEMM micro-kernel over global operands: a K loop of scalar multiply-adds whose factors are
read straight from global memory (no shared tiles), read in the terms `gemm_global` gives a
staged one.

A naive GEMM keeps one accumulator (or a small register tile) per thread and adds, once per k,
the product of an element of A with an element of B, both read from global memory. Which
operand is which, how each is laid out, which output each accumulator holds, which blockIdx
component steps rows and columns and which integer parameters bound M, N and K is read from
what the code *does*: the kernel up to the end of its K loop (the one outermost loop that
multiplies elements of two pointer parameters, or loops that follow each other in one block: a
loop unrolled by hand and the loop over its remainder) is translated to Python and run thread by
thread on probe values (`passes.cuda.gemm_global`'s way: integer parameters get distinct odd
values, pointer parameters become symbolic bases, `blockIdx` a few probe blocks), with the
floating-point registers the loop updates as symbols at its entry. The result must be, for every
accumulator of every thread of a block, its own value plus the products

    A[(m0 + m) * sm + k * sk] * B[k * sk' + (n0 + n) * sn']   for k = 0 .. K - 1

(one stride of each pair 1, the other the value of an integer parameter, the leading
dimension), where the block's accumulators cover a BM x BN tile of outputs exactly once with
each thread's accumulators at (row(t) + dm, col(t) + dn) (sums of one weight per bit of the
thread index, `gemm_eval`'s `BitSum`), (m0, n0) the block's origin (2-D blockIdx, or blockIdx.x
counting blocks row- or column-major), and an accumulator whose output lies past the integer
parameters bounding M and N (found where the outputs stop) free to hold anything (the kernel's
own bounds check keeps its store). The hypothesis is fitted on one block with large values and
checked, product by product, on the first block and on the block where the bounds fall, with
K small enough that the loop runs to its end. Anything else is refused with the reason: among
others a K loop inside a loop that stores the outputs (a grid-stride loop over outputs), and
accumulators other than `float` (a sum kept in fp16 / bf16 or double, which the schedule's fp32
accumulation would change).

Operands addressed through blockIdx.z are a batch where the first block's products at z = 1 and
2 are those of z = 0 with each operand moved by 1 and 2 times one offset, a product of one or
two integer parameters on two probes (`Operand.batch`, as `gemm_global` reads staged ones).

The result is a `GlobalGemm` whose `GemmTile` has no shared tiles (`shared_bytes` 0, `bk` 1,
the tiles named by the operands' pointers) and whose `loop` is the K loop statement, wherever it
sits in the body (inside the kernel's bounds check, say). No GPU library is imported here.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from passes.cuda._tree import Scope, block_items, children, declared_names, subtree
from passes.cuda.gemm_eval import (GemmTile, Refusal, Tile, _Acc, _and, _cdiv, _cmod, _k,
                                   _Kernel, _Local, _max, _min, _not, _or, _Outer, _sel, _Sum,
                                   _FMA, _TRIVIA, _multiplies, _thread_map, variable_kind)
from passes.cuda.gemm_eval import _accumulated as _sums, kernel_functions, memo
from passes.cuda.gemm_eval import _NOT_F32, accumulator_refusal
from passes.cuda.gemm_global import (GlobalGemm, Operand, _addr, _GPtr, _kernel_params, _lane,
                                     _CHUNK, _product, _Unaligned, batch_strides, py_name,
                                     template_sizes,
                                     _StagingTranslator, _vat, _vcast, _VPtr, _vpair, _vzero,
                                     block_at, block_order)

if TYPE_CHECKING:
    from kir import KernelIR

_CAP = 64
"""Iterations a loop makes at most in a probe (a K loop over a large K is followed this far;
register-tile loops are shorter)."""
_WIDE = 1025
"""The first probe's integers start here (no bound cuts the first block)."""
_SCAN = 40
_LOOPS = ("for_statement", "while_statement", "do_statement")
_SIZES = {"bf16": 2, "fp16": 2, "f32": 4}


class _GRead:
    """The element `ptr[off]` of a global operand as the K loop reads it."""

    __slots__ = ("ptr", "off")

    def __init__(self, ptr: str, off: int) -> None:
        self.ptr, self.off = ptr, off

    def __mul__(self, other: Any) -> _Sum:
        if type(other) is _GRead:
            return _Sum(None, [(self, other)])
        raise Refusal("a global element is scaled by something other than a global element")

    __rmul__ = __mul__

    def _refuse(self, *_: Any) -> Any:
        raise Refusal("the K loop computes with a global element other than by a product")

    __add__ = __radd__ = __sub__ = __rsub__ = __truediv__ = __lt__ = __gt__ = _refuse

    def __bool__(self) -> bool:
        raise Refusal("a branch depends on a global element")


def _read(obj: Any, idx: tuple) -> Any:
    if isinstance(obj, _VPtr):
        raise Refusal("the K loop reads vectors")
    if isinstance(obj, _GPtr):
        if len(idx) != 1 or isinstance(idx[0], bool) or not isinstance(idx[0], int):
            raise Refusal(f"the pointer {obj.ptr} is indexed by something other than one integer")
        return _GRead(obj.ptr, obj.off + idx[0])
    if isinstance(obj, _Local):
        return obj[_k(*idx)]
    raise Refusal("an element read through something other than a pointer or register array")


def _deref(p: Any) -> Any:
    if isinstance(p, _GPtr):
        return _GRead(p.ptr, p.off)
    raise Refusal("a value read through a pointer the rule does not follow")


def _no_shared(*_: Any) -> Any:
    raise Refusal("the kernel stages through shared memory")


# ---------------------------------------------------------------------------------------------
# finding the K loop


def may_be_direct(code: str) -> bool:
    """A cheap test on a unit's code view: whether it may hold a K loop over global operands."""
    return "__global__" in code and bool(re.search(r"\b(?:for|while)\b", code)) and \
        bool(re.search(r"\*|\bfma", code))


def _base_name(ir: KernelIR, nid: int) -> str | None:
    node = nid
    while ir.grammar_type_of(node) in ("subscript_expression", "parenthesized_expression",
                                       "pointer_expression", "cast_expression",
                                       "binary_expression"):
        kids = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA]
        if not kids:
            return None
        node = kids[-1] if ir.grammar_type_of(node) in ("pointer_expression", "cast_expression") \
            else kids[0]
    return ir.name_of(node) if ir.grammar_type_of(node) == "identifier" else None


def _accesses(ir: KernelIR, nid: int, pointers: set[str]) -> tuple[set[str], set[str]]:
    """(read, written): the pointers of `pointers` accessed by element (`p[i]`, `*p`) in the
    subtree `nid`."""
    reads, writes = set(), set()
    for c in subtree(ir, nid):
        gtype = ir.grammar_type_of(c)
        if gtype == "subscript_expression" or (gtype == "pointer_expression"
                                               and ir.name_of(c) == "*"):
            name = _base_name(ir, c)
            if name not in pointers:
                continue
            parent = ir.parent_of(c)
            target = parent is not None and ir.grammar_type_of(parent) in (
                "assignment_expression", "update_expression") and children(ir, parent)[0] == c
            (writes if target else reads).add(name)
    return reads, writes


def _candidates(k: _Kernel, pointers: set[str], nested: bool = False) -> list[int]:
    """The outermost loops of the kernel (with `nested`, the loops inside another loop) that
    multiply and read elements of two pointer parameters (or of pointers the kernel derives
    from them), and neither store through one nor wait at a barrier nor touch shared memory."""
    ir = k.ir
    derived = set(pointers)
    for name, decls in k.scope.decls.items():
        for _, init in decls:
            if init is not None and _base_name(ir, init) in derived:
                derived.add(name)
    out = []
    for nid in subtree(ir, k.fn):
        if ir.grammar_type_of(nid) not in _LOOPS:
            continue
        if any(ir.grammar_type_of(a) in _LOOPS for a in ir.ancestors(nid)) != nested:
            continue
        products = [c for c in subtree(ir, nid)
                    if (ir.grammar_type_of(c) == "binary_expression" and ir.name_of(c) == "*")
                    or (ir.grammar_type_of(c) == "call_expression"
                        and _FMA.match(ir.attrs_of(c).get("callee") or ""))]
        reads, writes = _accesses(ir, nid, derived)
        if not products or len(reads) < 2 or writes:
            continue
        names = {ir.name_of(c) for c in subtree(ir, nid) if ir.grammar_type_of(c) == "identifier"}
        if names & set(k.shared) or "__syncthreads" in names:
            continue
        out.append(nid)
    return out


def _run_of(k: _Kernel, loops: list[int]) -> list[int]:
    """The K loop as one or more loops that follow each other in one block (a loop unrolled by
    hand and the loop over its remainder), or `Refusal`."""
    ir = k.ir
    if len(loops) == 1:
        return loops
    parent = ir.parent_of(loops[0])
    items = block_items(ir, parent) if parent is not None and \
        ir.grammar_type_of(parent) == "compound_statement" else []
    at = [i for i, it in enumerate(items) if it.node in loops]
    if len(at) != len(loops) or at != list(range(at[0], at[0] + len(at))):
        raise Refusal(f"{len(loops)} loops multiply global operands (one K loop, or loops that "
                      "follow each other in one block, expected)")
    return [items[i].node for i in at]


def _span(ir: KernelIR, loops: list[int]) -> tuple[int, int]:
    return ir.span_of(loops[0]).start, ir.span_of(loops[-1]).end


def _accumulators(k: _Kernel, loops: list[int]) -> dict[str, bool]:
    """The floating-point registers declared before the loops that they assign: name -> is an
    array."""
    ir = k.ir
    start, end = _span(ir, loops)
    out: dict[str, bool] = {}
    for nid in (n for loop in loops for n in subtree(ir, loop)):
        for name in k.scope.written(nid):
            decls = k.scope.decls.get(name, [])
            if len(decls) != 1 or start <= ir.span_of(decls[0][0]).start < end:
                continue
            kind = variable_kind(ir, k.fn, name)
            if _declares_pointer(ir, decls[0][0]):
                continue
            if kind == "f32":
                out[name] = name in k.scope.arrays
            elif kind in _NOT_F32:
                raise Refusal(accumulator_refusal(name, kind))
    return out


def _declares_pointer(ir: KernelIR, ident: int) -> bool:
    """Whether the declarator of identifier `ident` makes it a pointer (a walked operand, not
    a value)."""
    node = ir.parent_of(ident)
    while node is not None and ir.grammar_type_of(node) not in ("declaration",
                                                                 "parameter_declaration"):
        if ir.grammar_type_of(node) == "pointer_declarator":
            return True
        node = ir.parent_of(node)
    return False


def _left_for_later(k: _Kernel, loops: list[int], accs: dict[str, bool]) -> str | None:
    """A register the loops assign, besides the accumulators, that code after them reads."""
    ir = k.ir
    (start, stop), end = _span(ir, loops), ir.span_of(k.fn).end
    for nid in (n for loop in loops for n in subtree(ir, loop)):
        for name in k.scope.written(nid):
            decls = k.scope.decls.get(name, [])
            if name in accs or any(start <= ir.span_of(d[0]).start < stop for d in decls):
                continue
            after = [c for c in subtree(ir, k.fn) if ir.grammar_type_of(c) == "identifier"
                     and ir.name_of(c) == name and stop <= ir.span_of(c).start < end]
            if after:
                return name
    return None


# ---------------------------------------------------------------------------------------------
# running the kernel up to the end of its K loop


class _DirectTranslator(_StagingTranslator):
    """The kernel's statements up to the end of the K loop -> Python: the loop's accumulators
    become symbols at its entry and the function returns them after it; a `return` before it
    returns None (the thread computes nothing); every loop stops after `_CAP` iterations."""

    def __init__(self, k: _Kernel, loops: list[int], accs: dict[str, bool], ints: list[str],
                 pointers: list[str]) -> None:
        super().__init__(k, set(), ints, pointers)
        self.run, self.accs = loops, accs
        self.loops = 0
        self.path = {a for a in k.ir.ancestors(loops[0])} | set(loops)
        self.span = _span(k.ir, loops)

    def block(self, nids: list[int], pad: str) -> list[str]:
        at = [i for i, n in enumerate(nids) if n in self.path]
        return super().block(nids[:at[-1] + 1] if at else nids, pad)

    def stmt(self, nid: int, pad: str, body: int | None = None) -> list[str]:
        ir = self.k.ir
        gtype = ir.grammar_type_of(nid)
        if gtype == "return_statement":
            return [f"{pad}return None"]
        if gtype == "declaration" and nid not in self.path:
            names = declared_names(ir, nid)
            if names and all(n in self.accs and not self.accs[n] for n, _, _ in names):
                # an accumulator's first value (beta * C, a bias...) is a symbol at the loop's
                # entry: what it is does not change the products the loop adds
                return [f"{pad}v_{n} = 0" for n, _, _ in names]
        if gtype in _LOOPS:
            lines = super().stmt(nid, pad, body)
            self.loops += 1
            n = f"_c{self.loops}"
            at = next(i for i, line in enumerate(lines) if line.startswith(f"{pad}while "))
            lines[at:at + 1] = [f"{pad}{n} = 0", lines[at], f"{pad}    {n} += 1",
                                f"{pad}    if {n} > {_CAP}: break"]
            if nid not in self.run:
                return lines
            entry = [f"{pad}v_{a} = _Outer({a!r})" if arr else f"{pad}v_{a} = _Acc(({a!r}, ()))"
                     for a, arr in self.accs.items()] if nid == self.run[0] else []
            result = ", ".join(f"{a!r}: v_{a}" for a in self.accs)
            end = [f"{pad}return {{{result}}}"] if nid == self.run[-1] else []
            return entry + lines + end
        return super().stmt(nid, pad, body)


class _DirectProgram:
    """The kernel up to the end of its K loop as a Python function of one thread."""

    def __init__(self, k: _Kernel, loops: list[int], accs: dict[str, bool], ints: list[str],
                 pointers: list[str]) -> None:
        ir = k.ir
        body = children(ir, k.fn, "compound_statement")
        if not body:
            raise Refusal("the kernel has no body")
        tr = _DirectTranslator(k, loops, accs, ints, pointers)
        tr.batched = True
        lines = tr.block([it.node for it in block_items(ir, body[0])], "    ")
        head = ["def _run(_tx, _ty, _bx, _by, _cx, _cy, _P, _rd, _step, _cz):", "    _n = 0"]
        head += [f"    {py_name(n)} = _P[{n!r}]" for n in ints + pointers]
        source = "\n".join(head + ["    " + line for line in tr.prelude] + lines +
                           ["    return None"])
        namespace: dict[str, Any] = {
            "_cdiv": _cdiv, "_cmod": _cmod, "_Local": _Local, "_t": bool, "_and": _and,
            "_or": _or, "_not": _not, "_sel": _sel, "_min": _min, "_max": _max, "_k": _k,
            "_Acc": _Acc, "_Outer": _Outer, "_deref": _deref, "_addr": _addr, "_vzero": _vzero,
            "_vcast": _vcast, "_vat": _vat, "_gaddr": lambda p, i: p + i[0], "_lane": _lane,
            "_vpair": _vpair, "_st": _no_shared, "_saddr": _no_shared, "_vst": _no_shared,
            "_acopied": _no_shared}
        exec(compile(source, "<gemm-direct>", "exec"), namespace)  # noqa: S102 — our translation
        self.fn = namespace["_run"]
        self.source = source
        self.reads_z = tr.reads_z

    def run(self, block: tuple[int, int], cta: tuple[int, int], params: dict[str, Any], z: int = 0
            ) -> list[dict[tuple[str, tuple], list] | None]:
        """Each thread's accumulators (thread t = x + bx * y): (name, index) -> the products
        added, each as (element, element); None where the thread does not reach the loop."""
        bx, by = block

        def step() -> None:
            raise Refusal("the kernel does not end within the step limit")

        out: list[dict[tuple[str, tuple], list] | None] = []
        for ty in range(by):
            for tx in range(bx):
                try:
                    res = self.fn(tx, ty, bx, by, cta[0], cta[1], params, _read, step, z)
                except (TypeError, ValueError, ZeroDivisionError, RecursionError, IndexError,
                        KeyError, AttributeError) as exc:
                    raise Refusal(f"the kernel does something the rule does not read ({exc})") \
                        from None
                out.append(None if res is None else _accumulated(res))
        return out


def _accumulated(res: dict[str, Any]) -> dict[tuple[str, tuple], list]:
    temps: set[str] = set()
    mine = _sums(res, temps)
    if temps:
        raise Refusal(f"{sorted(temps)[0]} is set in the K loop to something other than a sum "
                      "of products")
    return mine


# ---------------------------------------------------------------------------------------------
# fitting the global meaning


_CACHE: dict[tuple[bytes, tuple[int, int] | None, frozenset[str] | None],
             tuple[list[GlobalGemm], list[str]]] = {}


def find_direct(ir: KernelIR, block: tuple[int, int] | None,
                kernels: frozenset[str] | None = None) -> tuple[list[GlobalGemm], list[str]]:
    """Every GEMM micro-kernel over global operands among the kernels of `ir` (those named in
    `kernels`, where given), and a one-line reason for each kernel with a candidate K loop that
    is not one. `block`: the launch's (x, y) block. Results are kept per source, block and
    kernels."""
    return memo(_CACHE, (ir.source, block, kernels), lambda: _find(ir, block, kernels))


def _find(ir: KernelIR, block: tuple[int, int] | None, kernels: frozenset[str] | None
          ) -> tuple[list[GlobalGemm], list[str]]:
    scope = Scope(ir)
    found: list[GlobalGemm] = []
    reasons: list[str] = []
    for fn in kernel_functions(ir, scope, kernels):
        name = ir.name_of(fn) or ""
        try:
            try:
                k = _Kernel(ir, scope, fn)
            except Refusal:  # said only of a kernel that multiplies in a loop: a GEMM candidate
                if not any(ir.grammar_type_of(c) in _LOOPS and _multiplies(ir, c)
                           for c in subtree(ir, fn)):
                    continue
                raise
            ints, ptrs, kinds = _kernel_params(k)
            fixed = template_sizes(k) if len(ints) < 3 else []
            ints += fixed
            loops = _candidates(k, set(ptrs))
            if not loops and _candidates(k, set(ptrs), nested=True):
                raise Refusal("the K loop sits in a loop that stores the outputs (a thread's "
                              "outputs stepped by a loop, such as a grid-stride loop, are not "
                              "read)")
            if not loops:
                continue
            loops = _run_of(k, loops)
            if block is None:
                raise Refusal("the block size is not known (give the host's launch or the block "
                              "fact)")
            try:
                g = _fit(k, loops, block, ints, ptrs, kinds)
            except _Unaligned as exc:  # outputs stored in whole chunks: probed at their multiples
                try:
                    g = _fit(k, loops, block, ints, ptrs, kinds, _CHUNK)
                except Refusal:
                    raise exc from None
            found.append(replace(g, fixed=tuple(fixed)))
        except Refusal as exc:
            reasons.append(f"{name}: {exc.args[0]}")
    return found, reasons


def _fit(k: _Kernel, loops: list[int], block: tuple[int, int], ints: list[str], ptrs: list[str],
         kinds: dict[str, str], unit: int = 1) -> GlobalGemm:
    ir = k.ir
    if len(ints) < 3:
        raise Refusal("the kernel has fewer than three integer parameters (M, N, K)")
    accs = _accumulators(k, loops)
    if not accs:
        raise Refusal("the K loop accumulates into no floating-point register declared before it")
    later = _left_for_later(k, loops, accs)
    if later:
        raise Refusal(f"the K loop sets {later}, which the code after it reads")
    program = _DirectProgram(k, loops, accs, ints, ptrs)
    bases = {p: _GPtr(p, 0, _SIZES.get(kinds.get(p, ""), 1)) for p in ptrs}

    def run(values: dict[str, int], cta: tuple[int, int], z: int = 0) -> list:
        return program.run(block, cta, {**values, **bases}, z)

    wide = {n: _WIDE + 2 * i for i, n in enumerate(ints)}
    first = run(wide, (0, 0))
    if any(o is None for o in first):
        raise Refusal("a thread of the first block does not reach the K loop")
    keys = sorted(first[0])
    if not keys or any(sorted(o) != keys for o in first):
        raise Refusal("the threads accumulate into different registers")
    a_ptr, b_ptr = _operands(first[0][keys[0]], ptrs)
    pairs = [[_pairs(o[key], a_ptr, b_ptr) for key in keys] for o in first]
    s_a, s_b = _steps(pairs)
    by_value = {v: n for n, v in wide.items()}
    a_kc, lda = _stride(s_a, by_value, "A")
    b_kc, ldb = _stride(s_b, by_value, "B")
    a0 = np.array([[p[e][0][0] for p in pairs] for e in range(len(keys))], dtype=np.int64)
    b0 = np.array([[p[e][0][1] for p in pairs] for e in range(len(keys))], dtype=np.int64)
    if (a_kc and not lda and len(np.unique(a0)) < 2) or (b_kc and not ldb and len(np.unique(b0)) < 2):
        # a block of one row (column): the next blocks' first products step by the leading
        # dimension
        more = [_pairs(terms, a_ptr, b_ptr)[0] for cta in ((1, 0), (0, 1))
                for o in run(wide, cta) if o for terms in o.values() if terms]
        a0 = np.concatenate([a0.ravel(), [p[0] for p in more]])
        b0 = np.concatenate([b0.ravel(), [p[1] for p in more]])
    lda = lda or _leading(a0, by_value, "A", "rows")
    ldb = ldb or _leading(b0, by_value, "B", "columns")
    a0 = np.array([[p[e][0][0] for p in pairs] for e in range(len(keys))], dtype=np.int64)
    b0 = np.array([[p[e][0][1] for p in pairs] for e in range(len(keys))], dtype=np.int64)
    m = a0 // wide[lda] if a_kc else a0
    n = b0 // wide[ldb] if b_kc else b0
    if (a_kc and (a0 % wide[lda]).any()) or (b_kc and (b0 % wide[ldb]).any()):
        raise Refusal("the first products do not read k = 0")
    if m.min() != 0 or n.min() != 0:
        raise Refusal("the first block's outputs do not start at the matrices' origin")
    bm, bn = int(m.max()) + 1, int(n.max()) + 1
    cells = np.unique(m * bn + n, return_counts=True)
    if len(cells[0]) != bm * bn or (cells[1] != 1).any():
        raise Refusal("the threads' accumulators do not cover the block's outputs exactly once")
    row, col, elements = _thread_map(block, m, n, keys)
    lay = _Layout(a_ptr, b_ptr, a_kc, b_kc, lda, ldb)

    # the blocks' order and the bounds, on integers just past two tiles
    big = 2 * max(bm, bn) + 1
    values = {nm: big + 2 * i for i, nm in enumerate(ints)} if unit == 1 else \
        {nm: (-(-big // unit) + i) * unit for i, nm in enumerate(ints)}

    def origin(cta: tuple[int, int]) -> tuple[int, int] | None:
        got = lay.cells(run(values, cta), values)
        return (min(c[0] for c in got), min(c[1] for c in got)) if got else None

    order, axes, period = block_order(origin, bm, bn)

    def block_of(i: int, j: int) -> tuple[int, int]:
        return block_at(order, axes, period, i, j)

    a_bound, ia = _bound(lambda i: lay.cells(run(values, block_of(i, 0)), values), values, bm, 0,
                         "rows")
    b_bound, ib = _bound(lambda j: lay.cells(run(values, block_of(0, j)), values), values, bn, 1,
                         "columns")
    if order != "2d":
        if "" in (a_bound, b_bound):
            raise Refusal("a kernel without bounds checks under a 1-D grid: the output's extent "
                          "cannot be told")
        bound, extent = (b_bound, bn) if order == "row" else (a_bound, bm)
        if period != -(-values[bound] // extent):
            raise Refusal(f"blockIdx.x counts {period} blocks a row where ceil({bound} / {extent}) "
                          f"= {-(-values[bound] // extent)}")
    # every product, on a K the loop runs to its end, at the first block and the bounds' block
    narrow = {nm: values[nm] for nm in (a_bound, b_bound) if nm}
    small = iter(v for v in (range(13, _CAP, 2) if unit == 1 else range(unit, _CAP, unit))
                 if v not in narrow.values())
    for nm in ints:
        if nm not in narrow:
            narrow[nm] = next(small, 0)
    if 0 in narrow.values():
        raise Refusal("too many integer parameters to probe")
    kname = ""
    for cta, (i0, j0) in (((0, 0), (0, 0)), (block_of(ia, ib), (ia, ib))):
        outs = run(narrow, cta)
        kname = _check(outs, keys, m, n, (i0 * bm, j0 * bn), narrow, lay, a_bound, b_bound, kname)
    if not kname:
        raise Refusal("no output of the probed blocks lies inside the bounds")
    if kname in (a_bound, b_bound):
        raise Refusal("K is the bound of an output dimension")
    if kinds.get(a_ptr) != kinds.get(b_ptr) or kinds.get(a_ptr) not in ("bf16", "fp16"):
        raise Refusal(f"the global operands are {kinds.get(a_ptr)} and {kinds.get(b_ptr)} "
                      "(bf16 or fp16 both expected)")
    span = (_loop_span(ir, loops[0])[0], _loop_span(ir, loops[-1])[1])
    tile_a = Tile(a_ptr, kinds[a_ptr], 0, wide[lda] if a_kc else 1, 1 if a_kc else wide[lda], bm,
                  (0, 0), False)
    tile_b = Tile(b_ptr, kinds[b_ptr], 0, wide[ldb] if b_kc else 1, 1 if b_kc else wide[ldb], bn,
                  (0, 0), False)
    tile = GemmTile(k.name, tile_a, tile_b, bm, bn, 1, block, span, (span,), elements, row, col, 0)
    strides = _batch(run, (wide, narrow), lay, ints) if program.reads_z else ((), ())
    return GlobalGemm(k.name, Operand(a_ptr, a_kc, lda, a_bound, axes[0], strides[0]),
                      Operand(b_ptr, b_kc, ldb, b_bound, axes[1], strides[1]), kname,
                      kinds[a_ptr], tile, order)


def _batch(run: Any, probes: tuple[dict[str, int], ...], lay: _Layout, ints: list[str]
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The operands' batch strides where blockIdx.z moves them: at z = 1 and 2 every product of
    the first block is the one of z = 0 with each operand moved by z times one offset, a product
    of one or two integer parameters on both probes."""
    found: list[list[list[tuple[str, ...]]]] = [[], []]
    for values in probes:
        ref = run(values, (0, 0))
        moved = []
        for z in (1, 2):
            shifts = set()
            for o0, o1 in zip(ref, run(values, (0, 0), z)):
                if (o0 is None) != (o1 is None) or sorted(o0 or {}) != sorted(o1 or {}):
                    raise Refusal("blockIdx.z changes which threads or registers accumulate")
                for key, terms in (o0 or {}).items():
                    p0, p1 = (_pairs(t, lay.a_ptr, lay.b_ptr) for t in (terms, o1[key]))
                    if len(p0) != len(p1):
                        raise Refusal("blockIdx.z changes how many products a register adds")
                    shifts |= {(y[0] - x[0], y[1] - x[1]) for x, y in zip(p0, p1)}
            if len(shifts) != 1:
                raise Refusal("blockIdx.z moves an operand's elements by different offsets")
            moved.append(shifts.pop())
        if moved[1] != (2 * moved[0][0], 2 * moved[0][1]):
            raise Refusal("blockIdx.z moves an operand by other than a multiple of one offset "
                          "(a batch stride)")
        for i in (0, 1):
            found[i].append(_product(moved[0][i], values, ints))
    return batch_strides(found)


def _loop_span(ir: KernelIR, loop: int) -> tuple[int, int]:
    """The K loop statement's byte span, with the comments and pragmas that lead it."""
    parent = ir.parent_of(loop)
    if parent is not None and ir.grammar_type_of(parent) == "compound_statement":
        for it in block_items(ir, parent):
            if it.node == loop:
                return it.start, it.end
    s = ir.span_of(loop)
    return s.start, s.end


def _operands(terms: list, ptrs: list[str]) -> tuple[str, str]:
    """(A, B): the two pointers the products pair, the one declared first as A."""
    if not terms:
        raise Refusal("an accumulator receives no product")
    x, y = terms[0]
    if x.ptr == y.ptr:
        raise Refusal("both factors come from the same operand")
    return (x.ptr, y.ptr) if ptrs.index(x.ptr) < ptrs.index(y.ptr) else (y.ptr, x.ptr)


def _pairs(terms: list, a_ptr: str, b_ptr: str) -> list[tuple[int, int]]:
    out = []
    for x, y in terms:
        if x.ptr == b_ptr and y.ptr == a_ptr:
            x, y = y, x
        if x.ptr != a_ptr or y.ptr != b_ptr:
            raise Refusal("the products do not pair the same two operands")
        out.append((x.off, y.off))
    return sorted(out)


def _steps(pairs: list[list[list[tuple[int, int]]]]) -> tuple[int, int]:
    """The k steps of A's and B's offsets (the same in every accumulator)."""
    depth = len(pairs[0][0])
    if depth < 2:
        raise Refusal("the K loop adds fewer than two products on a large K")
    s_a = pairs[0][0][1][0] - pairs[0][0][0][0]
    s_b = pairs[0][0][1][1] - pairs[0][0][0][1]
    for per_thread in pairs:
        for p in per_thread:
            if len(p) != depth:
                raise Refusal("the accumulators receive different numbers of products")
            for j in range(1, depth):
                if p[j][0] - p[j - 1][0] != s_a or p[j][1] - p[j - 1][1] != s_b:
                    raise Refusal("the products' k steps are not even in both operands")
    return s_a, s_b


def _stride(step: int, by_value: dict[int, str], which: str) -> tuple[bool, str]:
    """(k contiguous, leading dimension where the k step names it)."""
    if step == 1:
        return True, ""
    if step in by_value:
        return False, by_value[step]
    raise Refusal(f"{which}'s k step ({step}) is neither 1 nor an integer parameter")


def _leading(offsets: np.ndarray, by_value: dict[int, str], which: str, what: str) -> str:
    """The leading dimension of a k-contiguous operand: the step between its first rows."""
    starts = np.unique(offsets)
    if len(starts) < 2:
        raise Refusal(f"a block's outputs are one of {which}'s {what} (its leading dimension "
                      "cannot be told)")
    ld = int(starts[1] - starts[0])
    if ld not in by_value or (starts % ld).any():
        raise Refusal(f"the leading dimension of {which} is not an integer parameter")
    return by_value[ld]


class _Layout:
    """The operands' layouts: an accumulator's output cell from its first product."""

    def __init__(self, a_ptr: str, b_ptr: str, a_kc: bool, b_kc: bool, lda: str, ldb: str) -> None:
        self.a_ptr, self.b_ptr, self.a_kc, self.b_kc = a_ptr, b_ptr, a_kc, b_kc
        self.lda, self.ldb = lda, ldb

    def cell(self, a: int, b: int, values: dict[str, int]) -> tuple[int, int]:
        return (a // values[self.lda] if self.a_kc else a,
                b // values[self.ldb] if self.b_kc else b)

    def at(self, m: int, n: int, k: int, values: dict[str, int]) -> tuple[int, int]:
        """The offsets of A(m, k) and B(k, n)."""
        return ((m * values[self.lda] + k) if self.a_kc else (k * values[self.lda] + m),
                (n * values[self.ldb] + k) if self.b_kc else (k * values[self.ldb] + n))

    def cells(self, outs: list, values: dict[str, int]) -> list[tuple[int, int]]:
        got = []
        for o in outs:
            for terms in (o or {}).values():
                if terms:
                    a, b = min(_pairs(terms, self.a_ptr, self.b_ptr))
                    got.append(self.cell(a, b, values))
        return got


def _bound(cells_at: Any, values: dict[str, int], extent: int, axis: int, what: str
           ) -> tuple[str, int]:
    """The integer parameter bounding the outputs' `what` (the first one missing from the
    blocks stepped along them from the third on, then from the blocks holding each integer's
    value: a block of one row or column reaches no value in a few steps) and the index of that
    block; "" where the kernel checks no bound."""
    near = list(range(2, min(_SCAN, max(values.values()) // extent + 3)))
    for i in near + sorted({v // extent for v in values.values()} - set(near)):
        present = {c[axis] for c in cells_at(i)}
        for mn in range(i * extent, (i + 1) * extent):
            if mn not in present:
                names = [nm for nm, v in values.items() if v == mn]
                if len(names) != 1:
                    raise _Unaligned(f"the outputs' {what} are bounded by no integer parameter")
                return names[0], i
    return "", 2


def _check(outs: list, keys: list, m: np.ndarray, n: np.ndarray, origin: tuple[int, int],
           values: dict[str, int], lay: _Layout, a_bound: str, b_bound: str, kname: str) -> str:
    """Every accumulator inside the bounds holds exactly its row of A times its column of B
    over k < K (K: the integer whose value is the products' count); returns K's name."""
    for t, o in enumerate(outs):
        for e, key in enumerate(keys):
            gm, gn = origin[0] + int(m[e, t]), origin[1] + int(n[e, t])
            inside = (not a_bound or gm < values[a_bound]) and (not b_bound or gn < values[b_bound])
            if not inside:
                continue
            terms = (o or {}).get(key, [])
            if not terms:
                raise Refusal(f"the output ({gm}, {gn}) inside the bounds gets no products")
            got = _pairs(terms, lay.a_ptr, lay.b_ptr)
            if not kname:
                names = [nm for nm, v in values.items() if v == len(got)]
                if len(names) != 1:
                    raise Refusal("the K loop's product count names no single integer parameter")
                kname = names[0]
            want = sorted(lay.at(gm, gn, kk, values) for kk in range(values[kname]))
            if got != want:
                raise Refusal(f"the products of output ({gm}, {gn}) are not its row of A times "
                              "its column of B")
    return kname

