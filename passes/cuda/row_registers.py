"""A row read by several passes from global memory <-> the row held in registers, read once.

Row kernels (softmax, LayerNorm, RMSNorm, norms, row sums) walk one row several times with the
same block-stride loop. `row-cache` keeps the row in shared memory; this rule keeps it in the
threads' registers instead, for rows short enough: each thread loads its part of the row as
`vectors` 16-byte vectors at the top, all at once (the loads of a row are in flight together,
which a block-stride pass reading one element per step never has), and every pass runs over
those registers. The row crosses global memory once, no barrier is added, no shared memory is
taken, and the passes' other 16-bit / 32-bit pointers at the same index (a weight, a bias, the
output) move 16 bytes per access where aligned.

Found by role, with `row-cache`'s recognition (`row_cache.row_passes`, no shared room
checked): two or more block-stride passes of one block with the same header that read one
global pointer `p` at `p[off + v]` and never write it (every refusal of that recognition
applies: a store or atomic between the passes, a pass that leaves early, a bound or offset
that differs between threads, ...; not those of the copy's barrier: a thread may return before
the passes, one warp per row with its own guard), and none where a thread's count or last-seen value
(`++c`, `last = x[i]`) is computed with before the block combines it
(`recognize.repartition_refusal`: its elements change). Thread t of T holds the vectors
`c = t + k * T`, k < `vectors`, i.e. elements `c * L .. c * L + L - 1` (L elements per 16
bytes); each pass visits, per thread, exactly those elements, so every element of `[0, bound)` is visited once
in each pass, by one thread, as before; a thread's own partial results (a sum, a max) fold its
elements in another order (the reassociation `vectorize-global` makes too).

The rewrite is taken at run time only where it is that kernel: the row has at most
`vectors * L * T` elements, the loops step by the block's threads (`step == blockDim.x`,
unless it is written so), and the row starts on a 16-byte boundary; elsewhere the passes run
as written. A vector past the row's end is loaded element by element; a vector whose other
pointers are not 16-byte aligned runs element by element on the registers.

With option `reuse`, a value a pass folds (`acc += E`, `E` a float math function of the row's
element, softmax's exponential) is kept per element in registers where a later pass computes
the same `E` (the same text, the same loop variable) and nothing from the fold to that pass
assigns what `E` reads; the later pass reads the kept value (the same bits: the value is
computed once instead of twice). Where nothing is kept the option refuses.

A row the kernel already keeps in shared memory (`row-cache`'s form or a copy an expert wrote,
`row_cache.cached_rows`), or whose passes run vectorized, is taken too (`rows_as_written`): the
passes are read back from global memory (the copy, its barrier, the shared array and its guard
go, as `row-cache`'s de-optimization does), a pass vectorized with its loop as written as the
fallback (`memory.vector_fallbacks`: `vectorize-global`'s form) becomes that loop, and the rule
acts on the passes so found, with every precondition above; where a shared row's passes are not
passes it takes, it refuses with their reason. The copy's barrier synchronized the copy alone
(it runs only where the copy does, or right after it): nothing else waited on it.

The de-optimization (`register_rows`) recognizes the form by role: a local array of a 16-byte
vector type with a constant extent, a `const bool` guard declared next to it, a guarded
statement that only fills the array, and passes `if (guard) { ... } else { pass }`; the array,
the guard and the fill go (and `float` arrays of kept values declared beside the row's),
each pass becomes its `else` side, and `vectors` (and `reuse`) is recorded.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from kir.errors import KLineageError
from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._tree import children, declared_names, if_parts, loop_body, subtree, text
from passes.cuda.annotations import CUDA
from passes.cuda.memory import VECTORS, vector_fallbacks, vector_loops
from passes.cuda.recognize import (Unit, expand_locals, for_parts, launch_block,
                                   repartition_refusal, subscript)
from passes.cuda.row_cache import (RowPasses, _indent, _statement_items, _target_name,
                                   _upto_next, cached_rows, passes_back, row_passes)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

MAX_VECTORS = 16
"""At most this many 16-byte vectors per thread (64 registers of the row)."""

_TYPES = {"int", "long", "unsigned", "signed", "short", "size_t", "int64_t", "int32_t", "uint32_t",
          "uint64_t", "const", "static_cast"}

UNFIT_VECTORS = 4
"""`vectors=0` (fit) where the case's row or the block cannot be told."""


