"""Masking passes of Triton kernels: the unmasked even-K fast path and causal block skipping.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import (ByteEdit, finish, indent_of, line_end, line_start, make_site,
                            restore_recorded)
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, fresh_name, is_cdiv, literal_int, names_in
from passes.triton.heavy_first import heavy_first
from passes.triton.launch import TRITON, comment_above, holders, kernel_tiles
from passes.triton.roles import ARANGE, PID_CALLS, assignments, pid_names, reached

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

LOADS = frozenset({"tl.load", "triton.language.load"})


def _constexprs(kernel: ast.FunctionDef) -> set[str]:
    return {a.arg for a in kernel.args.args
            if a.annotation is not None and "constexpr" in ast.dump(a.annotation)}


def _loads(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and callee(n) in LOADS]


def _masked(call: ast.Call) -> bool:
    return any(k.arg == "mask" for k in call.keywords) or len(call.args) > 1


def _mask(call: ast.Call) -> ast.AST | None:
    kw = next((k.value for k in call.keywords if k.arg == "mask"), None)
    return kw if kw is not None else (call.args[1] if len(call.args) > 1 else None)


def _block_text(mod: PyModule, stmts: list[ast.stmt], *, comment: bool = False
                ) -> tuple[int, int, str]:
    """(start, end, text) of the whole lines of `stmts`; with `comment`, from the comment lines
    directly above the first statement."""
    start = line_start(mod.source, mod.start(stmts[0]))
    if comment:
        start = comment_above(mod.source, start)
    end = line_end(mod.source, mod.end(stmts[-1]) - 1)
    return start, end, mod.source[start:end].decode("utf-8")


def _reindent(text: str, old: str, new: str) -> str:
    return "".join(new + line[len(old):] if line.startswith(old) else line
                   for line in text.splitlines(keepends=True))


def _tile_value(mod: PyModule, name: str) -> int | None:
    """The first literal value bound to tile constexpr `name` (config, launch or default)."""
    for holder in holders(mod):
        call = holder.call
        if holder.kind == "config" and call.args and isinstance(call.args[0], ast.Dict):
            for key, val in zip(call.args[0].keys, call.args[0].values):
                if isinstance(key, ast.Constant) and key.value == name and literal_int(val):
                    return literal_int(val)
        for kw in call.keywords:
            if kw.arg == name and literal_int(kw.value):
                return literal_int(kw.value)
    return None


@dataclass(frozen=True, slots=True)
class EvenKFastPath(Pass):
    """Unmasked loads when K is a multiple of BLOCK_K (`if EVEN_K:` fast path) <-> always
    masked loads."""

    code: str = ""
    """The exact `if EVEN_K: ... else: ...` statement to restore (recorded by a
    de-optimization); empty: build it from the masked loads."""
    after: str = ""
    """The masked statements the de-optimization left in its place."""

    name: ClassVar[str] = "even-k-fast-path"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "mask-free K-loop loads guarded by K % BLOCK_K == 0 <-> masked loads"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("even-k",)
    conflicts: ClassVar[tuple[str, ...]] = ()
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("K % BLOCK_K == 0 or guarded",)

    def _fast_paths(self, mod: PyModule) -> list[tuple[ast.FunctionDef, ast.If]]:
        """`if EVEN_K:` (a constexpr flag named for divisibility) in a kernel loop whose two
        branches are the same statements except that the else-branch masks its loads."""
        out = []
        for kernel in mod.kernels():
            flags = {f for f in _constexprs(kernel) if _DIVISIBILITY.search(f.upper())}
            for node in ast.walk(kernel):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                        and node.test.id in flags and node.orelse
                        and mod.enclosing(node, ast.For) is not None):
                    continue
                fast, slow = _loads(ast.Module(node.body, [])), _loads(ast.Module(node.orelse, []))
                if (fast and slow and not any(map(_masked, fast)) and all(map(_masked, slow))
                        and _unmasked_dump(node.body) == _unmasked_dump(node.orelse)):
                    out.append((kernel, node))
        return out

    def _masked_runs(self, mod: PyModule) -> list[tuple[ast.FunctionDef, ast.For, list[ast.stmt]]]:
        """Runs of `x = tl.load(..., mask=<K-only mask>)` statements directly in a kernel loop."""
        out = []
        for kernel in mod.kernels():
            for loop in (n for n in ast.walk(kernel) if isinstance(n, ast.For)):
                loop_var = loop.target.id if isinstance(loop.target, ast.Name) else ""
                run: list[ast.stmt] = []
                for stmt in [*loop.body, None]:
                    ok = (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                          and callee(stmt.value) in LOADS and _masked(stmt.value)
                          and _k_only(_mask(stmt.value), loop_var))
                    if ok:
                        run.append(stmt)
                    elif run:
                        out.append((kernel, loop, run))
                        run = []
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel, node in self._fast_paths(mod):
            start, end, _ = _block_text(mod, [node])
            out.append(make_site(self.name, ir, index, (start, end), True,
                                 {"kernel": kernel.name, "flag": node.test.id}, mod.span(node)))
        for kernel, _loop, run in self._masked_runs(mod):
            start, end, _ = _block_text(mod, run)
            out.append(make_site(self.name, ir, index, (start, end), False,
                                 {"kernel": kernel.name, "loads": len(run)},
                                 (mod.start(run[0]), mod.end(run[-1]))))
        for kernel in mod.kernels():  # a kernel keeping its flag: a recorded path can return
            if any(_DIVISIBILITY.search(f.upper()) for f in _constexprs(kernel)):
                out.append(make_site(self.name, ir, index, mod.stmt_span(kernel), False,
                                     {"kernel": kernel.name, "form": "recorded"}, mod.span(kernel)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        for _kernel, node in self._fast_paths(mod):
            start, end, text = _block_text(mod, [node])
            if (start, end) != tuple(site.span):
                continue
            _, _, slow = _block_text(mod, node.orelse)
            outer = indent_of(mod.source, mod.start(node))
            inner = indent_of(mod.source, mod.start(node.orelse[0]))
            after = _reindent(slow, inner, outer)
            return finish(ir, site, [ByteEdit(start, end, after)],
                          options={"code": text, "after": after})
        return Skipped("no even-K fast path at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if self.code and self.after:
            done = restore_recorded(ir, site, self.code, self.after)
            if done is not None:
                return done
        for kernel, loop, run in self._masked_runs(mod):
            start, end, text = _block_text(mod, run)
            if (start, end) != tuple(site.span):
                continue
            if self.code:
                return finish(ir, site, [ByteEdit(start, end, self.code)])
            flags = [f for f in _constexprs(kernel) if "EVEN" in f.upper()]
            tiles = kernel_tiles(mod).get(kernel.name, {})
            block = next((n for n in names_in(_mask(run[0].value)) if n in tiles), None)
            facts = {"guarded": bool(flags)}
            if block is not None and _tile_value(mod, block) is not None:
                facts["BLOCK_K"] = _tile_value(mod, block)
            results, skip = self.check(ctx, facts)
            if skip:
                return skip
            if not flags and results[0].value is not True:
                return Skipped("dropping the masks needs K % BLOCK_K == 0 to be known true",
                               dict(results[0].facts) | {"missing": list(results[0].missing)})
            indent = indent_of(mod.source, start)
            fast = "".join(
                f"{indent}{mod.text(s.targets[0])} = tl.load({mod.text(s.value.args[0])})\n"
                for s in run)
            if flags:
                body = _reindent(text, indent, indent + "    ")
                new = (f"{indent}if {flags[0]}:\n{_reindent(fast, indent, indent + '    ')}"
                       f"{indent}else:\n{body}")
            else:
                new = fast
            return finish(ir, site, [ByteEdit(start, end, new)], preconditions=results)
        return Skipped("no masked K-loop loads at the site", {"site": site.anchor})


_DIVISIBILITY = re.compile(r"EVEN|DIVISIBLE|NO_MASK|UNMASKED")


def _unmasked_dump(stmts: list[ast.stmt]) -> str:
    """The statements' AST with `mask=` / `other=` of their loads dropped."""
    import copy  # noqa: PLC0415

    tree = copy.deepcopy(ast.Module(body=stmts, type_ignores=[]))
    for call in _loads(tree):
        call.keywords = [k for k in call.keywords if k.arg not in ("mask", "other")]
        call.args = call.args[:1]
    return ast.dump(tree)


