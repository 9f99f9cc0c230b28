"""A persistent kernel's loop over tiles flattened with the K loop inside it.

A persistent kernel walks its tiles in a loop that starts at the program id and steps by the
number of programs; each tile runs a K loop of `tl.dot` products, then an epilogue that stores
the tile. Left as two loops, Triton pipelines the K loop alone: its first loads of the next
tile wait until the epilogue of this one is done. `tl.range(..., flatten=True)` on the tile
loop has Triton pipeline both loops as one, so the next tile's loads are in flight during
this tile's epilogue. This is the form the expert GEMM's persistent loop was written in, and,
as there, it is offered only where the K loop reads its operands through tensor descriptors
(`persist.feeds_dot`: over pointer loads a flattened tile loop measured slower). A kernel made
persistent by `persistent-grid` gets the keyword with the loop; this rule reaches a kernel
that was written persistent. An unroll of the K loop (`loop_unroll_factor`) is taken off with
it: Triton does not fuse an unrolled inner loop, and the keyword would change nothing.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee
from passes.triton.launch import RANGE_NAMES
from passes.triton.persist import _descriptor_loads
from passes.triton.roles import dot_loops

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

PROGRAM_ID = frozenset({"tl.program_id", "triton.language.program_id"})


def tile_loops(kernel: ast.FunctionDef) -> list[ast.For]:
    """The loops of `kernel` that walk tiles persistently and are not flattened: a `range` /
    `tl.range` of three arguments whose start reads the program id, holding a K loop that feeds
    `tl.dot` from tensor descriptors, with no `flatten` keyword."""
    out = []
    for node in ast.walk(kernel):
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                and callee(node.iter) in ("range", *RANGE_NAMES) and len(node.iter.args) == 3
                and not any(k.arg in ("flatten", None) for k in node.iter.keywords)):
            continue
        start = node.iter.args[0]
        if not any(isinstance(c, ast.Call) and callee(c) in PROGRAM_ID for c in ast.walk(start)):
            continue
        inner = [loop for loop in dot_loops(node) if loop is not node]
        if inner and all(_descriptor_loads(loop) for loop in inner):
            out.append(node)
    return out


@dataclass(frozen=True, slots=True)
class TileLoopFlatten(Pass):
    """A persistent tile loop over a descriptor-fed K loop -> `tl.range(..., flatten=True)`.
    Optimization only: a de-optimization would take a keyword off an expert's loop that
    `persistent-grid` already records with the loop itself."""

    name: ClassVar[str] = "tile-loop-flatten"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("a persistent tile loop over a descriptor-fed K loop flattened "
                              "(tl.range(..., flatten=True)): the next tile's loads overlap "
                              "this tile's epilogue")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    languages: ClassVar[tuple[str, ...]] = ("triton",)
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # The expert GEMM's persistent kernel is written so; the gain is the epilogue's share of a
    # tile's time, a few percent on a large GEMM, more where K is short.
    prior: ClassVar[float] = 1.05

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        return [make_site(self.name, ir, index, mod.stmt_span(loop), False,
                          {"kernel": kernel.name, "loop": mod.text(loop.target)}, mod.span(loop.iter))
                for kernel in mod.kernels() for loop in tile_loops(kernel)]

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("tile-loop-flatten only adds the keyword; it takes none off",
                       {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        loop = next((loop for kernel in mod.kernels() for loop in tile_loops(kernel)
                     if mod.stmt_span(loop) == tuple(site.span)), None)
        if loop is None:
            return Skipped("no unflattened persistent tile loop at the site", {"site": site.anchor})
        call = loop.iter
        edits = [mod.insert_argument(call, len(mod.arguments(call)), "flatten=True")]
        if callee(call) == "range":
            edits.insert(0, ByteEdit(mod.start(call.func), mod.end(call.func), "tl.range"))
        # Triton fuses the two loops only where the inner one is not unrolled (an unrolled K
        # loop compiles the same with the keyword as without it, at sm_90): its unroll goes
        for inner in dot_loops(loop):
            if isinstance(inner, ast.For) and isinstance(inner.iter, ast.Call):
                unroll = PyModule.keyword(inner.iter, "loop_unroll_factor")
                if unroll is not None:
                    edits.append(mod.remove_argument(inner.iter, unroll))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))
