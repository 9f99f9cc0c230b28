"""Memory-access passes of CUDA kernels: vectorized global access, shared-memory staging and
`__restrict__` (read-only, non-aliased) pointers.

`vectorize-global` also vectorizes a grid-, block- or warp-stride loop a user wrote with scalar
accesses (found by role, `passes.cuda.recognize.stride_loops`): the pointers the body reads or
writes at `base + i` in straight-line statements (loop-invariant base) move 16 bytes per
access (option `ahead`, default 2: a thread loads its next vectors with the current one, so
that two are in flight; its elements are still visited in the loop's order); each vector's
elements run the body in turn with `i` bound to their index, the elements past the last whole
vector run the scalar body, and a run-time check that every vectorized address is 16-byte
aligned falls back to the loop as written (one site per kernel for all of its loops at once,
one per loop where a kernel has one). One-dimensional
shared arrays the body accesses at `i` move 16 bytes at a time too (a shared array the loop
writes only where a barrier follows the loop: a vector moves elements between threads). In a
warp-stride loop (one warp per row) a pointer is vectorized only where it and its offset are
the same for the warp's 32 threads, so that a warp takes one side of the alignment check.
A vector hands a thread other elements than the loop did: a loop whose thread keeps a count or
the last value it saw, used after the loop before the block combines it, is refused
(`recognize.repartition_refusal`); sums, maxima and other folds only change their order.
`vector_fallbacks` reads such a loop back by role (the alignment check, the scalar tail, the
loop as written as the fallback), for rules that act on the loop as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site, restore_recorded
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, code_view, find_iter, functions
from passes.cuda._tree import children, declared_names, escapes, if_parts, loop_body, subtree, text
from passes.cuda.annotations import CUDA
from passes.cuda.recognize import (
    StrideLoop,
    Unit,
    element_bytes,
    flat_code,
    for_parts,
    global_pointers,
    repartition_refusal,
    stagings,
    stride_loops,
    subscript,
    written_names,
)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

# vector type -> (scalar type, component names, bytes)
VECTORS: dict[str, tuple[str, str, int]] = {
    "float4": ("float", "xyzw", 16), "int4": ("int", "xyzw", 16),
    "uint4": ("unsigned int", "xyzw", 16), "double2": ("double", "xy", 16),
    "float2": ("float", "xy", 8), "int2": ("int", "xy", 8), "uint2": ("unsigned int", "xy", 8),
}
_VEC = "|".join(VECTORS)
_CAST = re.compile(rf"reinterpret_cast\s*<\s*(const\s+)?({_VEC})\s*\*\s*>\s*\(")
_VEC_PTR_DECL = re.compile(rf"\b(?:const\s+)?({_VEC})\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)\s*[=;,)]")
_LDG = re.compile(r"__ldg\s*\(")
_CANON_LOAD = re.compile(rf"\bmake_({_VEC})\s*\(\s*reinterpret_cast\s*<\s*const ")
_CANON_STORE = re.compile(rf"\{{ const ({_VEC}) kl_v = ")


@dataclass(frozen=True, slots=True)
class _Access:
    start: int
    end: int       # the access expression (or the whole statement for a store)
    vec: str
    address: str   # source of the vector address expression
    store_value: str | None = None


def _is_assignment(src: CSource, pos: int) -> bool:
    rest = src.code[pos:pos + 3].lstrip()
    return rest.startswith("=") and not rest.startswith("==")


def _accesses(src: CSource) -> list[_Access]:
    """Vector loads and stores through `reinterpret_cast<VEC*>` or VEC pointer variables."""
    found: list[_Access] = []
    taken: list[tuple[int, int]] = []

    def add(access: _Access) -> None:
        if any(a <= access.start < b or access.start <= a < access.end for a, b in taken):
            return
        taken.append((access.start, access.end))
        found.append(access)

    def finish_access(start: int, end: int, vec: str, address: str) -> None:
        if _is_assignment(src, end):
            eq = src.code.index("=", end)
            stmt_end = src.statement_end(eq + 1)
            value = src.text[eq + 1:stmt_end - 1].strip()
            add(_Access(start, stmt_end, vec, address, value))
        else:
            add(_Access(start, end, vec, address))

    for m in find_iter(_LDG, src):  # __ldg(vector address)
        end = src.close(m.end() - 1)
        inner = src.text[m.end():end - 1].strip()
        vec = _vector_of(src, inner, m.start())
        if vec:
            add(_Access(m.start(), end, vec, inner))
    for m in find_iter(_CAST, src):
        cast_end = src.close(m.end() - 1)
        cast = src.text[m.start():cast_end]
        vec = m.group(2)
        before = src.code[:m.start()].rstrip()
        if before.endswith("*") and not before.endswith("**"):  # *reinterpret_cast<VEC*>(p)
            star = len(before) - 1
            prev = before[:-1].rstrip()
            if prev and (prev[-1].isalnum() or prev[-1] in ")]_"):
                continue  # a multiplication, not a dereference
            finish_access(star, cast_end, vec, cast)
        elif src.code[cast_end:cast_end + 1] == "[":
            close = src.close(cast_end)
            index = src.text[cast_end + 1:close - 1]
            finish_access(m.start(), close, vec, f"{cast} + ({index})")
    pointers = _vector_pointers(src)
    for name, vec in pointers.items():
        for m in re.finditer(rf"(?<![\w.>]){re.escape(name)}\s*\[", src.code):
            close = src.close(m.end() - 1)
            index = src.text[m.end():close - 1]
            finish_access(m.start(), close, vec, f"{name} + ({index})")
    return sorted(found, key=lambda a: a.start)


def _vector_pointers(src: CSource) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in find_iter(_VEC_PTR_DECL, src)}


def _vector_of(src: CSource, expr: str, pos: int) -> str | None:
    m = _CAST.match(expr)
    if m:
        return m.group(2)
    head = re.match(r"\(?\s*(\w+)", expr)
    if head:
        return _vector_pointers(src).get(head.group(1))
    return None


def _scalarize(access: _Access) -> str:
    scalar, comps, _ = VECTORS[access.vec]
    if access.store_value is None:
        parts = ", ".join(f"reinterpret_cast<const {scalar}*>({access.address})[{i}]"
                          for i in range(len(comps)))
        return f"make_{access.vec}({parts})"
    stores = " ".join(f"reinterpret_cast<{scalar}*>({access.address})[{i}] = kl_v.{c};"
                      for i, c in enumerate(comps))
    return f"{{ const {access.vec} kl_v = {access.store_value}; {stores} }}"


@dataclass(frozen=True, slots=True)
class VectorizeGlobal(Pass):
    """128-bit (and 64-bit) vector loads/stores (`float4`, `uint4`, ...) <-> one scalar access
    per component (the same bytes, 4-byte words)."""

    before: str = ""
    """The exact vector access to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in its place."""
    ahead: int = 2
    """Vectors a thread of a vectorized stride loop loads before it uses the first (its next
    iterations' loads in flight with the current one's; 1: one at a time)."""

    name: ClassVar[str] = "vectorize-global"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "float4/uint4 vector global access <-> scalar components"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("align % vector_bytes == 0",)

    def _canonical(self, src: CSource) -> list[tuple[int, int, str]]:
        """(start, end, vectorized text) of scalarized accesses in the canonical form."""
        out = []
        for m in find_iter(_CANON_LOAD, src):
            paren = src.code.index("(", m.start())
            end = src.close(paren)
            vec = m.group(1)
            scalar, comps, _ = VECTORS[vec]
            args = [src.text[a:b] for a, b in src.args(paren)]
            addr = _common_address(args, f"reinterpret_cast<const {scalar}*>", len(comps))
            if addr is not None:
                out.append((m.start(), end, f"*reinterpret_cast<const {vec}*>({addr})"))
        for m in find_iter(_CANON_STORE, src):
            end = src.close(m.start())
            vec = m.group(1)
            scalar, comps, _ = VECTORS[vec]
            body = src.text[m.end():end - 1]
            value_end = _top_level_semicolon(body)
            value = body[:value_end].strip()
            addrs = re.findall(rf"reinterpret_cast<{re.escape(scalar)}\*>\((.*?)\)\[\d\] = kl_v\.[xyzw];",
                               body[value_end + 1:])
            if len(addrs) == len(comps) and len(set(addrs)) == 1:
                out.append((m.start(), end, f"*reinterpret_cast<{vec}*>({addrs[0]}) = {value};"))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = [make_site(self.name, ir, index, src.bspan(a.start, a.end), True,
                         {"vector": a.vec, "store": a.store_value is not None})
               for a in _accesses(src)]
        out += [make_site(self.name, ir, index, src.bspan(s, e), False, {"vectorized": text})
                for s, e, text in self._canonical(src)]
        grouped = set()
        for loops in _loop_groups(ir):
            span = (loops[0][0].span[0], loops[-1][0].span[1])
            out.append(make_site(self.name, ir, index, span, False, {
                "loops": len(loops), "kernel": loops[0][0].kernel}, loops[0][0].span))
            grouped |= {lp.kernel for lp, _plan in loops}
        for loop, plan in vector_loops(ir):
            if isinstance(plan, _VectorPlan) and loop.kernel not in grouped:
                out.append(make_site(self.name, ir, index, loop.span, False, {
                    "loop": loop.kind, "pointers": sorted(plan.pointers), "lanes": plan.lanes}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        for access in _accesses(src):
            if src.bspan(access.start, access.end) == tuple(site.span):
                text = _scalarize(access)
                return finish(ir, site, [src.edit(access.start, access.end, text)], options={
                    "before": src.text[access.start:access.end], "after": text})
        return Skipped("no vector access at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        if self.before:
            done = restore_recorded(ir, site, self.before, self.after)
            if done is not None:
                return done
        if not 1 <= self.ahead <= 4:
            return Skipped(f"ahead={self.ahead}: a thread keeps 1 to 4 vectors in flight", {})
        for loops in _loop_groups(ir):
            if (loops[0][0].span[0], loops[-1][0].span[1]) == tuple(site.span):
                return finish(ir, site, [ByteEdit(lp.span[0], lp.span[1],
                                                  _vector_loop_text(ir, lp, plan, self.ahead))
                                         for lp, plan in loops])
        for loop, plan in vector_loops(ir):
            if loop.span == tuple(site.span):
                if not isinstance(plan, _VectorPlan):
                    return plan
                return finish(ir, site, [ByteEdit(loop.span[0], loop.span[1],
                                                  _vector_loop_text(ir, loop, plan, self.ahead))])
        for start, end, text in self._canonical(src):
            if src.bspan(start, end) != tuple(site.span):
                continue
            vec = re.search(rf"({_VEC})", text).group(1)
            results, skip = self.check(ctx, {"vector_bytes": VECTORS[vec][2]})
            if skip:
                return skip
            return finish(ir, site, [src.edit(start, end, text)], preconditions=results)
        return Skipped("no scalarized vector access at the site", {"site": site.anchor})


def _common_address(args: list[str], cast: str, count: int) -> str | None:
    if len(args) != count:
        return None
    addrs = set()
    for i, arg in enumerate(args):
        m = re.fullmatch(rf"{re.escape(cast)}\((.*)\)\[{i}\]", arg.strip(), re.S)
        if m is None:
            return None
        addrs.add(m.group(1))
    return addrs.pop() if len(addrs) == 1 else None


def _top_level_semicolon(text: str) -> int:
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ";" and depth == 0:
            return i
    return len(text)


# ---------------------------------------------------------------------------------------------
_SHARED_DECL = re.compile(r"__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?[\w:<> ]+?\s+(\w+)\s*((?:\[[^\]]+\])+)\s*;")
_ASSIGNED = r"(?<![\w.])(?:{names})\s*(?:[-+*/%&|^]?=(?!=)|\+\+|--)|(?:\+\+|--)\s*(?:{names})\b"


@dataclass(frozen=True, slots=True)
class _Staging:
    array: str
    fill_start: int
    fill_end: int
    rhs: str
    indices: list[str]      # the fill's index variables (simple identifiers)
    reads: list[tuple[int, int, list[str]]]  # (start, end, index texts) of reads after the fill


@dataclass(frozen=True, slots=True)
class SmemStaging(Pass):
    """A tile staged in shared memory (`As[ty][tx] = A[...]; __syncthreads(); ... As[i][k]`)
    <-> every read going to global memory directly."""

    before: str = ""
    """The exact staged region to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in its place."""

    name: ClassVar[str] = "smem-staging"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "stage global tiles in shared memory <-> read global memory directly"
    provides: ClassVar[tuple[str, ...]] = ("smem-staged",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("*",)

    def _stagings(self, src: CSource) -> list[_Staging]:
        out = []
        for decl in find_iter(_SHARED_DECL, src):
            array = decl.group(1)
            dims = decl.group(2).count("[")
            fn = src.function_at(decl.start())
            if fn is None:
                continue
            pattern = re.compile(rf"(?<![\w.]){array}\s*" + r"\[([^\[\]]+)\]\s*" * dims)
            uses = [m for m in pattern.finditer(src.code, decl.end(), fn.body_end)]
            fills = [m for m in uses if _is_assignment(src, m.end())]
            if len(fills) != 1:
                continue
            fill = fills[0]
            indices = [g.strip() for g in fill.groups()]
            if not all(re.fullmatch(r"[A-Za-z_]\w*", i) for i in indices):
                continue
            eq = src.code.index("=", fill.end())
            stmt_end = src.statement_end(eq + 1)
            rhs = src.text[eq + 1:stmt_end - 1].strip()
            reads = [(m.start(), m.end(), [g.strip() for g in m.groups()])
                     for m in uses if m.start() > stmt_end]
            if not reads or any(m.start() < fill.start() for m in uses):
                continue
            # a staged copy of global memory: the fill reads a pointer parameter, every other
            # use is a plain read (no address taken, no atomics), and a barrier separates them
            pointers = {name for name, _ in _pointer_params(src, fn)}
            if not any(re.search(rf"(?<![\w.]){re.escape(p)}\s*\[", rhs) for p in pointers):
                continue
            if any(src.code[:m.start()].rstrip().endswith("&") or _is_assignment(src, m.end())
                   for m in uses if m is not fill):
                continue
            if "__syncthreads" not in src.code[stmt_end:reads[0][0]]:
                continue
            # the fill's other inputs must not change between the fill and the reads
            others = set(re.findall(r"[A-Za-z_]\w*", rhs)) - set(indices)
            between = src.code[stmt_end:reads[-1][1]]
            if others and re.search(_ASSIGNED.format(names="|".join(map(re.escape, others))), between):
                continue
            if not _locals_reach(src, others, indices, fill.start(), reads):
                continue
            out.append(_Staging(array, fill.start(), stmt_end, rhs, indices, reads))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = [make_site(self.name, ir, index, src.bspan(src.line_start(s.fill_start), s.reads[-1][1]), True,
                         {"array": s.array, "reads": len(s.reads)}) for s in self._stagings(src)]
        # staging in the other forms users write (a guarded temporary, a ternary, a vector
        # copy; found by role): present, so what requires staged tiles sees it; this rule
        # de-optimizes only the direct form above
        for st in stagings(ir)[0]:
            if not any(site.span[0] <= st.store[0] and st.store[1] <= site.span[1] for site in out):
                out.append(make_site(self.name, ir, index, st.span, True, {
                    "array": st.array, "form": st.form, "source": st.source}, st.store))
        for decl in find_iter(_SHARED_DECL, src):  # a declared tile nobody uses
            fn = src.function_at(decl.start())
            if fn is not None and not re.search(rf"(?<![\w.]){decl.group(1)}\b",
                                                src.code[decl.end():fn.body_end]):
                out.append(make_site(self.name, ir, index, src.bspan(decl.start(), fn.body_end),
                                     False, {"array": decl.group(1)},
                                     src.bspan(decl.start(), decl.end())))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        for s in self._stagings(src):
            start, end = src.line_start(s.fill_start), s.reads[-1][1]
            if src.bspan(start, end) != tuple(site.span):
                continue
            fill_start, fill_end = s.fill_start, s.fill_end
            line_a, line_b = src.line_start(fill_start), src.line_end(fill_end)
            if not src.text[line_a:fill_start].strip() and not src.text[fill_end:line_b].strip():
                fill_start, fill_end = line_a, line_b  # the fill had its own line: drop it
            changes = [(fill_start, fill_end, "")] + [
                (r_start, r_end, "(" + _substitute(s.rhs, s.indices, idx) + ")")
                for r_start, r_end, idx in s.reads]
            after = src.text[start:end]
            for c_start, c_end, text in sorted(changes, reverse=True):
                after = after[:c_start - start] + text + after[c_end - start:]
            return finish(ir, site, [src.edit(*c) for c in changes],
                          options={"before": src.text[start:end], "after": after})
        return Skipped("no shared-memory staging at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not self.before:
            return Skipped("staging a tile needs the recorded fill (which global elements the "
                           "block shares is kernel-specific)", {"array": site.detail.get("array")})
        done = restore_recorded(ir, site, self.before, self.after)
        if done is None:
            return Skipped("the recorded direct reads are not at the site", {"site": site.anchor})
        return done


def _locals_reach(src: CSource, names: set[str], indices: list[str], fill: int,
                  reads: list[tuple[int, int, list[str]]]) -> bool:
    """Whether each of `names` that the fill's right side reads and a declaration of the
    function binds holds, at every read, the value it had at the fill: its declaration
    before the fill is in a block that also holds the last read (`ar` declared in the fill's
    own loop body is out of scope there), and a fill index its value is computed from is that
    same index at every read (`row = base + ty` stands for the fill's row: right where each
    read's row is `ty` too, not where it is another)."""
    ir = src.ir
    fill_b, read_b = src.b(fill), src.b(reads[-1][1])
    for nid in range(ir.subtree_end(0)):
        if ir.grammar_type_of(nid) != "declaration" or ir.span_of(nid).start >= fill_b:
            continue
        for name, _ident, init in declared_names(ir, nid):
            if name not in names:
                continue
            scope = ir.parent_of(nid)
            if scope is not None and ir.span_of(scope).end < read_b:
                return False
            used = set(re.findall(r"[A-Za-z_]\w*", text(ir, init))) if init is not None else set()
            if any(index in used and any(idx[at] != index for _s, _e, idx in reads)
                   for at, index in enumerate(indices)):
                return False
    return True


def _substitute(expr: str, names: list[str], values: list[str]) -> str:
    table = dict(zip(names, values))
    return re.sub(r"(?<![\w.])([A-Za-z_]\w*)\b",
                  lambda m: f"({table[m.group(1)]})" if m.group(1) in table else m.group(1), expr)


# ---------------------------------------------------------------------------------------------
_RESTRICT = re.compile(r"\b__restrict__\b\s*")


@dataclass(frozen=True, slots=True)
class RestrictReadonly(Pass):
    """`__restrict__` pointer parameters (no aliasing: read-only loads may use the
    non-coherent cache)."""

    params: str = ""
    """Comma-separated parameters to qualify (recorded by a de-optimization); empty: every
    pointer parameter."""

    name: ClassVar[str] = "restrict-readonly"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "__restrict__ on non-aliasing pointer parameters"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("not aliased",)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = []
        for fn in functions(src):
            params = src.code[fn.params_start:fn.params_end]
            span = src.bspan(fn.params_start, fn.params_end)
            locus = src.bspan(fn.start, fn.params_end)
            if "__restrict__" in params:
                out.append(make_site(self.name, ir, index, span, True,
                                     {"function": fn.name, "params": _restricted(src, fn)}, locus))
            elif _pointer_params(src, fn):
                out.append(make_site(self.name, ir, index, span, False, {"function": fn.name}, locus))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        fn = next((f for f in functions(src) if src.bspan(f.params_start, f.params_end) == tuple(site.span)), None)
        if fn is None or "__restrict__" not in src.code[fn.params_start:fn.params_end]:
            return Skipped("no __restrict__ parameters at the site", {"site": site.anchor})
        edits = [src.edit(m.start(), m.end(), "")
                 for m in _RESTRICT.finditer(src.code, fn.params_start, fn.params_end)]
        return finish(ir, site, edits, options={"params": ",".join(_restricted(src, fn))})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        fn = next((f for f in functions(src) if src.bspan(f.params_start, f.params_end) == tuple(site.span)), None)
        if fn is None:
            return Skipped("no function at the site", {"site": site.anchor})
        results, skip = self.check(ctx)
        if skip:
            return skip
        wanted = [p for p in self.params.split(",") if p]
        edits = []
        for name, name_at in _pointer_params(src, fn):
            if (not wanted or name in wanted) and "__restrict__" not in src.code[fn.params_start:name_at].split(",")[-1]:
                edits.append(ByteEdit(src.b(name_at), src.b(name_at), "__restrict__ "))
        if not edits:
            return Skipped("no pointer parameter to qualify", {"function": fn.name})
        return finish(ir, site, edits, preconditions=results)


def _pointer_params(src: CSource, fn) -> list[tuple[str, int]]:  # noqa: ANN001
    """(name, offset of the name) of the function's pointer parameters."""
    out = []
    for start, end in src.args(fn.params_start):
        text = src.code[start:end]
        m = re.search(r"\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)\s*$", text)
        if m:
            out.append((m.group(1), start + m.start(1)))
    return out


def _restricted(src: CSource, fn) -> list[str]:  # noqa: ANN001
    out = []
    for start, end in src.args(fn.params_start):
        text = src.code[start:end]
        if "__restrict__" in text:
            m = re.search(r"(\w+)\s*$", text)
            if m:
                out.append(m.group(1))
    return out


# ---------------------------------------------------------------------------------------------
# the forward rule on a stride loop (by role)


@dataclass(frozen=True, slots=True)
class _VectorPlan:
    """Which pointers a stride loop's body accesses at `base + i` (pointer -> (base, element
    type, written)), how many elements a 16-byte vector holds, and the loop's parts."""

    pointers: dict
    lanes: int
    var: str
    var_type: str
    body: tuple[int, int]
    spans: tuple  # (start, end, pointer, written) of each vectorized access


def vector_loops(ir: KernelIR) -> list[tuple[StrideLoop, _VectorPlan | Skipped]]:
    """Each grid- or block-stride loop of the unit with the plan that vectorizes it, or why
    none does."""

    unit = Unit(ir)
    out = []
    for loop in stride_loops(unit):
        node = next(n.id for n in ir.walk() if (n.span.start, n.span.end) == loop.span
                    and ir.grammar_type_of(n.id) == "for_statement")
        if _under_alignment_check(ir, node):
            continue  # the scalar path (or tail) of a loop vectorized already
        fn = unit.block_helpers()[loop.kernel]
        pointers = global_pointers(unit, fn) | _shared_rows(unit, fn, node)
        why = repartition_refusal(unit, loop.kernel, [loop.span])
        out.append((loop, Skipped(why, {}) if why else _plan(unit, loop, node, pointers, escapes)))
    return out


def _loop_groups(ir: KernelIR) -> list[list[tuple[StrideLoop, _VectorPlan]]]:
    """Per kernel with two or more stride loops the rule takes, those loops (none inside
    another), in source order: one site vectorizes them all."""
    groups: dict[str, list] = {}
    for loop, plan in vector_loops(ir):
        if isinstance(plan, _VectorPlan):
            groups.setdefault(loop.kernel, []).append((loop, plan))
    out = []
    for loops in groups.values():
        loops.sort(key=lambda lp: lp[0].span)
        outer = [lp for lp in loops if not any(o[0].span[0] <= lp[0].span[0] and lp[0].span[1] <= o[0].span[1]
                                               and o is not lp for o in loops)]
        if len(outer) >= 2:
            out.append(outer)
    return out


def _shared_rows(unit, fn: int, node: int) -> dict[str, str]:  # noqa: ANN001
    """The one-dimensional shared arrays the stride loop `node` may access 16 bytes at a time
    (name -> element type). Vectorizing moves an element to another thread of the block, so a
    shared array the loop writes needs the barrier right after the loop before anyone reads it;
    where none follows, the array is left as written (its reads are vectorized all the same)."""
    ir = unit.ir
    arrays = {name: arr.element for name, arr in unit.shared_views(fn).items()
              if len(arr.extents) == 1}
    parent = ir.parent_of(node)
    items = [c for c in children(ir, parent) if ir.grammar_type_of(c) != "comment"] \
        if parent is not None else []
    after = items[items.index(node) + 1] if node in items and items.index(node) + 1 < len(items) \
        else None
    barrier = after is not None and re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;",
                                                text(ir, after).strip()) is not None
    if not barrier:
        body = loop_body(ir, node)
        for c in subtree(ir, body):
            if ir.grammar_type_of(c) == "assignment_expression":
                base, _ = subscript(ir, children(ir, c)[0])
                arrays.pop(base or "", None)
    return arrays