def _k_only(mask: ast.AST | None, loop_var: str) -> bool:
    """A mask that bounds only the K dimension (every name K-ish or the loop variable)."""
    if mask is None:
        return False
    names = names_in(mask) - {"tl", loop_var}
    return bool(names) and all("k" in n.lower() for n in names)


# ---------------------------------------------------------------------------------------------
def _causal(name: str) -> bool:
    return "causal" in name.lower()


RANGE_CALLS = frozenset({"range", "tl.range", "tl.static_range", "triton.language.range"})
MINIMUM = frozenset({"tl.minimum", "triton.language.minimum", "min"})


@dataclass(frozen=True, slots=True)
class Triangle:
    """A loop over key blocks whose body masks keys against rows (`cols <= rows`): keys past
    the last row of the program's block are masked out in every iteration that reaches them,
    so the loop may stop at `row base + row block`."""

    loop: ast.For
    bound: ast.AST
    """The node of the loop's upper bound to clamp (inside a cdiv when the loop counts blocks)."""
    limit: str
    """`row base + row block`: the first key no row of the program needs."""
    present: bool
    """The bound is already clamped by that limit."""
    text: str = ""
    """The clamped bound when it is not `tl.minimum(<bound>, <limit>)` (a counted-blocks bound
    read from a variable: the count recomputed from the clamped size)."""
    base: str = ""
    """`row base`: the program's first row."""
    terms: tuple[str, ...] = ()
    """What the bound is at most: the arguments of the minimum it is (read through a variable
    it is assigned to), else the bound itself."""


def _row_block(mod: PyModule, kernel: ast.FunctionDef, names: set[str],
               inner: set[str]) -> tuple[str, str] | None:
    """(row base text, row block text) of a row-offset name computed outside the loop as
    `base + tl.arange(0, BLOCK)` with a base read from the program id."""
    pid = pid_names(kernel)
    outer = {t.id: a.value for a in ast.walk(kernel) if isinstance(a, ast.Assign)
             for t in a.targets if isinstance(t, ast.Name) and t.id not in inner}
    for name in names:
        value = outer.get(name)
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
            continue
        terms = (value.left, value.right)
        aranges = [t for t in terms if isinstance(t, ast.Call) and callee(t) in ARANGE
                   and len(t.args) == 2 and literal_int(t.args[0]) == 0]
        bases = [t for t in terms if t not in aranges]
        if len(aranges) == 1 and len(bases) == 1 and (names_in(bases[0]) & pid or any(
                isinstance(c, ast.Call) and callee(c) in PID_CALLS for c in ast.walk(bases[0]))):
            return mod.text(bases[0]), mod.text(aranges[0].args[1])
    return None


def _conjunctive(mod: PyModule, node: ast.AST, loop: ast.For, depth: int = 3,
                 dual: bool = False) -> bool:
    """Whether `node` only ever narrows what it feeds: it reaches its statement through `&` /
    `and` alone (not under `|`, `or`, `not` or a conditional), its statement lies in the loop's
    own body (not under an `if`), and a name it is assigned to is read the same way.
    `(keys < n) & (not CAUSAL or rows >= keys)` masks nothing when the flag is off: a loop
    bound cut at the diagonal would be wrong there. With `dual`, `node` is a condition of what
    to drop (`keys > rows`): it must only ever widen what is dropped, through `|` / `or` alone
    into the condition of a `tl.where` whose first value is the dropped one
    (`tl.where(future, -inf, s)`); a load's mask keeps what it holds, so it cannot take one.
    A negation on the way swaps the two readings (`tl.where(~(keys <= rows), -inf, s)`)."""
    joins = (ast.BitOr, ast.Or) if dual else (ast.BitAnd, ast.And)
    cur = node
    parent = mod.parents.get(cur)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.Invert, ast.Not)):
            # `~keep` is a condition of what to drop, `~drop` one of what to keep (De Morgan:
            # under the negation a conjunction of keeps reads as a disjunction of drops)
            dual = not dual
            joins = (ast.BitOr, ast.Or) if dual else (ast.BitAnd, ast.And)
            cur, parent = parent, mod.parents.get(parent)
            continue
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, joins[0]) \
                or isinstance(parent, ast.BoolOp) and isinstance(parent.op, joins[1]) \
                or isinstance(parent, ast.Subscript) and parent.value is cur:
            cur, parent = parent, mod.parents.get(parent)
            continue
        if isinstance(parent, ast.Call) and callee(parent) in WHERE and cur in parent.args[:1]:
            if not _drops(mod, parent, loop, when=dual):
                return False  # `tl.where(keys <= rows, -inf, s)` keeps the other side
            break  # the condition of a `tl.where` that drops what the mask excludes
        if isinstance(parent, ast.keyword) and parent.arg == "mask" and not dual:
            break  # a load's or a store's mask
        return False
    stmt = parent
    while stmt is not None and stmt is not loop:  # `if CAUSAL:` around the mask: a flag again
        if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.Try)):
            return False
        stmt = mod.parents.get(stmt)
    if isinstance(parent, ast.Assign) and cur is parent.value and depth > 0:
        names = {t.id for t in parent.targets if isinstance(t, ast.Name)}
        uses = [n for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id in names
                and isinstance(n.ctx, ast.Load)]
        return all(_conjunctive(mod, use, loop, depth - 1, dual) for use in uses)
    return True


