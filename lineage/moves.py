"""Moves: what makes a candidate kernel from a state of the optimize loop (paper §3.4).

A move is one of
- a card's materialization at a site (`materializations`): the pass's deterministic rule at
  the pass's optimization sites (those at the card's locus first), the card's recorded step
  transplanted where the rule has no site or refuses (`anchors.transplant`; rewriter
  "transplant"), then the LLM rewriter where one is configured; on a timed run a structural
  step (its pass sets no launch parameter) is written under a small joint list around the
  configuration its state runs with (`around_parent`): a structure moves the best
  configuration, and one gate then measures it at the best of that neighbourhood;
- a sweep around a card's recorded joint configuration (`recorded_sweeps`, launch-parameter
  cards: `lineage.transfer`; rewriter "config-sweep");
- a sweep of the state's own tunables: the generic role-keyed list the no-library control
  writes (`plain_sweep`, `lineage.control`), or a sweep around the configuration the kernel
  runs with, its autotuner's pick where the device reported one (`own_sweeps`);
- a rule that declares a prior (`Pass.prior`), offered without a card wherever it takes the
  state (`rule_offers`), its result under the generic autotune list first (`rule_candidates`);
- the configuration each autotuner of the state picked on the shapes the gate timed, pinned in
  place of its list (`pinned_picks`).

The loop (`lineage.optimize`) decides which move to spend a gate on; this module only makes
candidates and says why one could not be made. What every move observes:
- a step on an entry of a literal autotune list is written as a new entry beside the one it
  edits (`_beside_in_list`): the autotuner then picks between them, and the configuration the
  kernel was running with is not lost to a step kept on timing noise;
- a dot kernel's configurations fit the shared memory its operand tiles need at the case's
  element width (`_over_shared`, `lineage.transfer.shared_fit`);
- a card's step leaves a tile the kernel never bounds-checks at a divisor of the sizes its
  author runs it with, whatever value the card recorded (`_past_unchecked`);
- a card without a site on a kernel is asked again on the kernel with its `@triton.jit`
  helpers inlined, the flags every launch sets read as their value and its counted `while`
  loops written as `for` loops over a range (`_normalized`): what a helper or a hand-counted
  loop hides is then a site too;
- `kernel_room` (how far each kernel's variants trail the reference) orders sites, then
  `kernel_shares` (a verdict's per-kernel GPU time), and the loop leaves out kernels too
  cold to pay.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kir.errors import BadInputError, KLineageError
from lineage.skills import SkillCard, locus_signature

if TYPE_CHECKING:
    from kir import KernelIR
    from passes.base import PassContext, PassResult, Site
    from passes.rewriter import Rewriter

# Sites tried per card and kernel (the card's own locus first).
MAX_SITES = 3
# The pass a sweep of a state's own tunables records in the lineage.
SWEEP_PASS = "autotune"
# A kernel of a multi-kernel file under this share of its profiled GPU time takes no
# candidates (device tier): removing it entirely would gain less than this.
COLD_SHARE = 0.05
# Expected gain of pinning a state's autotuner picks (`pinned_picks`): the pinned kernel runs the
# binary the autotuner ran, and the gate times GPU work alone (its GPU lead keeps the host's
# launch time out of the figure, `gate.worker._Runner.gpu_lead`), so none is expected there;
# what the pin saves, the autotuner's dispatch on the host, a caller pays and the gate does not.
PIN_PRIOR = 1.0
# Configurations a structural candidate is gated under (`around_parent`): the first points of
# the own sweep around its state's configuration (`lineage.transfer.sweep_own`), for a dot
# kernel that configuration, one pipeline stage more, twice and half the warps, one stage
# fewer; a kernel slow to compile (`heavy`) the first three.
AROUND_POINTS = 5
AROUND_POINTS_HEAVY = 3


# -- card materialization ------------------------------------------------------------------------
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


def tuned(cls: Any, variants: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each of `variants` in the rule's fullest forms first (each of its `reach`, best first,
    on top: refused where the kernel does not allow it, at no gate), then `variants`, then
    each with every other value of a tunable option it sets (the rule's `tunables`): a
    recorded slot count of four also tries three and five."""
    out: list[Mapping[str, Any]] = []
    for variant in variants:
        for form in getattr(cls, "reach", None) or ():
            full = {**variant, **form}
            if full not in out and full not in variants:
                out.append(full)
    out += [v for v in variants if v not in out]
    for variant in variants:
        for key, values in (getattr(cls, "tunables", None) or {}).items():
            if key in variant:
                out += [v for v in ({**variant, key: x} for x in values) if v not in out]
    return out


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
                     site_order: Callable[[Site], Any] | None = None,
                     own_sweeps: bool | None = None,
                     heavy: bool = False,
                     picks: Mapping[str, Mapping[str, int]] | None = None) -> Iterator[Materialized]:
    """Distinct candidate materializations of `card` on `ir`, best first; the last item has
    no IR (it carries every refusal) when nothing else came out.

    Order: for each site (the card's locus first), each back-end (a chain is unwrapped so a
    result names the back-end that made it): a deterministic back-end tries the card's recorded
    option variants for the site (`SkillCard.option_candidates`), then those with the other
    values of the rule's tunable options (`tuned`), and then the pass's defaults
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
        past = _past_unchecked(ir, made.ir, unchecked_before)
        if past:
            refusals.append(f"transplant: {past}")
            return
        if any(ln in old_lines for ln in _inserted_lines(source, text)):
            repeats.append(made)
            return
        yield made

    over_before: dict[str, Any] = {}  # `_over_shared`'s answer for `ir`, asked once
    unchecked_before: dict[str, Any] = {}  # `_past_unchecked`'s caps of `ir`, read once
    for site in sites[:max_sites]:
        for backend in backends:
            if backend.name == "llm" and not (produced or repeats or transplant_tried):
                transplant_tried = True  # the recorded step before the LLM is paid for
                for made in transplant():
                    produced = True
                    yield made
            variants = card.option_candidates(site.anchor)
            variants = variants[:1] if backend.name == "llm" else tuned(cls, variants) + [{}]
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
                too_big = _over_shared(ir, new_ir, ctx, over_before) \
                    or _past_unchecked(ir, new_ir, unchecked_before)
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


def _past_unchecked(ir: KernelIR, new_ir: KernelIR, memo: dict[str, Any]) -> str:
    """Why `new_ir` is refused for a tile its kernel never bounds-checks ("" where it is not):
    a kernel of `ir` whose block offsets of a tile are compared with no size is correct only on
    sizes its author made multiples of the values they run it with
    (`passes.triton.roles.unchecked_caps`), so the tile may only shrink to a divisor of such a
    value; a value a card recorded on another kernel (a launch value or a configuration entry
    `new_ir` writes) that is not one reads past those sizes. The configuration sweeps keep to
    this already (`roles._within_unchecked`); a card's step must too. A tile stepping a loop
    whose counter the kernel divides by a group (`roles.grouped_caps`: `k // GROUP`) is refused
    the same way at a value that does not divide the group. `memo` keeps `ir`'s caps."""
    if str(getattr(ir.language, "value", ir.language)) != "triton":
        return ""
    from passes.triton._py import PyModule, literal_int  # noqa: PLC0415
    from passes.triton.roles import (  # noqa: PLC0415
        autotune_entries, grouped_caps, kernel_config, unchecked_caps)

    if "caps" not in memo:
        try:
            mod = PyModule(ir)
            memo["caps"] = {k.name: caps for k in mod.kernels()
                            if (caps := unchecked_caps(mod, k, kernel_config(mod, k)))}
            memo["grouped"] = {k.name: caps for k in mod.kernels()
                               if (caps := grouped_caps(mod, k, kernel_config(mod, k)))}
        except (SyntaxError, ValueError, KLineageError):
            memo["caps"], memo["grouped"] = {}, {}
    if not memo["caps"] and not memo["grouped"]:
        return ""
    try:
        mod = PyModule(new_ir)
        kernels = [k for k in mod.kernels() if k.name in memo["caps"] or k.name in memo["grouped"]]
        for kernel in kernels:
            caps = memo["caps"].get(kernel.name, {})
            grouped = memo["grouped"].get(kernel.name, {})
            values = [(p.name, p.value) for p in kernel_config(mod, kernel).params]
            for entry in autotune_entries(mod, kernel):
                values += [(key.value, literal_int(val))
                           for key, val in zip(entry.args[0].keys, entry.args[0].values)
                           if isinstance(key, ast.Constant)]
            for name, value in values:
                cap = caps.get(name)
                if cap and value and (value > cap or cap % value):
                    return (f"{kernel.name} never bounds-checks its {name} block: it is correct "
                            f"only on sizes that are multiples of {cap}, and {name}={value} may "
                            "read past them")
                group = grouped.get(name)
                if group and value and (value > group or group % value):
                    return (f"{kernel.name} divides the counter of the loop its {name} block "
                            f"steps by {group} (one row of a group per step): {name}={value} "
                            "would span several groups")
    except (SyntaxError, ValueError, KLineageError):
        return ""
    return ""