def row_length(ir: KernelIR, kernel: str, bound: str, facts: Mapping[str, Any]) -> int | None:
    """A row's bound (text, in function `kernel`) at the case's shape: its names (locals bound
    once expanded) are the shape's facts (`shape_dims`, `PassContext.for_case`), or one name
    that is not a fact where every integer entry of the shape has one value (a square case) or
    else every input of two or more dimensions (`input_shapes`) has the same last dimension
    (the row a block walks contiguously); None where it cannot be told."""
    dims = {k: facts[k] for k in facts.get("shape_dims", ())
            if isinstance(facts.get(k), int) and not isinstance(facts.get(k), bool)}
    if not dims:
        return None
    unit = Unit(ir)
    fn = unit.functions.get(kernel)
    bound = expand_locals(unit, fn, bound) if fn is not None else bound
    names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*\b(?!\s*\()", bound)) - set(unit.constants) - _TYPES
    free = names - dims.keys()
    values = set(dims.values())
    if free and len(values) != 1:  # the rows of the case's inputs: their common last dimension
        values = {t[-1] for t in facts.get("input_shapes") or () if len(t) >= 2}
    if len(free) > 1 or (free and len(values) != 1):
        return None
    unit.constants.update({k: str(v) for k, v in dims.items()})
    unit.constants.update({k: str(next(iter(values))) for k in free})
    return unit.value(bound)


def _block_threads(ir: KernelIR, plan: RowPasses, facts: Mapping[str, Any]) -> int | None:
    """The threads the passes step by: the step's constant value, else the launch's block
    (the kernel's launches, as rewritten; else the fact `block_threads`)."""
    unit = Unit(ir)
    step = unit.value(plan.step)
    if step is not None:
        return step
    fn = unit.functions.get(plan.kernel)  # a local bound once to the block's threads
    if re.sub(r"[\s()]", "", expand_locals(unit, fn, plan.step) if fn is not None else plan.step) \
            != "blockDim.x":
        return None
    dims = launch_block(ir, kernel=plan.kernel if plan.kernel in Unit(ir).kernels else None).dims
    if dims is not None and dims[1:] == (1, 1):
        return dims[0]
    return int(facts["block_threads"]) if isinstance(facts.get("block_threads"), int) else None


def fitting_vectors(ir: KernelIR, plan: RowPasses, ctx: PassContext | None) -> tuple[int | None, str]:
    """The fewest 16-byte vectors per thread that hold the case's row at the passes' block
    (None where the row or the block cannot be told), and what was found (for notes)."""
    facts = ctx.facts if ctx is not None else {}
    row = row_length(ir, plan.kernel, plan.bound, facts)
    threads = _block_threads(ir, plan, facts)
    if row is None or threads is None or threads <= 0:
        return None, f"row {row}, block {threads}"
    return vectors_for(row, 16 // plan.size, threads), f"a row of {row} elements at {threads} threads"


def vectors_for(row: int, lanes: int, threads: int) -> int:
    """The fewest 16-byte vectors of `lanes` elements per thread that hold a row of `row`
    elements at `threads` threads (at least one)."""
    return max(1, -(-row // (lanes * threads)))


@dataclass(frozen=True, slots=True)
class _PassVectors:
    """The other pointers one pass accesses at `base + v` with the row's element size:
    name -> (base, element type, written), and each access (start, end, name, written)."""

    pointers: dict
    spans: tuple


def _fresh(ir: KernelIR) -> str:
    n = 0
    while f"kl_reg{n}" in ir.text:
        n += 1
    return f"kl_reg{n}"


def _pass_vectors(ir: KernelIR, plan: RowPasses) -> list[_PassVectors]:
    """Per pass of `plan`, the pointers besides the row that move 16 bytes at a time."""
    plans = {loop.span: vp for loop, vp in vector_loops(ir)}
    out = []
    for span in plan.loops:
        vp = plans.get(span)
        if vp is None or isinstance(vp, Skipped) or vp.lanes != 16 // plan.size:
            out.append(_PassVectors({}, ()))
            continue
        pointers = {k: v for k, v in vp.pointers.items() if k != plan.pointer}
        spans = tuple(s for s in vp.spans if s[2] in pointers)
        out.append(_PassVectors(pointers, spans))
    return out


def _address(data: bytes, pv: _PassVectors, pointer: str, var: str, j: str) -> str:
    """`&pointer[index]` with the pass's loop variable `var` in the index as written replaced
    by `j` (the index's own text: casts and spacing kept)."""
    start, end = next((s, e) for s, e, p, _w in pv.spans if p == pointer)
    access = data[start:end].decode("utf-8")
    index = access[access.index("[") + 1:access.rindex("]")]
    return f"&{pointer}[" + re.sub(rf"(?<![.\w]){re.escape(var)}(?!\w)", f"({j})", index) + "]"


def _var_type(ir: KernelIR, span: tuple[int, int], var: str) -> str:
    """The declared type of a pass's loop variable (`int` where the header does not say)."""
    header = ir.source[span[0]:span[1]].decode("utf-8").split(";", 1)[0]
    m = re.search(rf"\(\s*(.*?)\b{re.escape(var)}\s*=", header, re.S)
    kind = m.group(1).strip() if m else ""
    return kind or "int"


def _body_span(ir: KernelIR, span: tuple[int, int]) -> tuple[int, int]:
    node = next(n.id for n in ir.walk() if (n.span.start, n.span.end) == span
                and ir.grammar_type_of(n.id) == "for_statement")
    body = loop_body(ir, node)
    return ir.span_of(body).start, ir.span_of(body).end


def _replaced(data: bytes, lo: int, hi: int, edits: list[tuple[int, int, str]]) -> str:
    """Bytes `[lo, hi)` of `data` with `edits` (absolute spans inside) applied."""
    out = data[lo:hi]
    for s, e, new in sorted(edits, reverse=True):
        out = out[:s - lo] + new.encode() + out[e - lo:]
    return out.decode("utf-8")


def _lines(lines: list[tuple[int, str]], ind: str) -> str:
    """Statements at their depths (two spaces each) under indentation `ind`, the first line
    unindented (it continues the line the replaced text started on); a statement spanning
    lines keeps its own relative indentation. `#pragma` lines sit one level out."""
    out = []
    for depth, line in lines:
        pad = ind + "  " * depth
        out.append(pad + line.replace("\n", "\n" + "  " * depth))
    return "\n".join(out)[len(ind):]


def _hoisted(ir: KernelIR, plan: RowPasses, others: list[_PassVectors]) -> dict[tuple[str, str], int]:
    """The passes' other read-only pointers at `base + v` that may be loaded with the row:
    (pointer, base) -> number. The kernel never writes through the pointer, and nothing from
    the row's load to the pass writes the pointer or what its base reads (no global store runs
    between the passes either: `row_passes`)."""
    fn = next(a for a in ir.ancestors(_for_id(ir, plan.loops[0]))
              if ir.grammar_type_of(a) == "function_definition")
    stores, assigned = set(), []
    for c in subtree(ir, fn):
        gtype = ir.grammar_type_of(c)
        if gtype in ("assignment_expression", "update_expression"):
            target = _target_name(ir, c)
            if target:
                assigned.append((ir.span_of(c).start, target))
                base, _ = subscript(ir, children(ir, c)[0])
                if base:
                    stores.add(base)
    out: dict[tuple[str, str], int] = {}
    for (ls, _le), pv in zip(plan.loops, others, strict=True):
        for q, (base, _t, written, _size) in sorted(pv.pointers.items()):
            names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", base)) | {q}
            if written or q in stores or (q, base) in out or \
                    any(plan.span[0] <= at < ls and t in names for at, t in assigned):
                continue
            out[(q, base)] = len(out)
    return out


def _for_id(ir: KernelIR, span: tuple[int, int]) -> int:
    return next(n.id for n in ir.walk() if (n.span.start, n.span.end) == span
                and ir.grammar_type_of(n.id) == "for_statement")


_FLOAT_CALL = re.compile(r"(?:__)?(?:exp|exp2|exp10|log|log2|pow|tanh|sqrt|rsqrt|sin|cos)f\s*\(")
_PURE_CALL = re.compile(r"(?:__)?(?:\w+f|__h\w+|__half2float|__bfloat162float|__float2half\w*|"
                        r"__float2bfloat16\w*|reinterpret_cast<[^<>]*>|fmaxf|fminf|fabsf)$")


def _kept_values(ir: KernelIR, plan: RowPasses, bodies: dict[int, tuple[str, str]],
                 name: str) -> tuple[dict[int, tuple[str, str]], dict[int, list[tuple[str, str]]]]:
    """Values of the row a pass folds (`acc += E;`, its one statement) that a later pass computes
    again as the same text `E` (the same loop variable, the row read through the registers):
    pass -> (E, array keeping E per element) and later pass -> [(E, array)]. `E` is a call of a
    float math function over the row's element and names nothing from the fold up to the last
    pass that uses it assigns (no assignment, increment or call besides conversions and math
    functions inside it)."""
    fn = next(a for a in ir.ancestors(_for_id(ir, plan.loops[0]))
              if ir.grammar_type_of(a) == "function_definition")
    assigned = []
    for c in subtree(ir, fn):
        if ir.grammar_type_of(c) in ("assignment_expression", "update_expression"):
            target = _target_name(ir, c)
            if target:
                assigned.append((ir.span_of(c).start, target))
    keep: dict[int, tuple[str, str]] = {}
    uses: dict[int, list[tuple[str, str]]] = {}
    for k, (var, body) in sorted(bodies.items()):
        m = re.fullmatch(r"\s*(?:\{\s*)?\w+\s*\+=\s*(.+?)\s*;\s*(?:\}\s*)?", body, re.S)
        expr = m.group(1) if m else ""
        if not expr or "reinterpret_cast" not in expr or not _FLOAT_CALL.match(expr) or \
                re.search(r"(?<![=!<>])=(?!=)|\+\+|--", expr) or \
                not all(_PURE_CALL.match(c) for c in re.findall(r"([\w:]+(?:<[^<>]*>)?)\s*\(", expr)):
            continue
        later = [j for j, (v, b) in sorted(bodies.items()) if j > k and v == var and expr in b]
        names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*\b(?!\s*[(<])", expr)) - {var}
        if not later or any(plan.loops[k][0] <= at < plan.loops[later[-1]][1] and t in names
                            for at, t in assigned):
            continue
        array = f"{name}_e{len(keep)}"
        keep[k] = (expr, array)
        for j in later:
            uses.setdefault(j, []).append((expr, array))
    return keep, uses


def registers_text(ir: KernelIR, plan: RowPasses, vectors: int, hoist: bool = False,
                   reuse: bool = False) -> tuple[str, int]:
    """The text replacing the passes' span: the row (and with `hoist` the passes' other
    read-only operands at the row's index) loaded into registers once, and each pass on the
    registers or as written (see the module); with `reuse`, values kept for later passes
    (`_kept_values`). Also how many values are kept."""
    data = ir.source
    name = _fresh(ir)
    fits, ind = f"{name}_fits", _indent(data, plan.span[0])
    lanes, elem = 16 // plan.size, plan.element
    step = plan.step.strip()
    same_step = "" if re.sub(r"[\s()]", "", step) == "blockDim.x" else f" && ({step}) == blockDim.x"
    chunk = f"const long long kl_c = (long long)({plan.start}) + (long long)kl_k * ({step});"
    others = _pass_vectors(ir, plan)
    hoisted = _hoisted(ir, plan, others) if hoist else {}
    declared = "".join(f"{ind}uint4 {name}_{n}[{vectors}];  // `{q}` at the row's index, loaded with it\n"
                       for (q, _b), n in hoisted.items())
    def at(q: str, _base: str, j: str) -> str:
        k = next(k for k, pv in enumerate(others) if (q, _base) in
                 {(p, b[0]) for p, b in pv.pointers.items()})
        var = next(v for kk, _s, _e, v in plan.reads if kk == k)
        return _address(data, others[k], q, var, j)
    loads = "".join(
        f"{ind}    if ((kl_c + 1) * {lanes} <= ({plan.bound}) && (reinterpret_cast<unsigned long long>"
        f"({at(q, b, 0)}) & 15ull) == 0) {name}_{n}[kl_k] = *reinterpret_cast<const uint4*>"
        f"({at(q, b, f'kl_c * {lanes}')});\n" for (q, b), n in hoisted.items())
    head = (f"uint4 {name}[{vectors}];  // the row in registers: {vectors} vectors of 16 bytes per thread\n"
            f"{declared}"
            f"{ind}const bool {fits} = ({plan.bound}) <= {vectors * lanes} * ({step}){same_step} && "
            f"(reinterpret_cast<unsigned long long>(&{plan.at('0')}) & 15ull) == 0;\n"
            f"{ind}if ({fits}) {{  // every vector of the row this thread holds is loaded before any is used\n"
            f"{ind}#pragma unroll\n"
            f"{ind}  for (int kl_k = 0; kl_k < {vectors}; ++kl_k) {{\n"
            f"{ind}    {chunk}\n"
            f"{ind}    if ((kl_c + 1) * {lanes} <= ({plan.bound})) {{\n"
            f"{ind}      {name}[kl_k] = *reinterpret_cast<const uint4*>(&{plan.at(f'kl_c * {lanes}')});\n"
            f"{ind}    }} else {{\n"
            f"{ind}      {name}[kl_k] = make_uint4(0u, 0u, 0u, 0u);\n"
            f"{ind}#pragma unroll\n"
            f"{ind}      for (int kl_l = 0; kl_l < {lanes}; ++kl_l)\n"
            f"{ind}        if (kl_c * {lanes} + kl_l < ({plan.bound})) "
            f"reinterpret_cast<{elem}*>(&{name}[kl_k])[kl_l] = {plan.at(f'kl_c * {lanes} + kl_l')};\n"
            f"{ind}    }}\n"
            f"{loads}"
            f"{ind}  }}\n"
            f"{ind}}}\n{ind}")
    lane = f"reinterpret_cast<const {elem}*>(&{name}[kl_k])[kl_l]"
    bodies = {}
    for k, (ls, le) in enumerate(plan.loops):
        reads = [(s, e, lane) for kk, s, e, _v in plan.reads if kk == k]
        if reads:
            bs, be = _body_span(ir, (ls, le))
            bodies[k] = (next(v for kk, _s, _e, v in plan.reads if kk == k), _replaced(data, bs, be, reads))
    keep, reused = _kept_values(ir, plan, bodies, name) if reuse else ({}, {})
    kept = "".join(f"float {a}[{vectors}][{lanes}];  // a value the fold computes per element, kept for a later pass\n{ind}"
                   for e, a in keep.values())
    head = head.replace(f"{ind}const bool {fits} =", f"{ind}{kept}const bool {fits} =", 1)

    def values(text: str, k: int) -> str:  # the kept values stored by the fold, read by later passes
        if k in keep:
            expr, array = keep[k]
            text = text.replace(expr, f"({array}[kl_k][kl_l] = {expr})", 1)
        for expr, array in reused.get(k, []):
            text = text.replace(expr, f"{array}[kl_k][kl_l]")
        return text
    pieces, cursor = [head], plan.span[0]
    for k, (ls, le) in enumerate(plan.loops):
        pieces.append(data[cursor:ls].decode("utf-8"))
        cursor = le
        original = data[ls:le].decode("utf-8")
        reads = [(s, e, lane) for kk, s, e, _v in plan.reads if kk == k]
        if not reads:
            pieces.append(original)
            continue
        var = next(v for kk, _s, _e, v in plan.reads if kk == k)
        vtype = _var_type(ir, (ls, le), var)
        bs, be = _body_span(ir, (ls, le))
        scalar_body = values(_replaced(data, bs, be, reads), k)
        lane_decl = f"const {vtype} {var} = kl_c * {lanes} + kl_l;"
        pv = others[k]
        lines = [(0, f"if ({fits}) {{"), (0, "#pragma unroll"),
                 (1, f"for (int kl_k = 0; kl_k < {vectors}; ++kl_k) {{"), (2, chunk)]
        depth = 2
        if pv.pointers:
            names = {p: f"kl_v{i}" for i, p in enumerate(sorted(pv.pointers))}
            vec_edits = list(reads)
            for s, e, p, written in pv.spans:
                t = pv.pointers[p][1] if written else f"const {pv.pointers[p][1]}"
                vec_edits.append((s, e, f"reinterpret_cast<{t}*>(&{names[p]})[kl_l]"))
            at = lambda p, j, pv=pv: _address(data, pv, p, var, j)  # noqa: E731
            aligned = " | ".join(f"reinterpret_cast<unsigned long long>({at(p, 0)})"
                                 for p in sorted(pv.pointers))
            lines.append((2, f"if ((kl_c + 1) * {lanes} <= ({plan.bound}) && (({aligned}) & 15ull) == 0) {{"
                             "  // its other pointers 16 bytes at a time"))
            lines += [(3, f"const uint4 {names[p]} = " + (
                          f"{name}_{hoisted[(p, pv.pointers[p][0])]}[kl_k];" if (p, pv.pointers[p][0]) in hoisted
                          else f"*reinterpret_cast<const uint4*>({at(p, f'kl_c * {lanes}')});"))
                      for p in sorted(pv.pointers) if not pv.pointers[p][2]]
            lines += [(3, f"uint4 {names[p]};") for p in sorted(pv.pointers) if pv.pointers[p][2]]
            lines += [(2, "#pragma unroll"), (3, f"for (int kl_l = 0; kl_l < {lanes}; ++kl_l) {{"),
                      (4, lane_decl), (4, values(_replaced(data, bs, be, vec_edits), k)), (3, "}")]
            lines += [(3, f"*reinterpret_cast<uint4*>({at(p, f'kl_c * {lanes}')}) = {names[p]};")
                      for p in sorted(pv.pointers) if pv.pointers[p][2]]
            lines.append((2, "} else {"))
            depth = 3
        lines += [(depth - 1, "#pragma unroll"), (depth, f"for (int kl_l = 0; kl_l < {lanes}; ++kl_l) {{"),
                  (depth + 1, lane_decl), (depth + 1, f"if ({var} < ({plan.bound})) {scalar_body}"),
                  (depth, "}")]
        if pv.pointers:
            lines.append((2, "}"))
        lines += [(1, "}"), (0, "} else {"), (1, original), (0, "}")]
        pieces.append(_lines(lines, ind))
    pieces.append(data[cursor:plan.span[1]].decode("utf-8"))
    return "".join(pieces), len(keep)


# -- the rule's form, read back ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RegisterRow:
    """A row held in local vector array `array` (`vectors` of them per thread) under guard
    `guard`: the statements that go (`removed`) and each pass's `else` side (`edits`)."""

    array: str
    guard: str
    vectors: int
    removed: tuple[tuple[int, int], ...]
    edits: tuple[tuple[int, int, str], ...]
    span: tuple[int, int]
    hoist: bool = False
    """Whether other operands are held beside the row (arrays of the same extent next to it)."""
    bound: str = ""
    """The row's bound and the elements a thread holds per thread of the step, as the guard
    tests them (`(bound) <= per * (step)`; "" and 0 where the guard says otherwise)."""
    per: int = 0
    reuse: bool = False
    """Whether values a fold computed are kept for a later pass (arrays `float X[v][l]`)."""


_ARRAY = re.compile(rf"^\s*(?:{'|'.join(v for v, (_s, _c, b) in VECTORS.items() if b == 16)})"
                    r"\s+(\w+)\s*\[\s*(\d+)\s*\]\s*;\s*$")
_KEPT = re.compile(r"^\s*float\s+(\w+)\s*\[\s*(\d+)\s*\]\s*\[\s*\d+\s*\]\s*;\s*$")
_GUARD = re.compile(r"^\s*const\s+bool\s+(\w+)\s*=")


def register_rows(ir: KernelIR) -> list[RegisterRow]:
    """Rows held in registers by the rule's form, by role (see the module)."""
    out = []
    for node in ir.walk():
        if ir.grammar_type_of(node.id) != "compound_statement":
            continue
        items = _statement_items(ir, node.id)
        for i in range(len(items) - 2):
            found = _register_row(ir, items, i)
            if found is not None:
                out.append(found)
    return out


def _register_row(ir: KernelIR, items: list[int], i: int) -> RegisterRow | None:
    m = _ARRAY.match(text(ir, items[i]))
    if m is None or "__shared__" in text(ir, items[i]):
        return None
    extra = []  # operands loaded with the row: arrays of the same extent declared next to it
    while i + 1 + len(extra) < len(items):
        e = _ARRAY.match(text(ir, items[i + 1 + len(extra)]))
        if e is None or e.group(2) != m.group(2):
            break
        extra.append(e.group(1))
    kept = []  # values a fold computed, kept for a later pass: `float X[vectors][lanes];`
    while i + 1 + len(extra) + len(kept) < len(items):
        e = _KEPT.match(text(ir, items[i + 1 + len(extra) + len(kept)]))
        if e is None or e.group(2) != m.group(2):
            break
        kept.append(e.group(1))
    g_at = i + 1 + len(extra) + len(kept)
    if g_at + 1 >= len(items):
        return None
    g = _GUARD.match(text(ir, items[g_at]))
    if g is None or ir.grammar_type_of(items[g_at]) != "declaration":
        return None
    array, guard = m.group(1), g.group(1)
    if [n for n, _i, _v in declared_names(ir, items[g_at])] != [guard]:
        return None
    fill = items[g_at + 1]

    def guarded(c: int) -> bool:
        return ir.grammar_type_of(c) == "if_statement" and \
            re.sub(r"[\s()]", "", text(ir, if_parts(ir, c)[0])) == guard

    if not guarded(fill) or if_parts(ir, fill)[2] is not None:
        return None
    uses = lambda n, name: [c for c in subtree(ir, n) if ir.grammar_type_of(c) == "identifier"  # noqa: E731
                            and ir.name_of(c) == name]
    edits, passes = [], []
    for c in items[g_at + 2:]:
        if not guarded(c):
            continue
        _cond, then, alt = if_parts(ir, c)
        if alt is None or not any(uses(then, n) for n in (array, *kept)) or uses(alt, array):
            return None
        inner = text(ir, alt).strip()
        if ir.grammar_type_of(alt) == "compound_statement":
            inner = inner[1:-1].strip().replace("\n  ", "\n")
        edits.append((ir.span_of(c).start, ir.span_of(c).end, inner))
        passes.append(c)
    inside = lambda u: any(ir.span_of(p).start <= ir.span_of(u).start < ir.span_of(p).end  # noqa: E731
                           for p in [*items[i:g_at + 2], *passes])
    block = ir.parent_of(items[i])
    if not edits or not all(inside(u) for name in (array, guard, *extra, *kept) for u in uses(block, name)):
        return None
    removed = tuple(_upto_next(ir, items, j) for j in range(i, g_at + 2))
    span = (removed[0][0], max(e for _s, e, _t in edits))
    test = re.match(r"\s*const\s+bool\s+\w+\s*=\s*\((.+?)\)\s*<=\s*(\d+)\s*\*", text(ir, items[g_at]), re.S)
    return RegisterRow(array, guard, int(m.group(2)), removed, tuple(edits), span, bool(extra),
                       test.group(1) if test else "", int(test.group(2)) if test else 0, bool(kept))


def count_spans(ir: KernelIR, held: RegisterRow) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """Where the form writes its vectors count (byte spans of the literal): the extents of the
    row's array and of the arrays beside it (hoisted operands, kept values' first extent), the
    count in the array's comment, the bound of every loop from 0 that indexes those arrays by
    its variable; and the span of the guard's elements per thread of the step (None: the
    guard does not say)."""
    data, count = ir.source, str(held.vectors)
    spans, names = [], []
    for start, end in held.removed[:-2]:  # the arrays' declarations, the row's first
        line = data[start:end].decode("utf-8")
        m = re.match(rf"\s*[\w:]+\s+(\w+)\s*\[\s*({count})\s*\]", line)
        if m is None:
            continue
        names.append(m.group(1))
        spans.append((start + len(line[:m.start(2)].encode()), start + len(line[:m.end(2)].encode())))
        note = re.search(rf"//[^\n]*?\b({count}) vectors of 16 bytes", line)
        if note is not None:
            spans.append((start + len(line[:note.start(1)].encode()),
                          start + len(line[:note.end(1)].encode())))
    for n in ir.walk():
        if not held.span[0] <= n.span.start < held.span[1] or ir.grammar_type_of(n.id) != "for_statement":
            continue
        _init, cond, _update = for_parts(ir, n.id)
        m = re.fullmatch(rf"\s*(\w+)\s*<\s*({count})\s*", text(ir, cond)) if cond is not None else None
        body = text(ir, loop_body(ir, n.id)) if m is not None else ""
        if m is not None and any(re.search(rf"(?<![\w.]){a}\s*\[\s*{m.group(1)}\s*\]", body) for a in names):
            at = ir.span_of(cond).start
            spans.append((at + len(text(ir, cond)[:m.start(2)].encode()),
                          at + len(text(ir, cond)[:m.end(2)].encode())))
    gs, ge = held.removed[-2]
    guard = data[gs:ge].decode("utf-8")
    per = re.search(r"<=\s*(\d+)\s*\*", guard)
    per_span = (gs + len(guard[:per.start(1)].encode()), gs + len(guard[:per.end(1)].encode())) \
        if per is not None and held.per else None
    return spans, per_span


def count_edits(ir: KernelIR, held: RegisterRow, vectors: int) -> list[ByteEdit]:
    """The edits that make the form hold `vectors` vectors per thread instead of its own
    (`count_spans`; the guard's elements per thread scale with them)."""
    spans, per = count_spans(ir, held)
    edits = [ByteEdit(s, e, str(vectors)) for s, e in spans]
    if per is not None:
        edits.append(ByteEdit(*per, str(held.per // held.vectors * vectors)))
    return edits


# -- a row kept in shared memory or read by vectorized passes, as the passes were written -------
@dataclass(frozen=True, slots=True)
class RowAsWritten:
    """A row whose passes read a shared copy (`array`, None where they read global memory) or
    run vectorized loops; `span`: the statements from the copy (or first pass) through the last
    pass; `ir`: the kernel with the passes reading global memory again and their vectorized
    loops as written, where `plan` holds them."""

    array: str | None
    span: tuple[int, int]
    ir: KernelIR
    plan: RowPasses


def _applied(ir: KernelIR, edits: list[tuple[int, int, str]]
             ) -> tuple[KernelIR, list[tuple[int, int]], Callable[[int, bool], int]]:
    """`ir` with the disjoint byte `edits` applied, where each edit's text lies in it, and the
    map of a position in it back to `ir` (the start or, `True`, the end of a span: a position
    inside an edit's text maps to the edit's start or end)."""
    from kir import Edit, Span  # noqa: PLC0415

    ordered = sorted(edits)
    shift, spans, placed = 0, [], []
    for s, e, t in ordered:
        n = len(t.encode())
        spans.append((s + shift, s + shift + n))
        placed.append((s + shift, s + shift + n, s, e, shift))
        shift += n - (e - s)

    def back(pos: int, end: bool) -> int:
        moved = 0
        for ns, ne, s, e, before in placed:
            if pos <= ns:
                return pos - before
            if pos < ne or (pos == ne and end):
                return e if end or pos == ne else s
            moved = before + (ne - ns) - (e - s)
        return pos - moved

    return ir.apply(tuple(Edit(Span(s, e), t) for s, e, t in ordered)), spans, back


def rows_as_written(ir: KernelIR) -> list[RowAsWritten | Skipped]:
    """Each row kept in shared memory (`row_cache.cached_rows`), with its passes read from
    global memory again and their vectorized loops as written (`memory.vector_fallbacks` inside
    the passes), or why those are not passes the rule takes; and each row whose passes read
    global memory through loops vectorized with a fallback (every such loop as written) where
    that makes passes the rule takes (see the module)."""
    known = {(p.kernel, p.pointer) for p in row_passes(ir, None) if isinstance(p, RowPasses)}
    out: list[RowAsWritten | Skipped] = []
    for cached in [*cached_rows(ir), None]:
        first: list[tuple[int, int, str]] = [] if cached is None else \
            [(s, e, "") for s, e in cached.removed] + list(cached.edits)
        try:
            back, spans, to_ir = _applied(ir, first) if first else (ir, [], lambda p, _e: p)
            spans = [(a, b) for a, b in spans if b > a]  # the passes' new text (the copy left none)
            loops = [f for f in vector_fallbacks(back)
                     if cached is None or any(f.span[0] < b and a < f.span[1] for a, b in spans)]
            outer = [f for f in loops if not any(o is not f and o.span[0] <= f.span[0] and
                                                 f.span[1] <= o.span[1] for o in loops)]
            if cached is None and not outer:
                continue
            to_back = lambda p, _e: p  # noqa: E731
            if outer:
                back, _spans, to_back = _applied(back, [(*f.span, f.loop) for f in outer])
        except KLineageError as exc:  # the passes read back do not parse: no such row here
            if cached is not None:
                out.append(Skipped(f"the row kept in `{cached.array}`, read from global memory "
                                   f"again, does not parse: {exc}", {"array": cached.array}))
            continue
        plans = row_passes(back, None)
        found = [p for p in plans if isinstance(p, RowPasses) and (p.kernel, p.pointer) not in known
                 and (cached is None or cached.pointer is None or p.pointer == cached.pointer)]
        for plan in found[:1] if cached is not None else found:
            lo = to_ir(to_back(plan.span[0], False), False)
            hi = to_ir(to_back(plan.span[1], True), True)
            if cached is not None:
                lo, hi = min(lo, cached.span[0]), max(hi, cached.span[1])
            out.append(RowAsWritten(cached.array if cached is not None else None,
                                    _statements_over(ir, (lo, hi)), back, plan))
        if cached is not None and not found:
            why = next((p.reason for p in plans if isinstance(p, Skipped)),
                       "no two passes with one header read the row from global memory")
            out.append(Skipped(f"the row kept in `{cached.array}`, read from global memory again: {why}",
                               {"array": cached.array}))
    return out


def _statements_over(ir: KernelIR, span: tuple[int, int]) -> tuple[int, int]:
    """The statements of the innermost block holding `span` that `span` touches, first to last
    (a pass that reads the copy ends where its statement does)."""
    block = max((n for n in ir.walk() if ir.grammar_type_of(n.id) == "compound_statement"
                 and n.span.start <= span[0] and span[1] <= n.span.end),
                key=lambda n: n.span.start, default=None)
    if block is None:
        return span
    items = [ir.span_of(c) for c in _statement_items(ir, block.id)
             if ir.span_of(c).start < span[1] and span[0] < ir.span_of(c).end]
    return (min([span[0]] + [i.start for i in items]), max([span[1]] + [i.end for i in items]))


def _minimal_edit(ir: KernelIR, new: str) -> ByteEdit:
    """One edit turning `ir`'s text into `new`: the bytes between their common head and tail."""
    old = ir.text
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    start = len(old[:head].encode())
    end = len(old[:len(old) - tail].encode())
    return ByteEdit(start, end, new[head:len(new) - tail])


@dataclass(frozen=True, slots=True)
class RowRegisters(Pass):
    """Passes re-reading a row from global memory <-> the row held in registers, read once."""

    vectors: int = 0
    """16-byte vectors of the row each thread holds (a row of up to `vectors * 16 / element
    bytes * threads` elements takes the register form; a longer one runs as written). 0, or a
    value too small to hold the case's row where the row and the block are known
    (`fitting_vectors`), is the fewest that hold it (fewer would only take the fallback; a
    row needing more than `MAX_VECTORS` is refused); a larger value is kept (the round trip
    of a recorded form); 0 where the row is not known is `UNFIT_VECTORS`."""

    hoist: bool = False
    """Also load the passes' other read-only operands at the row's index (a weight, a bias)
    with the row, into registers of their own, so that no pass waits for them."""

    reuse: bool = False
    """Keep a value a pass folds (`acc += E`, `E` a float math function of the row's element:
    softmax's exponential) in registers where a later pass computes the same `E` and nothing
    in between assigns what `E` reads; the later pass reads it instead (`_kept_values`)."""

    name: ClassVar[str] = "row-registers"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "a row read once into registers <-> every pass re-reads it"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    tunables: ClassVar[Mapping[str, tuple[Any, ...]]] = MappingProxyType({"vectors": (0, 2, 4, 8)})
    reach: ClassVar[tuple[Mapping[str, Any], ...]] = (
        MappingProxyType({"vectors": 0, "reuse": True}), MappingProxyType({"vectors": 0}),
        MappingProxyType({"vectors": 0, "hoist": True}))
    """Tried first on top of a recorded variant: the vectors that fit the case's row (a
    recorded count sized for another row would leave vectors past it), with kept values,
    alone, with the operands hoisted (each refused at no gate where it does not apply)."""

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        out = [make_site(self.name, ir, index, r.span, True, {"array": r.array,
                                                              "vectors": r.vectors})
               for r in register_rows(ir)]
        for plan in row_passes(ir, None):
            if isinstance(plan, RowPasses):
                out.append(make_site(self.name, ir, index, plan.span, False, {
                    "pointer": plan.pointer, "passes": len(plan.loops)}, plan.loops[0]))
        for row in rows_as_written(ir):
            if isinstance(row, RowAsWritten):
                out.append(make_site(self.name, ir, index, row.span, False, {
                    "pointer": row.plan.pointer, "passes": len(row.plan.loops),
                    **({"shared": row.array} if row.array else {"vectorized": True})}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        for r in register_rows(ir):
            if r.span == tuple(site.span):
                return passes_back(ir, site, r.removed, r.edits,
                                   {"vectors": r.vectors, **({"hoist": True} if r.hoist else {}),
                                    **({"reuse": True} if r.reuse else {})})
        return Skipped("no row held in registers at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not 0 <= self.vectors <= MAX_VECTORS:
            return Skipped(f"vectors={self.vectors}: a thread holds 1 to {MAX_VECTORS} vectors "
                           "of the row (0: as many as hold the case's row)", {"vectors": self.vectors})
        plans = row_passes(ir, None)
        for plan in plans:
            if isinstance(plan, RowPasses) and plan.span == tuple(site.span):
                made = self._registers(ir, plan, ctx)
                if isinstance(made, Skipped):
                    return made
                text_, options = made
                return finish(ir, site, [ByteEdit(*plan.span, text_)], options=options)
        for row in rows_as_written(ir):
            if isinstance(row, RowAsWritten) and row.span == tuple(site.span):
                made = self._registers(row.ir, row.plan, ctx)
                if isinstance(made, Skipped):
                    return made
                text_, options = made
                data = row.ir.source
                new = (data[:row.plan.span[0]] + text_.encode() + data[row.plan.span[1]:]).decode("utf-8")
                return finish(ir, site, [_minimal_edit(ir, new)], options=options)
        refused = [p for p in [*plans, *rows_as_written(ir)] if isinstance(p, Skipped)]
        if refused:
            return refused[0]
        return Skipped("no row read by several passes at the site", {"site": site.anchor})

    def _registers(self, ir: KernelIR, plan: RowPasses,
                   ctx: PassContext | None) -> tuple[str, dict[str, Any]] | Skipped:
        """The text replacing `plan`'s passes and the options recorded, or why the rule refuses."""
        why = repartition_refusal(Unit(ir), plan.kernel, plan.loops)
        if why is not None:
            return Skipped(why, {"kernel": plan.kernel})
        fit, found = fitting_vectors(ir, plan, ctx)
        if fit is not None and fit > MAX_VECTORS:
            return Skipped(f"{found} needs {fit} vectors of 16 bytes per thread, more than "
                           f"{MAX_VECTORS}: the form would only take its fallback", {"vectors": fit})
        # 0, or a value that would not hold the row (a card's recorded one): the fit
        vectors = fit if fit is not None and self.vectors < fit else self.vectors or UNFIT_VECTORS
        text_, kept = registers_text(ir, plan, vectors, self.hoist, self.reuse)
        if self.reuse and not kept:
            return Skipped("no pass computes again a value an earlier pass folds (reuse)",
                           {"vectors": vectors})
        return text_, {"vectors": vectors, **({"reuse": True} if self.reuse else {})}
