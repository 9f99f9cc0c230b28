"""Materialize SkillCards on a kernel and the optimize loop (paper §3.4).

`materialize(card, ir, ...)` performs one card on a kernel: it finds where the card's pass
applies (the pass's optimization sites, those at the card's locus first; for a pass without
a rule module, the matches of the card's anchor query), and asks the rewriter — the pass's
deterministic rule first, then the LLM rewriter when one is configured — to perform it there.
Where the rule has no site or refuses, and before the LLM is asked, the card's recorded step
(`carrier["edit"]`) is transplanted onto the kernel (`anchors.transplant`: the step's anchors
mapped onto the target's, its hunks renamed and applied; rewriter "transplant"); where they do
not map, the refusal says so ("anchors do not map: ..."): that is where the LLM takes over.

`optimize(target, case, library)` starts from any kernel that passes the gate, retrieves
admitted cards for it, materializes them one at a time, gates every candidate and keeps a
candidate only when it passes the gate *and* improves the kernel (device tier: faster than
the current best; interpret tier, which has no timing: the card's pass finds more sites where
its optimization is present, or fewer where it could still be applied). After each kept
candidate the target's features change, so cards are retrieved again (a card rejected
`MAX_CARD_FAILURES` times in the run is not tried again; a refusal for a kernel already in
the run does not count, nor does a card that could not be materialized on a kernel: that costs
no gate, and a later kernel may give it a site). Cards the current kernel cannot use again
(tried on it, failed out, or kept as often as they have evidence) are excluded before
retrieval takes its top-k, so lower-ranked cards come up once the top ones are spent. The
run is recorded as a new lineage (`lineage.graph.Lineage`, saved after every gated
candidate): the start state (role `root`), every kept state and the forward transitions
between them, and every rejected candidate as risk evidence. It never returns a kernel
that failed the gate: the best kernel is the start kernel or a kept candidate, and both
passed.

Gates are the loop's cost (seconds each on the device), so it spends them carefully:

- a card with no site, or whose rewrite the rule refuses, and whose recorded step does not
  transplant, is refused before the gate; so is, at an untimed tier, a candidate after which
  the card's pass finds no more of its optimization (it could not be kept anyway);
- a candidate that is already a state of the run (e.g. a recorded tile size smaller than the
  current one) is dropped before the gate; one whose source was already gated in this run
  (reached again along another path) reuses that verdict instead of being gated again, and
  is not counted against the budget;
- a launch-parameter card first proposes its lineage's joint configuration with a sweep around
  it as the kernel's autotune list (`lineage.transfer`; rewriter "config-sweep"); one such
  sweep is gated per kernel state, so the rest of the budget goes to cards that change the
  kernel's structure (a kept one makes a new state, which may be swept again; a state a sweep
  made is not swept again); that sweep goes to a card of the round whose recorded
  configuration shares the most roles with the kernel (`lineage.transfer.fit`: a reduction
  step recorded on a kernel with no output tile says nothing about a matmul's tile); when a
  round keeps nothing after that sweep, or before the loop walks from the state to an
  enabling stone, one sweep around a kernel's own configuration is gated on the state besides
  (the recorded values may be far from what the kernel wants), the hottest kernel's first;
- once a launch pass (tile, warp, stage, autotune) has had a candidate gated in the run, its
  cards wait while a card of another pass has not been asked at all (`_knobs_deferred`): every
  structural card is asked once before the budget goes to more single-knob steps, which are
  kept rarely and for little, and whose small keeps would otherwise make new states on which
  the same launch cards rank first again;
- a tile, warp or stage step on an entry of a literal autotune list is written as a new entry
  beside the one it edits (`_beside_in_list`): the autotuner picks between them, and the
  configuration the kernel was running with is not lost to a step kept on timing noise;
- a card's sites whose detail a recorded variant names (the tile a tile step resized) come
  before the card's other sites;
- at the static tier (compiles, no timing), a Triton candidate after which every
  configuration of a kernel spills registers where the current kernel's did not is refused
  (stage "profile");
- a card with no site on a kernel is asked again on the kernel with its `@triton.jit`
  helpers inlined (`passes.triton.inline`: Triton inlines them anyway), so loads and loops a
  helper holds are sites too (a K loop in a helper gets descriptors and a grouped order);
- where the current kernel's verdict profiles several GPU kernels (device tier: each own
  kernel's GPU time in the timed run, `gate.verdict.Timing.kernel_shares`), a card's sites
  and sweeps are tried in the hottest kernel first, and sites in a kernel under `COLD_SHARE`
  of the time are left out: were it free, the file would gain less than that (gdn's four
  kernels: ten of eighteen gates went to two kernels where no candidate moved the time);
- a card is kept at most as many times per kernel of the file (`kernel_of` its anchor) as it
  has evidence transitions (the lineages never needed it more often; a tile card with recorded
  sizes could otherwise shuffle sizes between tiles without end); a file of several kernels
  (gdn has four) may take it once in each;
- two-step gains (device tier): a candidate that passes the gate but is not `MIN_GAIN` faster
  than the best is kept aside as a *stepping stone* (e.g. larger tiles that only pay once the
  warps or the autotuner follow). When a round of retrieved cards yields no improvement, the
  loop continues from the fastest stone (at most `MAX_STONE_DEPTH` stones in a row, each
  within `STONE_SLACK` of the best time); a candidate found from a stone is kept only when it
  beats the best kernel, so the result is never worse than without the lookahead. The stone
  states are in the recorded lineage (role `stone`) with their transitions.
- enabling steps (device tier): a stone at most `ENABLER_SLACK` slower than the best that gives
  a card of another pass a materialization the current kernel does not have (gemm's grouped
  tile order is what persistent-grid's recorded loop body needs) is walked to at once, within
  the same `MAX_STONE_DEPTH`: before, a later improvement cleared it from the stones and the
  card that needed it never got a site. So is one whose optimization a card's evidence ran
  with (its pass among the card's prior actions) when that card rewrites the stone otherwise
  than it rewrites the current kernel (the two steps do not commute: persistent-grid flattens
  its loop and builds descriptors once per program only over descriptor loads); such a pair's
  stone may be up to `PAIR_SLACK` slower, since the card's gain was measured with it. Whether a
  card materializes, and what it writes, is asked of the deterministic rules and the
  transplant only (no LLM call). Such a walk is a bet on the cards it unlocks (`_Run.bet`):
  they are tried on the stone first, and when they have all been tried there, at least one
  gated, and none beat the best kernel, the loop goes back to the best at once, the stones
  dropped; a bet card with no site on the stone leaves the walk going, since a step there may
  give it one. (mm1024 at c1d5a41 spent 13 of its 16 gates on a descriptor stone 14% slower
  and a grouped order on top of it, none faster than the kernel they left, while the best
  kernel's own sweep that had paid at 9ed1476 was never gated.) Where the state's own sweep
  is due (`_own_sweep_round`), it is gated first: one gate on the state the walk would leave.
- revisits (device tier): a card whose last gated candidate passed and was at most
  `NEAR_MISS` slower than the best (a tie within timing noise, not evidence against it) is
  tried once more on each later best kernel, when nothing else is left to try: no card is
  retrieved and no stepping stone is left (the loop goes back to the best kernel first).
  Revisits therefore only act where the loop would otherwise have ended, and a kept one must
  beat the best: they never make a run's result worse. Their failures still count against
  retrieval (`MAX_CARD_FAILURES`). Why: topk's scan fusion measured 1.04x slower after the
  early exit and was failed out, yet with the autotuner that came next it is 2-8% faster.

`seed` makes trials differ for a reason: retrieval ranks cards by scope similarity and then by
measured effect; cards whose similarity is equal and whose effect lies within `EFFECT_TIE` of
each other are *equally ranked* (the effect difference is within timing noise), and a non-zero
seed permutes each such group (a fixed permutation per seed and per retrieval round). Seed 0
keeps retrieval's deterministic order.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import itertools
import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kir.embedded import cuda_unit, in_file
from kir.errors import BadInputError, KLineageError
from lineage.graph import KernelState, Lineage, Transition, atomic_write_text, state_id
from lineage.retrieval import Retriever, Target, kernel_features, kernel_signature, kernel_sites
from lineage.skills import Library, SkillCard, locus_signature

if TYPE_CHECKING:
    from kir import KernelIR
    from passes.base import PassContext, PassResult, Site
    from passes.rewriter import Rewriter

ProgressFn = Callable[[str, Mapping[str, Any]], None]
# A device-tier candidate must beat the current best by this factor to be kept (timing noise).
MIN_GAIN = 1.01
# Sites tried per card and kernel (the card's own locus first).
MAX_SITES = 3
# A card rejected this many times in one run is not retrieved again in that run.
MAX_CARD_FAILURES = 2
# A candidate's gate started before the time box ends may run this long past it (its limit is cut).
BOX_GRACE_S = 30.0
# Without an explicit gate timeout a candidate's gate may take this many times the start
# kernel's own gate, and never less than the floor: a sweep compiles up to 8 configurations,
# and one configuration that cannot pay (a 128x256 tile at one warp) must not spend the box.
CANDIDATE_GATE_FACTOR = 10.0
CANDIDATE_GATE_FLOOR_S = 120.0
# Materializations of one card gated on one kernel (recorded options, then pass defaults).
CANDIDATES_PER_CARD = 2
# Stepping stones (passing, not faster candidates) the device loop may walk through in a row.
MAX_STONE_DEPTH = 2
# A stone may be at most this much slower than the best kernel (a gross slowdown is no stone).
STONE_SLACK = 4.0
# A stone that enables another pass's card may be at most this much slower than the best.
ENABLER_SLACK = 1.03
# ... and at most this much where the card's evidence ran with the stone's optimization (its
# pass among the card's prior actions) and it rewrites the stone otherwise than the current
# kernel: the card's recorded gain was measured with the step, whose own cost the pair pays.
# Batched-GEMM descriptors read per program cost 1.11-1.14x alone; with the persistent grid
# that builds them once per program and flattens the loop the pair is 1.07x faster than the
# best (16x1024^3 bmm). The first step of such a pair changes the kernel's structure: a launch
# configuration step is never one (`_unlocked`).
PAIR_SLACK = 1.20
# A passing candidate at most this much slower than the best is a near miss (see revisits).
NEAR_MISS = 1.05
# Effect scores within this relative distance count as equal ranks (a seed may reorder them).
EFFECT_TIE = 0.05
# A kernel of a multi-kernel file under this share of its profiled GPU time takes no
# candidates (device tier): removing it entirely would gain less than this.
COLD_SHARE = 0.05


# -- materialization ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Materialized:
    """The outcome of one card on one kernel: the new IR (None when no site took it), the site,
    which back-end did it, and the reasons of every refusal on the way."""

    card: SkillCard
    ir: KernelIR | None
    site: Site | None
    rewriter: str = ""
    refusals: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    """The options the back-end was given (a recorded variant, or {} for the pass defaults)."""

    @property
    def ok(self) -> bool:
        return self.ir is not None


def _rule(card: SkillCard, ir: KernelIR) -> Any:
    """The card's pass class when it has a rule for the kernel's language, else None."""
    from passes.registry import get_pass  # noqa: PLC0415

    try:
        cls = get_pass(card.pass_name)
    except (BadInputError, ImportError):
        return None
    language = str(getattr(ir.language, "value", ir.language))
    return cls if not cls.languages or language in cls.languages else None


def card_sites(card: SkillCard, ir: KernelIR) -> list[Site]:
    """Where `card` can act on `ir`: the pass's optimization sites (`present=False`), those at
    the card's locus signature first; when the pass has no rule for the kernel's language (or
    no importable module), the matches of the card's anchor query (for the LLM rewriter)."""
    import anchors  # noqa: PLC0415

    from passes.base import Site  # noqa: PLC0415

    index = anchors.build_index(ir)
    cls = _rule(card, ir)
    if cls is not None:
        sites = [s for s in cls.from_options(_known_options(cls, card.options)).sites(ir, index)
                 if not s.present]
        sites.sort(key=lambda s: (locus_signature(s.anchor) != card.locus,
                                  not _fits_recorded(card, s), s.span))
        return sites
    query = str(card.anchor.get("query") or "")
    if not query:
        return []
    return [Site(card.pass_name, str(m.anchor.id), False, {"query": query},
                 (m.anchor.span.start, m.anchor.span.end)) for m in index.query(query)]


