"""Passes of selection, scan and histogram kernels (radix select, top-k, compaction, sorting).

Four rules, each a construct a selection kernel's author chooses on purpose:
- `histogram-primitive`: `tl.histogram(x, N, mask=m)` <-> a compare-and-reduce histogram
  (`tl.sum(((x[:, None] == tl.arange(0, N)[None, :]) & m[:, None]).to(tl.int32), 0)`);
- `scan-fusion`: one `tl.cumsum` over a packed `a + (b << S)` whose result is split with
  `& (2**S - 1)` and `>> S` <-> two separate cumsums;
- `early-exit`: `if FLAG:` (a constexpr flag) running a convergence `while` loop, with a
  fixed-trip `tl.static_range` loop as its `else:` <-> only the fixed-trip loop, the flag gone
  from the signature and the launches;
- `radix-width`: the digit width of a radix pass (`RADIX_BITS`-style constexpr at a launch or
  as a parameter default) doubled <-> halved, while it divides the key width.

Like the other Triton rules they match Python `ast` nodes and edit source bytes; a
de-optimization records in `Applied.options` what it removed, so `optimize` with those options
restores the text (up to formatting); without them `optimize` builds the construct from the
de-optimized form where that is possible and says what it needs where it is not.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site, restore_recorded
from passes.base import Applied, Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, literal_int, names_in, walk_stmts
from passes.triton.launch import TRITON, autotuned
from passes.triton.ordering import _lines_span

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

HISTOGRAM_NAMES = frozenset({"tl.histogram", "triton.language.histogram"})
SUM_NAMES = frozenset({"tl.sum", "triton.language.sum"})
ARANGE_NAMES = frozenset({"tl.arange", "triton.language.arange"})
CUMSUM_NAMES = frozenset({"tl.cumsum", "triton.language.cumsum"})
STATIC_RANGE_NAMES = frozenset({"tl.static_range", "triton.language.static_range"})


_ATOMS = (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)


def _atom(mod: PyModule, node: ast.AST) -> str:
    """Source of `node`, parenthesized unless it is an atom, so that `x[:, None]` or `x << S`
    applies to all of it."""
    return mod.text(node) if isinstance(node, _ATOMS) else f"({mod.text(node)})"


def _marks(node: ast.AST) -> str:
    """":x" for `e[:, None]`, "x:" for `e[None, :]`, "" otherwise."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) == 2):
        return ""
    out = ""
    for e in node.slice.elts:
        if isinstance(e, ast.Constant) and e.value is None:
            out += "x"
        elif isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None:
            out += ":"
        else:
            return ""
    return out


_INT_TYPE = re.compile(r"(tl|triton\.language)\.u?int(8|16|32|64)")


def _is_int_cast(node: ast.AST) -> bool:
    """`e.to(tl.int32)` (any integer type): the shape of an indicator or a count."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to" and bool(node.args)
            and _INT_TYPE.fullmatch(ast.unparse(node.args[0])) is not None)


def _constexpr_params(fn: ast.FunctionDef) -> list[ast.arg]:
    return [a for a in fn.args.args if a.annotation is not None and "constexpr" in ast.dump(a.annotation)]


def _jit_span(mod: PyModule, kernel: ast.FunctionDef) -> tuple[int, int]:
    """The kernel with its decorators and every launch of it: the region a rewrite that
    changes the kernel's signature (and so its launches) may touch."""
    launches = mod.launches(kernel.name)
    return (min([mod.stmt_span(kernel)[0], *(mod.start(c) for c in launches)]),
            max([mod.end(kernel), *(mod.end(c) for c in launches)]))


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Histogram:
    """A compare-and-reduce histogram found in a kernel."""

    whole: ast.Call  # the tl.sum(...) call
    values: ast.AST  # x
    bins: ast.AST  # N
    mask: ast.AST | None  # m