WHERE = frozenset({"tl.where", "triton.language.where"})


def neg_inf(node: ast.AST) -> bool:
    """Exactly -inf: `float("-inf")`, `-float("inf")`, `-math.inf`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if isinstance(inner, ast.Attribute) and inner.attr == "inf":
            return True
        return isinstance(inner, ast.Call) and callee(inner) == "float" and len(inner.args) == 1 \
            and isinstance(inner.args[0], ast.Constant) \
            and str(inner.args[0].value).lower() in ("inf", "infinity")
    return isinstance(node, ast.Call) and callee(node) == "float" and len(node.args) == 1 \
        and isinstance(node.args[0], ast.Constant) \
        and str(node.args[0].value).lower() in ("-inf", "-infinity")


def strong_drop(node: ast.AST) -> bool:
    """-inf (`neg_inf`) or a literal at or below -1e4: a score no softmax weight survives."""
    if neg_inf(node):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        return isinstance(inner, ast.Constant) and isinstance(inner.value, (int, float)) \
            and not isinstance(inner.value, bool) and inner.value >= 1e4
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
        and not isinstance(node.value, bool) and node.value <= -1e4


SCORE_CALLS = frozenset({"tl.exp", "tl.exp2", "tl.math.exp", "tl.math.exp2", "tl.max",
                         "triton.language.exp", "triton.language.exp2", "triton.language.max"})


def _feeds_scores(mod: PyModule, node: ast.AST, loop: ast.For, depth: int = 3) -> bool:
    """Whether `node`'s value reaches an exponential or a max in the loop (inline, or through
    the names it is assigned to): there a zero is a score like any other, not a dropped one."""
    cur, parent = node, mod.parents.get(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Call) and callee(parent) in SCORE_CALLS:
            return True
        cur, parent = parent, mod.parents.get(parent)
    if isinstance(parent, ast.Assign) and cur is parent.value and depth > 0:
        names = {t.id for t in parent.targets if isinstance(t, ast.Name)}
        return any(_feeds_scores(mod, n, loop, depth - 1) for n in ast.walk(loop)
                   if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load))
    return False


def _drops(mod: PyModule, where: ast.Call, loop: ast.For, when: bool = False) -> bool:
    """Whether `tl.where(cond, a, b)` drops what `cond` is `when` for (false: `b` is the
    dropped value, true: `a` is): the dropped value removes an element's contribution and the
    other does not. -inf or a large negative score does where it goes; zero does where the
    value is a weight or a term of a sum (not where it reaches an exponential or a max,
    `_feeds_scores`: a zeroed score still weighs exp(0 - m)). An additive mask
    `tl.where(mask, 0, -1e6)` keeps where the mask holds; `tl.where(past, -inf, s)` drops what
    `past` is true for."""
    if len(where.args) != 3:
        return False
    kept, dropped = (where.args[2], where.args[1]) if when else (where.args[1], where.args[2])
    zero = isinstance(dropped, ast.Constant) and not isinstance(dropped.value, bool) \
        and dropped.value == 0 and not _feeds_scores(mod, where, loop)
    return (strong_drop(dropped) or zero) and not strong_drop(kept)


def _ordered(cmp: ast.Compare) -> tuple[ast.expr, ast.expr, ast.cmpop] | None:
    """(smaller side, larger side, operator) of a single `<`, `<=`, `>` or `>=` comparison
    (`rows >= keys` gives keys, rows, `>=`), else None."""
    if len(cmp.ops) != 1:
        return None
    left, right, op = cmp.left, cmp.comparators[0], cmp.ops[0]
    if isinstance(op, (ast.Gt, ast.GtE)):
        return right, left, op
    return (left, right, op) if isinstance(op, (ast.Lt, ast.LtE)) else None


def _loop_names(loop: ast.For) -> set[str]:
    """The loop variable and every name the loop body assigns."""
    return {t.id for a in ast.walk(loop) if isinstance(a, ast.Assign)
            for t in a.targets if isinstance(t, ast.Name)} | {loop.target.id}


def _outside(kernel: ast.FunctionDef, inner: set[str]) -> dict[str, list[ast.AST]]:
    """The kernel's assignments of names the loop (`inner`) does not assign."""
    return {k: v for k, v in assignments(kernel).items() if k not in inner}


def _rows_of(mod: PyModule, kernel: ast.FunctionDef, expr: ast.AST,
             inner: set[str]) -> tuple[str, str] | None:
    """(row base text, row block text) when `expr` is the program's rows themselves (a name
    assigned outside the loop as `base + tl.arange(0, BLOCK)`, maybe broadcast-indexed); an
    expression of them (`rows + 64`) reaches past the block and is None."""
    row = _strip_index(expr)
    if not isinstance(row, ast.Name) or row.id in inner:
        return None
    return _row_block(mod, kernel, {row.id}, inner)


