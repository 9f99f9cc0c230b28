"""Compute-level passes of Triton kernels: tensor-core `tl.dot` and `exp2` with a folded log2(e).
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee
from passes.triton.launch import TRITON

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

DOT_NAMES = frozenset({"tl.dot", "triton.language.dot"})
EXP2_NAMES = frozenset({"tl.exp2", "tl.math.exp2", "triton.language.exp2"})
EXP_NAMES = frozenset({"tl.exp", "tl.math.exp", "triton.language.exp"})
LOG2E = 1.4426950408889634
_F32 = ".to(tl.float32)"


def _paren(mod: PyModule, node: ast.AST) -> str:
    """Source of `node`, parenthesized unless it is an atom (name, call, attribute, subscript)."""
    text = mod.text(node)
    if isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)):
        return text
    return f"({text})"


def _slice_pattern(node: ast.AST) -> str:
    """"MKx" for `x[:, :, None]`, "xKN" for `x[None, :, :]`, "" otherwise."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) == 3):
        return ""
    marks = "".join("x" if isinstance(e, ast.Constant) and e.value is None
                    else (":" if isinstance(e, ast.Slice) and e.lower is None and e.upper is None
                          and e.step is None else "?") for e in node.slice.elts)
    return {"::x": "a", "x::": "b"}.get(marks, "")