def _beside_in_list(ir: KernelIR, result: Any) -> KernelIR | None:
    """A rewrite whose edits all lie inside one `triton.Config(...)` entry of a literal config
    list (a tile, warp or stage step on an autotuned kernel), written as a new entry after the
    one it edits, which stays: the autotuner then picks between them on the target's shapes.
    Edited in place, the step would drop a configuration the kernel may be running with.
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
"""Source text -> its kernels normalized (helpers inlined, flags specialized, counted loops as
ranges) and what was done (every card without a site asks)."""


def _normalized(ir: KernelIR) -> tuple[KernelIR | None, tuple[str, ...]]:
    """(`ir` with its kernels' `@triton.jit` helpers inlined, the constexpr flags every launch
    sets to one literal read as it (`passes.triton.inline`) and its counted `while` loops as
    `for` loops over a range (`passes.triton.loops`), what of the three was done), or (None, ())
    when none applies (or it is not Triton)."""
    if str(getattr(ir.language, "value", ir.language)) != "triton":
        return None, ()
    source = ir.unparse()
    if source in _NORMALIZED:
        return _NORMALIZED[source]
    from passes.triton.inline import inline_helpers, specialize_flags  # noqa: PLC0415
    from passes.triton.loops import counted_loops  # noqa: PLC0415

    out: KernelIR | None = None
    how: tuple[str, ...] = ()
    for step, label in ((inline_helpers, "helpers inlined"),
                        (specialize_flags, "flags specialized"),
                        (counted_loops, "while loops counted as ranges")):
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
        new_ir = kir.parse(result.text, ir.language, path=ir.path)  # its host module stays found
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




def autotune_picks(verdict: Any) -> dict[str, dict[str, int]]:
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
    records none. The parts of a phase (`phase: part`) are in the phase already."""
    return sum((s for name, s in _phases(verdict).items() if ": " not in name), 0.0)