def triangles(mod: PyModule) -> list[Triangle]:
    """Loops over key blocks masked by a key <= row comparison (`Triangle`), in every kernel."""
    found: list[Triangle] = []
    for kernel in mod.kernels():
        for loop in ast.walk(kernel):
            if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
                    and isinstance(loop.iter, ast.Call) and callee(loop.iter) in RANGE_CALLS
                    and loop.iter.args):
                continue
            inner = _loop_names(loop)
            assigns = assignments(loop)
            limit = base = keys = None
            for cmp in ast.walk(loop):
                ordered = _ordered(cmp) if isinstance(cmp, ast.Compare) else None
                if ordered is None:
                    continue
                left, right, _ = ordered
                # keys (from the loop variable) on the smaller side, rows (from outside) on the
                # larger: a condition of what to keep (`keys <= rows`); the other way round, a
                # condition of what to drop (`keys > rows`), the dual of the first
                for keys_side, rows_side, dual in ((left, right, False), (right, left, True)):
                    if loop.target.id not in reached(names_in(keys_side), assigns):
                        continue
                    rows = _rows_of(mod, kernel, rows_side, inner)
                    if rows is not None and _conjunctive(mod, cmp, loop, dual=dual):
                        limit, base, keys = f"{rows[0]} + {rows[1]}", rows[0], keys_side
                        break
                if limit is not None:
                    break
            if limit is None:
                continue
            args = loop.iter.args
            bound = args[1] if len(args) >= 2 else args[0]
            replace_with = named = None

            def counts_blocks(div: ast.AST, counted: bool = True) -> bool:
                """The keys are `j * div + tl.arange(0, div)` (`j + tl.arange(0, div)` for a
                loop stepping by div): an iteration's keys start at its block."""
                return _keys_of(keys, loop, mod.text(div).replace(" ", ""),
                                _outside(kernel, inner), assignments(loop), counted=counted)

            if len(args) == 3 and literal_int(args[2]) != 1 and not counts_blocks(args[2], False):
                continue  # keys shifted from the block (`keys - 64 <= rows`) reach past it

            if isinstance(bound, ast.Name):  # `n_blocks = tl.cdiv(seq, BLOCK)` counted blocks
                outer = [a.value for a in ast.walk(kernel) if isinstance(a, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == bound.id for t in a.targets)]
                if len(outer) == 1 and is_cdiv(outer[0], 2):
                    if not counts_blocks(outer[0].args[1]):
                        continue  # blocks of another size than the count's: no clamp
                    replace_with = (f"tl.cdiv(tl.minimum({mod.text(outer[0].args[0])}, {{limit}}), "
                                    f"{mod.text(outer[0].args[1])})")
                elif len(outer) == 1 and len(args) == 3:
                    named = outer[0]  # a key bound read from a variable: a clamp wraps the name
                elif outer or len(args) < 2:
                    continue  # a count computed some other way: no clamp we can write
            elif is_cdiv(bound) and bound.args:
                if len(bound.args) != 2 or not counts_blocks(bound.args[1]):
                    continue
                bound = bound.args[0]
            clamped = named if named is not None else bound
            if is_cdiv(clamped) and clamped.args:
                clamped = clamped.args[0]
            minimum = isinstance(clamped, ast.Call) and callee(clamped) in MINIMUM
            present = minimum and any(
                limit.replace(" ", "") in mod.text(a).replace(" ", "")
                or _same_sum(a, ast.parse(limit, mode="eval").body) for a in clamped.args)
            terms = tuple(ast.unparse(a) for a in (clamped.args if minimum else [clamped]))
            found.append(Triangle(loop, bound, limit, present,
                                  replace_with.replace("{limit}", limit) if replace_with else "",
                                  base, terms))
    return found


def _sum(expr: ast.AST) -> dict[tuple[str, ...], int] | None:
    """`expr` as a polynomial (monomial of sorted factor texts -> integer coefficient) over
    +, -, * of names and integers; anything else is a factor of its own text."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) \
            and not isinstance(expr.value, bool):
        return {(): expr.value} if expr.value else {}
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _sum(expr.operand)
        return None if inner is None else {k: -v for k, v in inner.items()}
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _sum(expr.left), _sum(expr.right)
        if a is None or b is None:
            return None
        out: dict[tuple[str, ...], int] = {}
        if isinstance(expr.op, ast.Mult):
            for ka, va in a.items():
                for kb, vb in b.items():
                    key = tuple(sorted(ka + kb))
                    out[key] = out.get(key, 0) + va * vb
        else:
            sign = 1 if isinstance(expr.op, ast.Add) else -1
            out = dict(a)
            for kb, vb in b.items():
                out[kb] = out.get(kb, 0) + sign * vb
        return {k: v for k, v in out.items() if v}
    return {(ast.unparse(expr).replace(" ", ""),): 1}


def _same_sum(a: ast.AST, b: ast.AST) -> bool:
    """`(qblk + 1) * BQ` and `qblk * BQ + BQ` are one value."""
    x, y = _sum(a), _sum(b)
    return x is not None and x == y


STORES = frozenset({"tl.store", "triton.language.store"})


def _strip_index(expr: ast.AST) -> ast.AST:
    """`x[None, :]` -> `x` (broadcast indexing keeps the values)."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr


LOADS_STORES = LOADS | STORES | {"tl.advance", "triton.language.advance"}


def _poly_text(poly: dict[tuple[str, ...], int]) -> str:
    """A `_sum` polynomial written back as an expression."""
    terms = []
    for mono, coef in sorted(poly.items()):
        body = " * ".join(f if f.isidentifier() else f"({f})" for f in mono)
        if not body:
            terms.append(str(coef))
        else:
            terms.append(body if coef == 1 else f"-{body}" if coef == -1 else f"{coef} * {body}")
    return " + ".join(terms).replace("+ -", "- ") or "0"


def _moves_pointers(mod: PyModule, loop: ast.For) -> bool:
    """Whether an iteration advances state the next one addresses memory with: a pointer or
    block pointer bumped in the loop (`p += STEP`, `p = tl.advance(p, ...)`, `p = p + STEP`,
    a name assigned both before and in the loop that a load or store addresses with). A loop
    that does cannot start later without those advances."""
    inner = _loop_names(loop) | {n.target.id for n in ast.walk(loop)
                                 if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    kernel = mod.kernel_of(loop)
    if kernel is None:
        return True
    lo, hi = mod.start(loop), mod.end(loop)
    before = {a.arg for a in kernel.args.args} | {
        t.id for n in ast.walk(kernel) if isinstance(n, (ast.Assign, ast.AugAssign))
        and not lo <= mod.start(n) < hi
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)}
    carried = (inner - {loop.target.id}) & before
    for call in ast.walk(loop):
        if isinstance(call, ast.Call) and callee(call) in LOADS_STORES and call.args:
            if names_in(call.args[0]) & carried:
                return True
    return False


