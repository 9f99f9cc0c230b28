"""Algorithmic intents: detected and declared, rewritten only by the LLM rewriter.

These passes carry preconditions and a detector (where the construct is present, which kernels
could take it) but no deterministic rule: `deterministic = False`, and `optimize` /
`deoptimize` return `Skipped("needs the LLM rewriter")`. `passes.rewriter.ChainRewriter` with
the LLM back-end performs them.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

NEEDS_LLM = "needs the LLM rewriter"


class _Intent(Pass):
    """Detection by patterns over each kernel's text (CUDA: `__global__`/`__device__`
    functions; Triton: `@triton.jit` functions); a kernel without the construct is an
    applicable site."""

    __slots__ = ()
    deterministic: ClassVar[bool] = False
    patterns: ClassVar[dict[str, tuple[str, ...]]] = {}
    """language -> regexes that must ALL match a function's text for the intent to be present."""

    def _functions(self, ir: KernelIR) -> list[tuple[str, int, int, bool]]:
        """(name, start, end, is_kernel) of the functions, byte spans."""
        lang = str(getattr(ir.language, "value", ir.language))
        if lang == "triton":
            from passes.triton._py import PyModule  # noqa: PLC0415

            mod = PyModule(ir)
            return [(k.name, *mod.stmt_span(k), True) for k in mod.kernels()]
        from passes.cuda._c import CSource, functions  # noqa: PLC0415

        src = CSource(ir)
        return [(f.name, *src.bspan(f.start, f.body_end), f.is_kernel) for f in functions(src)]

    def present_in(self, language: str, text: str) -> bool:
        pats = self.patterns.get(language, ())
        return bool(pats) and all(re.search(p, text, re.M) for p in pats)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        lang = str(getattr(ir.language, "value", ir.language))
        if lang not in self.languages:
            return []
        out = []
        for name, start, end, is_kernel in self._functions(ir):
            text = ir.source[start:end].decode("utf-8", errors="replace")
            if self.present_in(lang, text):
                out.append(make_site(self.name, ir, index, (start, end), True, {"function": name}))
            elif is_kernel:
                out.append(make_site(self.name, ir, index, (start, end), False, {"function": name}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped(NEEDS_LLM, {"pass": self.name})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        results, skip = self.check(ctx)
        if skip:
            return skip
        return Skipped(NEEDS_LLM, {"pass": self.name})


@dataclass(frozen=True, slots=True)
class RadixSelect(_Intent):
    """Top-k / selection by radix digits: per-digit histograms narrow the k-th key."""

    name: ClassVar[str] = "radix-select"
    category: ClassVar[Category] = Category.ALGORITHMIC
    summary: ClassVar[str] = "select the k-th key digit by digit with histograms (coarse + refine)"
    languages: ClassVar[tuple[str, ...]] = ("cuda", "triton")
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("dtype in {fp32, fp16, bf16, int32}",)
    patterns: ClassVar[dict[str, tuple[str, ...]]] = {
        "cuda": (r">>\s*[\w()*+ ]+\)?\s*&\s*(0x[0-9a-fA-F]+|\w*MASK\w*|\(\s*\w+\s*-\s*1\s*\))",
                 r"atomicAdd\s*\(\s*&\s*\w*(hist|count|bin)\w*\s*\["),
        "triton": (r">>", r"tl\.histogram\s*\(|tl\.atomic_add\s*\(\s*\w*(hist|count|bin)"),
    }


@dataclass(frozen=True, slots=True)
class GemmPhaseDecomposition(_Intent):
    """A recurrence rewritten as chunk-level GEMM phases: a state matrix read by one matrix
    product and updated by another inside the chunk loop (chunked linear attention / GDN)."""

    name: ClassVar[str] = "gemm-phase-decomposition"
    category: ClassVar[Category] = Category.ALGORITHMIC
    summary: ClassVar[str] = "per-token recurrence -> chunked GEMM phases with a carried state"
    languages: ClassVar[tuple[str, ...]] = ("triton",)
    platforms: ClassVar[tuple[str, ...]] = ("*",)

    def present_in(self, language: str, text: str) -> bool:
        try:
            tree = ast.parse(_dedent(text))
        except SyntaxError:
            return False
        for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))):
            read_by_dot, updated_by_dot = set(), set()
            for node in ast.walk(loop):
                if isinstance(node, ast.Call) and _dotted(node.func) == "tl.dot":
                    for arg in node.args[:2]:
                        read_by_dot |= {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
                if isinstance(node, (ast.Assign, ast.AugAssign)):
                    targets = [node.target] if isinstance(node, ast.AugAssign) else node.targets
                    value = node.value
                    has_dot = any(isinstance(c, ast.Call) and _dotted(c.func) == "tl.dot"
                                  for c in ast.walk(value))
                    uses_self = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                    for t in targets:
                        if isinstance(t, ast.Name) and has_dot and (
                                isinstance(node, ast.AugAssign) or t.id in uses_self):
                            updated_by_dot.add(t.id)
            if read_by_dot & updated_by_dot:
                return True
        return False


def _dotted(expr: ast.AST) -> str:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
    return ".".join(reversed(parts))


def _dedent(text: str) -> str:
    import textwrap  # noqa: PLC0415

    lines = text.splitlines()
    # a decorated kernel's text starts at its first decorator; drop decorators
    while lines and lines[0].lstrip().startswith("@"):
        lines.pop(0)
    return textwrap.dedent("\n".join(lines))