def first_run_s(verdict: Any) -> float:
    """Seconds the gate's correctness phase took (a kernel's first calls: its compilation,
    then the seeds); 0 where the verdict does not say."""
    return _phases(verdict).get("correctness", 0.0)


def kernel_shares(verdict: Any, ir: Any = None) -> dict[str, float]:
    """Each GPU kernel's share of a verdict's profiled time (`Timing.kernel_shares`) when it
    profiles two or more kernels; {} otherwise (nothing to choose between). With the profiled
    program's `ir`, a kernel it launches somewhere that the profile does not name (a path the
    timed shapes never take: a dispatch to a skinny-shape kernel) holds a share of 0, so one
    profiled kernel beside it is already a choice. A jit function nothing launches (a helper
    the kernels call) is not a kernel and gets no share."""
    timing = getattr(verdict, "timing", None)
    shares = timing.kernel_shares() if timing is not None else {}
    if shares and ir is not None:
        shares = {**{name: 0.0 for name in launched_kernels(ir)}, **shares}
    return shares if len(shares) > 1 else {}


def kernel_room(verdict: Any) -> dict[str, float]:
    """Each profiled kernel's part of the time by which the timed variants trail their
    reference (ms): a variant's lag behind the reference, max(0, candidate - reference), split
    over its kernels by their GPU time in it. The reference (the vendor library) says what
    that variant can reach; a kernel already at its speed has little to give, however much
    of the time it takes (a dispatching module whose big-shape kernel matches the vendor
    while its small-shape one trails it by its own time). {} where nothing trails."""
    room: dict[str, float] = {}
    for v in getattr(getattr(verdict, "timing", None), "variants", None) or ():
        lag, whole = v.candidate_ms - v.reference_ms, sum(ms for _, ms in v.kernels)
        if lag > 0 and whole > 0:
            for name, ms in v.kernels:
                room[name] = room.get(name, 0.0) + lag * ms / whole
    return room


def launched_kernels(ir: Any) -> set[str]:
    """The names of the Triton jit functions `ir` launches (as `kernel[grid](...)`, through a
    host helper or a partial); empty for other languages or a source that does not parse."""
    if str(getattr(ir.language, "value", ir.language)) != "triton":
        return set()
    from passes.triton._py import PyModule  # noqa: PLC0415
    from passes.triton.roles import kernel_launches  # noqa: PLC0415

    try:
        mod = PyModule(ir)
        return {k.name for k in mod.kernels() if kernel_launches(mod, k)}
    except (SyntaxError, ValueError):
        return set()