def _named(expr: ast.expr, names: dict[ast.AST, str]) -> ast.expr:
    """A copy of `expr` with each of the nodes `names` holds replaced by a name of its own."""
    import copy  # noqa: PLC0415

    copied = copy.deepcopy(expr)
    tags = {id(b): names[a] for a, b in zip(ast.walk(expr), ast.walk(copied)) if a in names}

    class _Swap(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            tag = tags.get(id(node))
            return ast.Name(tag, ast.Load()) if tag else self.generic_visit(node)

    return _Swap().visit(copied)


def window_start(mod: PyModule, kernel: ast.FunctionDef, loop: ast.For) -> str | None:
    """The first key block a banded mask keeps for any row of the program, for a key loop
    `range(0, bound, STEP)`: a comparison of the iteration's keys against the program's rows
    and a loop-invariant width, e.g. `rows - keys < W` (reached like a causal mask,
    `_conjunctive`; or its negation as a condition of what to drop), keeps no key below
    `row base - W + 1`, so the loop may start at `tl.maximum(row base - W + 1, 0) // STEP *
    STEP`. None where there is no such comparison, the loop does not start at a literal 0 in
    steps of its keys, its variable is read after it, or it moves pointers the skipped
    iterations would have moved (`_moves_pointers`)."""
    args = loop.iter.args
    if len(args) != 3 or literal_int(args[0]) != 0 or _moves_pointers(mod, loop):
        return None
    var = loop.target.id
    if any(isinstance(n, ast.Name) and n.id == var and mod.start(n) >= mod.end(loop)
           for n in ast.walk(kernel)):
        return None
    step = mod.text(args[2])
    inner_names = _loop_names(loop)
    outer, inner = _outside(kernel, inner_names), assignments(loop)
    for cmp in ast.walk(loop):
        ordered = _ordered(cmp) if isinstance(cmp, ast.Compare) else None
        if ordered is None:
            continue
        # a comparison of what to keep, or of what to drop (`rows - keys >= W` joined by `|`
        # into `tl.where(drop, -inf, s)`), which keeps its negation
        dual = not _conjunctive(mod, cmp, loop)
        if dual and not _conjunctive(mod, cmp, loop, dual=True):
            continue
        keys = [n for n in ast.walk(cmp) if isinstance(n, ast.expr)
                and _keys_of(n, loop, step.replace(" ", ""), outer, inner)]
        rows = [(n, r) for n in ast.walk(cmp) if isinstance(n, ast.expr)
                and (r := _rows_of(mod, kernel, n, inner_names)) is not None]
        keys = [k for k in keys if not any(k is not o and k in set(ast.walk(o)) for o in keys)]
        rows = [(n, r) for n, r in rows
                if not any(n is not o and n in set(ast.walk(o)) for o, _ in rows)]
        if len(keys) != 1 or len(rows) != 1:
            continue
        small, large, op = _ordered(_named(cmp, {keys[0]: "__keys__", rows[0][0]: "__rows__"}))
        strict = isinstance(op, (ast.Lt, ast.Gt))
        if dual:  # not (small < large) is large <= small
            small, large, strict = large, small, not strict
        a, b = _sum(small), _sum(large)
        if a is None or b is None:
            continue
        diff = dict(b)
        for k, v in a.items():
            diff[k] = diff.get(k, 0) - v
        diff = {k: v for k, v in diff.items() if v}
        # kept where keys - rows + rest > 0 (`<`) or >= 0 (`<=`)
        if diff.pop(("__keys__",), 0) != 1 or diff.pop(("__rows__",), 0) != -1:
            continue
        rest_names = {n for mono in diff for f in mono for n in names_in(ast.parse(f, mode="eval"))}
        if not diff or any("__" in f for mono in diff for f in mono) or rest_names & inner_names:
            continue
        base = rows[0][1][0]
        # strict: keys > rows - W, so keys >= rows - W + 1
        low = f"{base} - ({_poly_text(diff)})" + (" + 1" if strict else "")
        return f"tl.maximum({low}, 0) // {step} * {step}"
    return None


@dataclass(frozen=True, slots=True)
class Split:
    """How a triangle loop splits at the program's first row: key blocks that end at or
    before it are unmasked for every row of the program (`Split.loop`, the first loop, with
    those comparisons folded to true), the rest keep the original body."""

    name: str
    """The variable holding the split point."""
    assign: str
    """`name = tl.minimum(<bound>, <row base>) // STEP * STEP`: a whole number of key blocks,
    none past the loop's bound nor the program's first row."""
    loop: str
    """The first loop's text (unindented), its body folded."""
    bound: str
    """The second loop's range arguments: from the split point to the clamped bound."""


def _keys_of(expr: ast.AST, loop: ast.For, step: str, outer: dict[str, list[ast.AST]],
             inner: dict[str, list[ast.AST]], counted: bool = False) -> bool:
    """Whether `expr` holds exactly the keys of one iteration: `j + tl.arange(0, STEP)` for
    loop variable j stepping by STEP, or `j * STEP + tl.arange(0, STEP)` for a loop counting
    blocks (`counted`); directly, through a name assigned once, broadcast-indexed."""
    expr = _strip_index(expr)
    if isinstance(expr, ast.Name) and len(inner.get(expr.id, [])) == 1:
        expr = _strip_index(inner[expr.id][0])
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add)):
        return False

    def flat(node: ast.AST) -> str:
        return ast.unparse(node).replace(" ", "")

    def arange(node: ast.AST) -> bool:
        node = _strip_index(node)  # `start + offs[None, :]`
        if isinstance(node, ast.Name) and len(outer.get(node.id, [])) == 1 \
                and node.id not in inner:
            node = _strip_index(outer[node.id][0])
        return (isinstance(node, ast.Call) and callee(node) in ARANGE and len(node.args) == 2
                and literal_int(node.args[0]) == 0 and flat(node.args[1]) == step)

    var = loop.target.id

    def start(node: ast.AST) -> bool:  # the iteration's first key
        if not counted:
            return isinstance(node, ast.Name) and node.id == var
        return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
                and {flat(node.left), flat(node.right)} == {var, step})

    sides = (expr.left, expr.right)
    return any(start(a) and arange(b) for a, b in (sides, sides[::-1]))


class _Fold(ast.NodeTransformer):
    """Folds comparisons known true into `True` and known false into `False` (a mask of what
    to keep, a mask of what to drop), then `x & True`, `x | False`, `~`, names bound to
    either, `tl.where(True, a, b)`, `tl.where(False, a, b)` and loads / stores masked by
    `True`."""

    def __init__(self, true: Callable[[ast.Compare], bool],
                 false: Callable[[ast.Compare], bool] = lambda cmp: False) -> None:
        self.true = true
        self.false = false
        self.names: dict[str, bool] = {}
        self.dropped: set[str] = set()

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)  # a block whose statements all folded away keeps a `pass`
        if isinstance(node, (ast.If, ast.For, ast.While, ast.With)) and not node.body:
            node.body = [ast.Pass()]
        return node

    @staticmethod
    def _is_true(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value is True

    @staticmethod
    def _is_false(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value is False

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if self.true(node):
            return ast.Constant(True)
        return ast.Constant(False) if self.false(node) else node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        known = isinstance(node.ctx, ast.Load) and node.id in self.names
        return ast.Constant(self.names[node.id]) if known else node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)  # `ok[:, None]` of an `ok` known true is true
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            return node.value
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | None:
        self.generic_visit(node)  # `s += tl.where(True, 0.0, -inf)` folded to `s += 0.0`
        zero = isinstance(node.value, ast.Constant) and not isinstance(node.value.value, bool) \
            and node.value.value == 0
        return None if zero and isinstance(node.op, (ast.Add, ast.Sub)) else node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Invert, ast.Not)) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, bool):
            return ast.Constant(not node.operand.value)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.BitAnd):
            if self._is_true(node.left):
                return node.right
            if self._is_true(node.right):
                return node.left
        if isinstance(node.op, ast.BitOr):
            if self._is_false(node.left):
                return node.right
            if self._is_false(node.right):
                return node.left
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = callee(node)
        if name in WHERE and len(node.args) == 3 and self._is_true(node.args[0]):
            return node.args[1]
        if name in WHERE and len(node.args) == 3 and self._is_false(node.args[0]):
            return node.args[2]
        if name in LOADS or name in STORES:
            at = 1 if name in LOADS else 2
            mask = next((k for k in node.keywords if k.arg == "mask"), None)
            if mask is not None and self._is_true(mask.value):
                node.keywords = [k for k in node.keywords if k.arg not in ("mask", "other")]
            elif mask is None and len(node.args) > at and self._is_true(node.args[at]):
                node.args = node.args[:at]
                node.keywords = [k for k in node.keywords if k.arg != "other"]
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            self.names[node.targets[0].id] = node.value.value
            self.dropped.add(node.targets[0].id)
            return None
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Name) and node.value.id == node.targets[0].id:
            return None  # `x = tl.where(True, x, y)` folded to `x = x`
        return node


