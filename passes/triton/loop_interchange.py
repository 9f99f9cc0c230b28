"""A runtime dot loop under statically unrolled loops moved outside them.

An implicit-GEMM kernel (a convolution's filter taps, any reduction split into a static part
and a runtime part) is commonly written with the unrolled loops outside:

    for r in tl.static_range(R):
        for s in tl.static_range(S):
            PRE(r, s)                       # names assigned from r, s and values made before
            for c0 in range(lo, hi, step):  # a runtime loop accumulating a tl.dot
                BODY(r, s, c0)

Triton software-pipelines runtime loops only, so here each of the R*S unrolled copies of the
`c0` loop is pipelined on its own: a copy of few trips is mostly prologue and drain, and
nothing overlaps one tap's loads with another's products. `loop-interchange` writes

    for c0 in range(lo, hi, step):
        for r in tl.static_range(R):
            for s in tl.static_range(S):
                PRE(r, s)
                BODY(r, s, c0)

one runtime loop whose trip holds every tap's loads and products, which the pipeline overlaps
from trip to trip. The accumulators then receive the same products in another order (fp32
sums; the gate's tolerance judges the rounding).

The nest is read by role: a `range` / `tl.range` loop that reduces with `tl.dot` (no runtime
loop inside it does) written as a statement of a `tl.static_range` loop's body, with the static
loops above it that hold it as their last statement (outermost first). The rewrite refuses,
with the reason, where it would not keep the program's meaning: the runtime loop's bounds read
a name the nest assigns (a tap variable, a PRE name); a PRE statement does more than assign
names from the loop variables, values made before the nest and earlier PRE names (a store, an
effect, a value carried from an earlier trip); something follows the runtime loop in its static
loop; the runtime loop carries state from trip to trip other than accumulators that only add
`tl.dot` products (a pointer advanced with `p += ...`, a name its next trip reads before
assigning it), writes memory, or leaves early; a name the nest assigns (a loop variable, a PRE
or loop name other than an accumulator) is read after the nest. Positions: `ast`'s (lines
1-indexed, byte columns 0-indexed); the edit is one byte span, the nest's whole lines.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, bound_names, callee, names_in
from passes.triton.launch import STATIC_RANGES
from passes.triton.roles import _has_dot, accumulators
from passes.triton.split_k import RANGES, _assigned, _linear_update

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

# Calls that write memory or act outside the values they return (by the callee's last name).
_EFFECTS = frozenset({"store", "debug_barrier", "device_print", "device_assert", "static_print",
                      "static_assert", "inline_asm_elementwise", "print"})
_PURE_BUILTINS = frozenset({"range", "min", "max", "abs", "int", "float", "bool", "len"})


@dataclass(frozen=True, slots=True)
class Nest:
    """A runtime dot loop `loop` with the static loops `statics` above it (outermost first),
    each holding the next (the last, `loop`) as the last statement of its body, except that
    `loop` may be followed by statements in the innermost (a refusal: `refusal`)."""

    statics: tuple[ast.For, ...]
    loop: ast.For


def _static(node: ast.AST) -> bool:
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Call) \
        and callee(node.iter) in STATIC_RANGES and isinstance(node.target, ast.Name)


def _runtime(node: ast.AST) -> bool:
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Call) \
        and callee(node.iter) in RANGES and isinstance(node.target, ast.Name)


def nests(mod: PyModule, kernel: ast.FunctionDef) -> list[Nest]:
    """Each runtime (`range` / `tl.range`) loop of `kernel` that reduces with `tl.dot`, holds
    no runtime loop that does, and is a statement of a `tl.static_range` loop's body, with the
    static loops above it (`Nest`), in source order."""
    out = []
    for loop in ast.walk(kernel):
        if not _runtime(loop) or not _has_dot(loop) or any(
                inner is not loop and isinstance(inner, (ast.For, ast.While))
                and not _static(inner) and _has_dot(inner) for inner in ast.walk(loop)):
            continue
        parent = mod.parents.get(loop)
        if not _static(parent) or not any(s is loop for s in parent.body):
            continue
        statics = [parent]
        while True:
            up = mod.parents.get(statics[0])
            if not _static(up) or up.body[-1] is not statics[0]:
                break
            statics.insert(0, up)
        out.append(Nest(tuple(statics), loop))
    return sorted(out, key=lambda n: (n.loop.lineno, n.loop.col_offset))


# -- reading names ---------------------------------------------------------------------------
def _reads(stmt: ast.AST) -> set[str]:
    """The names a simple statement reads (an augmented assignment reads its target too)."""
    out = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        out.add(stmt.target.id)
    return out


def _exposed(stmts: list[ast.stmt], tracked: set[str],
             defined: set[str]) -> tuple[set[str], set[str]]:
    """(the names of `tracked` that `stmts` may read before assigning them, given the names
    `defined` on entry; the names assigned on every path through them). A loop's body may run
    no trip, a branch's arms count where both assign; other compound statements count every
    name they mention as read. `persist.carried_names` asks the same of a tile's body but takes
    what an inner loop assigns as assigned after it; here nothing a loop assigns is, since an
    interchange must keep each name's value whatever the loops' trip counts, none included."""
    found: set[str] = set()
    defined = set(defined)
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            found |= (names_in(stmt.test) & tracked) - defined
            then, after_then = _exposed(stmt.body, tracked, defined)
            other, after_other = _exposed(stmt.orelse, tracked, defined)
            found |= then | other
            defined = after_then & after_other
        elif isinstance(stmt, (ast.For, ast.While)):
            head = stmt.iter if isinstance(stmt, ast.For) else stmt.test
            found |= (names_in(head) & tracked) - defined
            inner = defined | (bound_names(stmt) if isinstance(stmt, ast.For) else set())
            found |= _exposed(stmt.body + stmt.orelse, tracked, inner)[0]
        elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            found |= (_reads(stmt) & tracked) - defined
            defined |= bound_names(stmt)
        else:
            found |= (names_in(stmt) & tracked) - defined
    return found, defined


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    return [b for b in (getattr(node, a, None) for a in ("body", "orelse", "finalbody"))
            if isinstance(b, list)]


def _live_after(mod: PyModule, stmt: ast.stmt, kernel: ast.FunctionDef,
                tracked: set[str]) -> set[str]:
    """The names of `tracked` that a statement of `kernel` run after `stmt` may read before
    assigning them: the rest of each enclosing block, and the next trip of each enclosing loop."""
    found: set[str] = set()
    defined: set[str] = set()
    cur: ast.AST = stmt
    while cur is not kernel:
        parent = mod.parents[cur]
        block = next((b for b in _blocks(parent) if any(s is cur for s in b)), [])
        at = next((i for i, s in enumerate(block) if s is cur), len(block))
        got, defined = _exposed(block[at + 1:], tracked, defined)
        found |= got
        if isinstance(parent, (ast.For, ast.While)):
            found |= _exposed([parent], tracked, defined)[0]
        cur = parent
    return found


def _effect(mod: PyModule, node: ast.AST, seen: frozenset[str] = frozenset()) -> str | None:
    """The first call under `node` that may write memory or act beyond its value (a store, an
    atomic, a print or barrier, a function the module does not show as a jit function free of
    such calls), as written; None where there is none."""
    jits = {f.name: f for f in mod.kernels()}
    for call in sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=mod.start):
        name = callee(call)
        last = name.split(".")[-1]
        if last in _EFFECTS or last.startswith("atomic_"):
            return name
        if isinstance(call.func, ast.Name) and name not in _PURE_BUILTINS:
            if name not in jits:
                return name
            if name not in seen:
                inner = _effect(mod, jits[name], seen | {name})
                if inner is not None:
                    return f"{name} (which calls {inner})"
        elif not name:
            return ast.unparse(call.func)
    return None


# -- legality --------------------------------------------------------------------------------
def refusal(mod: PyModule, kernel: ast.FunctionDef, nest: Nest) -> str | None:
    """Why moving `nest.loop` outside `nest.statics` would not keep `kernel`'s meaning (module
    docstring), or why the text cannot be moved line by line; None where it would."""
    loop, statics, outer = nest.loop, nest.statics, nest.statics[0]
    var = loop.target.id
    if statics[-1].body[-1] is not loop:
        return (f"statements follow the loop over `{var}` in the loop over "
                f"`{statics[-1].target.id}`: they would run once a trip of `{var}`")
    for node in ast.walk(outer):
        if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
            return f"the loop nest leaves early (line {node.lineno})"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.end_lineno != node.lineno:
            return f"the loop nest holds a string of several lines (line {node.lineno})"
    if any(x.orelse for x in (*statics, loop)):
        return "a loop of the nest has an `else` clause"
    assigned = _assigned([outer])
    bounds = (names_in(loop.iter) & assigned) - {var}
    if bounds:
        return (f"the bounds of the loop over `{var}` read {_listed(bounds)}, which the loop nest "
                "assigns: outermost they would be read before it")
    effect = _effect(mod, outer)
    if effect is not None:
        return (f"the loop nest calls `{effect}`, which may write memory or act: its effects "
                "would run in another order")
    targets = {s.target.id for s in statics}
    body = _assigned(loop.body)
    defined: set[str] = set()
    pre_names: set[str] = set()
    for level in statics:
        early = (names_in(level.iter) & assigned) - defined
        if early:
            return (f"the range of the loop over `{level.target.id}` reads {_listed(early)}, "
                    "which the loop nest assigns")
        defined.add(level.target.id)
        for stmt in level.body[:-1]:  # the loop below is last (checked above, or by `nests`)
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or not all(
                    isinstance(n, (ast.Name, ast.Tuple, ast.List)) for t in _targets(stmt)
                    for n in ast.walk(t) if not isinstance(n, ast.expr_context)):
                return (f"line {stmt.lineno} in the loop over `{level.target.id}` does more than "
                        "assign names: it would run once a trip of the loop over "
                        f"`{var}`")
            carried = (_reads(stmt) & assigned) - defined
            if carried:
                return (f"line {stmt.lineno} reads {_listed(carried)} before its trip assigns "
                        "it: a value carried from an earlier trip")
            names = bound_names(stmt)
            if names & (targets | body | {var}):
                return (f"line {stmt.lineno} assigns {_listed(names & (targets | body | {var}))}, "
                        "which a loop of the nest assigns too")
            defined |= names
            pre_names |= names
    accs = accumulators(loop) - pre_names - targets
    if not accs:
        return f"the loop over `{var}` adds its tl.dot products into no name"
    for acc in sorted(accs):
        writes = [s for s in ast.walk(loop) if isinstance(s, (ast.Assign, ast.AugAssign,
                                                              ast.AnnAssign))
                  and acc in bound_names(s)]
        reads = [n for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == acc
                 and isinstance(n.ctx, ast.Load)]
        if not all(_linear_update(s, acc) for s in writes) \
                or len(reads) > sum(1 for s in writes if isinstance(s, ast.Assign)):
            return (f"the loop over `{var}` does more with `{acc}` than add products into it: "
                    "its value would depend on the order of the trips")
    carried = _exposed(loop.body, body - accs - {var}, {var})[0]
    if carried:
        return (f"the loop over `{var}` carries {_listed(carried)} from trip to trip (read before "
                "its trip assigns it): outermost, its trips would meet the values in another order")
    live = _live_after(mod, outer, kernel, assigned - accs)
    if live:
        return (f"{_listed(live)}, which the loop nest assigns, is read after it: the nest in "
                "another order leaves another value")
    for x in (*statics, loop):
        if x.body[0].lineno <= x.iter.end_lineno:
            return f"the loop on line {x.lineno} has its body on its header's line"
    return None


def _targets(stmt: ast.stmt) -> list[ast.expr]:
    return list(stmt.targets) if isinstance(stmt, ast.Assign) else [stmt.target]


def _listed(names: set[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(names))


# -- the rewrite ------------------------------------------------------------------------------
def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def interchanged(mod: PyModule, nest: Nest) -> ByteEdit | str:
    """The edit that writes `nest`'s lines with its runtime loop's header first (at the
    outermost static loop's indentation) and every other line that is not the runtime loop's
    body indented by one of the runtime loop's steps (its body's lines stay where they are:
    they end up as deep as before); or why the lines cannot be moved so."""
    outer, loop = nest.statics[0], nest.loop
    start, end = mod.stmt_span(outer)
    lines = [x for x in re.split(r"(?<=\n)", mod.source[start:end].decode("utf-8")) if x]
    first = outer.lineno

    def line(no: int) -> str:
        return lines[no - first]

    own, deeper = _indent(line(loop.lineno)), _indent(line(loop.body[0].lineno))
    if len(deeper) <= len(own) or not deeper.startswith(own):
        return f"the body of the loop on line {loop.lineno} is not indented under it"
    step = deeper[len(own):]
    top = _indent(line(first))
    header, rest = [], []
    for no in range(first, first + len(lines)):
        text = line(no)
        if loop.lineno <= no < loop.body[0].lineno:
            header.append(top + text[len(own):] if text.startswith(own) else text)
        elif no >= loop.body[0].lineno or not text.strip():
            rest.append(text)
        else:
            rest.append(step + text)
    return ByteEdit(start, end, "".join(header + rest))


@dataclass(frozen=True, slots=True)
class LoopInterchange(Pass):
    """A runtime `tl.dot` loop under `tl.static_range` loops -> outside them, the static loops
    and their assignments inside its body. Optimization only: a de-optimization would put a
    reduction loop inside unrolled ones, a style of writing, not a step an expert's kernel
    records."""

    name: ClassVar[str] = "loop-interchange"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("a runtime tl.dot loop under tl.static_range loops moved outside "
                              "them, so one pipelined loop holds every unrolled trip's loads")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    languages: ClassVar[tuple[str, ...]] = ("triton",)
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # Offered without a card wherever a runtime dot loop sits under unrolled loops. Where that
    # loop runs few trips, each unrolled copy of it is mostly pipeline prologue and drain, and
    # outermost it overlaps one trip's loads with the previous trip's products: worth some
    # tens of percent then. Where it runs many trips its copies already pipeline, and the
    # interchanged trip, every unrolled load at once, needs more registers and stage buffers,
    # which can cost the largest tiles. A modest prior, a little above a sweep's, for a step
    # that pays on some shapes and not others.
    prior: ClassVar[float] = 1.1

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            for nest in nests(mod, kernel):
                out.append(make_site(self.name, ir, index, mod.stmt_span(nest.statics[0]), False,
                                     {"kernel": kernel.name, "line": nest.loop.lineno,
                                      "static_loops": len(nest.statics)},
                                     mod.span(nest.loop.iter)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("loop-interchange only moves a runtime loop outside unrolled ones; it "
                       "writes no nest", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        found = next(((k, n) for k in mod.kernels() if k.name == site.detail.get("kernel")
                      for n in nests(mod, k) if mod.stmt_span(n.statics[0]) == tuple(site.span)
                      and n.loop.lineno == site.detail.get("line")),
                     None)
        if found is None:
            return Skipped("no runtime dot loop under static loops at the site",
                           {"site": site.anchor})
        kernel, nest = found
        why = refusal(mod, kernel, nest)
        edit = interchanged(mod, nest) if why is None else why
        if isinstance(edit, str):
            return Skipped(edit, {"kernel": kernel.name, "line": nest.loop.lineno})
        return finish(ir, site, [edit])