def kernel_of(anchor: str) -> str:
    """The kernel (or function) of the file an anchor lies in: the launched kernel of a
    `.../launch:NAME[i]` anchor, else the first segment of the anchor's path."""
    path = str(anchor).split(":", 1)[1] if ":" in str(anchor) else str(anchor)
    for segment in path.split("/"):
        if segment.startswith("launch:"):
            return segment[len("launch:"):].split("[", 1)[0]
    return path.split("/", 1)[0]



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



def all_configs_spill(verdict: Any) -> set[str]:
    """Kernels whose every compile in the verdict's facts spills (or uses local memory); empty
    where the tier compiled nothing."""
    compiles = getattr(getattr(verdict, "facts", None), "compiles", None) or ()
    spills: dict[str, bool] = {}
    for c in compiles:
        spills[c.kernel] = spills.get(c.kernel, True) and c.spills
    return {k for k, v in spills.items() if v}



def effect_spread(cards: Sequence[SkillCard]) -> float:
    """The standard deviation of the log of the timed cards' measured effects: how far a
    move's gain on a kernel may plausibly lie from its prior before it is measured there
    (0 with fewer than two timed cards)."""
    import statistics  # noqa: PLC0415

    logs = [math.log(c.effect_score) for c in cards if c.speedup and c.effect_score > 0]
    return statistics.pstdev(logs) if len(logs) > 1 else 0.0


# -- where a card still acts ------------------------------------------------------------------------
def full_kernels(card: SkillCard, state: Any) -> set[str]:
    """The kernels the card was kept on, on the way to `state`, as often as it has evidence."""
    uses = Counter(kernel_of(step.anchor) for step in state.path if step.card == card.id)
    return {kernel for kernel, n in uses.items() if n >= max(1, len(card.evidence))}


def left_out(card: SkillCard, state: Any) -> set[str]:
    """Kernels of `state` the card does not act on: those it is used up on (`full_kernels`)
    and those under `COLD_SHARE` of its profile (`kernel_shares`: a kernel the state launches
    that the profile does not name is cold; a site in a helper function the kernels call is
    neither)."""
    return full_kernels(card, state) | {name for name, share in
                                         kernel_shares(state.verdict, state.ir).items() if share < COLD_SHARE}


def kernel_order(state: Any) -> Callable[[Site], tuple[float, float]] | None:
    """The order of sites on `state` (ascending key) where its profile names several kernels:
    the kernel with the most room first (`kernel_room`), then the hottest (`kernel_shares`);
    a site in a function the profile does not name ranks as a kernel at `COLD_SHARE`. None
    (the sites' own order) where the profile names one kernel or none."""
    shares = kernel_shares(state.verdict, state.ir)
    if not shares:
        return None
    room = kernel_room(state.verdict)

    def order(site: Site) -> tuple[float, float]:
        kernel = kernel_of(site.anchor)
        return -room.get(kernel, 0.0), -shares.get(kernel, COLD_SHARE)
    return order


def used_up(card: SkillCard, state: Any) -> bool:
    """Every site `card` has on `state` lies in a kernel it is used up on."""
    if card.id not in state.used_up:
        full = full_kernels(card, state)
        state.used_up[card.id] = bool(full) and all(kernel_of(s.anchor) in full
                                                    for s in card_sites(card, state.ir))
    return state.used_up[card.id]