def _strip_f32(mod: PyModule, node: ast.AST) -> str:
    """The operand of a de-optimized product without its `.to(tl.float32)` cast."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to" and len(node.args) == 1
            and mod.text(node.args[0]) == "tl.float32" and not node.keywords):
        inner = node.func.value
        return mod.text(inner)
    return _paren(mod, node)


@dataclass(frozen=True, slots=True)
class TensorCoreDot(Pass):
    """`tl.dot` (tensor cores) <-> a broadcast multiply reduced with `tl.sum` in fp32."""

    call: str = ""
    """The exact `tl.dot(...)` expression to restore (recorded by a de-optimization)."""

    name: ClassVar[str] = "tensor-core-dot"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "tl.dot on tensor cores <-> broadcast multiply + tl.sum"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("tensor-core",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = (
        "arch >= sm_70", "dtype in {fp16, bf16, fp32, fp8, fp8e4m3, fp8e5m2, int8}")

    def _dots(self, mod: PyModule) -> list[ast.Call]:
        return [c for k in mod.kernels() for c in mod.calls(k, DOT_NAMES) if len(c.args) >= 2]

    def _products(self, mod: PyModule) -> list[tuple[ast.AST, ast.Call, ast.AST | None]]:
        """(whole expression, the tl.sum call, the accumulator or None) of de-optimized dots."""
        out = []
        for kernel in mod.kernels():
            for call in mod.calls(kernel, frozenset({"tl.sum"})):
                axis = next((k.value for k in call.keywords if k.arg == "axis"),
                            call.args[1] if len(call.args) > 1 else None)
                prod = call.args[0] if call.args else None
                if not (isinstance(axis, ast.Constant) and axis.value == 1
                        and isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult)
                        and _slice_pattern(prod.left) == "a" and _slice_pattern(prod.right) == "b"):
                    continue
                parent = mod.parents.get(call)
                cast = mod.parents.get(parent) if isinstance(parent, ast.Attribute) else None
                if (isinstance(parent, ast.Attribute) and parent.attr == "to"
                        and isinstance(cast, ast.Call) and cast.func is parent):
                    # `tl.sum(...).to(T)`: a de-optimized out_dtype, or the kernel's own cast;
                    # the site covers it, `optimize` decides (the recorded call says which)
                    out.append((cast, call, None))
                elif isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add) and parent.right is call:
                    out.append((parent, call, parent.left))
                else:
                    out.append((call, call, None))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = [make_site(self.name, ir, index, mod.span(c), True,
                         {"a": mod.text(c.args[0]), "b": mod.text(c.args[1])}) for c in self._dots(mod)]
        out += [make_site(self.name, ir, index, mod.span(whole), False,
                          {"accumulates": acc is not None}) for whole, _, acc in self._products(mod)]
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        call = next((c for c in self._dots(mod) if mod.span(c) == tuple(site.span)), None)
        if call is None:
            return Skipped("no tl.dot at the site", {"site": site.anchor})
        acc = call.args[2] if len(call.args) > 2 else next(
            (k.value for k in call.keywords if k.arg == "acc"), None)
        out_dtype = next((k.value for k in call.keywords if k.arg == "out_dtype"), None)
        a, b = call.args[0], call.args[1]
        product = (f"tl.sum({_paren(mod, a)}{_F32}[:, :, None] * "
                   f"{_paren(mod, b)}{_F32}[None, :, :], axis=1)")
        if out_dtype is not None and acc is None:
            product = f"{product}.to({mod.text(out_dtype)})"
        text = f"{_paren(mod, acc)} + {product}" if acc is not None else product
        return finish(ir, site, [ByteEdit(*mod.span(call), text)],
                      options={"call": mod.text(call)})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        found = next(((w, c, acc) for w, c, acc in self._products(mod)
                      if mod.span(w) == tuple(site.span)), None)
        if found is None:
            return Skipped("no broadcast-multiply reduction at the site", {"site": site.anchor})
        results, skip = self.check(ctx)
        if skip:
            return skip
        whole, call, acc = found
        if self.call:
            recorded = ast.parse(self.call, mode="eval").body
            keywords = {k.arg for k in getattr(recorded, "keywords", [])}
            has_acc = isinstance(recorded, ast.Call) and (len(recorded.args) > 2 or "acc" in keywords)
            if not has_acc and (isinstance(whole, ast.BinOp)  # `x + dot(a, b)`: only the product
                                or "out_dtype" not in keywords):  # `.to(T)` is the kernel's own
                whole = call
            text = self.call
        else:
            prod = call.args[0]
            a = _strip_f32(mod, prod.left.value)
            b = _strip_f32(mod, prod.right.value)
            if acc is None:
                whole = call  # a `.to(T)` after the product stays a cast of the dot
            text = f"tl.dot({a}, {b}, {mod.text(acc)})" if acc is not None else f"tl.dot({a}, {b})"
        return finish(ir, site, [ByteEdit(*mod.span(whole), text)], preconditions=results)


# ---------------------------------------------------------------------------------------------
def _log2e_names(mod: PyModule) -> set[str]:
    """Names bound (anywhere in the module) to the constant log2(e)."""
    names = set()
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Assign) and _is_log2e_literal(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None and _is_log2e_literal(node.value):
            names.add(node.target.id)
    return names


def _is_log2e_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and callee(node) in ("tl.constexpr", "triton.language.constexpr") \
            and len(node.args) == 1:
        node = node.args[0]  # LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
    return (isinstance(node, ast.Constant) and isinstance(node.value, float)
            and math.isclose(node.value, LOG2E, rel_tol=1e-6))


@dataclass(frozen=True, slots=True)
class Exp2Fold(Pass):
    """`exp2(x * log2(e))` (the MUFU.EX2 instruction, the factor folded) <-> `exp(x)`."""

    fn: str = "tl.exp2"
    """The exp2 spelling to emit."""
    factor: str = "1.4426950408889634"
    """The log2(e) factor's source (a literal or a name bound to it)."""
    side: str = "right"
    """Which side of the product the factor stands on ("left" / "right")."""
    target: str = ""
    """Scale-folded form: the variable that carries `scale * log2(e)` (e.g. `qk_scale`) and
    whose every use feeds exp2; empty for the direct `exp2(x * log2(e))` form."""

    name: ClassVar[str] = "exp2-fold"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "exp2 with log2(e) folded into the argument <-> exp"
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("side in {'left', 'right'}",)

    def _folded(self, mod: PyModule) -> list[tuple[ast.Call, ast.AST, ast.AST, str]]:
        """(exp2 call, its x, the factor, side) for `exp2(x * LOG2E)` / `exp2(LOG2E * x)`."""
        log2e = _log2e_names(mod)
        out = []
        for kernel in mod.kernels():
            for call in mod.calls(kernel, EXP2_NAMES):
                arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
                if not (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mult)):
                    continue
                for x, factor, side in ((arg.left, arg.right, "right"), (arg.right, arg.left, "left")):
                    if _is_log2e_literal(factor) or (isinstance(factor, ast.Name) and factor.id in log2e):
                        out.append((call, x, factor, side))
                        break
        return out

    def _scales(self, mod: PyModule) -> list[tuple[ast.Assign, ast.AST, ast.AST, str]]:
        """(assignment, scale, factor, side) of `s = scale * LOG2E` inside a kernel."""
        log2e = _log2e_names(mod)
        out = []
        for kernel in mod.kernels():
            for node in ast.walk(kernel):
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Mult)):
                    continue
                value = node.value
                for x, factor, side in ((value.left, value.right, "right"),
                                        (value.right, value.left, "left")):
                    if _is_log2e_literal(factor) or (isinstance(factor, ast.Name) and factor.id in log2e):
                        out.append((node, x, factor, side))
                        break
        return out

    def _module_calls(self, mod: PyModule, names: frozenset[str]) -> list[ast.Call]:
        return [c for k in mod.kernels() for c in mod.calls(k, names)]

    def _jit_span(self, mod: PyModule) -> tuple[int, int]:
        kernels = mod.kernels()
        return min(mod.stmt_span(k)[0] for k in kernels), max(mod.end(k) for k in kernels)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = [make_site(self.name, ir, index, mod.span(c), True,
                         {"factor": mod.text(f), "side": side}) for c, _, f, side in self._folded(mod)]
        if self._module_calls(mod, EXP2_NAMES):
            for assign, _, factor, side in self._scales(mod):
                out.append(make_site(self.name, ir, index, self._jit_span(mod), True,
                                     {"factor": mod.text(factor), "side": side,
                                      "target": assign.targets[0].id}, mod.span(assign)))
        for kernel in mod.kernels():
            # the scale-folded form rewrites every exp of the kernels: the region is theirs
            out += [make_site(self.name, ir, index, self._jit_span(mod), False,
                              {"call_span": list(mod.span(c))}, mod.span(c))
                    for c in mod.calls(kernel, EXP_NAMES) if len(c.args) == 1 and not c.keywords]
        return out

    def _deoptimize_scale(self, ir: KernelIR, mod: PyModule, site: Site) -> PassResult:
        target = site.detail["target"]
        found = next((f for f in self._scales(mod) if f[0].targets[0].id == target), None)
        if found is None:
            return Skipped("no log2(e)-folded scale at the site", {"target": target})
        if self._module_calls(mod, EXP_NAMES) or self._module_calls(
                mod, frozenset({"tl.log2", "tl.math.log2", "tl.log", "tl.math.log"})):
            return Skipped("the kernels also use exp/log: dropping the folded log2(e) would "
                           "change them", {"target": target})
        assign, x, factor, side = found
        edits = [ByteEdit(*mod.span(assign.value), mod.text(x))]
        for call in self._module_calls(mod, EXP2_NAMES):
            edits.append(ByteEdit(*mod.span(call.func), mod.text(call.func)[:-1]))
        return finish(ir, site, sorted(edits, key=lambda e: e.start), options={
            "fn": "", "factor": mod.text(factor), "side": side, "target": target})

    def _optimize_scale(self, ir: KernelIR, mod: PyModule, site: Site) -> PassResult:
        assign = next((n for k in mod.kernels() for n in ast.walk(k) if isinstance(n, ast.Assign)
                       and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                       and n.targets[0].id == self.target), None)
        if assign is None:
            return Skipped("the recorded scale variable is not assigned", {"target": self.target})
        x = mod.text(assign.value) if isinstance(assign.value, (ast.Name, ast.Call, ast.Attribute)) \
            else f"({mod.text(assign.value)})"
        value = f"{x} * {self.factor}" if self.side == "right" else f"{self.factor} * {x}"
        edits = [ByteEdit(*mod.span(assign.value), value)]
        for call in self._module_calls(mod, EXP_NAMES):
            edits.append(ByteEdit(*mod.span(call.func), mod.text(call.func) + "2"))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if site.detail.get("target"):
            return self._deoptimize_scale(ir, mod, site)
        found = next((f for f in self._folded(mod) if mod.span(f[0]) == tuple(site.span)), None)
        if found is None:
            return Skipped("no exp2 with a folded log2(e) at the site", {"site": site.anchor})
        call, x, factor, side = found
        exp = "tl.math.exp" if callee(call).startswith("tl.math") else "tl.exp"
        return finish(ir, site, [ByteEdit(*mod.span(call), f"{exp}({mod.text(x)})")],
                      options={"fn": callee(call), "factor": mod.text(factor), "side": side})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if self.target:
            return self._optimize_scale(ir, mod, site)
        call = next((c for k in mod.kernels() for c in mod.calls(k, EXP_NAMES)
                     if list(mod.span(c)) == list(site.detail.get("call_span", ()))), None)
        if call is None or len(call.args) != 1:
            return Skipped("no exp at the site", {"site": site.anchor})
        results, skip = self.check(ctx, {"side": self.side})
        if skip:
            return skip
        x = call.args[0]
        tight = isinstance(x, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)) or (
            isinstance(x, ast.BinOp) and isinstance(x.op, (ast.Mult, ast.Div)) and self.side == "right")
        xt = mod.text(x) if tight else f"({mod.text(x)})"
        arg = f"{xt} * {self.factor}" if self.side == "right" else f"{self.factor} * {xt}"
        return finish(ir, site, [ByteEdit(*mod.span(call), f"{self.fn}({arg})")],
                      preconditions=results)