def split_plan(mod: PyModule, kernel: ast.FunctionDef, tri: Triangle) -> Split | None:
    """The split of triangle loop `tri` (`Split`), or None: a loop that neither starts at 0
    in steps of the key block nor counts key blocks from 0 (`range(tl.cdiv(size, STEP))`), or
    whose body has nothing to fold."""
    import copy  # noqa: PLC0415

    loop = tri.loop
    args = loop.iter.args
    if not tri.base or loop.orelse or any(isinstance(n, (ast.Break, ast.Continue, ast.Return))
                                          for n in ast.walk(loop)):
        return None
    counted = len(args) == 1 or (literal_int(args[0]) == 0 and (
        len(args) == 2 or len(args) == 3 and literal_int(args[2]) == 1))
    if counted:
        # the count is `tl.cdiv(size, STEP)`, inline (tri.bound is its size) or read from a
        # variable (tri.text is the clamped count)
        count = args[-1] if len(args) < 3 else args[1]
        if isinstance(count, ast.Name):
            value = assignments(kernel).get(count.id, [])
            count = value[0] if len(value) == 1 else None
        if not is_cdiv(count, 2) or tri.present and tri.text:
            return None
        size, step_node = count.args
        sized = (mod.text(size) if tri.present and not tri.text
                 else f"tl.minimum({mod.text(size)}, {tri.limit})")
        step_text = mod.text(step_node)
        bound = f"tl.cdiv({sized}, {step_text})"
        terms = size.args if isinstance(size, ast.Call) and callee(size) in MINIMUM else [size]
        bounds = {ast.unparse(t).replace(" ", "") for t in terms}
    elif len(args) == 3 and literal_int(args[0]) == 0 and not tri.text \
            and not is_cdiv(tri.bound):
        step_text = mod.text(args[2])
        bound = sized = (mod.text(tri.bound) if tri.present
                         else f"tl.minimum({mod.text(tri.bound)}, {tri.limit})")
        bounds = {t.replace(" ", "") for t in tri.terms}
    else:
        return None
    step = step_text.replace(" ", "")
    inner_names = _loop_names(loop)
    outer = _outside(kernel, inner_names)
    base = tri.base.replace(" ", "")
    copied = copy.deepcopy(loop)
    inner = assignments(copied)

    def keys_below(keys: ast.expr, other: ast.expr, bound_too: bool) -> bool:
        # every key of the first loop lies below the split: below the program's first row,
        # and below the loop's bound (so below each term the bound is the minimum of)
        if not _keys_of(keys, copied, step, outer, inner, counted):
            return False
        rows = _rows_of(mod, kernel, other, inner_names)
        return (rows is not None and rows[0].replace(" ", "") == base) or (
            bound_too and ast.unparse(other).replace(" ", "") in bounds)

    def true(cmp: ast.Compare) -> bool:  # `keys < rows`, `keys <= rows`, `keys < bound`
        ordered = _ordered(cmp)
        return ordered is not None and keys_below(ordered[0], ordered[1],
                                                  isinstance(ordered[2], ast.Lt))

    def false(cmp: ast.Compare) -> bool:  # the same facts read from the other side
        # no key of the first loop lies past a row (`keys > rows`, `keys >= rows`) nor at or
        # past the loop's bound
        ordered = _ordered(cmp)
        return ordered is not None and keys_below(ordered[1], ordered[0], True)

    fold = _Fold(true, false)
    copied.body = [fold.visit(stmt) for stmt in copied.body]
    copied.body = [stmt for stmt in copied.body if stmt is not None] or [ast.Pass()]
    if ast.dump(ast.Module(copied.body, [])) == ast.dump(ast.Module(loop.body, [])):
        return None
    # a folded-away name read after the loop would read the first loop's value; one assigned
    # twice in the loop (or in a branch) is not true everywhere the fold read it as true
    after = {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load) and mod.start(n) >= mod.end(loop)}
    stores = [n.id for n in ast.walk(loop)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    if fold.dropped & after or any(stores.count(name) > 1 for name in fold.dropped):
        return None
    taken = {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)} | {
        a.arg for a in kernel.args.args}
    name = fresh_name("below_diagonal", taken)
    if counted:  # blocks counted from 0: the first loop counts up to the split's block
        copied.iter.args = [ast.Constant(0), ast.Name(name, ast.Load())]
        assign = f"{name} = tl.minimum({sized}, {tri.base}) // {step_text}"
        rest = f"{name}, {bound}"
    else:
        copied.iter.args[1] = ast.Name(name, ast.Load())
        window = window_start(mod, kernel, loop)
        if window is not None:  # a banded mask: the first loop starts at the band
            copied.iter.args[0] = ast.parse(window, mode="eval").body
        assign = f"{name} = tl.minimum({bound}, {tri.base}) // {step_text} * {step_text}"
        rest = f"{name}, {bound}, {step_text}"
    return Split(name, assign, ast.unparse(copied), rest)


def split_edits(mod: PyModule, tri: Triangle, plan: Split) -> tuple[int, int, list[ByteEdit]]:
    """(start, end, edits) that write `plan`: the split point and the folded first loop above
    the loop, whose range then runs from the split point to the clamped bound."""
    loop = tri.loop
    pad = indent_of(mod.source, mod.start(loop))
    start = line_start(mod.source, mod.start(loop))
    head = "".join(pad + line + "\n" for line in (plan.assign + "\n" + plan.loop).splitlines())
    args = loop.iter.args
    edits = [ByteEdit(start, start, head),
             ByteEdit(mod.start(args[0]), mod.end(args[-1]), plan.bound)]
    return start, line_end(mod.source, mod.end(loop) - 1), edits