def move_candidates(kind: str, card: SkillCard, state: Any, *, ctx: Any, rewriter: Any,
                    heavy: bool = False, around: bool = False) -> Iterator[Materialized]:
    """The candidates of a move of the optimize loop (`lineage.optimize`) on `state` (its
    `ir`, `verdict`, `path`): `kind` plain | own | recorded | rule | pin | card, acting for `card`;
    sites in kernels the card does not act on (`left_out`) left out; where the state's profile
    names several kernels, the one with the most room first (`kernel_room`), then the hottest;
    `heavy`: the kernel is slow to compile; `around` (a timed run with sweeps): a card's
    structural step under a joint list around the state's configuration (`around_parent`)."""
    skipped, order = left_out(card, state), kernel_order(state)

    def skip(site: Any) -> bool:
        return kernel_of(site.anchor) in skipped

    if kind == "plain":
        made: Iterator[Materialized] = iter((plain_sweep(state.ir),))
    elif kind == "own":
        made = own_sweeps(state.ir, ctx=ctx, heavy=heavy,
                          picks=autotune_picks(state.verdict), skip_site=skip,
                          site_order=order)
    elif kind == "recorded":
        made = recorded_sweeps(card, state.ir, ctx=ctx, skip_site=skip)
    elif kind == "rule":
        made = rule_candidates(card, state.ir, ctx)
    elif kind == "pin":
        made = iter((pinned_picks(state.ir, state.verdict),))
    else:
        made = materializations(card, state.ir, rewriter, ctx, skip_site=skip,
                                sweeps=False, site_order=order)
        if around:
            made = (around_parent(m, state, ctx=ctx, heavy=heavy) for m in made)
    return (dataclasses.replace(m, ir=None, refusals=(*m.refusals, (
        "its config lists hold some of its state's entries, reordered or repeated, and nothing "
        "else changed: never faster than its state")))
        if kind != "pin" and _configured_as(m, state) else m for m in made)  # a pin cuts on purpose


def _configured_as(made: Materialized, state: Any) -> bool:
    """Whether a Triton candidate is its state's kernel with its config lists holding some of
    the state's entries, reordered or repeated (`passes.triton.autotune.configured_alike`):
    its autotuner chooses among the same configurations or fewer, never a faster one."""
    if made.ir is None or state.ir is None or made.ir is state.ir:
        return False
    if str(getattr(made.ir.language, "value", made.ir.language)) != "triton":
        return False
    from passes.triton.autotune import configured_alike  # noqa: PLC0415

    return configured_alike(made.ir.unparse(), state.ir.unparse())


def around_parent(made: Materialized, state: Any, *, ctx: Any = None,
                  heavy: bool = False) -> Materialized:
    """`made`, a step on `state` (its `ir`, `verdict`), with the kernel it edits under a joint
    list of `AROUND_POINTS` configurations around the one `state` runs it with (its
    autotuner's pick where the verdict names one, else its launch values: the own sweep's
    first points, `lineage.transfer.sweep_own`), in place of the configuration it inherited.
    A structural step moves the best configuration (a load path that frees registers or
    shared memory lets a deeper pipeline pay): judged at its parent's configuration alone it
    may lose where its own neighbourhood wins. `made` itself where its pass sets launch
    parameters (`lineage.transfer.LAUNCH_PASSES`: the configuration is its step), the kernel
    is not Triton, or no list can be written there. The options record the list (`around`)."""
    from lineage.transfer import LAUNCH_PASSES, config_candidates  # noqa: PLC0415

    if not made.ok or made.site is None or made.card.pass_name in LAUNCH_PASSES \
            or str(getattr(made.ir.language, "value", made.ir.language)) != "triton":
        return made
    listed = config_candidates({}, made.ir, own=True, every=True, heavy=heavy,
                               picks=autotune_picks(getattr(state, "verdict", None)),
                               elem_bytes=_element_width(ctx),
                               points=AROUND_POINTS_HEAVY if heavy else AROUND_POINTS)
    kernel = kernel_of(made.site.anchor)
    fits = [c for c in listed if c[0] == kernel] or (listed if len(listed) == 1 else [])
    if not fits:
        return made
    _, new_ir, fitted = fits[0]
    return dataclasses.replace(made, ir=new_ir,
                               options={**made.options, "around": [dict(c) for c in fitted]})


# -- sweeps of a state's own tunables -------------------------------------------------------------
def sweep_card(kind: str, language: str) -> SkillCard:
    """The stand-in card a sweep of a state's own tunables is recorded under: `kind` "plain"
    (the generic list of `lineage.control`), "own" (around the configuration it runs with) or
    "pin" (the configurations its autotuners picked, `pinned_picks`)."""
    intent = {"plain": "the generic autotune list over the kernel's tunable launch parameters",
              "own": "a sweep around the launch configuration the kernel runs with",
              "pin": "the configuration each autotuner picked, pinned in place of its list"}[kind]
    return SkillCard(id=f"sweep.{kind}", intent=intent, pass_name=SWEEP_PASS,
                     category="expression-level", language=language, locus="kernel")


