"""A tf32 dot operand read along its non-K axis, rounded to TF32 in registers before the dot.

Hopper's wgmma reads 32-bit operands from shared memory K-major only (see `layout`). Triton
stages a `tl.dot` operand loaded N- (or M-) contiguous straight into a K-major shared buffer:
element by element (4-byte asynchronous copies, four times the copy instructions of a
K-contiguous read, none of them 16-byte vectors; Triton 3.6 and 3.9 at sm_90). An elementwise
operation between the load and the dot changes how it is staged: the load is pipelined in the
layout it is read in (16-byte copies), and the operation's result is written K-major from
registers. The operation the rule inserts is the rounding the tf32 product needs anyway, to the
nearest TF32 value (ties away from zero) on the bits, where the tensor cores would otherwise
drop the low 13 bits: the product is the same or closer to the fp32 one.

Beside `k-major-operands` (which copies the tensor K-major on the host) this makes no copy: no
pass over the operand per call, which for a large operand read once (a batched product's
right-hand side) costs more than the product gains.

A site is one operand of a kernel's dot loop, as `layout.KMajorOperands` finds them (anchored
at its load); it is present where the dots read the operand through the rounding helper the
rule adds to the module (`HELPER`). Refused with the reason: an operand already K-major, a
16-bit operand (the case's dtype fact, or a cast before the dot), a dot not in tf32 (full fp32:
`input_precision="ieee"`, `allow_tf32=False`; `"tf32x3"`, whose low part the rounding would
drop), a layout it cannot tell, an operand the kernel also writes, a kernel this module never
launches. The de-optimization unwraps the operand; the helper goes when no dot calls it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, fresh_name, normalized
from passes.triton.affine import Scope
from passes.triton.host_layout import HostArgs
from passes.triton.launch import TRITON
from passes.triton.layout import DOT, SIXTEEN_BIT, KMajorOperands, _after_imports, _unwrap
from passes.triton.roles import dot_loops

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

HELPER = '''

@triton.jit
def {name}(x):
    # x rounded to TF32 in registers (nearest, ties away from zero), so that the compiler
    # stages the dot's operand from the layout it is read in
    return ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
'''
_IMPORTS = (("triton", None, "import triton\n"), ("triton.language", "tl", "import triton.language as tl\n"))


def _helpers(mod: PyModule) -> set[str]:
    """The names of the module's functions that are this rule's helper (its text up to the name)."""
    out = set()
    for fn in mod.functions():
        lo, hi = mod.stmt_span(fn)
        text = mod.source[lo:hi].decode("utf-8")
        if normalized(text) == normalized(HELPER.format(name=fn.name)):
            out.add(fn.name)
    return out


def _precision(dot: ast.Call) -> str:
    """Why `dot` is not a tf32 product ("" where it is)."""
    for kw in dot.keywords:
        value = kw.value.value if isinstance(kw.value, ast.Constant) else None
        if kw.arg == "input_precision" and value in ("ieee", "tf32x3"):
            return f'the dot runs with input_precision="{value}", not in tf32'
        if kw.arg == "allow_tf32" and value is False:
            return "the dot runs in full fp32 (allow_tf32=False), not in tf32"
    return ""


@dataclass(frozen=True, slots=True)
class Tf32RoundOperands(Pass):
    """A tf32 dot operand read N- (or M-) contiguous <-> rounded to TF32 in registers first."""

    name: ClassVar[str] = "tf32-round-operands"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = ("a tf32 tl.dot operand read along its non-K axis <-> rounded to TF32 "
                              "in registers before the dot (staged from the layout it is read in)")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("tf32-rounded",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)

    def _reads(self, mod: PyModule, kernel: ast.FunctionDef,
               helpers: set[str]) -> list[tuple[ast.Call, ast.AST, ast.Call, bool]]:
        """(dot, the operand argument, the load it reads, read through a helper) of each dot
        argument of the kernel's dot loops that reads a load."""
        out = []
        for loop in dot_loops(kernel):
            scope = Scope(mod, kernel, region=loop)
            for dot in mod.calls(loop, DOT):
                for arg in dot.args[:2]:
                    wrapped = isinstance(arg, ast.Call) and callee(arg) in helpers and len(arg.args) == 1
                    load, _, _ = _unwrap(scope, arg.args[0] if wrapped else arg)  # type: ignore[attr-defined]
                    if load is not None:
                        out.append((dot, arg, load, wrapped))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        whole = (0, len(mod.source))
        helpers = _helpers(mod)
        out = []
        for kernel in mod.kernels():
            ops = KMajorOperands()._operands(mod, kernel)
            loads = {id(ld): op.param for op in ops for ld in op.loads}
            wrapped = {}
            for _, _, load, through in self._reads(mod, kernel, helpers):
                if through:
                    param = self._param(mod, kernel, load)
                    if param is not None:
                        wrapped.setdefault(param, load)
            for op in ops:
                if op.param not in wrapped:
                    out.append(make_site(self.name, ir, index, whole, False,
                                         {"kernel": kernel.name, "operand": op.param}, mod.span(op.loads[0])))
            for param, load in wrapped.items():
                if id(load) not in loads:
                    out.append(make_site(self.name, ir, index, whole, True,
                                         {"kernel": kernel.name, "operand": param}, mod.span(load)))
        return out

    @staticmethod
    def _param(mod: PyModule, kernel: ast.FunctionDef, load: ast.Call) -> str | None:
        params = {a.arg for a in kernel.args.args}
        read = KMajorOperands()._read(mod, kernel, Scope(mod, kernel), load, 0, params)
        return read.param if read is not None else None

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        op = next((o for o in KMajorOperands()._operands(mod, kernel)
                   if o.param == site.detail.get("operand")), None) if kernel is not None else None
        if kernel is None or op is None:
            return Skipped("no unrounded dot operand at the site", {"site": site.anchor})
        dtype = str((ctx.facts if ctx is not None else {}).get("dtype", "")).split(".")[-1]
        if dtype in SIXTEEN_BIT:
            return Skipped(f"the case's operands are {dtype}: a 16-bit operand is read transposed "
                           "at no cost", {"dtype": dtype})
        launches = mod.launches(kernel.name)
        if not launches:
            return Skipped("the kernel is never launched in this module", {"kernel": kernel.name})
        layouts = {KMajorOperands._layout(op, HostArgs(mod, kernel, c)) for c in launches}
        why = next((x for x in layouts if isinstance(x, str)), None)
        if why:
            return Skipped(why, {"operand": op.param})
        helpers = _helpers(mod)
        reads = [(dot, arg) for dot, arg, load, through in self._reads(mod, kernel, helpers)
                 if not through and any(load is ld for ld in op.loads)]
        why = next((w for dot, _ in reads for w in [_precision(dot)] if w), "")
        if why:
            return Skipped(why, {"operand": op.param})
        if helpers:
            helper = min(helpers)
            edits = []
        else:
            taken = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} | \
                {f.name for f in mod.functions()}
            helper = fresh_name("_tf32_round", taken)
            have = {(a.name, a.asname) for n in mod.tree.body if isinstance(n, ast.Import) for a in n.names}
            imports = "".join(line for name, alias, line in _IMPORTS if (name, alias) not in have)
            at = _after_imports(mod)
            edits = [ByteEdit(at, at, imports + HELPER.format(name=helper))]
        edits += [ByteEdit(*mod.span(arg), f"{helper}({mod.text(arg)})") for _, arg in reads]
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        helpers = _helpers(mod)
        if kernel is None or not helpers:
            return Skipped("no rounded dot operand at the site", {"site": site.anchor})
        mine = [arg for _, arg, load, through in self._reads(mod, kernel, helpers)
                if through and self._param(mod, kernel, load) == site.detail.get("operand")]
        if not mine:
            return Skipped("no rounded dot operand at the site", {"site": site.anchor})
        edits = [ByteEdit(*mod.span(arg), mod.text(arg.args[0])) for arg in mine]  # type: ignore[attr-defined]
        calls = [c for c in ast.walk(mod.tree) if isinstance(c, ast.Call) and callee(c) in helpers]
        if len(calls) == len(mine):
            for fn in mod.functions():
                if fn.name in helpers:
                    lo, hi = mod.stmt_span(fn)
                    while lo > 0 and mod.source[lo - 2:lo] == b"\n\n":
                        lo -= 1
                    edits.append(ByteEdit(lo, hi, ""))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))