@dataclass(frozen=True, slots=True)
class HistogramPrimitive(Pass):
    """`tl.histogram` (one block-level histogram primitive) <-> a broadcast compare of every
    value against every bin, reduced with `tl.sum` (elements x bins work and registers)."""

    call: str = ""
    """The exact `tl.histogram(...)` expression to restore (recorded by a de-optimization);
    empty: build `tl.histogram(x, N, mask=m)` from the compare-and-reduce form."""

    name: ClassVar[str] = "histogram-primitive"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "tl.histogram <-> compare-against-every-bin + tl.sum"
    provides: ClassVar[tuple[str, ...]] = ("block-histogram",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    # tl.arange (the bins of the compare form) takes power-of-two lengths only; the bins are a
    # fact only where N is a literal (a constexpr computed in the kernel is unknown here).
    # tl.histogram counts values in [0, N) only where they are there (the compare form drops
    # the others): `values_in_range` is known where x is `e & (N - 1)` or `e % N`.
    preconditions: ClassVar[tuple[str, ...]] = ("pow2(num_bins)", "values_in_range == true")

    def _primitives(self, mod: PyModule) -> list[ast.Call]:
        return [c for k in mod.kernels() for c in mod.calls(k, HISTOGRAM_NAMES)
                if 2 <= len(c.args) + len(c.keywords) and len(c.args) >= 1]

    @staticmethod
    def _parts(call: ast.Call) -> tuple[ast.AST, ast.AST | None, ast.AST | None]:
        """(values, bins, mask) of a tl.histogram call (positional or keyword)."""
        kw = {k.arg: k.value for k in call.keywords}
        values = call.args[0]
        bins = call.args[1] if len(call.args) > 1 else kw.get("num_bins")
        mask = call.args[2] if len(call.args) > 2 else kw.get("mask")
        return values, bins, mask

    def _compares(self, mod: PyModule) -> list[_Histogram]:
        """`tl.sum(((x[:, None] == tl.arange(0, N)[None, :]) & m[:, None]).to(tl.int32), 0)`
        (the mask optional, either operand order of `&` and `==`)."""
        out = []
        for kernel in mod.kernels():
            for call in mod.calls(kernel, SUM_NAMES):
                axis = call.args[1] if len(call.args) > 1 else next(
                    (k.value for k in call.keywords if k.arg == "axis"), None)
                if literal_int(axis) != 0 or not call.args or not _is_int_cast(call.args[0]):
                    continue
                body = call.args[0].func.value
                mask = None
                if isinstance(body, ast.BinOp) and isinstance(body.op, ast.BitAnd):
                    for cmp_side, mask_side in ((body.left, body.right), (body.right, body.left)):
                        if isinstance(cmp_side, ast.Compare) and _marks(mask_side) == ":x":
                            body, mask = cmp_side, mask_side.value
                            break
                if not (isinstance(body, ast.Compare) and len(body.ops) == 1
                        and isinstance(body.ops[0], ast.Eq)):
                    continue
                found = _values_and_bins(body.left, body.comparators[0]) or \
                    _values_and_bins(body.comparators[0], body.left)
                if found is not None:
                    out.append(_Histogram(call, found[0], found[1], mask))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for call in self._primitives(mod):
            values, bins, _ = self._parts(call)
            if bins is None:
                continue
            out.append(make_site(self.name, ir, index, mod.span(call), True,
                                 {"values": mod.text(values), "bins": mod.text(bins)}))
        out += [make_site(self.name, ir, index, mod.span(h.whole), False,
                          {"values": mod.text(h.values), "bins": mod.text(h.bins)})
                for h in self._compares(mod)]
        return out

    def _facts(self, bins: ast.AST) -> dict[str, int]:
        n = literal_int(bins)
        return {"num_bins": n} if n is not None else {}

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        call = next((c for c in self._primitives(mod) if mod.span(c) == tuple(site.span)), None)
        if call is None:
            return Skipped("no tl.histogram at the site", {"site": site.anchor})
        values, bins, mask = self._parts(call)
        if bins is None:
            return Skipped("the histogram's bin count is not given", {"site": site.anchor})
        results, skip = self.check(ctx, self._facts(bins))
        if skip:
            return skip
        hit = f"{_atom(mod, values)}[:, None] == tl.arange(0, {mod.text(bins)})[None, :]"
        if mask is not None:
            hit = f"({hit}) & {_atom(mod, mask)}[:, None]"
        text = f"tl.sum(({hit}).to(tl.int32), 0)"
        return finish(ir, site, [ByteEdit(*mod.span(call), text)], options={"call": mod.text(call)},
                      preconditions=results)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        found = next((h for h in self._compares(mod) if mod.span(h.whole) == tuple(site.span)), None)
        if found is None:
            return Skipped("no compare-and-reduce histogram at the site", {"site": site.anchor})
        facts: dict[str, int | bool] = dict(self._facts(found.bins))
        if _in_range(mod, found.values, found.bins):
            facts["values_in_range"] = True
        results, skip = self.check(ctx, facts)
        if skip:
            return skip
        text = f"tl.histogram({mod.text(found.values)}, {mod.text(found.bins)}"
        text += f", mask={mod.text(found.mask)})" if found.mask is not None else ")"
        if self.call and _same_histogram(self.call, text):
            text = self.call  # the recorded spelling (e.g. a keyword num_bins=)
        return finish(ir, site, [ByteEdit(*mod.span(found.whole), text)], preconditions=results)


def _in_range(mod: PyModule, values: ast.AST, bins: ast.AST) -> bool:
    """Whether `values` is provably in [0, bins): `e & (bins - 1)` or `e % bins` (maybe cast),
    directly or as the one assignment of the name it is."""
    if isinstance(values, ast.Name):
        fn = mod.enclosing(values, ast.FunctionDef)
        assigns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
                   and _is_name(n.targets[0], values.id)] if fn is not None else []
        if len(assigns) != 1:
            return False
        values = assigns[0]
    while (isinstance(values, ast.Call) and isinstance(values.func, ast.Attribute)
           and values.func.attr == "to"):
        values = values.func.value
    if not isinstance(values, ast.BinOp):
        return False
    n = ast.dump(bins)
    if isinstance(values.op, ast.Mod):
        return ast.dump(values.right) == n
    right = values.right
    return (isinstance(values.op, ast.BitAnd) and isinstance(right, ast.BinOp)
            and isinstance(right.op, ast.Sub) and ast.dump(right.left) == n
            and literal_int(right.right) == 1)