def plain_sweep(ir: KernelIR, keep: Collection[str] = ()) -> Materialized:
    """The state under the generic autotune list the no-library control gives its start kernel
    (`lineage.control.autotune_control`): on the start state this is the control itself, so a
    run that gates it is never worse than the control. The kernels named in `keep` keep their
    own lists. Without IR (and the reason) where no kernel of the module can be tuned, or the
    module is not Triton."""
    import kir  # noqa: PLC0415

    from lineage.control import autotune_control  # noqa: PLC0415
    from lineage.transfer import kernel_site  # noqa: PLC0415
    from passes.triton.roles import joint_config  # noqa: PLC0415

    card = sweep_card("plain", str(getattr(ir.language, "value", ir.language)))
    if card.language != "triton":
        return Materialized(card, None, None, refusals=("no launch parameters to sweep",))
    try:
        text = autotune_control(ir.unparse(), keep=keep)
        new_ir = kir.parse(text, "triton")
    except (BadInputError, KLineageError, SyntaxError, ValueError) as exc:
        return Materialized(card, None, None, refusals=(f"plain sweep: {exc}",))
    if text == ir.unparse():
        return Materialized(card, None, None, refusals=("plain sweep: the list is already there",))
    site = next((s for s in (kernel_site(SWEEP_PASS, ir, name) for name in joint_config(ir))
                 if s is not None), None)
    if site is None:
        return Materialized(card, None, None, refusals=("plain sweep: no kernel definition",))
    return Materialized(card, new_ir, site, "config-sweep", (), {"plain": True})


def own_sweeps(ir: KernelIR, *, ctx: Any = None, heavy: bool = False,
               picks: Mapping[str, Mapping[str, int]] | None = None,
               skip_site: Callable[[Site], bool] | None = None,
               site_order: Callable[[Site], Any] | None = None) -> Iterator[Materialized]:
    """A sweep around each kernel's own configuration, the one its autotuner picked where
    `picks` (the state's verdict) names it (`lineage.transfer.sweep_own`): one candidate per
    kernel, in ascending `site_order` of the kernel's site; `heavy`: the kernel is slow to
    compile. A CUDA kernel: its configuration rules' values, one candidate each
    (`_configuration_rules`)."""
    from lineage.transfer import config_candidates, kernel_site  # noqa: PLC0415

    card = sweep_card("own", str(getattr(ir.language, "value", ir.language)))
    if card.language != "triton":
        yield from _configuration_rules(card, ir, ctx, skip_site)
        return
    made: list[Materialized] = []
    for name, new_ir, fitted in config_candidates({}, ir, own=True, heavy=heavy, picks=picks,
                                                  every=True, elem_bytes=_element_width(ctx)):
        site = kernel_site(SWEEP_PASS, ir, name)
        if site is None or (skip_site is not None and skip_site(site)):
            continue
        made.append(Materialized(card, new_ir, site, "config-sweep", (),
                                 {"sweep": [dict(c) for c in fitted], "own": True}))
    yield from (sorted(made, key=lambda m: site_order(m.site)) if site_order else made)


