"""The round trip `optimize(deoptimize(K)) == K`, up to formatting.

`normalized(text, language)` is the formatting-free form a round trip is compared in: the AST
dump for Triton (comments, whitespace, parentheses and trailing commas do not count) and the
whitespace-free token list for CUDA. `roundtrip` de-optimizes one site, finds the matching
optimization site in the result and re-applies the pass with the recorded options — the way the
lineage engine re-derives a forward step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from passes.base import Applied, Pass, PassContext, PassResult, Site, Skipped

if TYPE_CHECKING:
    from kir import KernelIR


def normalized(text: str, language: str) -> str:
    """The formatting-free form of kernel source in `language` ("triton" | "cuda")."""
    if language == "triton":
        from passes.triton._py import normalized as py_normalized  # noqa: PLC0415

        return py_normalized(text)
    from passes.cuda._c import tokens  # noqa: PLC0415

    return " ".join(tokens(text))


def forward_site(the_pass: Pass, ir: KernelIR, removed: Site) -> Site | None:
    """The optimization site in `ir` (a de-optimized kernel) that corresponds to the removed
    one: the same anchor if there is one, else the nearest by position."""
    candidates = [s for s in the_pass.sites(ir) if not s.present]
    if not candidates:
        return None
    same = [s for s in candidates if s.anchor == removed.anchor]
    pool = same or candidates
    return min(pool, key=lambda s: (abs(s.span[0] - removed.span[0]), s.span[1] - s.span[0]))


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """The two steps of a round trip and whether the result equals the input."""

    backward: PassResult
    forward: PassResult | None
    same: bool


def roundtrip(the_pass: Pass, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> RoundTrip:
    """De-optimize `site`, re-apply with the recorded options, compare to `ir`."""
    back = the_pass.deoptimize(ir, site, ctx)
    if not isinstance(back, Applied):
        return RoundTrip(back, None, False)
    forward_pass = the_pass.with_options(back.options)
    fsite = forward_site(forward_pass, back.ir, site)
    if fsite is None:
        return RoundTrip(back, Skipped("no optimization site after the de-optimization"), False)
    fwd = forward_pass.optimize(back.ir, fsite, ctx)
    lang = str(getattr(ir.language, "value", ir.language))
    same = isinstance(fwd, Applied) and normalized(fwd.ir.text, lang) == normalized(ir.text, lang)
    return RoundTrip(back, fwd, same)


def deoptimize_all(ir: KernelIR, ctx: PassContext | None = None, *, max_steps: int = 200,
                   passes: list[str] | None = None) -> tuple[KernelIR, list[tuple[str, str]]]:
    """Remove every deterministic optimization the passes find, one site at a time in the
    pass graph's de-optimization order, until none is left (or `max_steps`). Returns the
    de-optimized IR and the (pass, anchor) steps taken. Sites a pass refuses are left."""
    from passes.graph import PassGraph  # noqa: PLC0415
    from passes.registry import get_pass  # noqa: PLC0415

    graph = PassGraph.from_registry()
    lang = str(getattr(ir.language, "value", ir.language))
    names = passes if passes is not None else [n for n in graph.optimization_order()
                                               if lang in get_pass(n).languages
                                               and get_pass(n).deterministic]
    steps: list[tuple[str, str]] = []
    refused: set[tuple[str, str, tuple[int, int]]] = set()
    import anchors  # noqa: PLC0415

    while len(steps) < max_steps:
        present = []
        index = anchors.build_index(ir)
        for name in names:
            p = get_pass(name)()
            present += [(p, s) for s in p.sites(ir, index) if s.present
                        and (name, s.anchor, tuple(s.span)) not in refused]
        if not present:
            break
        rank = {n: i for i, n in enumerate(graph.deopt_order(p.name for p, _ in present))}
        present.sort(key=lambda ps: (rank[ps[0].name], ps[1].span))
        for p, site in present:
            result = p.deoptimize(ir, site, ctx)
            if isinstance(result, Applied):
                ir = result.ir
                steps.append((p.name, site.anchor))
                break
            refused.add((p.name, site.anchor, tuple(site.span)))
        else:
            break
    return ir, steps