def _values_and_bins(left: ast.AST, right: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(x, N) when `left` is `x[:, None]` and `right` is `tl.arange(0, N)[None, :]`."""
    if _marks(left) != ":x" or _marks(right) != "x:":
        return None
    rng = right.value
    if not (isinstance(rng, ast.Call) and callee(rng) in ARANGE_NAMES and len(rng.args) == 2
            and literal_int(rng.args[0]) == 0):
        return None
    return left.value, rng.args[1]


def _same_histogram(recorded: str, built: str) -> bool:
    """Whether a recorded `tl.histogram(...)` call counts the same values into the same bins
    under the same mask as the one built from the compare form."""
    try:
        a = ast.parse(recorded, mode="eval").body
        b = ast.parse(built, mode="eval").body
    except SyntaxError:
        return False
    if not (isinstance(a, ast.Call) and isinstance(b, ast.Call)):
        return False
    parts_a, parts_b = HistogramPrimitive._parts(a), HistogramPrimitive._parts(b)
    return [ast.dump(p) if p is not None else None for p in parts_a] == \
        [ast.dump(p) if p is not None else None for p in parts_b]


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Packed:
    """`P = cumsum(a + (b << S), ...)` followed by `lo = P & (2**S-1)` and `hi = P >> S`."""

    block: list[ast.stmt]
    at: int  # index of the scan statement in its block
    call: ast.Call
    low: ast.AST  # a
    high: ast.AST  # b
    shift: int
    packed: str
    low_target: str
    high_target: str


@dataclass(frozen=True, slots=True)
class ScanFusion(Pass):
    """Two prefix sums of one length computed by a single scan of the packed sum
    `a + (b << S)`, split with `& (2**S - 1)` and `>> S` <-> two separate `tl.cumsum`s.
    Sound while the scanned counts of `a` stay below 2**S and those of `b` below 2**(31-S)."""

    shift: int = 16
    """Bits of the low field (the packed scan splits at this bit)."""
    packed: str = "packed"
    """Name of the packed scan's result (an optimization without recorded text uses it)."""
    code: str = ""
    """The exact packed-scan statements to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in their place."""

    name: ClassVar[str] = "scan-fusion"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "one cumsum of a + (b << S), split <-> two cumsums"
    provides: ClassVar[tuple[str, ...]] = ("packed-scan",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    # `scan_len` (elements scanned) is a case/launch fact where the caller supplies it; the
    # operands must be integer casts (indicators or counts), not arbitrary values.
    preconditions: ClassVar[tuple[str, ...]] = (
        "shift >= 1 and shift <= 30", "int_casts == true",
        "scan_len < low_limit and scan_len < high_limit")

    def _packed_scans(self, mod: PyModule) -> list[_Packed]:
        out = []
        for fn in mod.kernels():
            for block in walk_stmts(fn.body):
                for i, stmt in enumerate(block[:-2]):
                    found = _packed_at(mod, fn, block, i)
                    if found is not None:
                        out.append(found)
        return out

    def _pairs(self, mod: PyModule) -> list[tuple[ast.Assign, ast.Assign]]:
        """Adjacent `x = cumsum(a, r)`; `y = cumsum(b, r)` with the same scan arguments `r`."""
        out = []
        for fn in mod.kernels():
            for block in walk_stmts(fn.body):
                for first, second in zip(block, block[1:]):
                    a, b = _scan_assign(first), _scan_assign(second)
                    if a is None or b is None or a[0] == b[0] or a[0] in names_in(second.value):
                        continue
                    if mod.text(a[1].func) == mod.text(b[1].func) and _rest(mod, a[1]) == _rest(mod, b[1]):
                        out.append((first, second))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for p in self._packed_scans(mod):
            span = _lines_span(mod, p.block[p.at], p.block[p.at + 2])
            out.append(make_site(self.name, ir, index, span, True,
                                 {"packed": p.packed, "shift": p.shift, "low": p.low_target,
                                  "high": p.high_target}, mod.span(p.block[p.at])))
        for first, second in self._pairs(mod):
            out.append(make_site(self.name, ir, index, _lines_span(mod, first, second), False,
                                 {"low": first.targets[0].id, "high": second.targets[0].id},
                                 mod.span(first)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        found = next((p for p in self._packed_scans(mod)
                      if _lines_span(mod, p.block[p.at], p.block[p.at + 2]) == tuple(site.span)), None)
        if found is None:
            return Skipped("no packed scan at the site", {"site": site.anchor})
        start, end = site.span
        indent = indent_of(mod.source, start)
        scan, rest = mod.text(found.call.func), _rest(mod, found.call)
        first, second = (found.low_target, found.low), (found.high_target, found.high)
        if self._high_first(found):
            first, second = second, first
        after = "".join(f"{indent}{target} = {scan}({mod.text(operand)}{rest})\n"
                        for target, operand in (first, second))
        code = mod.source[start:end].decode("utf-8")
        return finish(ir, site, [ByteEdit(start, end, after)], options={
            "shift": found.shift, "packed": found.packed, "code": code, "after": after})

    @staticmethod
    def _high_first(found: _Packed) -> bool:
        split = found.block[found.at + 1]
        return isinstance(split.value, ast.BinOp) and isinstance(split.value.op, ast.RShift)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        pair = next(((a, b) for a, b in self._pairs(mod) if _lines_span(mod, a, b) == tuple(site.span)), None)
        if pair is None:
            return Skipped("no two adjacent scans of the same axis at the site", {"site": site.anchor})
        first, second = pair
        (low_t, low_call), (high_t, high_call) = _scan_assign(first), _scan_assign(second)
        facts = {"shift": self.shift, "low_limit": 1 << self.shift,
                 "high_limit": 1 << max(31 - self.shift, 0),
                 "int_casts": _is_int_cast(low_call.args[0]) and _is_int_cast(high_call.args[0])}
        results, skip = self.check(ctx, facts)
        if skip:
            return skip
        if self.code:
            done = restore_recorded(ir, site, self.code, self.after)
            if isinstance(done, Applied):
                return dataclasses.replace(done, preconditions=tuple(results))
            if done is not None:
                return done
        start, end = site.span
        indent = indent_of(mod.source, start)
        scan, rest = mod.text(low_call.func), _rest(mod, low_call)
        packed = self.packed
        taken = names_in(mod.enclosing(first, ast.FunctionDef) or mod.tree)
        if packed in taken:
            return Skipped(f"the name {packed!r} is already used in the kernel", {"packed": packed})
        text = (f"{indent}{packed} = {scan}({_atom(mod, low_call.args[0])} + "
                f"({_atom(mod, high_call.args[0])} << {self.shift}){rest})\n"
                f"{indent}{low_t} = {packed} & {hex((1 << self.shift) - 1)}\n"
                f"{indent}{high_t} = {packed} >> {self.shift}\n")
        return finish(ir, site, [ByteEdit(start, end, text)], preconditions=results)


def _rest(mod: PyModule, call: ast.Call) -> str:
    """The scan's arguments after the scanned value, as `, 0, reverse=True` (source text)."""
    items = [a for a in mod.arguments(call) if a is not call.args[0]]
    return "".join(", " + mod.text(a) for a in items)


def _scan_assign(stmt: ast.stmt) -> tuple[str, ast.Call] | None:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and callee(stmt.value) in CUMSUM_NAMES
            and stmt.value.args):
        return stmt.targets[0].id, stmt.value
    return None


def _packed_at(mod: PyModule, fn: ast.FunctionDef, block: list[ast.stmt], i: int) -> _Packed | None:
    scan = _scan_assign(block[i])
    if scan is None:
        return None
    packed, call = scan
    value = call.args[0]
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return None
    for low, shifted in ((value.left, value.right), (value.right, value.left)):
        if isinstance(shifted, ast.BinOp) and isinstance(shifted.op, ast.LShift) \
                and literal_int(shifted.right) is not None:
            shift = literal_int(shifted.right)
            break
    else:
        return None
    targets: dict[str, str] = {}
    for stmt in block[i + 1:i + 3]:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.BinOp)):
            return None
        op, left, right = stmt.value.op, stmt.value.left, stmt.value.right
        if isinstance(op, ast.BitAnd):
            lit = (literal_int(right) if _is_name(left, packed)
                   else literal_int(left) if _is_name(right, packed) else None)
            if lit == (1 << shift) - 1:
                targets["low"] = stmt.targets[0].id
        elif isinstance(op, ast.RShift) and _is_name(left, packed) and literal_int(right) == shift:
            targets["high"] = stmt.targets[0].id
    if set(targets) != {"low", "high"}:
        return None
    # the packed value must feed only the two splits (three mentions: the store and two loads)
    uses = sum(1 for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == packed)
    if uses != 3:
        return None
    return _Packed(block, i, call, low, shifted.left, shift, packed, targets["low"], targets["high"])


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Guarded:
    """`if FLAG:` (constexpr flag) with a `while` loop in its body and a fixed-trip loop in
    its `else:`."""

    kernel: ast.FunctionDef
    branch: ast.If
    flag: str


@dataclass(frozen=True, slots=True)
class EarlyExit(Pass):
    """A convergence `while` loop that stops as soon as the result is settled, selected by a
    constexpr flag (`if EARLY_EXIT: while ... else: for _ in tl.static_range(N): ...`) <->
    the fixed-trip loop alone (every iteration runs; the flag leaves the signature and the
    launches)."""

    flag: str = ""
    """The constexpr flag to restore (recorded by a de-optimization)."""
    code: str = ""
    """The exact `if FLAG: ... else: ...` statement to restore."""
    after: str = ""
    """What the de-optimization wrote in its place (the fixed-trip branch, dedented)."""
    param: str = ""
    """The flag's parameter text as removed, separator included (`,\n    EARLY_EXIT:
    tl.constexpr`); a bare `EARLY_EXIT: tl.constexpr` also works."""
    param_index: int = -1
    """Its position among the kernel's parameters (-1: last)."""
    value: str = ""
    """The value the launches passed (`True`); empty: the launches did not pass it."""
    position: int = -1
    """The keyword's position in each launch's argument list (-1: last)."""

    name: ClassVar[str] = "early-exit"
    category: ClassVar[Category] = Category.ALGORITHMIC
    summary: ClassVar[str] = "constexpr-selected convergence while loop <-> fixed-trip loop"
    provides: ClassVar[tuple[str, ...]] = ("early-exit",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)

    def _guarded(self, mod: PyModule) -> list[_Guarded]:
        out = []
        for kernel in mod.kernels():
            flags = {a.arg for a in _constexpr_params(kernel)}
            for node in ast.walk(kernel):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                        and node.test.id in flags and node.orelse):
                    continue
                if any(isinstance(s, ast.While) for s in node.body) and _fixed_loops(node.orelse):
                    out.append(_Guarded(kernel, node, node.test.id))
        return out

    def _tuned_flag(self, mod: PyModule, g: _Guarded) -> bool:
        """Whether an autotune config list sets the flag: pinning it is the autotune pass's
        step, taken before this one can drop the flag."""
        if not autotuned(mod, g.kernel):
            return False
        dec = mod.decorator(g.kernel, "autotune")
        return any(isinstance(n, ast.Constant) and n.value == g.flag for n in ast.walk(dec))

    def _fallbacks(self, mod: PyModule) -> list[tuple[ast.FunctionDef, ast.For]]:
        """Unrolled fixed-trip loops (`tl.static_range`) of kernels outside a guarded branch:
        where a convergence exit can go. Runtime `range` loops (a K loop) are not offered."""
        guarded = {id(s) for g in self._guarded(mod) for s in ast.walk(g.branch)}
        return [(k, loop) for k in mod.kernels() for loop in ast.walk(k)
                if id(loop) not in guarded and _fixed_loops([loop])]

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = [make_site(self.name, ir, index, _jit_span(mod, g.kernel), True,
                         {"kernel": g.kernel.name, "flag": g.flag}, mod.span(g.branch))
               for g in self._guarded(mod) if not self._tuned_flag(mod, g)]
        out += [make_site(self.name, ir, index, _jit_span(mod, k), False,
                          {"kernel": k.name, "loop_line": loop.lineno}, mod.span(loop))
                for k, loop in self._fallbacks(mod)]
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        found = next((g for g in self._guarded(mod) if g.kernel.name == site.detail.get("kernel")
                      and g.flag == site.detail.get("flag")), None)
        if found is None or self._tuned_flag(mod, found):
            return Skipped("no untuned constexpr-guarded convergence loop at the site", {"site": site.anchor})
        kernel, branch, flag = found.kernel, found.branch, found.flag
        uses = [n for n in ast.walk(kernel) if isinstance(n, ast.Name) and n.id == flag]
        if len(uses) != 1:
            return Skipped(f"{flag} is used outside the guarded loop", {"flag": flag, "uses": len(uses)})
        params = kernel.args.args
        param = next(a for a in params if a.arg == flag)
        p_index = params.index(param)
        shared = mod.sharing(kernel.name)
        if shared is not None:  # its launches stop passing the flag
            return Skipped(shared, {"flag": flag})
        launches = mod.launches(kernel.name)
        kws = [mod.keyword(c, flag) for c in launches]
        if any(len(c.args) > p_index for c in launches):
            return Skipped(f"a launch passes {flag} by position", {"flag": flag})
        values = {mod.text(k.value) for k in kws if k is not None}
        if len(values) > 1 or (values and None in kws):
            return Skipped(f"the launches pass different values of {flag}", {"values": sorted(values)})
        start, end = mod.stmt_span(branch)
        code = mod.source[start:end].decode("utf-8")
        body = mod.source[line_start(mod.source, mod.start(branch.orelse[0])):
                          line_end(mod.source, mod.end(branch.orelse[-1]) - 1)].decode("utf-8")
        after = textwrap.indent(textwrap.dedent(body), indent_of(mod.source, start))
        removal = _remove_param(mod, kernel, p_index)
        param_text = mod.source[removal.start:removal.end].decode("utf-8")  # with its separator
        edits = [ByteEdit(start, end, after), removal]
        position = -1
        for call, kw in zip(launches, kws):
            if kw is not None:
                position = mod.arguments(call).index(kw)
                edits.append(mod.remove_argument(call, kw))
        return finish(ir, site, sorted(edits, key=lambda e: e.start), options={
            "flag": flag, "code": code, "after": after, "param": param_text, "param_index": p_index,
            "value": values.pop() if values else "", "position": position})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not self.code:
            return Skipped("an early exit needs the recorded convergence loop (its exit test is "
                           "kernel-specific)", {})
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        if any(a.arg == self.flag for a in kernel.args.args):
            return Skipped(f"{self.flag} is already a parameter", {"flag": self.flag})
        region = mod.source[mod.start(kernel):mod.end(kernel)]
        needle = self.after.encode("utf-8")
        if not needle or region.count(needle) != 1:
            return Skipped("the recorded fixed-trip loop is not in the kernel", {"kernel": kernel.name})
        at = mod.start(kernel) + region.find(needle)
        edits = [ByteEdit(at, at + len(needle), self.code),
                 _insert_param(mod, kernel, self.param_index, self.param)]
        shared = mod.sharing(kernel.name) if self.value else None
        if shared is not None:  # its launches start passing the flag
            return Skipped(shared, {"flag": self.flag})
        if self.value:
            for call in mod.launches(kernel.name):
                position = self.position if self.position >= 0 else len(mod.arguments(call))
                edits.append(mod.insert_argument(call, position, f"{self.flag}={self.value}"))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))