def variant_picks(verdict: Any) -> dict[str, dict[str, dict[str, int]]]:
    """Kernel -> timed variant -> the configuration its autotuner picked there (what the gate
    read from the autotuner after that variant's timed runs: its pick for the autotune key of
    that variant's shapes); {} where the verdict was not timed or no autotuner ran."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for v in getattr(getattr(verdict, "timing", None), "variants", None) or ():
        for kernel, config in v.picks:
            out.setdefault(kernel, {})[v.variant] = dict(config)
    return out


_TUNED: dict[str, frozenset[str]] = {}
"""Source text -> its kernels under an autotuner over several configurations (`pin_offered`)."""


def pin_offered(ir: KernelIR, verdict: Any) -> bool:
    """`pinned_picks` has something to pin: a kernel with a recorded pick is autotuned over
    several configurations."""
    picked = variant_picks(verdict)
    if not picked or str(getattr(ir.language, "value", ir.language)) != "triton":
        return False
    from passes.triton.autotune import Autotune  # noqa: PLC0415

    source = ir.unparse()
    if source not in _TUNED:
        if len(_TUNED) >= 64:
            _TUNED.clear()
        _TUNED[source] = frozenset(s.detail.get("kernel") for s in Autotune().sites(ir) if s.present)
    return bool(_TUNED[source] & set(picked))


def pinned_picks(ir: KernelIR, verdict: Any) -> Materialized:
    """`ir` with each autotuned kernel's list replaced by the configuration its autotuner picked
    (`passes.triton.autotune.pin_picked`: the decorator removed and the values passed at the
    launches, or the list cut to that entry), the picks read from `verdict` (the state's own
    device-tier verdict, `variant_picks`). The pick holds for the autotune keys of the shapes
    the gate times; a kernel whose variants picked different configurations is left autotuned
    (one pin would run one of them on every variant) and says so. Still correct on other
    shapes, possibly slower there. Without IR (and the reasons) where nothing was pinned."""
    from lineage.transfer import kernel_site  # noqa: PLC0415
    from passes.base import Applied  # noqa: PLC0415
    from passes.triton.autotune import pin_picked  # noqa: PLC0415

    card = sweep_card("pin", str(getattr(ir.language, "value", ir.language)))
    picked = variant_picks(verdict)
    if card.language != "triton" or not picked:
        return Materialized(card, None, None, refusals=(
            "pin: no autotuner pick recorded (the device tier records them)",))
    now, site, pinned, refusals = ir, None, {}, []
    for kernel, by_variant in sorted(picked.items()):
        if len({tuple(sorted(p.items())) for p in by_variant.values()}) > 1:
            refusals.append(f"pin {kernel}: its timed variants picked different configurations ("
                            + "; ".join(f"{v}: " + " ".join(f"{k}={x}" for k, x in p.items())
                                        for v, p in sorted(by_variant.items())) + ")")
            continue
        pick = next(iter(by_variant.values()))
        result = pin_picked(now, kernel, pick)
        if not isinstance(result, Applied):
            refusals.append(f"pin {kernel}: {getattr(result, 'reason', '') or getattr(result, 'error', '')}")
            continue
        now, pinned[kernel] = result.ir, pick
        site = site or kernel_site(SWEEP_PASS, ir, kernel)
    if site is None:
        return Materialized(card, None, None, refusals=tuple(refusals) or ("pin: nothing to pin",))
    return Materialized(card, now, site, "deterministic", tuple(refusals), {"pin": pinned})


def _configuration_rules(card: SkillCard, ir: KernelIR, ctx: Any,
                         skip_site: Callable[[Site], bool] | None) -> Iterator[Materialized]:
    """A kernel whose configuration no autotuner holds (CUDA: the block its host launches):
    each rule of its language whose every option is a tunable (a configuration, e.g.
    `launch-threads`) at each site it takes, with the rule's defaults first, then each other
    value of its tunables. The stand-in card takes the rule's name, which the lineage records."""
    from passes.base import Applied  # noqa: PLC0415
    from passes.registry import all_pass_classes  # noqa: PLC0415

    for cls in all_pass_classes():
        if card.language not in cls.languages or not cls.tunables \
                or set(cls.option_fields()) - set(cls.tunables):
            continue
        default = cls()
        values = [{}] + [{key: v} for key, vs in cls.tunables.items() for v in vs
                         if v != getattr(default, key)]
        rule_card = dataclasses.replace(card, pass_name=cls.name)
        for site in cls().sites(ir):
            if site.present or (skip_site is not None and skip_site(site)):
                continue
            for rule in (cls.from_options(options) for options in values):
                result = rule.optimize(ir, site, ctx)
                if isinstance(result, Applied):
                    yield Materialized(rule_card, result.ir, site, "config-sweep", (),
                                       {**{k: getattr(rule, k) for k in cls.tunables}, "own": True})


def recorded_sweeps(card: SkillCard, ir: KernelIR, *, ctx: Any = None,
                    skip_site: Callable[[Site], bool] | None = None) -> Iterator[Materialized]:
    """A launch-parameter card's recorded joint configuration and a sweep around it, on each
    kernel of `ir` it fits (`lineage.transfer`); nothing for another card."""
    return _config_sweeps(card, ir, skip_site, ctx=ctx)


# -- rules a search offers without a card ----------------------------------------------------------
_RULED: dict[tuple[str, str], dict[str, tuple[KernelIR, Site]]] = {}
"""(source, dtype) -> rule name -> the kernel with the rule applied wherever it takes it, and
its first site (`rule_moves`)."""


def rule_card(name: str, language: str) -> SkillCard:
    """The stand-in card a rule offered without a card is recorded under (its pass's name)."""
    from passes.registry import get_pass  # noqa: PLC0415

    cls = get_pass(name)
    return SkillCard(id=f"rule.{name}", intent=cls.summary, pass_name=name,
                     category=cls.category.value, language=language, locus="kernel")