def _plan(unit, loop: StrideLoop, node: int, pointers: dict, escapes) -> _VectorPlan | Skipped:  # noqa: ANN001

    ir = unit.ir
    body = loop_body(ir, node)
    why = escapes(ir, body)
    if why:
        return Skipped(f"the loop's body can leave by {why}", {})
    head = [c for c in children(ir, node) if ir.grammar_type_of(c) == "declaration"]
    if not head:
        return Skipped("the loop variable is not declared in the loop's header", {})
    var_type = re.split(rf"(?<![\w.]){re.escape(loop.var)}\b", text(ir, head[0]),
                        maxsplit=1)[0].strip() or "int"
    written = written_names(ir, body)
    if loop.var in written or set(re.findall(r"[A-Za-z_]\w*", loop.bound)) & written:
        return Skipped("the body writes the loop variable or its bound", {})
    if any(ir.grammar_type_of(c) == "call_expression" and "sync" in text(ir, c).split("(")[0]
           for c in subtree(ir, body)):
        return Skipped("the body synchronizes", {})
    if not re.fullmatch(rf"\s*{re.escape(loop.var)}\s*<\s*[^<>=]+", _cond_text(ir, node)):
        return Skipped("the loop's condition is not `i < n`", {})
    found: dict[str, list] = {}
    bad: set[str] = set()
    for c in subtree(ir, body):
        if ir.grammar_type_of(c) != "subscript_expression":
            continue
        base, idx = subscript(ir, c)
        if base not in pointers:
            continue
        if len(idx) != 1:
            bad.add(base)
            continue
        flat = _compact(ir, idx[0])
        m = re.fullmatch(rf"{re.escape(loop.var)}|(.+)\+{re.escape(loop.var)}|{re.escape(loop.var)}\+(.+)", flat)
        offset = None if m is None else (m.group(1) or m.group(2) or "0")
        if offset is None or loop.var in re.findall(r"[A-Za-z_]\w*", offset) or \
                set(re.findall(r"[A-Za-z_]\w*", offset)) & written or not _straight(ir, c, body):
            bad.add(base)
            continue
        parent = ir.parent_of(c)
        store = parent is not None and ir.grammar_type_of(parent) == "assignment_expression" and \
            children(ir, parent)[0] == c
        if store and (ir.source[ir.span_of(c).end:ir.span_of(children(ir, parent)[-1]).start]
                      .decode().strip() != "="):
            bad.add(base)
            continue
        found.setdefault(base, []).append((c, offset, store))
    if loop.kind == "warp":  # each warp takes one branch of the alignment check: bases per warp
        bad |= {name for name, uses in found.items()
                if not all(_warp_uniform(unit, loop, c) for c, _o, _s in uses)}
    plans = {}
    unsized = []
    for name, uses in found.items():
        if name in bad or len({u[1] for u in uses}) != 1 or len({u[2] for u in uses}) != 1:
            continue
        size = element_bytes(pointers[name])
        if size not in (2, 4, 8):
            unsized.append(f"`{name}` ({pointers[name]})")
            continue
        if uses[0][2] and sum(1 for u in uses) != 1:
            continue
        plans[name] = (uses[0][1], pointers[name].replace("const", "").strip(), uses[0][2], size)
    if not plans and unsized:
        return Skipped(f"the elements of {', '.join(unsized)} have no size known here (a type "
                       "parameter, a structure): lanes per 16 bytes cannot be told", {})
    if not plans:
        return Skipped("no pointer the body reads or writes at base + i in straight-line code", {})
    sizes = {p[3] for p in plans.values()}
    size = max(sizes, key=lambda z: sum(1 for p in plans.values() if p[3] == z))
    plans = {k: v for k, v in plans.items() if v[3] == size}
    spans = tuple((ir.span_of(u[0]).start, ir.span_of(u[0]).end, name, u[2])
                  for name, uses in found.items() if name in plans for u in uses)
    return _VectorPlan(plans, 16 // size, loop.var, var_type,
                       (ir.span_of(body).start, ir.span_of(body).end), spans)