def _fits_recorded(card: SkillCard, site: Site) -> bool:
    """Whether a recorded variant of `card` names this site's detail (e.g. the tile the
    recorded step resized: option `tile` = the site's `tile`); True when none names any."""
    named = False
    for variant in (*card.variants, {"options": card.options}):
        options = variant.get("options") or {}
        shared = [k for k in options if k in site.detail]
        named = named or bool(shared)
        if shared and all(options[k] == site.detail[k] for k in shared):
            return True
    return not named


def _known_options(cls: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    fields = cls.option_fields()
    return {k: v for k, v in options.items() if k in fields}


@dataclass(frozen=True, slots=True)
class _CardView:
    """What a rewriter receives for a card: `pass_name`, the options the pass knows, and the
    card's prompt (the LLM back-end sends its fields, carrier verbatim)."""

    card: SkillCard
    pass_name: str
    options: Mapping[str, Any]

    def to_prompt(self) -> str:
        return self.card.to_prompt()


def materialize(card: SkillCard, ir: KernelIR, rewriter: Rewriter,
                ctx: PassContext | None = None, *, max_sites: int = MAX_SITES) -> Materialized:
    """Perform `card` on `ir` at its first site that a back-end takes: the first of
    `materializations` (see there), or a `Materialized` without IR and with the refusals."""
    return next(iter(materializations(card, ir, rewriter, ctx, max_sites=max_sites)))


def materializations(card: SkillCard, ir: KernelIR, rewriter: Rewriter,
                     ctx: PassContext | None = None, *, max_sites: int = MAX_SITES,
                     skip_site: Callable[[Site], bool] | None = None,
                     sweeps: bool = True, transplants: bool = True,
                     site_order: Callable[[Site], float] | None = None,
                     own_sweeps: bool | None = None,
                     heavy: bool = False,
                     picks: Mapping[str, Mapping[str, int]] | None = None) -> Iterator[Materialized]:
    """Distinct candidate materializations of `card` on `ir`, best first; the last item has
    no IR (it carries every refusal) when nothing else came out.

    Order: for each site (the card's locus first), each back-end (a chain is unwrapped so a
    result names the back-end that made it): a deterministic back-end tries the card's recorded
    option variants for the site (`SkillCard.option_candidates`) and then the pass's defaults
    (a recorded value may name what only the source kernel has, e.g. its accumulator); the LLM
    back-end is asked once per site. A candidate whose edit re-inserts a line the kernel already
    has (most likely a variant already applied at another site, e.g. the same TMA descriptor)
    comes after the others. When the rules gave no candidate (no site, or they refused at
    every site tried so far), the card's recorded step is transplanted (rewriter
    "transplant", `_transplanted`) before the LLM back-end is asked; a transplant that does
    not map adds its reason to the refusals, one that does not make the pass's optimization
    appear (`feature_appears`) is refused too. `transplants=False` leaves it out. Callers gate
    candidates in this order and may stop at the first that passes. Sites for which
    `skip_site` returns True are left out (before `max_sites`); with `site_order`, sites (and
    each kernel's sweep) are taken in ascending order of that key, ties in the card's order.
    A launch-parameter card with a recorded joint configuration first proposes it with a sweep
    around it on each kernel it fits (`lineage.transfer`; rewriter "config-sweep"), and last a
    sweep around their own configuration on the kernels it does not fit (a row kernel whose
    only launch parameter is its warps), unless `sweeps` is False (the single-parameter
    rewrites alone, for ablation); `own_sweeps` (default: `sweeps`) decides the latter apart;
    `heavy`: the kernel is slow to compile (`lineage.transfer.sweep_own`); `picks`: what its
    autotuners picked on the device (`gate.verdict.Timing.picks`), where own sweeps start."""
    from passes.base import Applied  # noqa: PLC0415

    def ordered(items: Any, site: Callable[[Any], Site]) -> list[Any]:
        items = list(items)
        return sorted(items, key=lambda x: site_order(site(x))) if site_order else items

    produced_sweep = False
    for made in (ordered(_config_sweeps(card, ir, skip_site, ctx=ctx), lambda m: m.site)
                 if sweeps else ()):
        produced_sweep = True
        yield made
    sites = ordered((s for s in card_sites(card, ir) if skip_site is None or not skip_site(s)),
                    lambda x: x)
    cls = _rule(card, ir)
    backends = tuple(getattr(rewriter, "backends", None) or (rewriter,))
    if cls is None:  # no rule for this language: only a back-end that is not a rule may act
        backends = tuple(b for b in backends if b.name != "deterministic")
    source = ir.unparse()
    old_lines = _significant_lines(source)
    refusals: list[str] = [] if sites else [f"no site for {card.pass_name}"]
    seen: set[str] = {source}
    repeats: list[Materialized] = []
    produced = False
    transplant_tried = not transplants

    def transplant() -> Iterator[Materialized]:
        made, why = _transplanted(card, ir, skip_site)
        if why:
            refusals.append(why)
        if made is None or made.ir is None:
            return
        text = made.ir.unparse()
        if text in seen:
            return
        seen.add(text)
        if any(ln in old_lines for ln in _inserted_lines(source, text)):
            repeats.append(made)
            return
        yield made

    over_before: dict[str, Any] = {}  # `_over_shared`'s answer for `ir`, asked once
    for site in sites[:max_sites]:
        for backend in backends:
            if backend.name == "llm" and not (produced or repeats or transplant_tried):
                transplant_tried = True  # the recorded step before the LLM is paid for
                for made in transplant():
                    produced = True
                    yield made
            variants = card.option_candidates(site.anchor)
            variants = variants[:1] if backend.name == "llm" else variants + [{}]
            for options in variants:
                view = _CardView(card, card.pass_name,
                                 _known_options(cls, options) if cls is not None else options)
                try:
                    result: PassResult = backend.rewrite(ir, site, view, ctx)
                except BadInputError as exc:  # unknown pass or options the pass rejects
                    refusals.append(f"{backend.name} at {site.anchor}: {exc}")
                    continue
                if not isinstance(result, Applied):
                    why = getattr(result, "reason", None) or getattr(result, "error", "")
                    refusals.append(f"{backend.name} at {site.anchor}: {why}")
                    continue
                new_ir = _beside_in_list(ir, result) or result.ir
                text = new_ir.unparse()
                if text in seen:
                    continue
                too_big = _over_shared(ir, new_ir, ctx, over_before)
                if too_big:
                    refusals.append(f"{backend.name} at {site.anchor}: {too_big}")
                    continue
                seen.add(text)
                made = Materialized(card, new_ir, site, str(backend.name), tuple(refusals),
                                    dict(view.options))
                if any(ln in old_lines for ln in _inserted_lines(source, text)):
                    repeats.append(made)
                    continue
                produced = True
                yield made
    if not (produced or repeats or transplant_tried):
        for made in transplant():
            produced = True
            yield made
    for made in repeats:
        produced = True
        yield made
    for made in (ordered(_config_sweeps(card, ir, skip_site, own=True, heavy=heavy, picks=picks,
                                        ctx=ctx), lambda m: m.site)
                 if (sweeps if own_sweeps is None else own_sweeps) else ()):
        produced_sweep = True
        yield made
    if not produced and not produced_sweep:
        # what a jit helper hides (its loads, its K loop) is a site once the helper is inlined,
        # what a flag every launch sets hides once the flag reads as its value
        inlined, how = _normalized(ir)
        if inlined is not None:
            for made in materializations(card, inlined, rewriter, ctx, max_sites=max_sites,
                                         skip_site=skip_site, sweeps=sweeps,
                                         transplants=transplants, site_order=site_order,
                                         own_sweeps=own_sweeps, heavy=heavy, picks=picks):
                if made.ir is None:
                    break
                produced = True
                yield dataclasses.replace(made, refusals=(*made.refusals, *how))
        if not produced:
            yield Materialized(card, None, None, refusals=tuple(refusals))


def _element_width(ctx: Any) -> int | None:
    """Bytes of one element of the case a pass context was built for (its `dtype` fact,
    `lineage.transfer.element_bytes`); None where unknown."""
    from lineage.transfer import element_bytes  # noqa: PLC0415

    return element_bytes((getattr(ctx, "facts", None) or {}).get("dtype"))


def _over_shared(ir: KernelIR, new_ir: KernelIR, ctx: Any, memo: dict[str, Any]) -> str:
    """Why `new_ir` is refused for shared memory ("" where it is not): an autotune entry of a
    dot kernel it adds whose pipelined operand tiles need more shared memory than a block may
    have at the element width of `ctx`'s `dtype` fact (`lineage.transfer.entries_over_shared`;
    a single tile or stage step on a 16-bit entry of an fp32 kernel). `memo` keeps the answer
    for `ir`."""
    from lineage.transfer import entries_over_shared, shared_limit  # noqa: PLC0415

    width = _element_width(ctx)
    if not width:
        return ""
    if "before" not in memo:
        memo["before"] = entries_over_shared(ir, width)
    added = {text: need for text, need in entries_over_shared(new_ir, width).items()
             if text not in memo["before"]}
    if not added:
        return ""
    text, need = max(added.items(), key=lambda item: item[1])
    return (f"the configuration it would write ({' '.join(text.split())}) needs "
            f"{need // 1024} KB of shared memory for its operand tiles at {width}-byte elements, "
            f"more than a block's {shared_limit() // 1024} KB")


def _beside_in_list(ir: KernelIR, result: Any) -> KernelIR | None:
    """A rewrite whose edits all lie inside one `triton.Config(...)` entry of a literal config
    list (a tile, warp or stage step on an autotuned kernel), written as a new entry after the
    one it edits, which stays: the autotuner then picks between them on the target's shapes.
    Edited in place, the step would drop a configuration the kernel may be running with (a
    kept 1.5% step once replaced the 128x256x64, 3-stage entry a later persistent loop needed).
    None when the edits are elsewhere or the new entry is already in the list."""
    from kir import Edit, Span  # noqa: PLC0415
    from passes.triton._py import PyModule, callee  # noqa: PLC0415
    from passes.triton.launch import CONFIG_NAMES, cut_off_configs  # noqa: PLC0415

    edits = list(getattr(result, "edits", ()) or ())
    if not edits or str(getattr(ir.language, "value", ir.language)) != "triton":
        return None
    mod = PyModule(ir)
    dead = cut_off_configs(mod)
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.List):
            continue
        for entry in node.elts:
            if not (isinstance(entry, ast.Call) and callee(entry) in CONFIG_NAMES) \
                    or id(entry) in dead:
                continue
            lo, hi = mod.span(entry)
            if not all(lo <= e.span.start and e.span.end <= hi for e in edits):
                continue
            raw = mod.source[lo:hi]
            for e in sorted(edits, key=lambda e: e.span.start, reverse=True):
                raw = raw[:e.span.start - lo] + e.replacement.encode() + raw[e.span.end - lo:]
            if any(mod.source[a:b] == raw for a, b in map(mod.span, node.elts)):
                return None
            line = mod.source.rfind(b"\n", 0, lo) + 1
            indent = mod.source[line:lo].decode()
            indent = indent if not indent.strip() else " " * len(indent)
            return ir.apply([Edit(Span(hi, hi), ",\n" + indent + raw.decode())])
    return None