def rule_moves(ir: KernelIR, ctx: Any = None) -> dict[str, tuple[KernelIR, Site]]:
    """Rule name -> (`ir` with the rule applied at every site it takes, one after the other;
    the first of them) for each registered rule of `ir`'s language that declares a prior
    (`Pass.prior` > 1: the search offers it on its own, before any lineage recorded it) and
    takes `ir` somewhere under `ctx` (its `dtype` fact decides some refusals)."""
    from passes.base import Applied  # noqa: PLC0415
    from passes.registry import all_pass_classes  # noqa: PLC0415

    language = str(getattr(ir.language, "value", ir.language))
    key = (ir.unparse(), str((getattr(ctx, "facts", None) or {}).get("dtype", "")))
    if key in _RULED:
        return _RULED[key]
    out: dict[str, tuple[KernelIR, Site]] = {}
    for cls in all_pass_classes():
        if cls.prior <= 1 or language not in cls.languages:
            continue
        rule, now, first = cls(), ir, None
        for _ in range(MAX_SITES * 4):  # each site once: a site taken is no longer open
            step = next(((site, result) for site in rule.sites(now) if not site.present
                         for result in [rule.optimize(now, site, ctx)]
                         if isinstance(result, Applied)), None)
            if step is None:
                break
            first, now = first or step[0], step[1].ir
        if first is not None:
            out[cls.name] = (now, first)
    if len(_RULED) >= 64:
        _RULED.clear()
    _RULED[key] = out
    return out


def rule_offers(ir: KernelIR, ctx: Any = None) -> list[tuple[SkillCard, float]]:
    """(stand-in card, log of its prior) of every rule `rule_moves` finds on `ir`."""
    from passes.registry import get_pass  # noqa: PLC0415

    language = str(getattr(ir.language, "value", ir.language))
    return [(rule_card(name, language), math.log(get_pass(name).prior))
            for name in rule_moves(ir, ctx)]


def rule_candidates(card: SkillCard, ir: KernelIR, ctx: Any = None) -> Iterator[Materialized]:
    """A rule offered without a card (`rule_moves`): the kernel it makes under the generic
    autotune list first (a layout or schedule change moves the best tile configuration), then
    as it is. A kernel the rule gave an autotune list of its own (`rule_listed`: a list shaped
    for the problem it made, a matrix-vector product for one) keeps it in both."""
    made = rule_moves(ir, ctx).get(card.pass_name)
    if made is None:
        yield Materialized(card, None, None, refusals=(f"{card.pass_name} takes no site here",))
        return
    new_ir, site = made
    swept = plain_sweep(new_ir, keep=rule_listed(ir, new_ir))
    if swept.ok:
        yield Materialized(card, swept.ir, site, "deterministic", (), {})
    yield Materialized(card, new_ir, site, "deterministic", (), {})


def rule_listed(before: KernelIR, after: KernelIR) -> frozenset[str]:
    """The kernels of `after` whose autotune list a rule wrote: a list `before` lacks, or one
    that differs from its list there."""
    from passes.triton._py import PyModule  # noqa: PLC0415

    def lists(ir: KernelIR) -> dict[str, str]:
        mod = PyModule(ir)
        return {k.name: mod.text(dec) for k in mod.kernels()
                for dec in [mod.decorator(k, "autotune")] if dec is not None}

    if str(getattr(after.language, "value", after.language)) != "triton":
        return frozenset()
    old = lists(before)
    return frozenset(name for name, text in lists(after).items() if old.get(name) != text)


def verdict_ms(verdict: Any) -> float | None:
    """The candidate's time in a verdict (None where it was not timed)."""
    timing = getattr(verdict, "timing", None)
    value = getattr(timing, "candidate_ms", None) if timing is not None else None
    return float(value) if value else None


__all__ = ["AROUND_POINTS", "COLD_SHARE", "MAX_SITES", "PIN_PRIOR", "Materialized", "around_parent",
           "autotune_picks", "card_sites", "effect_spread", "feature_appears", "first_run_s",
           "full_kernels", "gate_seconds", "kernel_of", "kernel_order", "kernel_room", "kernel_shares", "left_out", "materialize",
           "materializations", "move_candidates", "own_sweeps", "pin_offered", "pinned_picks",
           "plain_sweep", "recorded_sweeps", "rule_candidates", "rule_card", "rule_listed", "rule_moves",
           "rule_offers", "sweep_card", "used_up", "variant_picks", "verdict_ms"]