def _compact(ir: KernelIR, nid: int) -> str:
    """A node's code without comments and without the whitespace C does not need (a space
    stays between two words: `(long long)i`), so that an offset read from it is code."""
    flat = re.sub(r"\s+", " ", code_view(text(ir, nid))).strip()
    return re.sub(r"(?<=\W) | (?=\W)", "", flat)


def _warp_uniform(unit, loop: StrideLoop, access: int) -> bool:  # noqa: ANN001
    """Whether the pointer and the offset of `access` (`p[off + i]`) are the same for the 32
    threads of a warp."""
    from passes.cuda._tree import UNIFORM, Scope  # noqa: PLC0415

    ir = unit.ir
    scope = Scope(ir)
    scope.enter(unit.block_helpers()[loop.kernel])
    pointer, idx = children(ir, access)[0], subscript(ir, access)[1][0]
    parts = [pointer]
    if flat_code(ir, idx) != loop.var:
        parts += [c for c in children(ir, idx) if ir.grammar_type_of(c) not in ("+", "comment")
                  and flat_code(ir, c) != loop.var]
    return all(scope.threads(c) == UNIFORM or scope.threads(c) % 32 == 0 for c in parts)


_ALIGNED = re.compile(r"reinterpret_cast\s*<\s*(?:unsigned\s+long\s+long|uintptr_t|size_t)\s*>"
                      r"[^;{]*(?:&\s*(?:15|0xf|0xF)|%\s*16)[uUlL]*\b")


