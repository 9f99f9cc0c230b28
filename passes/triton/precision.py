"""A full-fp32 `tl.dot` on tensor cores as three tf32 products (`input_precision="tf32x3"`).

A dot asked for in full fp32 (`input_precision="ieee"`, or `allow_tf32=False`) runs on the
CUDA cores, one fused multiply-add per element of the product: on Hopper several times slower
than the tensor cores. Triton's "tf32x3" splits each fp32 operand into a tf32 high part and a
tf32 remainder and sums three tensor-core products (hi*hi + hi*lo + lo*hi, the lo*lo term
below fp32's rounding): an error of the order of fp32's, so a kernel that asked for full fp32
to keep its accuracy (a sum that cancels, a tolerance TF32 misses) keeps it, on tensor cores.

A site is one jit function with all its full-fp32 dots: the rule rewrites each to
`input_precision="tf32x3"` (an `allow_tf32=False` keyword becomes that keyword). Refused
where the case's operands are 16-bit (the precision keyword does not apply to them) or a
dot's operand is cast to a 16-bit type. The de-optimization writes `input_precision="ieee"`
back on each tf32x3 dot of the function.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule
from passes.triton.launch import TRITON
from passes.triton.layout import DOT, SIXTEEN_BIT

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

SPLIT = "tf32x3"


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _says(keyword: ast.keyword | None, value: object) -> bool:
    """`keyword` is given as the literal `value`."""
    if keyword is None or not isinstance(keyword.value, ast.Constant):
        return False
    got = keyword.value.value
    return got is value if isinstance(value, bool) else got == value


def _full_fp32(call: ast.Call) -> ast.keyword | None:
    """The keyword that asks `call` for a full-fp32 product, or None."""
    precision, tf32 = _keyword(call, "input_precision"), _keyword(call, "allow_tf32")
    return precision if _says(precision, "ieee") else tf32 if _says(tf32, False) else None


def _split(call: ast.Call) -> ast.keyword | None:
    """The `input_precision="tf32x3"` keyword of `call`, or None."""
    precision = _keyword(call, "input_precision")
    return precision if _says(precision, SPLIT) else None


def _sixteen_bit_cast(node: ast.AST) -> str:
    """The 16-bit type an operand expression casts to (`x.to(tl.float16)`), "" if none."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "to" \
                and sub.args:
            kind = ast.unparse(sub.args[0]).split(".")[-1]
            if kind in SIXTEEN_BIT:
                return kind
    return ""


@dataclass(frozen=True, slots=True)
class Tf32x3Dot(Pass):
    """A full-fp32 tl.dot (CUDA cores) <-> three tf32 tensor-core products (tf32x3)."""

    name: ClassVar[str] = "tf32x3-dot"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = ('a tl.dot in full fp32 ("ieee") <-> input_precision="tf32x3": three '
                              "tf32 tensor-core products, fp32's accuracy")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("tf32x3",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_80",)
    # Hopper: tf32 tensor cores run about 7x its fp32 FMA rate; three products and the
    # operands' split leave a little over twice the FMA loop's rate where the dot dominates.
    prior: ClassVar[float] = 2.0

    def _dots(self, mod: PyModule, kernel: ast.FunctionDef) -> list[ast.Call]:
        return [c for c in mod.calls(kernel, DOT) if len(c.args) >= 2]

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            dots = self._dots(mod, kernel)
            full = [c for c in dots if _full_fp32(c) is not None]
            split = [c for c in dots if _split(c) is not None]
            for calls, present in ((full, False), (split, True)):
                if calls:
                    out.append(make_site(self.name, ir, index, mod.span(kernel), present,
                                         {"kernel": kernel.name, "dots": len(calls)}, mod.span(calls[0])))
        return out

    def _kernel(self, mod: PyModule, site: Site) -> ast.FunctionDef | None:
        return next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = self._kernel(mod, site)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        dtype = str((ctx.facts if ctx is not None else {}).get("dtype", "")).split(".")[-1]
        if dtype in SIXTEEN_BIT:
            return Skipped(f"the case's operands are {dtype}: the dot's precision keyword does "
                           "not apply to 16-bit operands", {"dtype": dtype})
        full = [c for c in self._dots(mod, kernel) if _full_fp32(c) is not None]
        if not full:
            return Skipped("the kernel has no full-fp32 dot", {"kernel": kernel.name})
        cast = next((k for c in full for k in (_sixteen_bit_cast(c.args[0]), _sixteen_bit_cast(c.args[1]))
                     if k), "")
        if cast:
            return Skipped(f"a dot's operand is cast to {cast}: its precision keyword does not "
                           "apply", {"kernel": kernel.name})
        edits = [ByteEdit(*mod.span(k), f'input_precision="{SPLIT}"') for c in full
                 for k in [_full_fp32(c)] if k is not None]
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = self._kernel(mod, site)
        split = [c for c in self._dots(mod, kernel) if _split(c) is not None] if kernel is not None else []
        if not split:
            return Skipped("no tf32x3 dot at the site", {"site": site.anchor})
        edits = [ByteEdit(*mod.span(k), 'input_precision="ieee"') for c in split
                 for k in [_split(c)] if k is not None]
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