def _fixed_loops(body: list[ast.stmt]) -> list[ast.For]:
    return [s for s in body if isinstance(s, ast.For) and isinstance(s.iter, ast.Call)
            and callee(s.iter) in STATIC_RANGE_NAMES]


def _default_of(fn: ast.FunctionDef, i: int) -> ast.expr | None:
    params, defaults = fn.args.args, fn.args.defaults
    k = i - (len(params) - len(defaults))
    return defaults[k] if k >= 0 else None


def _param_end(mod: PyModule, fn: ast.FunctionDef, i: int) -> int:
    default = _default_of(fn, i)
    return mod.end(default) if default is not None else mod.end(fn.args.args[i])


def _remove_param(mod: PyModule, fn: ast.FunctionDef, i: int) -> ByteEdit:
    """Delete parameter `i` (with its default) and the separator before it (after it when
    first)."""
    params = fn.args.args
    if i > 0:
        return ByteEdit(_param_end(mod, fn, i - 1), _param_end(mod, fn, i), "")
    if len(params) > 1:
        return ByteEdit(mod.start(params[0]), mod.start(params[1]), "")
    return ByteEdit(mod.start(params[0]), _param_end(mod, fn, 0), "")


def _insert_param(mod: PyModule, fn: ast.FunctionDef, i: int, text: str) -> ByteEdit:
    """Insert parameter `text` at position `i`; a separator recorded with it (what
    `_remove_param` removed) is kept, so the signature comes back byte for byte."""
    params = fn.args.args
    i = len(params) if i < 0 else min(i, len(params))
    if i > 0:
        at = _param_end(mod, fn, i - 1)
        return ByteEdit(at, at, text if text.lstrip().startswith(",") else ", " + text)
    if params:
        at = mod.start(params[0])
        return ByteEdit(at, at, text if text.rstrip().endswith(",") or text[-1:].isspace() and "," in text
                        else text + ", ")
    # no parameter: just inside the parentheses after the name
    at = mod.source.index(b"(", mod.start(fn) + len("def ")) + 1
    return ByteEdit(at, at, text)