_NORMALIZED: dict[str, tuple[KernelIR | None, tuple[str, ...]]] = {}
"""Source text -> its kernels normalized (helpers inlined, flags specialized) and what was done
(every card without a site asks)."""


def _normalized(ir: KernelIR) -> tuple[KernelIR | None, tuple[str, ...]]:
    """(`ir` with its kernels' `@triton.jit` helpers inlined and the constexpr flags every launch
    sets to one literal read as it (`passes.triton.inline`), what of the two was done), or
    (None, ()) when neither applies (or it is not Triton)."""
    if str(getattr(ir.language, "value", ir.language)) != "triton":
        return None, ()
    source = ir.unparse()
    if source in _NORMALIZED:
        return _NORMALIZED[source]
    from passes.triton.inline import inline_helpers, specialize_flags  # noqa: PLC0415

    out: KernelIR | None = None
    how: tuple[str, ...] = ()
    for step, label in ((inline_helpers, "helpers inlined"),
                        (specialize_flags, "flags specialized")):
        try:
            done = step(out if out is not None else ir)
        except (SyntaxError, ValueError, KLineageError):
            done = None  # that normalization does not apply; the other may
        if done is not None:
            out, how = done, (*how, label)
    if len(_NORMALIZED) >= 64:  # runs of several operators share the process (bench/heldout.py)
        _NORMALIZED.clear()
    _NORMALIZED[source] = (out, how)
    return out, how


def _transplanted(card: SkillCard, ir: KernelIR, skip_site: Callable[[Site], bool] | None
                  ) -> tuple[Materialized | None, str]:
    """The card's recorded step (`carrier["edit"]`) transplanted onto `ir`, as a
    materialization whose site is the smallest anchor around every edit it made; else None and
    why not ("" for a card that records no step, or a site `skip_site` leaves out)."""
    import anchors  # noqa: PLC0415
    import kir  # noqa: PLC0415

    from anchors.transplant import transplant_record  # noqa: PLC0415
    from passes.base import Site  # noqa: PLC0415

    step = card.carrier.get("edit")
    if not isinstance(step, Mapping) or step.get("language") != str(
            getattr(ir.language, "value", ir.language)):
        return None, ""  # no recorded step, or one in another language: nothing to transplant
    result = transplant_record(step, ir)
    if not result.ok or result.text is None:
        return None, ("transplant: anchors do not map: " if result.unmapped else "transplant: ") \
            + result.reason
    try:
        new_ir = kir.parse(result.text, ir.language)
    except kir.KLineageError as exc:
        return None, f"transplant: the result does not parse: {exc}"
    text = ir.unparse()
    lo = min(len(text[:p.start].encode()) for p in result.placed)
    hi = max(len(text[:p.end].encode()) for p in result.placed)
    around = [a for a in anchors.build_index(ir) if a.span.start <= lo and hi <= a.span.end]
    anchor = str(min(around, key=lambda a: a.span.end - a.span.start).id) if around \
        else result.placed[0].target_anchor
    site = Site(card.pass_name, anchor, False, {"transplant": result.to_json()}, (lo, hi))
    if skip_site is not None and skip_site(site):
        return None, ""
    if not feature_appears(card.pass_name, ir, new_ir):
        return None, (f"transplant at {anchor}: {card.pass_name} is not present after the "
                      "transplanted step")
    return Materialized(card, new_ir, site, "transplant"), ""


def _config_sweeps(card: SkillCard, ir: KernelIR, skip_site: Callable[[Site], bool] | None,
                   own: bool = False, heavy: bool = False,
                   picks: Mapping[str, Mapping[str, int]] | None = None,
                   every: bool = False, ctx: Any = None) -> Iterator[Materialized]:
    """A launch-parameter card's joint configuration and a sweep around it, written on each
    target kernel it fits (`lineage.transfer`): one candidate per kernel, before the card's
    single-parameter rewrites. With `own`, a sweep around the kernel's own configuration on
    each kernel the recorded one does not fit (after the card's rewrites; with `every`, on
    each kernel): the one its autotuner picked where `picks` (the current kernel's verdict)
    names it. A dot kernel's configurations fit the shared memory its operands need at the
    element width of `ctx`'s `dtype` fact (`lineage.transfer.shared_fit`)."""
    from lineage.transfer import LAUNCH_PASSES, config_candidates, kernel_site  # noqa: PLC0415

    if card.pass_name not in LAUNCH_PASSES or not card.carrier.get("config") \
            or str(getattr(ir.language, "value", ir.language)) != "triton":
        return
    for name, new_ir, fitted in config_candidates(card.carrier, ir, own=own, heavy=heavy,
                                                  picks=picks, every=every,
                                                  elem_bytes=_element_width(ctx)):
        site = kernel_site(card.pass_name, ir, name)
        if site is None or (skip_site is not None and skip_site(site)):
            continue
        yield Materialized(card, new_ir, site, "config-sweep", (),
                           {"sweep": [dict(c) for c in fitted], **({"own": True} if own else {})})


