"""A pipelined loop's unroll factor taken off, so that its pipeline buffers fit larger tiles.

Triton unrolls a `tl.range(..., loop_unroll_factor=N)` loop before it software-pipelines it,
so each of the N copies of a load in the unrolled body gets pipeline buffers of its own: the
loop's operand buffers are about N times what the same loop holds without the keyword. On a loop
of tile products that decides which tiles fit (a persistent descriptor GEMM compiled for sm_90
at a 128x256x64 fp16 tile and 3 stages needs 352 KiB unrolled twice, 208 KiB not; an H200 block
gets 227 KiB), so an autotuner drops every large-tile configuration the unroll pushed past the
limit, and the kernel runs the small ones. `loop-unroll` takes the literal factor off a loading loop that is
pipelined (its own depth, else a depth its configurations or launch apply, is above 1); a loop
that is not pipelined keeps it, since there an unroll buys instruction-level overlap and costs
no buffers.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, literal_int
from passes.triton.loop_depth import drop_loop_keywords, launch_depths, loading_ranges

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR


def unrolled_pipelines(mod: PyModule, kernel: ast.FunctionDef) -> list[tuple[ast.For, ast.keyword]]:
    """(loop, its `loop_unroll_factor` keyword) of each loading `tl.range` loop in `kernel`
    (`loading_ranges`) with a literal factor above 1 that Triton pipelines: its own
    `num_stages` is above 1, or it sets none and some depth the kernel's launches apply
    (`launch_depths`) is. A depth the source does not spell as a literal counts as pipelined."""
    out = []
    launched: set[int | None] | None = None
    for loop in loading_ranges(kernel):
        kw = PyModule.keyword(loop.iter, "loop_unroll_factor")
        factor = literal_int(kw.value) if kw is not None else None
        if factor is None or factor <= 1:
            continue
        own = PyModule.keyword(loop.iter, "num_stages")
        if own is not None:
            depths = {literal_int(own.value)}
        else:
            launched = launch_depths(mod, kernel) if launched is None else launched
            depths = launched
        if any(d is None or d > 1 for d in depths):
            out.append((loop, kw))
    return out


@dataclass(frozen=True, slots=True)
class LoopUnroll(Pass):
    """A pipelined loading loop's literal `loop_unroll_factor` -> none (the loop's other
    keywords stay). Optimization only: a de-optimization would unroll a loop, a style of
    writing, not a step an expert's kernel records."""

    name: ClassVar[str] = "loop-unroll"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("a pipelined loop's tl.range(..., loop_unroll_factor=N) taken off, "
                              "so its pipeline buffers are one copy's and larger tiles fit")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    languages: ClassVar[tuple[str, ...]] = ("triton",)
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # Offered without a card wherever a pipelined loop is unrolled. Alone, at the tiles that
    # already fit, the rewrite changes little (the unrolled body saves a branch and some index
    # arithmetic per trip, against nothing the pipeline does not already overlap): what it buys
    # is room, the configurations the unroll's doubled buffers pushed past the shared-memory
    # limit, which pay only once a sweep reaches them (the search tries the rule under the
    # generic autotune list first, whose dot tiles include 128x256). A modest prior, a sweep's
    # own (`SWEEP_PRIOR`), for a step whose gain needs that second one.
    prior: ClassVar[float] = 1.05

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            loops = unrolled_pipelines(mod, kernel)
            if loops:
                out.append(make_site(self.name, ir, index, mod.stmt_span(kernel), False,
                                     {"kernel": kernel.name, "loops": len(loops),
                                      "factors": sorted({literal_int(kw.value) for _, kw in loops})},
                                     mod.span(loops[0][0].iter)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("loop-unroll only takes a pipelined loop's unroll factor off; it writes none",
                       {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return drop_loop_keywords(ir, site, unrolled_pipelines, "no pipelined loop is unrolled")