def _under_alignment_check(ir: KernelIR, node: int) -> bool:
    """Whether the loop `node` sits in a branch that tests addresses for 16-byte alignment."""

    for a in ir.ancestors(node):
        if ir.grammar_type_of(a) == "if_statement" and _ALIGNED.search(text(ir, if_parts(ir, a)[0])):
            return True
    return False


def _cond_text(ir: KernelIR, node: int) -> str:

    cond = for_parts(ir, node)[1]
    return text(ir, cond) if cond is not None else ""


def _straight(ir: KernelIR, nid: int, body: int) -> bool:
    """Whether `nid` runs every time the body does (no branch, loop or short-circuit between)."""
    for a in ir.ancestors(nid):
        if a == body:
            return True
        gtype = ir.grammar_type_of(a)
        if gtype in ("if_statement", "conditional_expression", "for_statement", "while_statement",
                     "do_statement", "switch_statement") or \
                (gtype == "binary_expression" and ir.name_of(a) in ("&&", "||")):
            return False
    return False


def _vector_loop_text(ir: KernelIR, loop: StrideLoop, plan: _VectorPlan, ahead: int = 1) -> str:
    """The vectorized loop, its scalar tail and the aligned-or-not branch (see the module), each
    thread loading `ahead` vectors before it runs the first."""
    data = ir.source
    lanes, var = plan.lanes, plan.var
    names = {p: f"kl_vec{i}" for i, p in enumerate(sorted(plan.pointers))}
    body_text = data[plan.body[0]:plan.body[1]]
    edits = []
    for start, end, name, written in plan.spans:
        elem = plan.pointers[name][1] if written else f"const {plan.pointers[name][1]}"
        cast = f"reinterpret_cast<{elem}*>(&{names[name]})[kl_lane]"
        edits.append((start - plan.body[0], end - plan.body[0], cast))
    lane_body = body_text
    for start, end, new in sorted(edits, reverse=True):
        lane_body = lane_body[:start] + new.encode() + lane_body[end:]
    base = lambda p: plan.pointers[p][0]  # noqa: E731
    check = " | ".join(f"reinterpret_cast<unsigned long long>(&{p}[{base(p)}])"
                       for p in sorted(plan.pointers))
    original = data[loop.span[0]:loop.span[1]].decode("utf-8")  # spans are byte offsets
    indent = data[data.rfind(b"\n", 0, loop.span[0]) + 1:loop.span[0]].decode("utf-8")
    indent = indent if not indent.strip() else ""
    tail_head = f"for ({plan.var_type} {var} = kl_whole * {lanes} + ({loop.start}); {var} < {loop.bound}; {var} += {loop.step})"

    def vector(p: str, j: str) -> str:
        return f"*reinterpret_cast<const uint4*>(&{p}[{base(p)} + {j} * {lanes}])"

    def chunk(j: str, suffix: str, pad: str) -> str:
        """The lanes of vector `j` run the body, then the written vectors are stored."""
        body = lane_body.decode("utf-8")
        for p in sorted(plan.pointers, reverse=True):
            body = body.replace(f"&{names[p]})", f"&{names[p]}{suffix})")
        stores = "".join(f"{pad}*reinterpret_cast<uint4*>(&{p}[{base(p)} + {j} * {lanes}]) = "
                         f"{names[p]}{suffix};\n" for p in sorted(plan.pointers) if plan.pointers[p][2])
        return (f"#pragma unroll\n"
                f"{pad}for (int kl_lane = 0; kl_lane < {lanes}; ++kl_lane) {{\n"
                f"{pad}  const {plan.var_type} {var} = {j} * {lanes} + kl_lane;\n"
                f"{pad}  {body}\n"
                f"{pad}}}\n{stores}")

    # each thread loads its next vectors with the current ones (`ahead` in flight), then runs
    # them in order: its elements are visited in the order the loop as written visits them
    js = ["kl_j"] + [f"kl_j{k}" for k in range(1, ahead)]
    head = "".join(f"      const auto {js[k]} = kl_j + {k} * ({loop.step});\n" for k in range(1, ahead))
    loads = ""
    for k, j in enumerate(js):
        suffix = f"_{k}" if k else ""
        for p in sorted(plan.pointers):
            if plan.pointers[p][2]:
                loads += f"      uint4 {names[p]}{suffix};\n"
            elif k == 0:
                loads += f"      const uint4 {names[p]} = {vector(p, j)};\n"
            else:
                loads += (f"      const uint4 {names[p]}{suffix} = {j} < kl_whole ? {vector(p, j)} : "
                          f"make_uint4(0u, 0u, 0u, 0u);\n")
    runs = chunk("kl_j", "", "      ")
    for k in range(1, ahead):
        runs += f"      if ({js[k]} < kl_whole) {{\n" + chunk(js[k], f"_{k}", "        ") + "      }\n"
    step = loop.step if ahead == 1 else f"{ahead} * ({loop.step})"
    text_ = (f"{{ // 16-byte accesses where every vectorized address is aligned, else the loop as written\n"
             f"  if ((({check}) & 15ull) == 0) {{\n"
             f"    const auto kl_whole = ({loop.bound}) / {lanes};\n"
             f"    for (auto kl_j = ({loop.start}); kl_j < kl_whole; kl_j += {step}) {{\n"
             f"{head}{loads}{runs}"
             f"    }}\n"
             f"    {tail_head} {body_text.decode('utf-8')}\n"
             f"  }} else {{\n"
             f"    {original}\n"
             f"  }}\n"
             f"}}")
    return text_.replace("\n", "\n" + indent)