# ---------------------------------------------------------------------------------------------
_RADIX = re.compile(r"^(?:[A-Z0-9]+_)?(?:RADIX|DIGIT)(?:_?(?:BITS|WIDTH))?$"
                    r"|^BITS_PER_(?:PASS|DIGIT|STEP|ROUND)$")
KEY_WIDTHS = (8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class RadixWidth(Pass):
    """The digit width of a radix pass (a `RADIX_BITS`-style constexpr pinned at a launch or as
    a parameter default): de-optimization halves it (more, narrower passes), optimization
    doubles it (or sets the recorded width)."""

    value: int = 0
    """The width to set; 0 = twice the current width (optimize) / half of it (deoptimize)."""
    floor: int = 1
    """The narrowest digit a de-optimization produces."""
    cap: int = 8
    """The widest digit an optimization without a recorded width produces (2**8 bins)."""

    name: ClassVar[str] = "radix-width"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "widen/narrow the digit (RADIX_BITS) of a radix select/sort"
    provides: ClassVar[tuple[str, ...]] = ("radix-digits",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    # every pass must consume whole digits of the key (32 // RADIX_BITS passes)
    preconditions: ClassVar[tuple[str, ...]] = ("bits >= 1", "key_bits % bits == 0")

    def _literals(self, mod: PyModule) -> list[tuple[str, ast.Constant, ast.AST, ast.FunctionDef]]:
        """(constexpr name, its int literal, the launch or kernel holding it, the kernel).
        Widths inside an autotune config list are the autotune pass's: it pins one first."""
        shifts = _shiftnames_in(mod)
        out = []
        for kernel in mod.kernels():
            names = {a.arg for a in _constexpr_params(kernel) if _RADIX.match(a.arg) and a.arg in shifts}
            if autotuned(mod, kernel):
                # a launch cannot pass what the configs set, and a config overrides a default
                dec = mod.decorator(kernel, "autotune")
                names -= {n.value for n in ast.walk(dec) if isinstance(n, ast.Constant)}
            for i, param in enumerate(kernel.args.args):
                default = _default_of(kernel, i)
                if param.arg in names and literal_int(default) is not None:
                    out.append((param.arg, default, kernel, kernel))
            for call in mod.launches(kernel.name):
                for kw in call.keywords:
                    if kw.arg in names and literal_int(kw.value) is not None:
                        out.append((kw.arg, kw.value, call, kernel))
        return sorted(out, key=lambda t: mod.start(t[1]))

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out: list[Site] = []
        for name, lit, holder, _ in self._literals(mod):
            detail = {"constexpr": name, "bits": lit.value, "value_span": list(mod.span(lit))}
            if lit.value > self.floor:
                out.append(make_site(self.name, ir, index, mod.span(lit), True, detail, mod.span(holder)))
            out.append(make_site(self.name, ir, index, mod.span(lit), False, detail, mod.span(holder)))
        return out

    def _resize(self, ir: KernelIR, site: Site, ctx: PassContext | None, grow: bool) -> PassResult:
        mod = PyModule(ir)
        found = next((t for t in self._literals(mod) if mod.span(t[1]) == tuple(site.span)), None)
        if found is None:
            return Skipped("no radix width literal at the site", {"site": site.anchor})
        name, lit, _, _ = found
        current = lit.value
        target = self.value or (current * 2 if grow else current // 2)
        if not grow:
            target = max(target, self.floor)
        elif not self.value and target > self.cap:
            return Skipped(f"{name} is {current}: doubling it passes the cap {self.cap}",
                           {"bits": current, "cap": self.cap})
        facts: dict[str, int] = {"bits": target}
        key_bits = _key_bits(mod, name)
        if key_bits is not None:
            facts["key_bits"] = key_bits
        results, skip = self.check(ctx, facts)
        if skip:
            return skip
        if target == current:
            return Skipped(f"{name} is already {current}", {"bits": current})
        return finish(ir, site, [ByteEdit(*mod.span(lit), str(target))], options={"value": current},
                      preconditions=results)

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return self._resize(ir, site, ctx, grow=False)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return self._resize(ir, site, ctx, grow=True)


def _shiftnames_in(mod: PyModule) -> set[str]:
    """Names used as a shift amount or a shifted-by width in the jit functions (`1 << BITS`,
    `k >> BITS`): a radix width is one."""
    out: set[str] = set()
    for fn in mod.kernels():
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.LShift, ast.RShift)):
                out |= {n.id for n in (node.left, node.right) if isinstance(n, ast.Name)}
    return out


def _key_bits(mod: PyModule, name: str) -> int | None:
    """The key width the digits of `name` cut: the literal in `32 // NAME` or `32 - NAME`."""
    widths = [node.left.value for fn in mod.kernels() for node in ast.walk(fn)
              if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Sub))
              and _is_name(node.right, name) and literal_int(node.left) in KEY_WIDTHS]
    return max(widths) if widths else None