def _significant_lines(text: str) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 12}


def _inserted_lines(before: str, after: str) -> list[str]:
    """Stripped non-trivial lines the edit inserted (difflib over lines)."""
    a, b = before.splitlines(), after.splitlines()
    out: list[str] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            out += [ln.strip() for ln in b[j1:j2] if len(ln.strip()) >= 12]
    return out


# -- the optimize loop ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Step:
    """One gated candidate of the loop."""

    card: str
    pass_name: str
    anchor: str
    kept: bool
    stage: str = ""
    reason: str = ""
    ms: float | None = None
    speedup: float | None = None
    rewriter: str = ""
    state: str = ""
    """The state the candidate was made from."""
    near_miss: bool = False
    """Rejected as not faster, but at most `NEAR_MISS` slower than the best (device tier)."""

    def to_json(self) -> dict[str, Any]:
        out = {"card": self.card, "pass": self.pass_name, "anchor": self.anchor,
               "rewriter": self.rewriter}
        if self.kept:
            out.update({"ms": self.ms, "speedup": self.speedup})
        else:
            out.update({"stage": self.stage, "reason": self.reason})
            if self.near_miss:
                out["near_miss"] = True
        return out


def distinct_rejections(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """The JSON of rejected `steps`, each distinct entry once (in the order first seen) with
    `"times"`: how many of `steps` render to it. The same card refused at the same anchor for
    the same reason on several states of a run is one entry; entries that differ in any shown
    field (stage, rewriter, near miss) stay apart, so no count stands for a field it lacks."""
    times = Counter(tuple(step.to_json().items()) for step in steps)  # keeps first-seen order
    return [{**dict(key), "times": n} for key, n in times.items()]


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    best_path: Path
    best_verdict: Mapping[str, Any]
    applied: tuple[Step, ...]
    rejected: tuple[Step, ...]
    """Every rejection, repeats included (`to_json` folds them: `distinct_rejections`)."""
    spent_usd: float
    lineage_path: Path
    start_ms: float | None
    best_ms: float | None
    termination: str
    notes: tuple[str, ...] = ()
    gated: int = 0
    """Candidates gated (the start kernel not counted; reused verdicts not counted)."""
    seed: int = 0
    llm: Mapping[str, Any] | None = None
    """The LLM rewriter's `usage_report()` (None when no LLM back-end ran)."""

    def to_json(self) -> dict[str, Any]:
        return {"best": {"path": str(self.best_path), "verdict": dict(self.best_verdict)},
                "applied": [s.to_json() for s in self.applied],
                "rejected": distinct_rejections(self.rejected),
                "spent_usd": round(self.spent_usd, 6), "lineage": str(self.lineage_path),
                "start_ms": self.start_ms, "best_ms": self.best_ms,
                "speedup": (self.start_ms / self.best_ms
                            if self.start_ms and self.best_ms else None),
                "termination": self.termination, "notes": list(self.notes),
                "gated": self.gated, "seed": self.seed, "llm": self.llm}


@dataclass(frozen=True, slots=True)
class _Kernel:
    """One kernel the run holds: its text, IR, lineage state, verdict and time."""

    source: str
    ir: Any
    state: str
    verdict: Any
    ms: float | None


@dataclass(frozen=True, slots=True)
class _Stone:
    """A candidate that passed the gate without beating the best (device tier)."""

    kernel: _Kernel
    card: SkillCard
    made: Materialized


@dataclass
class _Run:
    """Mutable state of one optimize run: `current` is the kernel cards are applied to, `best`
    the fastest that passed (they differ only while the loop walks through stepping stones)."""

    current: _Kernel
    best: _Kernel
    tried: set[tuple[str, str]] = field(default_factory=set)
    chain: list[Step] = field(default_factory=list)
    """The kept steps from the start kernel to `current` (stones included)."""
    applied: list[Step] = field(default_factory=list)
    """The kept steps from the start kernel to `best`."""
    rejected: list[Step] = field(default_factory=list)
    gated: int = 0
    verdicts: dict[str, Any] = field(default_factory=dict)
    """Source text -> verdict of every candidate gated in this run."""
    stones: list[_Stone] = field(default_factory=list)
    """Stepping stones found since the last improvement, not yet walked to."""
    stone_depth: int = 0
    bet: tuple[str, ...] = ()
    """Ids of the cards the loop stepped onto the current stone for (an enabling or pair
    stone): they are tried there first, and when none of them beats the best kernel the loop
    goes back to it (`_try_in_turn`)."""
    reused: int = 0
    """Candidates answered from `verdicts` (not gated again)."""
    blocked: dict[str, frozenset[str]] = field(default_factory=dict)
    """State -> ids of the cards that have no materialization on it (asked on demand)."""
    swept: set[str] = field(default_factory=set)
    """States a sweep around a recorded configuration was gated on (one per state: see
    `_attempt`)."""
    own_swept: set[str] = field(default_factory=set)
    """States a sweep around the kernel's own configuration was gated on (one per state)."""
    rewrites: dict[tuple[str, str], Any] = field(default_factory=dict)
    """(card id, state id of a source) -> the card's first rewrite of it (`_unlocked`)."""
    fits: dict[tuple[str, str], int] = field(default_factory=dict)
    """(card id, state id) -> how well the card's recorded configuration fits that state's
    kernels (`lineage.transfer.carrier_fit`)."""
    sweep_fit: int = 0
    """The best fit among the cards of the current round: only such a card sweeps."""
    round_cards: tuple[SkillCard, ...] = ()
    """The cards of the current round (`_try_in_turn`): an own sweep is written by one of them."""


def seeded_order(found: Sequence[Any], seed: int, round_: int = 0) -> list[Any]:
    """Retrieved cards (`Retrieved`, in retrieval's rank order) with each group of equally
    ranked cards permuted by `seed` (module docstring); seed 0 returns them unchanged. The
    permutation depends only on (seed, round_, the group's card ids), so a rerun with the same
    seed takes the same path."""
    items = list(found)
    if seed == 0 or len(items) < 2:
        return items
    groups: list[list[Any]] = []
    for item in items:
        if groups and _same_rank(groups[-1][0], item):
            groups[-1].append(item)
        else:
            groups.append([item])
    out: list[Any] = []
    for group in groups:
        ids = ",".join(sorted(g.card.id for g in group))
        random.Random(f"{seed}:{round_}:{ids}").shuffle(group)
        out += group
    return out


def _same_rank(head: Any, item: Any) -> bool:
    if round(head.score, 9) != round(item.score, 9):
        return False
    a, b = head.card.effect_score, item.card.effect_score
    return abs(a - b) <= EFFECT_TIE * max(a, b)


def optimize(target: str | Path, case: str, library: str | Path | Library, *,
             budget_steps: int = 8, budget_usd: float = 1.0, tier: str = "auto",
             out: str | Path = "out/optimize", k: int = 5, rewriter: Rewriter | None = None,
             progress: ProgressFn | None = None, gate_timeout: float | None = None,
             check_fn: Callable[..., Any] | None = None, seed: int = 0,
             deadline: float | None = None, executor: Any = None,
             llm_config: Any = None, config_sweeps: bool = True) -> OptimizeResult:
    """Optimize the kernel file `target` for `case` with the admitted cards of `library`.

    `budget_steps` bounds the gated candidates, `budget_usd` the LLM spend (used when no
    `rewriter` is given: deterministic rules, then the LLM when `ANTHROPIC_API_KEY` is set).
    `seed` permutes equally ranked cards (module docstring; 0 = retrieval's order).
    `deadline` (a `time.monotonic()` value) stops the loop before a gate that would start
    after it (termination "time-box"; the best kernel so far is returned as usual), and a
    candidate's gate started before it may run at most `BOX_GRACE_S` past it (its time limit is
    cut to fit; a gate cut so is set aside as "time-box", not held against its card).
    `gate_timeout` bounds every gate; without it a candidate's gate may take
    `CANDIDATE_GATE_FACTOR` times the start kernel's own (at least `CANDIDATE_GATE_FLOOR_S`).
    `config_sweeps=False` turns off the joint-configuration proposals of launch-parameter
    cards (`materializations`), leaving their single-parameter rewrites.
    Writes OUT/best.<ext> (CUDA: with its host module), OUT/lineage.json and OUT/result.json.
    Raises BadInputError for a missing target, an unknown case or tier, a missing library,
    or a target that fails the gate (there is nothing correct to start from). `check_fn`
    replaces `gate.check` (same signature; tests use it to script verdicts); `executor` (a
    `gate.executor.Executor`, e.g. a Ray cluster) runs the gates otherwise. `llm_config` (a
    `passes.llm_rewriter.LLMConfig`, e.g. `LLMConfig.for_model(...)`) shapes the LLM
    rewriter's requests; its budget is `budget_usd`."""
    import gate  # noqa: PLC0415 — lazy: the gate's workers import torch
    import kir  # noqa: PLC0415

    from passes.base import PassContext  # noqa: PLC0415
    from passes.llm_rewriter import LLMConfig, default_rewriter  # noqa: PLC0415

    say = progress or (lambda event, data: None)
    if budget_steps < 0 or budget_usd < 0:
        raise BadInputError("--budget-steps and --budget-usd must be >= 0")
    if seed < 0:
        raise BadInputError("--seed must be >= 0")
    path = Path(target)
    if not path.is_file():
        raise BadInputError(f"{target}: no such kernel file")
    lib = library if isinstance(library, Library) else Library.open(library)
    the_case = gate.load_case(case)
    unit = cuda_unit(path)  # a CUDA kernel: its source, in a .cu or held in its host module
    if unit is not None:
        path = unit.source_path
    ir = kir.parse(unit.source, "cuda", path=path) if unit is not None else kir.parse_file(path)
    language = str(getattr(ir.language, "value", ir.language))
    run_tier = executor.resolve_tier(tier, language) if executor is not None else resolve_tier(tier, language)
    notes: list[str] = []
    if language == "triton":  # a kernel whose launch is not found has no launch-parameter site
        from passes.triton.roles import unlaunched  # noqa: PLC0415

        notes.extend(unlaunched(ir))
    admitted = lib.cards(admitted_only=True)
    if not admitted:
        notes.append(f"{lib.root} holds no admitted SkillCard")
    if rewriter is None:
        config = (dataclasses.replace(llm_config, budget_usd=budget_usd) if llm_config is not None
                  else LLMConfig(budget_usd=budget_usd))
        rewriter, note = default_rewriter(config,
                                          library=lib.to_prompt(admitted))
        if note:
            notes.append(note)
    ctx = PassContext.for_case(the_case.ref, tier="interpret" if run_tier == "interpret" else "device")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)

    candidate_limit: list[float | None] = [None]  # set from the start kernel's own gate

    def check(source: str, boxed: bool = True) -> Any:
        kwargs: dict[str, Any] = {"path": path}
        limit = gate_timeout if gate_timeout is not None or not boxed else candidate_limit[0]
        if boxed and deadline is not None:  # a candidate's gate ends near the box, not after it
            left = max(deadline - time.monotonic(), 0.0) + BOX_GRACE_S
            limit = min(limit, left) if limit is not None else left
        if limit is not None:
            kwargs["timeout"] = limit
        return (check_fn or (executor.check if executor is not None else gate.check))(
            source, language, the_case, run_tier, **kwargs)

    start_src = ir.unparse()
    say("gate", {"card": "(start)"})
    began = time.monotonic()
    verdict = check(start_src, boxed=False)
    own_s = gate_seconds(verdict) or time.monotonic() - began
    candidate_limit[0] = max(CANDIDATE_GATE_FLOOR_S, CANDIDATE_GATE_FACTOR * own_s)
    if not verdict.ok:
        raise BadInputError(f"{target} fails the gate at the {run_tier} tier "
                            f"({_kind(verdict)}: {verdict.reason}); nothing correct to start from")
    lineage = Lineage()
    start = lineage.add_state(_state(start_src, ir, language, the_case.ref, run_tier, verdict,
                                     frozenset({"root"})))
    first = _Kernel(start_src, ir, start, verdict, _ms(verdict))
    run = _Run(first, first, verdicts={start_src: verdict})
    from lineage.transfer import HEAVY_FIRST_RUN_S  # noqa: PLC0415

    job = _Job(rewriter, ctx, check, lineage, language, the_case.ref, run_tier, str(path), say,
               budget_steps, deadline, tuple(admitted), config_sweeps,
               first_run_s(verdict) >= HEAVY_FIRST_RUN_S)
    retriever = Retriever(admitted, k=k)

    def save() -> None:  # after every attempt: an interrupted run keeps what it learned
        lineage.save(out_dir / "lineage.json")

    termination = "budget-steps"
    rounds = 0
    while run.gated < budget_steps:
        if job.out_of_time():
            termination = "time-box"
            break
        present, open_ = kernel_sites(run.current.ir)
        failures = _failures(run)
        # Cards this kernel cannot use again are left out before retrieval's top-k, so that
        # the next-ranked cards get their turn.
        spent = {c.id for c in admitted
                 if (run.current.state, c.id) in run.tried or failures[c.id] >= MAX_CARD_FAILURES
                 or _used_up(c, run)}
        target = Target(language, the_case.ref, the_case.platform, present,
                        signature=kernel_signature(run.current.ir), open_sites=open_)
        deferred = _knobs_deferred(admitted, run, spent)
        found = retriever.retrieve(target, exclude=spent | deferred)
        if deferred and not _asks_new(found.cards, run):  # retrieval offers no unasked
            found = retriever.retrieve(target, exclude=spent)  # structural card: none wait
        fresh = [r.card for r in seeded_order(found.cards, seed, rounds)]
        rounds += 1
        # A state's due own sweep does not wait with the launch cards: it is one gate on this
        # state, and a structural card kept first would leave the state unswept.
        kept = False
        if deferred and _own_sweep_pending(run, job):
            kept = _own_sweep_round(fresh, run, job)
            save()
        kept = kept or _try_in_turn(fresh, run, job, save)
        if kept or run.gated >= budget_steps or job.out_of_time():
            continue
        if fresh:  # the cards tried this round are now excluded: others may come up
            continue
        if _walk_to_stone(run, job):
            continue
        if not _revisit(run, job, save):
            termination = "exhausted"
            break
    spent = _spent(rewriter)
    llm = _llm_report(rewriter)
    if llm is not None and llm["disabled"]:
        notes.append(llm["disabled"])
    best = run.best
    best_path = out_dir / f"best{path.suffix}"
    held = in_file(path) if language == "cuda" and path.suffix == ".py" else None
    atomic_write_text(best_path, held.splice(best.source) if held is not None else best.source)
    if language == "cuda" and path.suffix == ".cu" and path.with_suffix(".py").is_file():
        shutil.copyfile(path.with_suffix(".py"), best_path.with_suffix(".py"))
    node = lineage.node(best.state)
    node["roles"] = sorted(set(node.get("roles", [])) | {"best"})
    lineage.add_run({"target": str(path), "case": the_case.ref, "tier": run_tier,
                     "termination": termination, "steps": run.gated, "kept": len(run.applied),
                     "reused_verdicts": run.reused, "seed": seed,
                     "spent_usd": spent, "llm": llm, "kind": "optimize",
                     "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    lineage_path = out_dir / "lineage.json"
    lineage.save(lineage_path)
    result = OptimizeResult(best_path, _verdict_json(best.verdict), tuple(run.applied),
                            tuple(run.rejected), spent, lineage_path, first.ms, best.ms,
                            termination, tuple(notes), gated=run.gated, seed=seed, llm=llm)
    atomic_write_text(out_dir / "result.json", json.dumps(result.to_json(), indent=1) + "\n")
    return result


@dataclass(frozen=True, slots=True)
class _Job:
    """What every attempt of one run shares."""

    rewriter: Any
    ctx: Any
    check: Callable[[str], Any]
    lineage: Lineage
    language: str
    case: str
    tier: str
    expert: str
    say: ProgressFn
    budget_steps: int
    deadline: float | None = None
    cards: tuple[SkillCard, ...] = ()
    """The library's admitted cards (enabling steps ask which of them a candidate unlocks;
    revisits are drawn from them)."""
    sweeps: bool = True
    """Launch-parameter cards propose their joint configuration (`materializations`)."""
    heavy: bool = False
    """The start kernel's first run, compilation included, took `HEAVY_FIRST_RUN_S` or more
    (`lineage.transfer.sweep_own`)."""

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def _gated_rejections(run: _Run) -> Iterator[Step]:
    """The run's rejected candidates that were gated (refusals to materialize and repeats
    left out), in order."""
    return (step for step in run.rejected if step.stage not in ("repeat", "materialize", "time-box"))


def _failures(run: _Run) -> Counter[str]:
    """Card id -> gated rejections in the run."""
    return Counter(step.card for step in _gated_rejections(run))


def _try_in_turn(cards: Sequence[SkillCard], run: _Run, job: _Job, save: Callable[[], None],
                 event: str = "") -> bool:
    """Attempt `cards` on the current kernel one after another (each marked tried there) until
    one is kept, the budget or the time is spent; True when one was kept. The state's one
    configuration sweep goes to a card of the round whose recorded configuration fits the
    kernel best (`_fit`); when nothing was kept, a sweep around the kernel's own configuration
    may follow (`_own_sweep_round`)."""
    bet = _bet_cards(run, job)
    if bet:  # the stone was walked to for these: they come first, retrieved or not
        cards = bet + [c for c in cards if c.id not in run.bet]
    run.sweep_fit = max((_fit(card, run) for card in cards), default=0)
    run.round_cards = tuple(cards)
    lost = False  # a card of the bet was gated on the stone and did not beat the best
    for card in cards:
        if run.gated >= job.budget_steps or job.out_of_time():
            break
        run.tried.add((run.current.state, card.id))
        if event:
            job.say(event, {"card": card.id})
        gated = run.gated
        kept = _attempt(card, run, job)
        save()
        if kept:
            return True
        lost = lost or (bool(bet) and card.id in run.bet and run.gated > gated)
        if lost and not _bet_cards(run, job):
            # A bet card that found no site here may still get one from a step on this stone
            # (gemm's persistent loop needs the grouped order first): only a measured loss
            # ends the bet.
            _back_to_best(run, job, "its cards did not beat the best kernel")
            return False
    kept = _own_sweep_round(cards, run, job)
    save()
    return kept


def _bet_cards(run: _Run, job: _Job) -> list[SkillCard]:
    """The cards of `run.bet` not yet tried on the current kernel (the stone), in bet order;
    empty when the loop is on no such stone."""
    if not run.bet or run.current.state == run.best.state:
        return []
    by_id = {c.id: c for c in job.cards}
    return [by_id[i] for i in run.bet
            if i in by_id and (run.current.state, i) not in run.tried]


def _back_to_best(run: _Run, job: _Job, why: str) -> None:
    """Leave the stepping stones for the best kernel (the stones found so far are dropped:
    each was slower than the best, and the bet that walked to them is lost)."""
    job.say("back", {"reason": why, "ms": run.best.ms})
    run.current, run.chain = run.best, list(run.applied)
    run.stones, run.stone_depth, run.bet = [], 0, ()


def kernel_of(anchor: str) -> str:
    """The kernel (or function) of the file an anchor lies in: the launched kernel of a
    `.../launch:NAME[i]` anchor, else the first segment of the anchor's path."""
    path = str(anchor).split(":", 1)[1] if ":" in str(anchor) else str(anchor)
    for segment in path.split("/"):
        if segment.startswith("launch:"):
            return segment[len("launch:"):].split("[", 1)[0]
    return path.split("/", 1)[0]


def _full_kernels(card: SkillCard, run: _Run, best: bool = False) -> set[str]:
    """The kernels of the file on which the run has kept `card` as often as it has evidence
    (on the way to the current kernel, or to the best one with `best`)."""
    limit = max(1, len(card.evidence))
    steps = run.applied if best else run.chain
    uses = Counter(kernel_of(step.anchor) for step in steps if step.card == card.id)
    return {kernel for kernel, n in uses.items() if n >= limit}


def _used_up(card: SkillCard, run: _Run, best: bool = False) -> bool:
    """Whether every site `card` has on the current kernel (the best one with `best`) lies in
    a kernel it is used up on."""
    full = _full_kernels(card, run, best)
    if not full:
        return False
    kernel = run.best if best else run.current
    return all(kernel_of(site.anchor) in full for site in card_sites(card, kernel.ir))


def _knobs_deferred(admitted: Sequence[SkillCard], run: _Run, spent: set[str]) -> set[str]:
    """Launch-parameter cards (`lineage.transfer.LAUNCH_PASSES`) whose pass already had a
    candidate gated in this run, while a card of another pass has not been asked in the run at
    all: those are set aside for the round, so that every structural card is asked once before
    the budget goes to more single-knob steps. Empty when no such card is left.

    Why: over 92 device runs of held-out and style kernels (`bench/results/styles/h100*`,
    `bench/results/heldout/h100x4-2ee4125`), single tile, warp and stage steps took 806 of
    1,362 gated candidates and were kept 70 times (9%), half of those for gains within 3%;
    the steps of other passes were kept 74 times in 271 (27%). Each small keep made a new state on which
    the same launch cards ranked first again, so a structural card ranked below them (an
    attention kernel and the gemm lineage's descriptors) was never asked within 16 gates."""
    from lineage.transfer import LAUNCH_PASSES  # noqa: PLC0415

    if not any(c.id not in spent for c in _unasked_structural(admitted, run)):
        return set()
    knobs = {step.pass_name for step in (*run.applied, *run.chain, *_gated_rejections(run))
             if step.pass_name in LAUNCH_PASSES}
    return {c.id for c in admitted if c.pass_name in knobs}


def _unasked_structural(cards: Sequence[SkillCard], run: _Run) -> list[SkillCard]:
    """The cards of `cards` whose pass is not a launch pass and that the run has not asked on
    any state."""
    from lineage.transfer import LAUNCH_PASSES  # noqa: PLC0415

    asked = {card for _state, card in run.tried}
    return [c for c in cards if c.pass_name not in LAUNCH_PASSES and c.id not in asked]


def _asks_new(found: Sequence[Any], run: _Run) -> bool:
    """Whether retrieved cards (`Retrieved`) hold one of a structural pass not yet asked in
    the run (what `_knobs_deferred` made room for)."""
    return bool(_unasked_structural([r.card for r in found], run))


def _own_sweep_round(cards: Sequence[SkillCard], run: _Run, job: _Job) -> bool:
    """After a round that kept nothing on a state whose sweep around a recorded configuration
    was gated: the first sweep around the kernel's own configuration that a launch card of the
    round (else of the library) writes is gated too (one per state), on any kernel, one a
    recorded configuration fits included; an autotuned kernel's own configuration is the one
    its autotuner picked (`_picks`). The two are different hypotheses: the recorded values may
    be far from what this kernel wants (a gdn kernel's 64-row block over a cross entropy's 4
    rows), its own neighbourhood (blocks and warps grown together, a pipeline one stage
    deeper) may not. A round whose launch cards wait (`_knobs_deferred`) gates the state's due
    own sweep before its cards: a structural card kept first would leave the state unswept."""
    if not _own_sweep_pending(run, job):
        return False
    # Kernel first, hottest first (where the profile names several), then the first card of
    # the round that may act on it: the card only writes the sweep, and a card used up on one
    # kernel must not keep the hottest kernel from its own sweep (leave-one-out gdn: the
    # pipelining card kept once on the hottest kernel, which then was swept last).
    shares = kernel_shares(run.current.verdict)
    picks = _picks(run.current.verdict)
    hottest = -max(shares.values(), default=0.0)
    offers: list[tuple[float, int, SkillCard, Materialized]] = []
    # The round's cards first, then the library's other launch cards: a round that set the
    # launch cards aside for structural ones (`_knobs_deferred`) still owes the state its sweep.
    from lineage.transfer import LAUNCH_PASSES  # noqa: PLC0415

    writers = [*cards, *(c for c in job.cards if c.pass_name in LAUNCH_PASSES and c not in cards)]
    for i, card in enumerate(writers):
        left_out = _left_out(card, run)
        for made in _config_sweeps(card, run.current.ir,
                                   lambda s: kernel_of(s.anchor) in left_out, own=True,
                                   heavy=job.heavy, picks=picks, every=True, ctx=job.ctx):
            if _unseen(made.ir.unparse(), run, job):
                offers.append((-shares.get(kernel_of(made.site.anchor), 0.0), i, card, made))
        if offers and min(o[0] for o in offers) <= hottest:
            break  # no later card can offer a hotter kernel (or the file has one kernel)
    if not offers or run.gated >= job.budget_steps or job.out_of_time():
        return False
    _, _, card, made = min(offers, key=lambda o: o[:2])
    return _attempt_one(card, made, run, job)


def _own_sweep_pending(run: _Run, job: _Job) -> bool:
    """The current state's sweep around a recorded configuration was gated and its sweep
    around its own configuration was not (`_own_sweep_round`)."""
    state = run.current.state
    return job.sweeps and state in run.swept and state not in run.own_swept


def _left_out(card: SkillCard, run: _Run) -> set[str]:
    """Kernels of the current state `card` does not act on: those it is used up on
    (`_full_kernels`) and, where the state's profile names several GPU kernels, those too cold
    to pay (`COLD_SHARE`). A site in a function the profile does not name (a helper inlined
    into a kernel) is neither."""
    shares = kernel_shares(run.current.verdict)
    return _full_kernels(card, run) | {name for name, share in shares.items()
                                       if share < COLD_SHARE}


def _attempt(card: SkillCard, run: _Run, job: _Job) -> bool:
    """Materialize and gate one card on the run's current kernel (up to
    `CANDIDATES_PER_CARD` materializations); keep the first that improves it."""
    # A candidate that is already a state of the run (a recorded tile size smaller than the
    # current one takes the kernel back a step) can teach nothing: it takes no candidate slot.
    # One configuration sweep per kernel state: the sweeps of several launch cards differ by a
    # few points of one joint configuration; once one was gated on this state, the budget goes
    # to cards that change the kernel's structure (a kept one gives a new state, swept again).
    sweeps = job.sweeps and run.current.state not in run.swept and _fit(card, run) >= run.sweep_fit
    own_sweeps = sweeps and run.sweep_fit == 0  # else after the round (`_own_sweep_round`)
    # Where the current kernel's profile names several GPU kernels: the hottest first, none
    # in a kernel too cold to pay (`_left_out`).
    shares = kernel_shares(run.current.verdict)
    left_out = _left_out(card, run)
    # A candidate already gated in this run (another card of the same pass wrote the same
    # text) has its verdict: it takes no slot either, so that the card's later sites get theirs
    # (gdn's pipelining and autotune cards all wrote the same two candidates for the first two
    # of its four kernels, and the third kernel's launch, where the lineage's 1.3x step was,
    # was never reached).
    fresh = (m for m in materializations(card, run.current.ir, job.rewriter, job.ctx,
                                         skip_site=lambda s: kernel_of(s.anchor) in left_out,
                                         sweeps=sweeps, own_sweeps=own_sweeps,
                                         heavy=job.heavy, picks=_picks(run.current.verdict),
                                         site_order=(lambda s: -shares.get(kernel_of(s.anchor),
                                                                           COLD_SHARE))
                                         if shares else None)
             if m.ir is None or _unseen(m.ir.unparse(), run, job))
    for made in itertools.islice(fresh, CANDIDATES_PER_CARD):
        if run.gated >= job.budget_steps or job.out_of_time():
            return False
        if _attempt_one(card, made, run, job):
            return True
        if not made.ok:
            return False
    return False


def _fit(card: SkillCard, run: _Run) -> int:
    """How well `card`'s recorded launch configuration fits the current kernel (0: it records
    none, or none fits; `lineage.transfer.carrier_fit`)."""
    from lineage.transfer import LAUNCH_PASSES, carrier_fit  # noqa: PLC0415

    if card.pass_name not in LAUNCH_PASSES or not card.carrier.get("config"):
        return 0
    key = (card.id, run.current.state)
    if key not in run.fits:
        ir = run.current.ir
        triton = str(getattr(ir.language, "value", ir.language)) == "triton"
        run.fits[key] = carrier_fit(card.carrier, ir) if triton else 0
    return run.fits[key]


def _picks(verdict: Any) -> dict[str, dict[str, int]]:
    """Kernel -> the configuration its autotuner picked in a verdict's timed runs (a Verdict or
    its JSON; `gate.verdict.Timing.picks`); {} where none was recorded."""
    from gate.verdict import Timing  # noqa: PLC0415

    timing = verdict.get("timing") if isinstance(verdict, Mapping) else getattr(verdict, "timing", None)
    if isinstance(timing, Mapping):
        try:
            timing = Timing.from_json(timing)
        except (KeyError, TypeError, ValueError):
            return {}
    return timing.picks() if timing is not None else {}


def _phases(verdict: Any) -> dict[str, float]:
    """Phase -> wall seconds of a verdict's gate (a Verdict or its JSON; also when read back
    from the cache); {} where it records none."""
    phases = verdict.get("phases") if isinstance(verdict, Mapping) \
        else getattr(verdict, "phases", None)
    try:
        return {str(k): float(v) for k, v in dict(phases or {}).items()}
    except (TypeError, ValueError):
        return {}


def gate_seconds(verdict: Any) -> float:
    """Wall seconds of the worker phases a verdict records (what its gate took); 0 where it
    records none."""
    return sum(_phases(verdict).values(), 0.0)


def first_run_s(verdict: Any) -> float:
    """Seconds the gate's correctness phase took (a kernel's first calls: its compilation,
    then the seeds); 0 where the verdict does not say."""
    return _phases(verdict).get("correctness", 0.0)


def kernel_shares(verdict: Any) -> dict[str, float]:
    """Each GPU kernel's share of a verdict's profiled time (`Timing.kernel_shares`) when it
    profiles two or more kernels; {} otherwise (nothing to choose between)."""
    timing = getattr(verdict, "timing", None)
    shares = timing.kernel_shares() if timing is not None else {}
    return shares if len(shares) > 1 else {}


def _unseen(source: str, run: _Run, job: _Job) -> bool:
    """Neither a state of the run nor a candidate it has gated."""
    return source not in run.verdicts and not job.lineage.graph.has_node(state_id(source))


def _attempt_one(card: SkillCard, made: Materialized, run: _Run, job: _Job) -> bool:
    """Gate one materialization; keep it when it improves the kernel (module docstring)."""
    current = run.current

    def reject(stage: str, reason: str, anchor: str = "", near_miss: bool = False) -> bool:
        step = Step(card.id, card.pass_name, anchor, False, stage, reason, rewriter=made.rewriter,
                    state=current.state, near_miss=near_miss)
        run.rejected.append(step)
        job.lineage.record_rejection(current.state, card.pass_name, anchor, stage, None, reason,
                                     card=card.id, case=job.case, tier=job.tier)
        job.say("rejected", {"card": card.id, "stage": stage, "reason": reason})
        return False

    if not made.ok or made.site is None:
        return reject("materialize", "; ".join(made.refusals) or "no site")
    if job.tier != "device" and made.rewriter != "config-sweep" \
            and not feature_appears(card.pass_name, current.ir, made.ir):
        # Untimed tiers keep a candidate for its structural effect alone: one without it is
        # refused before its gate (a config sweep's effect is the configuration list it wrote).
        return reject("effect", f"{card.pass_name} is not present after the rewrite",
                      made.site.anchor)
    source = made.ir.unparse()
    verdict = run.verdicts.get(source)
    if made.rewriter == "config-sweep":
        (run.own_swept if made.options.get("own") else run.swept).add(current.state)
    if verdict is None:
        run.gated += 1
        job.say("gate", {"card": card.id, "anchor": made.site.anchor})
        verdict = job.check(source)
        if _kind(verdict) == "timeout" and job.out_of_time():
            # cut by the time box, not a verdict on the card: set aside, never reused
            step = Step(card.id, card.pass_name, made.site.anchor, False, "time-box",
                        "the gate was cut at the end of the time box", rewriter=made.rewriter,
                        state=current.state)
            run.rejected.append(step)
            job.say("rejected", {"card": card.id, "stage": "time-box", "reason": step.reason})
            return False
        run.verdicts[source] = verdict
    else:
        # Reached again along another path: the same text gets the same verdict.
        run.reused += 1
        if job.lineage.graph.has_node(state_id(source)):
            return reject("repeat", "this kernel is already in the run", made.site.anchor)
    if not verdict.ok:
        return reject(str(verdict.stage), f"{_kind(verdict)}: {verdict.reason}", made.site.anchor)
    spilling = (_all_configs_spill(verdict) - _all_configs_spill(current.verdict)
                if job.tier != "device" and job.language == "triton" else set())
    if spilling:
        # untimed, a Triton kernel whose every configuration now spills registers to local
        # memory is the slowdown the tier cannot time (a warp count of 1 on a 128x256 tile);
        # CUDA kernels hold local arrays on purpose
        return reject("profile", f"every configuration of {', '.join(sorted(spilling))} spills "
                      "registers, where the kernel it came from did not", made.site.anchor)
    ms = _ms(verdict)
    kernel = _Kernel(source, made.ir, "", verdict, ms)
    if job.tier == "device":
        best_ms = run.best.ms
        if ms is None or (best_ms is not None and ms * MIN_GAIN > best_ms):
            stone = None
            if ms is not None and best_ms is not None and ms <= best_ms * STONE_SLACK:
                stone = _Stone(kernel, card, made)
                run.stones.append(stone)
            near = ms is not None and best_ms is not None and ms <= best_ms * NEAR_MISS
            reject("profile", f"not faster: {best_ms} ms -> {ms} ms", made.site.anchor, near)
            if (stone is not None and ms <= best_ms * PAIR_SLACK
                    and run.stone_depth < MAX_STONE_DEPTH):
                unlocked = _unlocked(card, made.ir, run, job,
                                     pairs_only=ms > best_ms * ENABLER_SLACK)
                if unlocked:
                    # The state's own sweep, where it is due, is one gate on this state and
                    # is gated before the two-step bet leaves it (leave-one-out gdn: the walk
                    # to an enabling stone came first, and the hottest kernel's own sweep,
                    # 1.23x, only ran two stones later, past a shorter box).
                    if _own_sweep_pending(run, job) \
                            and _own_sweep_round(run.round_cards, run, job):
                        return True
                    _step_onto(run, job, stone, unlocks=unlocked)
                    return True
            return False
    kernel = _advance(run, job, card, made, kernel, frozenset())
    if made.rewriter == "config-sweep":  # its configurations were just swept: not again,
        run.swept.add(kernel.state)      # but around what its autotuners picked, where known
        if not _picks(kernel.verdict):
            run.own_swept.add(kernel.state)
    run.best, run.applied, run.stones, run.stone_depth = kernel, list(run.chain), [], 0
    run.bet = ()
    job.say("accepted", {"card": card.id, "anchor": made.site.anchor, "ms": ms})
    return True


def _advance(run: _Run, job: _Job, card: SkillCard, made: Materialized, kernel: _Kernel,
             roles: frozenset[str]) -> _Kernel:
    """Record the step current -> kernel in the lineage and the run's chain; make it current."""
    current = run.current
    new_state = job.lineage.add_state(_state(kernel.source, kernel.ir, job.language, job.case,
                                             job.tier, kernel.verdict, roles))
    ms = kernel.ms
    delta = ({"src_ms": current.ms, "dst_ms": ms, "ratio": current.ms / ms}
             if current.ms and ms else None)
    job.lineage.add_transition(Transition(
        src=current.state, dst=new_state, pass_name=card.pass_name, category=card.category,
        anchor=made.site.anchor if made.site else "", options=dict(made.options),
        diff=_diff_actions(current.ir, made.ir),
        src_verdict={"ok": True, "tier": job.tier, "ms": current.ms},
        dst_verdict={"ok": True, "tier": job.tier, "ms": ms}, profile_delta=delta,
        backward=None, rederived_by=(made.rewriter if made.rewriter in ("llm", "transplant")
                                     else "deterministic"),
        case=job.case, language=job.language, platform="cuda", expert=job.expert,
        step=len(run.chain) + 1))
    run.chain.append(Step(card.id, card.pass_name, made.site.anchor if made.site else "", True,
                            ms=ms, speedup=delta["ratio"] if delta else None,
                            rewriter=made.rewriter))
    moved = _Kernel(kernel.source, kernel.ir, new_state, kernel.verdict, ms)
    run.current = moved
    return moved


def _revisits(run: _Run, cards: Sequence[SkillCard]) -> list[SkillCard]:
    """Cards to try again on the best kernel (module docstring): the last gated candidate of
    each was a near miss on another state, and none was tried on the best one."""
    best = run.best.state
    last = {step.card: step for step in _gated_rejections(run)}
    return [card for card in cards
            if card.id in last and last[card.id].near_miss
            and last[card.id].state != best and (best, card.id) not in run.tried
            and not _used_up(card, run, best=True)]


def _revisit(run: _Run, job: _Job, save: Callable[[], None]) -> bool:
    """Try the near misses among the library's cards again on the best kernel (device tier);
    True when any was tried."""
    if job.tier != "device":
        return False
    again = _revisits(run, job.cards)
    if again and run.current.state != run.best.state:  # back from the stepping stones
        run.current, run.chain = run.best, list(run.applied)
    _try_in_turn(again, run, job, save, event="revisit")
    return bool(again)


def _walk_to_stone(run: _Run, job: _Job) -> bool:
    """Continue from the fastest stepping stone (device tier; module docstring); False when
    there is none left to walk to."""
    if run.stone_depth >= MAX_STONE_DEPTH or not run.stones:
        return False
    _step_onto(run, job, min(run.stones, key=lambda s: (s.kernel.ms or float("inf"))))
    return True


def _step_onto(run: _Run, job: _Job, stone: _Stone, unlocks: Sequence[str] = ()) -> None:
    """Make `stone` the current kernel (the best stays where it is); the cards it `unlocks` are
    the loop's bet on it (`_Run.bet`)."""
    run.stones = []
    run.stone_depth += 1
    run.bet = tuple(unlocks)
    _advance(run, job, stone.card, stone.made, stone.kernel, frozenset({"stone"}))
    job.say("stone", {"card": stone.card.id, "ms": stone.kernel.ms,
                      **({"unlocks": ",".join(unlocks)} if unlocks else {})})


def _materializes(card: SkillCard, ir: Any, ctx: Any) -> bool:
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    return next(iter(materializations(card, ir, DeterministicRewriter(), ctx))).ok


def _unlocked(card: SkillCard, ir: Any, run: _Run, job: _Job, pairs_only: bool = False) -> list[str]:
    """Ids of the cards of passes other than `card`'s that `ir` (the step by `card`) enables:
    those that have no materialization on the current kernel and have one on `ir`, and those
    whose evidence ran with `card`'s optimization present (its pass among the card's
    `prior_actions`) and whose rewrite is another with it (`_rewrites_differently`); cards
    failed out of the run or used up left aside.

    The second kind: persistent-grid's recorded speedup was measured on a GEMM that loaded
    through tensor descriptors, whose declarations the persistent loop then builds once per
    program and whose loads it flattens; on a kernel of pointer loads the same card makes a
    different, slower loop. The descriptor step alone is a near tie, so it only ever stayed a
    stone. `pairs_only`: the second kind alone (a stone slower than `ENABLER_SLACK`, within
    `PAIR_SLACK`)."""
    from lineage.transfer import LAUNCH_PASSES  # noqa: PLC0415

    failures = _failures(run)
    candidates = [c for c in job.cards if c.pass_name != card.pass_name
                  and failures[c.id] < MAX_CARD_FAILURES and not _full_kernels(c, run)]

    def paired(c: SkillCard) -> bool:  # the second kind; launch-parameter cards carry their
        # evidence's joint configuration in their sweep
        return (c.pass_name not in LAUNCH_PASSES
                and card.pass_name in (c.scope.get("prior_actions") or ())
                and _rewrites_differently(c, card, run.current.ir, ir, job.ctx, run.rewrites))

    if pairs_only:
        if card.pass_name in LAUNCH_PASSES:
            # a configuration step is in nearly every card's prior actions and is what the
            # next sweep retunes: its cost is not what a structural card's evidence paid for
            # (leave-one-out gdn walked to a 1.15x slower tile size and ran out of its box)
            return []
        return [c.id for c in candidates if paired(c)]
    state = run.current.state
    if state not in run.blocked:
        run.blocked[state] = frozenset(c.id for c in job.cards
                                       if not _materializes(c, run.current.ir, job.ctx))
    return [c.id for c in candidates
            if (_materializes(c, ir, job.ctx) if c.id in run.blocked[state] else paired(c))]


def _first_rewrite(card: SkillCard, ir: Any, ctx: Any, memo: dict[tuple[str, str], Any]) -> Any:
    """The IR of `card`'s first deterministic materialization on `ir`, or None (memoized by
    card and source: the current kernel's are asked again for every stone)."""
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    key = (card.id, state_id(ir.unparse()))
    if key not in memo:
        made = next(iter(materializations(card, ir, DeterministicRewriter(), ctx, sweeps=False)))
        memo[key] = made.ir if made.ok else None
    return memo[key]


def _rewrites_differently(other: SkillCard, card: SkillCard, current: Any, stepped: Any,
                          ctx: Any, memo: dict[tuple[str, str], Any]) -> bool:
    """`other` changes `stepped` (`card`'s step from `current`) otherwise than it changes
    `current`, beyond the lines the step itself changed: the two steps do not commute, so what
    `other` did on `current` says nothing of what it does after `card`.

    Changes are compared as multisets of removed and added lines, stripped of indentation (a
    rule that moves a loop into another re-indents it) and without the lines the step removed
    or added (a pipelining depth inside the loop the persistent rule moves). The persistent
    loop over descriptor loads writes another loop header than over pointer loads; a tile size
    in the autotune list changes nothing the persistent rule writes."""
    after = _first_rewrite(other, stepped, ctx, memo)
    if after is None:
        return False
    before = _first_rewrite(other, current, ctx, memo)
    if before is None:
        return True
    current_text, stepped_text = current.unparse(), stepped.unparse()
    step_removed, step_added = _line_changes(current_text, stepped_text)
    own = step_removed | step_added

    def effect(a: str, b: str) -> tuple[Counter[str], Counter[str]]:
        removed, added = _line_changes(a, b)
        return (Counter({k: v for k, v in removed.items() if k not in own}),
                Counter({k: v for k, v in added.items() if k not in own}))

    return effect(current_text, before.unparse()) != effect(stepped_text, after.unparse())


def _line_changes(a: str, b: str) -> tuple[Counter[str], Counter[str]]:
    """(removed, added) lines from `a` to `b`, stripped, blank lines left out."""
    x = [line.strip() for line in a.splitlines() if line.strip()]
    y = [line.strip() for line in b.splitlines() if line.strip()]
    removed: Counter[str] = Counter()
    added: Counter[str] = Counter()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes():
        if tag != "equal":
            removed.update(x[i1:i2])
            added.update(y[j1:j2])
    return removed, added


def _diff_actions(old: Any, new: Any) -> tuple[Mapping[str, Any], ...]:
    """The structured diff of a kept step, as `klineage diff --json` lists its actions."""
    import anchors  # noqa: PLC0415

    script = anchors.diff(old, new)
    return tuple(action.to_json() for action in script.actions)


def feature_appears(pass_name: str, before: Any, after: Any) -> bool:
    """The rewrite moved the kernel toward the pass: it has more sites where the optimization
    is present, or fewer where it could still be applied (a tile grown at an anchor that
    already counted as present). A card whose pass has no detector (no importable pass
    module: an intent only the LLM performs) cannot be checked this way; for it the gate
    alone decides."""
    import anchors  # noqa: PLC0415

    from passes.registry import get_pass  # noqa: PLC0415

    try:
        the_pass = get_pass(pass_name)()
    except (BadInputError, ImportError):
        return True

    def counts(ir: Any) -> tuple[int, int]:
        sites = the_pass.sites(ir, anchors.build_index(ir))
        return sum(s.present for s in sites), sum(not s.present for s in sites)

    (present_0, open_0), (present_1, open_1) = counts(before), counts(after)
    return present_1 > present_0 or open_1 < open_0


def _state(source: str, ir: Any, language: str, case: str, tier: str, verdict: Any,
           roles: frozenset[str]) -> KernelState:
    import anchors  # noqa: PLC0415

    verdict_json = _verdict_json(verdict)
    return KernelState(source=source, language=language, case=case, tier=tier,
                       anchors=tuple(str(a.id) for a in anchors.build_index(ir).anchors),
                       features=kernel_features(ir), verdict=verdict_json,
                       timing=verdict_json.get("timing"), roles=roles)


def _all_configs_spill(verdict: Any) -> set[str]:
    """Kernels whose every compile in the verdict's facts spills (or uses local memory); empty
    where the tier compiled nothing."""
    compiles = getattr(getattr(verdict, "facts", None), "compiles", None) or ()
    spills: dict[str, bool] = {}
    for c in compiles:
        spills[c.kernel] = spills.get(c.kernel, True) and c.spills
    return {k for k, v in spills.items() if v}


def _verdict_json(verdict: Any) -> dict[str, Any]:
    to_json = getattr(verdict, "to_json", None)
    return dict(to_json()) if callable(to_json) else dict(verdict or {})


def _ms(verdict: Any) -> float | None:
    timing = getattr(verdict, "timing", None)
    value = getattr(timing, "candidate_ms", None) if timing is not None else None
    return float(value) if value else None


def _kind(verdict: Any) -> str:
    kind = getattr(verdict, "failure_kind", None)
    return str(getattr(kind, "value", kind))


def resolve_tier(tier: str, language: str) -> str:
    """The concrete tier for `tier` ("auto": device where a GPU is present, else interpret);
    BadInputError for an unknown tier."""
    tier = str(getattr(tier, "value", tier))
    if tier not in ("static", "interpret", "device", "auto"):
        raise BadInputError(f"unknown tier {tier!r} (static|interpret|device|auto)")
    from gate.check import resolve_tier as gate_resolve  # noqa: PLC0415

    resolved, _ = gate_resolve(tier, language)
    return str(getattr(resolved, "value", resolved))


def _llm_report(rewriter: Any) -> dict[str, Any] | None:
    """The LLM back-end's `usage_report()` (calls, failures, cache reads / writes), if any."""
    for backend in (rewriter, *(getattr(rewriter, "backends", ()) or ())):
        report = getattr(backend, "usage_report", None)
        if callable(report):
            return dict(report())
    return None


def _spent(rewriter: Any) -> float:
    total = float(getattr(rewriter, "spent_usd", 0.0) or 0.0)
    for backend in getattr(rewriter, "backends", ()) or ():
        total += float(getattr(backend, "spent_usd", 0.0) or 0.0)
    return total


__all__ = ["Materialized", "OptimizeResult", "Step", "card_sites", "feature_appears", "kernel_of",
           "materialize", "materializations", "optimize", "resolve_tier", "seeded_order"]
