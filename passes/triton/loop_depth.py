"""A kernel loop's own pipelining depth handed to its launch.

Triton pipelines a loop as deep as its `tl.range(..., num_stages=N)` says when it says so, and
as deep as the launch's `num_stages` (a `triton.Config`'s, a launch keyword, else Triton's
default) only when it does not. A literal depth on the loop therefore shadows every depth the
kernel's autotune list or launch sets: a configuration sweep that varies `num_stages` changes
nothing the loop runs, and a card's recorded configuration meets the loop's depth, not its own.
`loop-depth` takes the literal off the loop, so that the depth the launch applies (and that
sweeps and cards tune) is the one the loop runs with. It is offered where that changes the depth
of some configuration the kernel runs; the gate judges the new depth like any other step.
"""
from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, literal_int
from passes.triton.launch import RANGE_NAMES, _inner_loop_loads, _loads
from passes.triton.roles import DEFAULT_STAGES, autotune_entries, kernel_launches

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR


def loading_ranges(kernel: ast.FunctionDef) -> list[ast.For]:
    """Each `tl.range` loop in `kernel` whose body loads memory and no loop inside it does
    (that one would be the loop a pipeline overlaps), in source order."""
    return [node for node in ast.walk(kernel)
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
            and callee(node.iter) in RANGE_NAMES and _loads(node) and not _inner_loop_loads(node)]


def deep_loops(kernel: ast.FunctionDef) -> list[tuple[ast.For, ast.keyword]]:
    """(loop, its `num_stages` keyword) of each loading `tl.range` loop in `kernel`
    (`loading_ranges`) that sets its own literal depth."""
    return [(loop, kw) for loop in loading_ranges(kernel)
            for kw in [PyModule.keyword(loop.iter, "num_stages")]
            if kw is not None and literal_int(kw.value) is not None]


def launch_depths(mod: PyModule, kernel: ast.FunctionDef) -> set[int | None]:
    """The pipelining depths the kernel's launches apply to a loop that sets none: each
    autotune configuration's `num_stages` (Triton's default where it sets none), else each
    launch's keyword (likewise). None stands for a depth the source does not spell as a
    literal (a configuration list built by a function, a depth read from a variable)."""
    if mod.decorator(kernel, "autotune") is not None:
        configs = autotune_entries(mod, kernel)
        if not configs:
            return {None}
        return {literal_int(kw.value) if kw is not None else DEFAULT_STAGES
                for kw in (PyModule.keyword(c, "num_stages") for c in configs)}
    launches = kernel_launches(mod, kernel)
    if not launches:
        return {None}
    out: set[int | None] = set()
    for launch in launches:
        value = launch.values().get("num_stages")
        out.add(DEFAULT_STAGES if value is None else literal_int(value))
    return out


def drop_loop_keywords(ir: KernelIR, site: Site,
                       loops_of: Callable[[PyModule, ast.FunctionDef], list[tuple[ast.For, ast.keyword]]],
                       none: str) -> PassResult:
    """`ir` with each keyword that `loops_of` finds in the kernel of `site` (a site over a
    kernel's whole statement, its name in `detail["kernel"]`) taken off its loop's call, the
    call's other arguments kept; Skipped where the site holds no kernel or `loops_of` finds no
    keyword there (`none` says why)."""
    mod = PyModule(ir)
    kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")
                   and mod.stmt_span(k) == tuple(site.span)), None)
    if kernel is None:
        return Skipped("no kernel at the site", {"site": site.anchor})
    loops = loops_of(mod, kernel)
    if not loops:
        return Skipped(none, {"kernel": kernel.name})
    edits: list[ByteEdit] = [mod.remove_argument(loop.iter, kw) for loop, kw in loops]
    return finish(ir, site, sorted(edits, key=lambda e: e.start))


@dataclass(frozen=True, slots=True)
class LoopDepth(Pass):
    """A kernel loop's literal `num_stages` -> the depth its launch applies (which sweeps and
    cards tune). Optimization only: a de-optimization would add a literal to a loop, a style
    of writing, not a step an expert's kernel records."""

    name: ClassVar[str] = "loop-depth"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("a loop's own tl.range(..., num_stages=N) taken off, so the depth "
                              "the launch and its autotune configurations set applies")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    languages: ClassVar[tuple[str, ...]] = ("triton",)
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # Offered without a card wherever a loop's literal depth differs from a depth its launch
    # sets. Going from a depth of 2 to 3 or 4 on a loop of tensor-core products is worth some
    # tens of percent on an H100/H200 (a load in flight per stage hides the copy behind the
    # products), and it is what lets every later sweep of `num_stages` reach the loop.
    prior: ClassVar[float] = 1.2

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            loops = deep_loops(kernel)
            if not loops:
                continue
            depths = launch_depths(mod, kernel)
            literals = {literal_int(kw.value) for _, kw in loops}
            if None in depths or literals != depths:
                out.append(make_site(self.name, ir, index, mod.stmt_span(kernel), False,
                                     {"kernel": kernel.name, "loops": len(loops),
                                      "loop_depths": sorted(literals),
                                      "launch_depths": sorted(d for d in depths if d is not None)},
                                     mod.span(loops[0][0].iter)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("loop-depth only takes a loop's literal depth off; it writes none",
                       {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return drop_loop_keywords(ir, site, lambda mod, kernel: deep_loops(kernel),
                                  "no loop sets its own depth")