def split_pair(mod: PyModule, tri: Triangle) -> tuple[ast.stmt, ast.For] | None:
    """(split point's assignment, first loop) when triangle loop `tri` is the second loop of a
    split (`split_plan`): the statement before it is a loop over the same variable from some
    start up to the name its own range starts from, and the one before that assigns that
    name; else None."""
    loop = tri.loop
    args = loop.iter.args
    if not tri.present or len(args) < 2 or not isinstance(args[0], ast.Name):
        return None
    parent = mod.parents.get(loop)
    body = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse"))
                 if isinstance(b, list) and loop in b), None)
    if body is None or body.index(loop) < 2:
        return None
    at = body.index(loop)
    first, assign = body[at - 1], body[at - 2]
    point = args[0].id
    if not (isinstance(first, ast.For) and isinstance(first.target, ast.Name)
            and first.target.id == loop.target.id and isinstance(first.iter, ast.Call)
            and callee(first.iter) in RANGE_CALLS and len(first.iter.args) == len(args)
            and isinstance(first.iter.args[1], ast.Name) and first.iter.args[1].id == point
            and not first.orelse):
        return None
    if len(args) == 3 and ast.dump(first.iter.args[2]) != ast.dump(args[2]):
        return None  # blocks of another step
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Name) and assign.targets[0].id == point):
        return None
    kernel = mod.kernel_of(loop)
    reads = [n for n in ast.walk(kernel) if isinstance(n, ast.Name) and n.id == point
             and isinstance(n.ctx, ast.Load)] if kernel is not None else []
    if len(reads) != 2:  # the split point is read by the two ranges alone
        return None
    return assign, first


def _merged_split(mod: PyModule, tri: Triangle) -> tuple[int, int, str] | None:
    """(start, end, text) that writes a split loop back as one loop over every key block of
    the clamped range, masked: the split point and the first loop removed, the second loop
    starting where the first did. None unless that one loop splits again into a first loop of
    the same body (`split_plan`: its comparisons that are true below the diagonal folded), so
    merging loses nothing the first loop did."""
    pair = split_pair(mod, tri)
    if pair is None:
        return None
    assign, first = pair
    start = line_start(mod.source, mod.start(assign))
    end = line_end(mod.source, mod.end(tri.loop) - 1)
    loop_at = line_start(mod.source, mod.start(tri.loop))
    point = tri.loop.iter.args[0]
    text = (mod.source[loop_at:mod.start(point)] + mod.text(first.iter.args[0]).encode()
            + mod.source[mod.end(point):end]).decode("utf-8")
    merged_source = (mod.source[:start] + text.encode() + mod.source[end:]).decode("utf-8")
    try:
        import kir  # noqa: PLC0415

        merged = PyModule(kir.parse(merged_source, "triton"))
    except Exception:  # noqa: BLE001 - a merge that does not parse is no merge
        return None
    for again in triangles(merged):
        if merged.start(again.loop) != start + (mod.start(tri.loop) - loop_at):
            continue
        kernel = merged.kernel_of(again.loop)
        plan = split_plan(merged, kernel, again) if kernel is not None else None
        if plan is None:
            return None
        folded = ast.parse(plan.loop).body[0]
        same = ast.dump(ast.Module(folded.body, [])) == ast.dump(ast.Module(first.body, []))
        return (start, end, text) if same else None
    return None