@dataclass(frozen=True, slots=True)
class VectorFallback:
    """A stride loop run 16 bytes at a time where its addresses are aligned, with the loop as
    written as the fallback: the statement at `span` (the check, or the block holding only it)
    and the fallback loop's text (`loop`)."""

    span: tuple[int, int]
    loop: str


def vector_fallbacks(ir: KernelIR) -> list[VectorFallback]:
    """Loops vectorized with a scalar fallback, by role: `if (C) { ...; T } else L` where `C`
    tests addresses for 16-byte alignment, `L` (alone, or alone in a block) is a stride loop and
    the last statement of the vector side, `T`, is the scalar tail: a loop with `L`'s condition,
    step and body (the form `vectorize-global` writes; a hand-written one has the same parts).
    Both sides compute the same result (up to the order of a fold), so `L` alone stands for the
    statement; where the check is the only statement of a block, the block is the statement."""
    loops = {lp.span: lp for lp in stride_loops(Unit(ir))}
    out = []
    for node in ir.walk():
        if ir.grammar_type_of(node.id) != "if_statement":
            continue
        cond, then, alt = if_parts(ir, node.id)
        if alt is None or not _ALIGNED.search(text(ir, cond)):
            continue
        fallback = _only_loop(ir, alt)
        tail = _statements(ir, then)[-1:] if ir.grammar_type_of(then) == "compound_statement" else []
        if fallback is None or not tail or ir.grammar_type_of(tail[0]) != "for_statement":
            continue
        lp = loops.get((ir.span_of(fallback).start, ir.span_of(fallback).end))
        if lp is None or not _same_loop(ir, tail[0], fallback):
            continue
        span = (node.span.start, node.span.end)
        parent = ir.parent_of(node.id)
        if parent is not None and ir.grammar_type_of(parent) == "compound_statement" and \
                _statements(ir, parent) == [node.id] and \
                ir.grammar_type_of(ir.parent_of(parent) or parent) != "function_definition":
            span = (ir.span_of(parent).start, ir.span_of(parent).end)
        out.append(VectorFallback(span, text(ir, fallback)))
    return out


def _statements(ir: KernelIR, block: int) -> list[int]:
    return [c for c in children(ir, block) if ir.grammar_type_of(c) not in ("comment", "{", "}")]


def _only_loop(ir: KernelIR, stmt: int) -> int | None:
    """`stmt` where it is a `for` loop, or the one statement of a block that is one."""
    if ir.grammar_type_of(stmt) == "compound_statement":
        inner = _statements(ir, stmt)
        stmt = inner[0] if len(inner) == 1 else stmt
    return stmt if ir.grammar_type_of(stmt) == "for_statement" else None


def _same_loop(ir: KernelIR, tail: int, loop: int) -> bool:
    """Whether `tail` runs `loop`'s body under its condition and update (its start may differ:
    it begins after the last whole vector)."""
    parts_t, parts_l = for_parts(ir, tail), for_parts(ir, loop)
    same = lambda a, b: (a is None and b is None) or (a is not None and b is not None and  # noqa: E731
                                                      _compact(ir, a) == _compact(ir, b))
    return same(parts_t[1], parts_l[1]) and same(parts_t[2], parts_l[2]) and \
        _compact(ir, loop_body(ir, tail)) == _compact(ir, loop_body(ir, loop))