@dataclass(frozen=True, slots=True)
class CausalBlockSkip(Pass):
    """Causal attention that skips key blocks above the diagonal <-> one loop over every key
    block with the causal mask applied. Forms: `staged` and `ifexp` (a causal flag's recorded
    bounds), `bound` (the key loop clamped at the row block's end), `split` (a clamped loop
    split at the row block's start, the blocks below it unmasked; undone into `bound` by
    `_merged_split`)."""

    code: str = ""
    """The exact causal statement(s) to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in their place."""
    heavy_first: bool = False
    """With a clamped or split loop, also relabel the programs along the row blocks' axis so
    the heaviest (latest row blocks, the most key blocks) start first
    (`passes.triton.heavy_first`); refused where that order cannot be written."""

    name: ClassVar[str] = "causal-block-skip"
    category: ClassVar[Category] = Category.ALGORITHMIC
    summary: ClassVar[str] = "skip fully masked causal key blocks <-> mask every block"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("causal-skip",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    # once the loop stops at the diagonal, a program's work grows with its row block: the
    # expert launches the latest row blocks first, so the grid's tail is its lightest programs
    reach: ClassVar[tuple[Mapping[str, Any], ...]] = (MappingProxyType({"heavy_first": True}),)

    @staticmethod
    def _call_of(stmt: ast.stmt) -> ast.Call | None:
        value = getattr(stmt, "value", None)
        return value if isinstance(value, ast.Call) else None

    def _staged(self, mod: PyModule) -> list[tuple[ast.If, int, int]]:
        """`if CAUSAL:` with two calls of one function (off-diagonal blocks, then the masked
        diagonal block) and an `else:` with one call: (the if, lo index, hi index)."""
        out = []
        for kernel in mod.kernels():
            for node in ast.walk(kernel):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                        and _causal(node.test.id) and len(node.body) == 2 and len(node.orelse) == 1):
                    continue
                c1, c2, ce = (self._call_of(s) for s in (*node.body, *node.orelse))
                if not (c1 and c2 and ce and callee(c1) == callee(c2) == callee(ce)
                        and len(c1.args) == len(c2.args) == len(ce.args)):
                    continue
                texts = [[mod.text(a) for a in c.args] for c in (c1, c2, ce)]
                pairs = [(lo, hi) for hi in range(len(c1.args)) for lo in range(len(c1.args))
                         if lo + 1 == hi and texts[0][hi] == texts[1][lo]
                         and texts[0][hi] != texts[0][lo]]
                if pairs:
                    out.append((node, *pairs[0]))
        return out

    def _ifexp(self, mod: PyModule) -> list[ast.AST]:
        """`A if CAUSAL else B` bounds (conditional expressions on a causal flag)."""
        return [n for k in mod.kernels() for n in ast.walk(k)
                if isinstance(n, ast.IfExp) and any(_causal(x) for x in names_in(n.test))]

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        # A comment above a bound explains the skipping: it is part of what the rewrite removes.
        for node, _lo, _hi in self._staged(mod):
            start, end, _ = _block_text(mod, node.body, comment=True)
            out.append(make_site(self.name, ir, index, (start, end), True,
                                 {"form": "staged"}, mod.span(node)))
        for node in self._ifexp(mod):
            stmt = mod.enclosing(node, ast.stmt)
            start, end, _ = _block_text(mod, [stmt], comment=True)
            out.append(make_site(self.name, ir, index, (start, end), True, {"form": "ifexp"},
                                 mod.span(node)))
        # a key loop masked against the rows: its bound can stop at the last row of the block;
        # one that already stops there can still split off the key blocks below the diagonal,
        # which no row masks (`split_plan`)
        for tri in triangles(mod):
            pair = split_pair(mod, tri)
            if pair is not None:  # already split: the split is what a de-optimization undoes
                start = line_start(mod.source, mod.start(pair[0]))
                end = line_end(mod.source, mod.end(tri.loop) - 1)
                out.append(make_site(self.name, ir, index, (start, end), True,
                                     {"form": "split"}, mod.span(tri.loop.iter)))
                continue
            out.append(make_site(self.name, ir, index, mod.span(tri.bound), tri.present,
                                 {"form": "bound", "limit": tri.limit}, mod.span(tri.loop.iter)))
            kernel = mod.kernel_of(tri.loop)
            if tri.present and kernel is not None and split_plan(mod, kernel, tri) is not None:
                start = line_start(mod.source, mod.start(tri.loop))
                end = line_end(mod.source, mod.end(tri.loop) - 1)
                out.append(make_site(self.name, ir, index, (start, end), False,
                                     {"form": "split"}, mod.span(tri.loop.iter)))
        # kernels with a causal flag: a recorded skip can be restored there
        for kernel in mod.kernels():
            if any(_causal(a.arg) for a in kernel.args.args):
                out.append(make_site(self.name, ir, index, mod.stmt_span(kernel), False,
                                     {"kernel": kernel.name}, mod.span(kernel)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if site.detail.get("form") == "split":
            for tri in triangles(mod):
                merged = _merged_split(mod, tri)
                if merged is not None and merged[:2] == tuple(site.span):
                    return finish(ir, site, [ByteEdit(*merged)])
            return Skipped("no split key loop at the site whose first loop is the second's "
                           "body with the diagonal's comparisons folded", {"site": site.anchor})
        if site.detail.get("form") == "bound":
            for tri in triangles(mod):
                if tri.present and mod.span(tri.bound) == tuple(site.span) \
                        and isinstance(tri.bound, ast.Call) and callee(tri.bound) in MINIMUM:
                    full = next(a for a in tri.bound.args
                                if tri.limit.replace(" ", "") not in mod.text(a).replace(" ", ""))
                    return finish(ir, site, [ByteEdit(*site.span, mod.text(full))])
            return Skipped("no clamped key-loop bound at the site", {"site": site.anchor})
        if site.detail.get("form") == "ifexp":
            for node in self._ifexp(mod):
                stmt = mod.enclosing(node, ast.stmt)
                start, end, text = _block_text(mod, [stmt], comment=True)
                if (start, end) != tuple(site.span):
                    continue
                s0 = line_start(mod.source, mod.start(stmt))
                a, b = mod.start(node) - s0, mod.end(node) - s0
                chunk = mod.source[s0:end]
                after = (chunk[:a] + mod.text(node.orelse).encode("utf-8") + chunk[b:]).decode("utf-8")
                return finish(ir, site, [ByteEdit(start, end, after)],
                              options={"code": text, "after": after})
            return Skipped("no causal bound at the site", {"site": site.anchor})
        for node, lo, hi in self._staged(mod):
            start, end, text = _block_text(mod, node.body, comment=True)
            if (start, end) != tuple(site.span):
                continue
            c1, c2, ce = (self._call_of(s) for s in (*node.body, *node.orelse))
            stmt = node.body[1]
            edits_in = sorted([(c2.args[lo], mod.text(c1.args[lo])), (c2.args[hi], mod.text(ce.args[hi]))],
                              key=lambda p: mod.start(p[0]))
            s0 = line_start(mod.source, mod.start(stmt))
            s1 = line_end(mod.source, mod.end(stmt) - 1)
            chunk = mod.source[s0:s1]
            for arg, new in reversed(edits_in):
                a, b = mod.start(arg) - s0, mod.end(arg) - s0
                chunk = chunk[:a] + new.encode("utf-8") + chunk[b:]
            after = chunk.decode("utf-8")
            return finish(ir, site, [ByteEdit(start, end, after)],
                          options={"code": text, "after": after})
        return Skipped("no causal block skipping at the site", {"site": site.anchor})

    @staticmethod
    def _finish(ir: KernelIR, site: Site, edits: list[ByteEdit], span: tuple[int, int],
                options: dict[str, Any]) -> PassResult:
        """The edits applied, the site widened to hold them all."""
        lo = min(span[0], site.span[0], *(e.start for e in edits))
        hi = max(span[1], site.span[1], *(e.end for e in edits))
        edits = sorted(edits, key=lambda e: e.start)
        if any(a.end > b.start for a, b in zip(edits, edits[1:])):
            return Skipped("the heavy-first relabeling overlaps the loop's rewrite", {})
        return finish(ir, dataclasses.replace(site, span=(lo, hi)), edits, options=options)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if site.detail.get("form") in ("bound", "split"):
            # The loop's keys are compared against the program's rows (`key <= row`): a key
            # block that starts past the block's last row is masked in full, so the loop stops
            # at `row base + row block`. A key block that ends at or before the block's first
            # row is masked for no row: those blocks run in a loop of their own, first, with
            # the comparisons that are true there folded away (the diagonal blocks keep the
            # masked body; the blocks run in the same order). The gate checks the result like
            # any rewrite.
            mod = PyModule(ir)
            split = site.detail.get("form") == "split"
            for tri in triangles(mod):
                if split != tri.present:
                    continue
                start = line_start(mod.source, mod.start(tri.loop))
                at = (start, line_end(mod.source, mod.end(tri.loop) - 1)) if split \
                    else mod.span(tri.bound)
                if at != tuple(site.span):
                    continue
                kernel = mod.kernel_of(tri.loop)
                plan = split_plan(mod, kernel, tri) if kernel is not None else None
                order: list[ByteEdit] = []
                if self.heavy_first and kernel is not None:
                    found = heavy_first(mod, kernel, tri.base)
                    if isinstance(found, str):
                        return Skipped(f"heavy-first order: {found}", {"base": tri.base})
                    order = found
                options = {"limit": tri.limit, **({"heavy_first": True} if order else {})}
                if plan is not None:
                    lo, hi, edits = split_edits(mod, tri, plan)
                    return self._finish(ir, site, edits + order, (lo, hi),
                                        {**options, "split": True})
                if split:
                    break
                text = tri.text or f"tl.minimum({mod.text(tri.bound)}, {tri.limit})"
                edits = [ByteEdit(*site.span, text)]
                window = window_start(mod, kernel, tri.loop) if kernel is not None else None
                if window is not None:  # a banded mask: the loop starts at the band too
                    first = tri.loop.iter.args[0]
                    edits.insert(0, ByteEdit(mod.start(first), mod.end(first), window))
                return self._finish(ir, site, edits + order, tuple(site.span), options)
            return Skipped("no key loop masked against the rows at the site", {"site": site.anchor})
        if not self.code:
            return Skipped("restoring causal block skipping needs the recorded bounds "
                           "(which blocks lie below the diagonal is kernel-specific)", {})
        done = restore_recorded(ir, site, self.code, self.after)
        if done is None:
            return Skipped("the recorded full-range loop is not at the site", {"site": site.anchor})
        return done
