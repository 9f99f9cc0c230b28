"""SkillCards (paper §3.3): lift forward transitions into reusable, scoped optimization skills.

A `SkillCard` is one intent in one context: the transitions of a lineage (or of several) that
apply the same pass at the same *locus signature* (the anchor path with the kernel name and the
sibling indices removed, e.g. ``for/call:tl.dot``) in the same language are lifted into one
card — not one card per transition. The card keeps the code-bearing carrier of its best
transition, the measured effect of all of them, the rejected attempts of its pass as risk, and
the scope it was seen in. It starts as a hypothesis (`admitted=False`); `lineage.admission`
admits it after a held-out trial and appends every trial to its verification log.

`Library` is a directory: ``cards/<id>.json`` (one card each) and ``index.json``; every write
is atomic. Adding a card whose id is already there *merges* it (evidence, effect samples,
scope, risk and trials are united; admission is kept), so lifting a lineage again, or lifting a
second lineage into the same library, never loses what was there.

JSON of a card: see `SkillCard.to_json` (the on-disk format; `klineage skills --json` prints a
subset). Markdown: `SkillCard.to_markdown` (also the text the LLM rewriter receives).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kir.errors import BadInputError, KLineageError
from lineage.graph import Lineage, atomic_write_text

CARD_FORMAT = 1
_INDEX = "index.json"
_CARDS = "cards"
# Lines of context kept around a changed hunk in a carrier snippet.
_SNIPPET_CONTEXT = 3
# A carrier snippet longer than this many lines is cut (the diff stays whole).
_SNIPPET_MAX_LINES = 80

_EMPTY: Mapping[str, Any] = MappingProxyType({})


# -- value types ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Trial:
    """One admission trial: the card materialized in a context absent from its sources."""

    context: str
    """Where: `"<case>:<state id>"` of the held-out state the card was tried on."""
    case: str
    tier: str
    ok: bool
    reason: str = ""
    speedup: float | None = None
    """Measured dst/src speedup of the trial (device tier), else None."""
    rewriter: str = ""
    at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context, "case": self.case, "tier": self.tier, "ok": self.ok,
                "reason": self.reason, "speedup": self.speedup, "rewriter": self.rewriter,
                "at": self.at}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Trial:
        return Trial(context=str(data.get("context", "")), case=str(data.get("case", "")),
                     tier=str(data.get("tier", "")), ok=bool(data.get("ok", False)),
                     reason=str(data.get("reason", "")), speedup=_float_or_none(data.get("speedup")),
                     rewriter=str(data.get("rewriter", "")), at=str(data.get("at", "")))


@dataclass(frozen=True, slots=True)
class SkillCard:
    """One lifted optimization skill. Immutable; `with_trial` / `merged` return new cards.

    Fields a caller may rely on:
    - `id`: stable for (pass, language, locus signature): lifting again gives the same id.
    - `pass_name`, `options`: what a rewriter performs (the card is a `passes.rewriter.CardLike`).
    - `anchor`: `{"query": anchor query, "locus": signature, "examples": [anchor ids],
      "present_loci": [signatures where the pass's feature shows up once applied]}`.
    - `carrier`: `{"diff": normalized structured diff, "before": snippet, "after": snippet,
      "unified": unified diff of the snippet}` from the transition with the best effect; for a
      Triton card also `"config"`: `{kernel: joint launch configuration by role}` of that
      transition's result, and `"expert_config"`: the same of its lineage's expert state
      (`passes.triton.roles.KernelConfig.to_json`); and `"edit"`: that transition's step as
      data (`anchors.transplant.record`: the source state's whole text, the token hunks that make
      the destination, the anchors of its edit script), which `lineage.optimize` transplants
      onto a target whose anchors map (a card lifted before it was kept has none: no
      transplant).
    - `preconditions`: `[{"expr", "held", "unknown", "failed"}]` (counts over the evidence).
    - `effect`: `{"tier", "samples": {transition id: speedup}, "speedup": {"n", "min",
      "median", "max", "geomean"} | None, "static": {fact: {"median_delta", "n"}}}`.
    - `evidence`: transition ids; `sources`: `[{"case", "expert"}]` they came from;
      `source_states`: the src/dst state ids (a trial must use a state outside them).
    - `risk`: `[{"stage", "failure_kind", "reason", "count", "cases"}]` (the pass's rejections).
    - `scope`: `{"cases", "languages", "platforms", "prior_actions", "signature"}` (signature:
      the operator signature of the lineage's expert, `passes.triton.roles.operator_signature`).
    - `requires`, `provides`, `conflicts`: the pass's declarations at lift time.
    - `verification`: the trials; `admitted`: True once one trial succeeded.
    - `variants`: `[{"anchor", "options"}]`, the options each piece of evidence recorded at its
      anchor (a card whose sites differ only in a recorded name or value, e.g. one TMA
      descriptor per operand); `options_for(anchor)` picks the one for a site.
    """

    id: str
    intent: str
    pass_name: str
    category: str
    language: str
    locus: str
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    anchor: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    carrier: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    preconditions: tuple[Mapping[str, Any], ...] = ()
    effect: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    evidence: tuple[str, ...] = ()
    sources: tuple[Mapping[str, str], ...] = ()
    source_states: tuple[str, ...] = ()
    risk: tuple[Mapping[str, Any], ...] = ()
    scope: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    verification: tuple[Trial, ...] = ()
    admitted: bool = False
    variants: tuple[Mapping[str, Any], ...] = ()

    # -- derived ---------------------------------------------------------------------------
    @property
    def speedup(self) -> Mapping[str, float] | None:
        """The effect's speedup summary (None when no transition was timed)."""
        return self.effect.get("speedup")

    @property
    def effect_score(self) -> float:
        """Geometric-mean speedup of the evidence (1.0 when untimed) — for ranking."""
        summary = self.speedup
        return float(summary["geomean"]) if summary else 1.0

    def options_for(self, anchor_id: str) -> Mapping[str, Any]:
        """The recorded options for a site: the variant recorded at this very anchor, else the
        first at the same locus signature, else the card's options."""
        for variant in self.variants:
            if variant.get("anchor") == anchor_id:
                return dict(variant.get("options") or {})
        locus = locus_signature(anchor_id)
        for variant in self.variants:
            if locus_signature(str(variant.get("anchor", ""))) == locus:
                return dict(variant.get("options") or {})
        return dict(self.options)

    def option_candidates(self, anchor_id: str) -> list[dict[str, Any]]:
        """Every recorded option set, the best fit for the site first: variants recorded at
        this anchor, then at the same locus signature, then the card's options, then the rest."""
        locus = locus_signature(anchor_id)
        ranked = sorted(self.variants, key=lambda v: (
            v.get("anchor") != anchor_id, locus_signature(str(v.get("anchor", ""))) != locus))
        out: list[dict[str, Any]] = []
        exact = [dict(v.get("options") or {}) for v in ranked
                 if locus_signature(str(v.get("anchor", ""))) == locus]
        rest = [dict(v.get("options") or {}) for v in ranked
                if locus_signature(str(v.get("anchor", ""))) != locus]
        for options in exact + [dict(self.options)] + rest:
            if options not in out:
                out.append(options)
        return out

    def with_trial(self, trial: Trial) -> SkillCard:
        """This card with `trial` appended to its log; a successful trial admits it."""
        return replace(self, verification=self.verification + (trial,),
                       admitted=self.admitted or trial.ok)

    def merged(self, other: SkillCard) -> SkillCard:
        """The union of two lifts of the same card (same id): evidence, effect samples,
        sources, scope, risk and trials are united; admitted if either was."""
        if other.id != self.id:
            raise ValueError(f"cannot merge card {other.id} into {self.id}")
        samples = {**dict(self.effect.get("samples", {})), **dict(other.effect.get("samples", {}))}
        static = _merge_static(self.effect.get("static", {}), other.effect.get("static", {}))
        best = other if other.effect_score > self.effect_score else self
        trials = self.verification + tuple(t for t in other.verification
                                          if t not in self.verification)
        worse = self if best is other else other
        carrier = dict(best.carrier)
        for key in ("config", "expert_config", "edit"):  # a lift from before these were kept
            if key not in carrier and key in worse.carrier:
                carrier[key] = worse.carrier[key]
        return replace(
            best,
            carrier=carrier,
            evidence=_union(self.evidence, other.evidence),
            sources=tuple(_union_dicts(self.sources, other.sources)),
            source_states=_union(self.source_states, other.source_states),
            effect=_effect(samples, static, best.effect.get("tier", "")),
            preconditions=_merge_preconditions(self.preconditions, other.preconditions),
            risk=_merge_risk(self.risk, other.risk),
            scope=_merge_scope(self.scope, other.scope),
            anchor={**dict(best.anchor), **{key: list(_union(
                self.anchor.get(key, ()), other.anchor.get(key, ())))
                for key in ("examples", "present_loci")}},
            verification=trials,
            admitted=self.admitted or other.admitted,
            variants=tuple(_union_dicts(self.variants, other.variants)),
        )

    # -- serialization ---------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": CARD_FORMAT, "id": self.id, "intent": self.intent, "pass": self.pass_name,
            "category": self.category, "language": self.language, "locus": self.locus,
            "options": _plain(self.options), "anchor": _plain(self.anchor),
            "carrier": _plain(self.carrier), "preconditions": _plain(self.preconditions),
            "effect": _plain(self.effect), "evidence": list(self.evidence),
            "sources": _plain(self.sources), "source_states": list(self.source_states),
            "risk": _plain(self.risk), "scope": _plain(self.scope),
            "requires": list(self.requires), "provides": list(self.provides),
            "conflicts": list(self.conflicts),
            "verification": [t.to_json() for t in self.verification],
            "admitted": self.admitted, "variants": _plain(self.variants),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SkillCard:
        """A card from its JSON; raises BadInputError when a required field is missing."""
        try:
            return SkillCard(
                id=str(data["id"]), intent=str(data["intent"]), pass_name=str(data["pass"]),
                category=str(data.get("category", "")), language=str(data.get("language", "")),
                locus=str(data.get("locus", "")), options=dict(data.get("options") or {}),
                anchor=dict(data.get("anchor") or {}), carrier=dict(data.get("carrier") or {}),
                preconditions=tuple(data.get("preconditions") or ()),
                effect=dict(data.get("effect") or {}),
                evidence=tuple(data.get("evidence") or ()),
                sources=tuple(data.get("sources") or ()),
                source_states=tuple(data.get("source_states") or ()),
                risk=tuple(data.get("risk") or ()), scope=dict(data.get("scope") or {}),
                requires=tuple(data.get("requires") or ()),
                provides=tuple(data.get("provides") or ()),
                conflicts=tuple(data.get("conflicts") or ()),
                verification=tuple(Trial.from_json(t) for t in data.get("verification") or ()),
                admitted=bool(data.get("admitted", False)),
                variants=tuple(data.get("variants") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInputError(f"not a SkillCard: {exc}") from None

    def summary_json(self) -> dict[str, Any]:
        """The record `klineage skills --json` prints."""
        return {"id": self.id, "intent": self.intent, "pass": self.pass_name,
                "admitted": self.admitted, "scope": _plain(self.scope),
                "effect": {k: v for k, v in _plain(self.effect).items() if k != "samples"},
                "preconditions": _plain(self.preconditions), "evidence": list(self.evidence),
                "risk": _plain(self.risk)}

    def to_markdown(self) -> str:
        """A readable card; the carrier is copied verbatim (it is the code-bearing hint)."""
        fence = "```"
        lang = "python" if self.language == "triton" else "cuda"
        status = "admitted" if self.admitted else "hypothesis (not yet admitted)"
        lines = [f"### SkillCard `{self.id}` — {status}", "",
                 f"**Intent.** {self.intent}", "",
                 f"**Pass.** `{self.pass_name}` ({self.category})"
                 + (f" with options `{json.dumps(_plain(self.options), sort_keys=True)}`"
                    if self.options else "")
                 + (f"; {len(self.variants)} recorded option variants" if len(self.variants) > 1
                    else ""), "",
                 f"**Anchor.** query `{self.anchor.get('query', '')}` (locus `{self.locus}`); "
                 f"seen at {', '.join(f'`{a}`' for a in self.anchor.get('examples', [])[:3])}", ""]
        lines += ["**Carrier.**", "", "Before:", "", f"{fence}{lang}",
                  str(self.carrier.get("before", "")).rstrip("\n"), fence, "", "After:", "",
                  f"{fence}{lang}", str(self.carrier.get("after", "")).rstrip("\n"), fence, ""]
        if self.carrier.get("diff"):
            lines += ["Structured diff:", "", f"{fence}json",
                      json.dumps(_plain(self.carrier["diff"]), indent=1), fence, ""]
        lines.append("**Preconditions.** " + (", ".join(
            f"`{p.get('expr')}` (held {p.get('held', 0)}, unknown {p.get('unknown', 0)}, "
            f"failed {p.get('failed', 0)})" for p in self.preconditions) or "none recorded"))
        decl = [f"{k}: {', '.join(v)}" for k, v in (("requires", self.requires),
                ("provides", self.provides), ("conflicts", self.conflicts)) if v]
        if decl:
            lines.append("Declarations: " + "; ".join(decl) + ".")
        lines += ["", "**Effect.** " + _effect_text(self.effect), "",
                  f"**Evidence.** {len(self.evidence)} transition(s): "
                  + ", ".join(f"`{t}`" for t in self.evidence[:6])
                  + (" ..." if len(self.evidence) > 6 else ""), ""]
        lines.append("**Risk.** " + ("; ".join(
            f"{r.get('stage')}/{r.get('failure_kind')} x{r.get('count', 1)}: {r.get('reason')}"
            for r in self.risk[:8]) or "no rejected attempts recorded"))
        scope = self.scope
        lines += ["", f"**Scope.** cases {_list(scope.get('cases'))}; languages "
                      f"{_list(scope.get('languages'))}; platforms {_list(scope.get('platforms'))}; "
                      f"prior actions {_list(scope.get('prior_actions'))}", ""]
        lines.append("**Verification log.** " + ("; ".join(
            f"{'ok' if t.ok else 'failed'} on {t.context} ({t.tier})"
            + (f", {t.speedup:.2f}x" if t.speedup else "") + (f": {t.reason}" if t.reason else "")
            for t in self.verification) or "no trials yet"))
        return "\n".join(lines) + "\n"

    def to_prompt(self) -> str:
        """What the LLM rewriter sends for this card (the markdown)."""
        return self.to_markdown()


# -- lift ---------------------------------------------------------------------------------------
_INDEX_SUFFIX = re.compile(r"\[\d+\]")


def locus_signature(anchor_id: str) -> str:
    """The anchor path without language, kernel name and sibling indices:
    ``triton:matmul_kernel/for[0]/call:tl.dot[0]`` -> ``for/call:tl.dot``; the kernel itself
    is ``kernel``; module-level anchors keep an ``@module`` head (``@module/assign:X``)."""
    head, _, rest = str(anchor_id).partition("/")
    steps = [_INDEX_SUFFIX.sub("", p) for p in rest.split("/") if p]
    if head.endswith(":@module"):
        steps = ["@module", *steps]
    return "/".join(steps) or "kernel"


# Labels of anchor-id steps that differ from the kir kinds the query language tests.
_STEP_KINDS = {"for": "loop", "while": "loop", "if": "branch", "else": "branch"}


def anchor_query(locus: str, kinds: Sequence[str] | None = None) -> str:
    """An anchor query (grammars/anchor_query.lark) that finds the locus in another kernel:
    the scope, then the signature's steps joined by ``>>`` (descendant), so the nesting between
    them may differ. `kinds` are the kir kinds of the scope and of each step (from the source
    state's anchor index); without them the kinds are guessed from the step labels, and a label
    that is not a kir kind becomes ``*`` (any kind, the name predicate still applies)."""
    steps = locus.split("/") if locus != "kernel" else []
    head = "kernel"
    if steps and steps[0] == "@module":
        head, steps = "module", steps[1:]
    if kinds is not None and len(kinds) == len(steps) + 1:
        head, step_kinds = kinds[0], list(kinds[1:])
    else:
        step_kinds = [_STEP_KINDS.get(step.partition(":")[0], step.partition(":")[0])
                      for step in steps]
    known = _known_kinds()
    parts = [head if head in known else "*"]
    for step, kind in zip(steps, step_kinds):
        _, sep, name = step.partition(":")
        test = kind if kind in known else "*"
        if sep:
            quoted = name.replace("\\", "\\\\").replace('"', '\\"')
            test += f'[name="{quoted}"]'
        parts.append(test)
    return " >> ".join(parts)


def _known_kinds() -> frozenset[str]:
    from kir import kinds  # noqa: PLC0415

    return kinds.ALL


def anchor_kinds(source: str, language: str, anchor_id: str) -> list[str] | None:
    """The kir kinds of the anchor's scope and of each step below it, read from the anchor
    index of `source`; None when the source does not parse or lacks the anchor."""
    try:
        import anchors  # noqa: PLC0415
        import kir  # noqa: PLC0415

        index = anchors.build_index(kir.parse(source, language=language))
        chain: list[str] = []
        current = index.get(anchor_id)
        while current is not None:
            chain.append(str(current.kind))
            current = index.get(current.parent) if current.parent is not None else None
    except (KLineageError, KeyError, ValueError):  # a state that does not parse: use labels
        return None
    chain.reverse()
    if chain and chain[0] == "module" and not str(anchor_id).split("/")[0].endswith("@module"):
        chain = chain[1:]  # ids of scoped anchors do not name the module
    return chain or None


def card_id(pass_name: str, language: str, locus: str, prior: Iterable[str] = ()) -> str:
    """Stable, filesystem-safe id: ``<pass>.<language>.<8 hex of locus and prior actions>``."""
    context = ",".join(sorted(prior))
    digest = hashlib.sha256(f"{pass_name}|{language}|{locus}|{context}".encode()).hexdigest()[:8]
    return f"{pass_name}.{language}.{digest}"


def lift(lineage: Lineage, *, declarations: Mapping[str, Mapping[str, Any]] | None = None
         ) -> list[SkillCard]:
    """Lift the forward transitions of `lineage` into SkillCard hypotheses.

    Transitions are grouped by intent and context — (pass, language, locus signature, prior
    actions: the passes already applied in the source state) — and each group is one card: the
    same intent at the same locus after different prior actions (e.g. grouped ordering before
    and after a persistent loop was introduced) is two skills. `declarations` (pass name -> `Pass.declaration()`-like dict) default to the registry's; a
    pass the registry does not know still gets a card (with empty declarations).
    Cards come back sorted by id.
    """
    groups: dict[tuple[str, str, str, tuple[str, ...]], list[str]] = {}
    for tid in lineage.transitions():
        attrs = lineage.node(tid)
        name = str(attrs.get("pass", ""))
        src, _ = _ends(lineage, tid)
        key = (name, str(attrs.get("language", "")), locus_signature(attrs.get("anchor", "")),
               tuple(sorted(_prior_actions(lineage, src) - {name})))
        groups.setdefault(key, []).append(tid)
    decls = dict(declarations) if declarations is not None else _registry_declarations(
        {k[0] for k in groups})
    cards = [_lift_group(lineage, key, sorted(tids), decls.get(key[0], {}))
             for key, tids in groups.items()]
    return sorted(cards, key=lambda c: c.id)


def _lift_group(lineage: Lineage, key: tuple[str, str, str, tuple[str, ...]], tids: list[str],
                decl: Mapping[str, Any]) -> SkillCard:
    pass_name, language, locus, prior_key = key
    samples: dict[str, float] = {}
    statics: dict[str, list[float]] = {}
    tiers: set[str] = set()
    cases: list[str] = []
    sources: list[dict[str, str]] = []
    states: list[str] = []
    prior: set[str] | None = None
    examples: list[str] = []
    present_loci: list[str] = []
    for tid in tids:
        attrs = lineage.node(tid)
        src, dst = _ends(lineage, tid)
        states += [src, dst]
        ratio = _ratio(attrs, lineage.node(src), lineage.node(dst))
        if ratio is not None:
            samples[tid] = ratio
        for fact, delta in _static_deltas(lineage.node(src), lineage.node(dst)).items():
            statics.setdefault(fact, []).append(delta)
        tiers.add(str((attrs.get("dst_verdict") or {}).get("tier") or lineage.node(dst).get("tier", "")))
        cases = _union(cases, [attrs.get("case") or lineage.node(src).get("case", "")])
        sources = _union_dicts(sources, [{"case": str(attrs.get("case", "")),
                                          "expert": str(attrs.get("expert", ""))}])
        before = _prior_actions(lineage, src) - {pass_name}
        prior = before if prior is None else prior & before
        examples = _union(examples, [str(attrs.get("anchor", ""))])
        present_loci = _union(present_loci, _new_feature_loci(
            lineage.node(src), lineage.node(dst), pass_name))
    best = max(tids, key=lambda t: (samples.get(t, 0.0), -int(lineage.node(t).get("step", 0))))
    best_attrs = lineage.node(best)
    src, dst = _ends(lineage, best)
    static = {fact: {"median_delta": statistics.median(v), "n": len(v)}
              for fact, v in statics.items()}
    tier = "device" if "device" in tiers else (sorted(tiers)[0] if tiers else "")
    summary = str(decl.get("summary") or "").strip()
    intent = (f"{summary} " if summary else f"apply `{pass_name}` ") + f"at `{locus}` ({language})"
    return SkillCard(
        id=card_id(pass_name, language, locus, prior_key), intent=intent, pass_name=pass_name,
        category=str(best_attrs.get("category") or decl.get("category") or ""),
        language=language, locus=locus, options=_step_options(lineage, best, pass_name),
        anchor={"query": anchor_query(locus, anchor_kinds(lineage.node(src).get("source", ""),
                                                           language, str(best_attrs.get("anchor")))),
                "locus": locus, "examples": examples, "present_loci": present_loci},
        carrier={**_carrier(lineage.node(src).get("source", ""), lineage.node(dst).get("source", ""),
                            best_attrs.get("diff") or []),
                 **_configs(lineage.node(dst).get("source", ""), language),
                 **{f"expert_{k}": v for k, v in _configs(_expert_source(lineage, dst),
                                                         language).items()},
                 **_edit(lineage.node(src).get("source", ""), lineage.node(dst).get("source", ""),
                         language, best_attrs.get("diff") or [])},
        preconditions=_precondition_counts(lineage.node(t).get("preconditions") or ()
                                           for t in tids),
        effect=_effect(samples, static, tier),
        evidence=tuple(tids), sources=tuple(sources), source_states=tuple(_union([], states)),
        risk=_risk(lineage, pass_name),
        scope={"cases": cases, "languages": [language],
               "signature": _signature(_expert_source(lineage, dst), language),
               "platforms": _union([], [str(lineage.node(t).get("platform") or "cuda") for t in tids]),
               "prior_actions": sorted(prior or ())},
        requires=tuple(decl.get("requires") or ()), provides=tuple(decl.get("provides") or ()),
        conflicts=tuple(decl.get("conflicts") or ()),
        variants=tuple(_union_dicts([], [{"anchor": str(lineage.node(t).get("anchor", "")),
                                          "options": _step_options(lineage, t, pass_name)}
                                         for t in tids])),
    )


def _step_options(lineage: Lineage, tid: str, pass_name: str) -> dict[str, Any]:
    """The options of transition `tid` as its pass needs them to perform the step again
    (`Pass.recorded_options`: an older record may lack what the pass now records)."""
    from passes.registry import get_pass  # noqa: PLC0415

    attrs = lineage.node(tid)
    options = dict(attrs.get("options") or {})
    try:
        cls = get_pass(pass_name)
    except (BadInputError, ImportError):
        return options
    src, _ = _ends(lineage, tid)
    return cls.recorded_options(options, str(lineage.node(src).get("source", "")),
                                list(attrs.get("diff") or ()))


def _new_feature_loci(src: Mapping[str, Any], dst: Mapping[str, Any], pass_name: str) -> list[str]:
    """Locus signatures where `pass_name` is present after the step and was not before: where
    the optimization shows up once applied (what retrieval compares a target's features to)."""
    def loci(node: Mapping[str, Any]) -> list[str]:
        return [locus_signature(f.get("anchor", "")) for f in node.get("features") or ()
                if f.get("pass") == pass_name]
    before = loci(src)
    return [lc for lc in loci(dst) if lc not in before]


def _registry_declarations(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    from passes import get_all_passes  # noqa: PLC0415 — lifting works without pass modules

    registry = get_all_passes()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in registry:
            continue
        try:
            cls = registry[name]()
        except ImportError:  # a pass module not written yet: the card lifts without it
            continue
        out[name] = {**cls.declaration(), "summary": getattr(cls, "summary", "")}
    return out


def _ends(lineage: Lineage, tid: str) -> tuple[str, str]:
    src = next(iter(lineage.graph.predecessors(tid)))
    dst = next(iter(lineage.graph.successors(tid)))
    return src, dst


def _ratio(attrs: Mapping[str, Any], src: Mapping[str, Any], dst: Mapping[str, Any]
           ) -> float | None:
    """Forward speedup src_ms / dst_ms of one transition, from its profile delta or, failing
    that, from the states' timings."""
    delta = attrs.get("profile_delta") or {}
    ratio = _float_or_none(delta.get("ratio"))
    if ratio is None:
        s_ms = _float_or_none(delta.get("src_ms") or (src.get("timing") or {}).get("candidate_ms"))
        d_ms = _float_or_none(delta.get("dst_ms") or (dst.get("timing") or {}).get("candidate_ms"))
        ratio = s_ms / d_ms if s_ms and d_ms else None
    return ratio if ratio is not None and math.isfinite(ratio) and ratio > 0 else None


def _static_deltas(src: Mapping[str, Any], dst: Mapping[str, Any]) -> dict[str, float]:
    """dst - src for every numeric static fact both states' verdicts report: the top-level
    facts (e.g. `max_registers`, `max_shared_bytes`) and the instruction counts of every
    compile, summed per class (`instructions.<class>`)."""
    a, b = _numeric_facts(src), _numeric_facts(dst)
    return {fact: b[fact] - a[fact] for fact in b if fact in a}


def _numeric_facts(state: Mapping[str, Any]) -> dict[str, float]:
    facts = (state.get("verdict") or {}).get("facts") or {}
    out: dict[str, float] = {}
    if not isinstance(facts, Mapping):
        return out
    for name, value in facts.items():
        if _is_number(value):
            out[str(name)] = float(value)
    for compiled in facts.get("compiles") or ():
        for cls, count in ((compiled or {}).get("instructions") or {}).items():
            if _is_number(count):
                key = f"instructions.{cls}"
                out[key] = out.get(key, 0.0) + float(count)
    return out


def _prior_actions(lineage: Lineage, state: str) -> set[str]:
    """Passes already applied at `state`: its recorded features and the lineage's prior actions."""
    node = lineage.node(state)
    found = {str(f.get("pass")) for f in node.get("features") or () if f.get("pass")}
    try:
        found |= set(lineage.prior_actions(state))
    except (KeyError, TypeError, ValueError):  # a hand-written lineage may lack a step number
        pass
    return found


def _expert_source(lineage: Lineage, state: str) -> str:
    """The source of the lineage's expert state (what the operator's kernels do once every
    step is applied), else of `state`."""
    for sid in lineage.states():
        if "expert" in (lineage.node(sid).get("roles") or ()):
            return str(lineage.node(sid).get("source", ""))
    return str(lineage.node(state).get("source", ""))


def _configs(source: str, language: str) -> dict[str, Any]:
    """`{"config": {kernel: joint launch configuration by role}}` of a Triton state (tiles,
    warps, stages, group size: what the step's evidence ran with); {} when there is none."""
    if language != "triton" or not source:
        return {}
    from kir import parse  # noqa: PLC0415
    from passes.triton.roles import joint_config  # noqa: PLC0415

    try:
        configs = joint_config(parse(source, "triton"))
    except (KLineageError, SyntaxError, ValueError):
        return {}
    kept = {name: cfg.to_json() for name, cfg in configs.items()
            if cfg.autotuned or cfg.by_role()}
    return {"config": kept} if kept else {}


def _signature(source: str, language: str) -> list[str]:
    """The operator signature of a Triton state (`passes.triton.roles.operator_signature`)."""
    if language != "triton" or not source:
        return []
    from kir import parse  # noqa: PLC0415
    from passes.triton.roles import operator_signature  # noqa: PLC0415

    try:
        return sorted(operator_signature(parse(source, "triton")))
    except (KLineageError, SyntaxError, ValueError):
        return []


def _carrier(before: str, after: str, diff: Sequence[Any]) -> dict[str, Any]:
    """Before/after snippets around the changed lines (with context) and the normalized diff."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    changed = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if not changed:
        return {"before": "", "after": "", "unified": "", "diff": _normalize_diff(diff)}
    i1 = max(0, changed[0][1] - _SNIPPET_CONTEXT)
    i2 = min(len(a), changed[-1][2] + _SNIPPET_CONTEXT)
    j1 = max(0, changed[0][3] - _SNIPPET_CONTEXT)
    j2 = min(len(b), changed[-1][4] + _SNIPPET_CONTEXT)
    snip_a, snip_b = a[i1:i2], b[j1:j2]
    unified = "".join(difflib.unified_diff(a, b, "before", "after", n=_SNIPPET_CONTEXT))
    return {"before": _cut("".join(snip_a)), "after": _cut("".join(snip_b)),
            "unified": unified, "diff": _normalize_diff(diff)}


def _edit(before: str, after: str, language: str, diff: Sequence[Any]) -> dict[str, Any]:
    """`{"edit": anchors.transplant.record(...)}` of a step (the anchors its recorded diff names);
    {} when a state has no source or the step changed nothing."""
    if not before or not after or before == after:
        return {}
    from anchors.transplant import record  # noqa: PLC0415

    anchors = [str(a.get("anchor")) for a in diff if isinstance(a, Mapping) and a.get("anchor")]
    step = record(before, after, language, anchors)
    return {"edit": step} if step["hunks"] else {}


def _cut(text: str) -> str:
    lines = text.splitlines(keepends=True)
    if len(lines) <= _SNIPPET_MAX_LINES:
        return text
    return "".join(lines[:_SNIPPET_MAX_LINES]) + f"... ({len(lines) - _SNIPPET_MAX_LINES} more lines)\n"


def _normalize_diff(diff: Sequence[Any]) -> list[Any]:
    """The diff actions with anchor ids reduced to locus signatures (kernel names and sibling
    indices dropped) so the carrier does not name its source kernel."""
    def norm(value: Any, key: str = "") -> Any:
        if isinstance(value, Mapping):
            return {k: norm(v, k) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [norm(v, key) for v in value]
        if isinstance(value, str) and "anchor" in key and ":" in value.split("/")[0]:
            return locus_signature(value)
        return value
    return [norm(action) for action in diff]


def _precondition_counts(groups: Iterable[Sequence[Mapping[str, Any]]]) -> tuple[dict[str, Any], ...]:
    counts: dict[str, dict[str, Any]] = {}
    for records in groups:
        for rec in records:
            if not isinstance(rec, Mapping) or "expr" not in rec:
                continue
            entry = counts.setdefault(str(rec["expr"]), {"expr": str(rec["expr"]), "held": 0,
                                                         "unknown": 0, "failed": 0})
            value = rec.get("value")
            entry["held" if value is True else "failed" if value is False else "unknown"] += 1
    return tuple(counts[k] for k in sorted(counts))


def _merge_preconditions(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
                         ) -> tuple[Mapping[str, Any], ...]:
    # Counts are per evidence transition; the larger count of a re-lift wins (no double count).
    out: dict[str, dict[str, Any]] = {}
    for rec in list(a) + list(b):
        entry = out.setdefault(str(rec.get("expr")), dict(rec))
        for k in ("held", "unknown", "failed"):
            entry[k] = max(int(entry.get(k, 0)), int(rec.get(k, 0)))
    return tuple(out[k] for k in sorted(out))


def _risk(lineage: Lineage, pass_name: str) -> tuple[dict[str, Any], ...]:
    """The pass's rejected attempts, grouped by (stage, failure kind, reason)."""
    grouped: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rec in lineage.graph.graph.get("rejected", []):
        if rec.get("pass") != pass_name:
            continue
        key = (str(rec.get("stage")), str(rec.get("failure_kind")), str(rec.get("reason")))
        entry = grouped.setdefault(key, {"stage": key[0], "failure_kind": key[1],
                                         "reason": key[2], "count": 0, "cases": []})
        entry["count"] += 1
        if rec.get("case") and rec["case"] not in entry["cases"]:
            entry["cases"].append(rec["case"])
    return tuple(sorted(grouped.values(), key=lambda r: (-r["count"], r["reason"])))


def _merge_risk(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
                ) -> tuple[Mapping[str, Any], ...]:
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rec in list(a) + list(b):
        key = (str(rec.get("stage")), str(rec.get("failure_kind")), str(rec.get("reason")))
        entry = out.setdefault(key, {**dict(rec), "count": 0, "cases": []})
        entry["count"] = max(entry["count"], int(rec.get("count", 1)))
        entry["cases"] = _union(entry["cases"], rec.get("cases") or [])
    return tuple(sorted(out.values(), key=lambda r: (-r["count"], r["reason"])))


def _effect(samples: Mapping[str, float], static: Mapping[str, Any], tier: str) -> dict[str, Any]:
    values = sorted(samples.values())
    summary = None
    if values:
        summary = {"n": len(values), "min": values[0], "median": statistics.median(values),
                   "max": values[-1],
                   "geomean": math.exp(sum(math.log(v) for v in values) / len(values))}
    return {"tier": tier, "samples": dict(sorted(samples.items())), "speedup": summary,
            "static": dict(static)}


def _merge_static(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for fact, rec in b.items():
        if fact not in out or int(rec.get("n", 0)) > int(out[fact].get("n", 0)):
            out[fact] = rec
    return out


def _merge_scope(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("cases", "languages", "platforms"):
        out[key] = _union(a.get(key) or [], b.get(key) or [])
    pa, pb = a.get("prior_actions"), b.get("prior_actions")
    # Prior actions are what every piece of evidence had: the intersection.
    out["prior_actions"] = sorted(set(pa or []) & set(pb or [])) if pa is not None and \
        pb is not None else list(pa or pb or [])
    signature = sorted(set(a.get("signature") or []) | set(b.get("signature") or []))
    if signature:
        out["signature"] = signature
    return out


def _effect_text(effect: Mapping[str, Any]) -> str:
    s = effect.get("speedup")
    text = (f"speedup {s['geomean']:.2f}x geomean over {s['n']} transition(s) "
            f"(min {s['min']:.2f}x, median {s['median']:.2f}x, max {s['max']:.2f}x) "
            f"at the {effect.get('tier') or '?'} tier" if s else
            f"not timed ({effect.get('tier') or '?'} tier): passes the gate")
    static = effect.get("static") or {}
    if static:
        text += "; static deltas: " + ", ".join(
            f"{k} {v['median_delta']:+g}" for k, v in sorted(static.items()))
    return text


# -- the library --------------------------------------------------------------------------------
class Library:
    """A directory of SkillCards: ``cards/<id>.json`` + ``index.json``, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def open(cls, path: str | Path, *, create: bool = False) -> Library:
        """Open the library at `path`; with `create`, make it when missing. A missing library
        without `create`, or a path that is a file, raises BadInputError."""
        root = Path(path)
        if root.exists() and not root.is_dir():
            raise BadInputError(f"{root}: not a SkillCard library (a file, not a directory)")
        if not root.exists():
            if not create:
                raise BadInputError(f"{root}: no such SkillCard library")
            (root / _CARDS).mkdir(parents=True, exist_ok=True)
            lib = cls(root)
            lib._write_index()
            return lib
        if not (root / _INDEX).is_file() and not (root / _CARDS).is_dir():
            if create and not any(root.iterdir()):
                (root / _CARDS).mkdir(parents=True, exist_ok=True)
                lib = cls(root)
                lib._write_index()
                return lib
            raise BadInputError(f"{root}: not a SkillCard library (no {_INDEX})")
        lib = cls(root)
        lib.verify()
        return lib

    def verify(self) -> None:
        """Read the index and every card: a file that is not what it should be is a
        `BadInputError` naming it, raised before anything reads or writes the library (a run
        that would rewrite the index or add cards leaves a corrupt library as it found it)."""
        index = self.root / _INDEX
        if index.exists():
            try:
                data = json.loads(index.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise BadInputError(f"{index}: not a library index ({exc})") from None
            if not isinstance(data, dict) or not isinstance(data.get("cards", []), list):
                raise BadInputError(f"{index}: not a library index (no list of cards)")
        for card_id in self.ids():
            self.get(card_id)

    def _card_path(self, card_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", card_id):
            raise BadInputError(f"bad SkillCard id {card_id!r}")
        return self.root / _CARDS / f"{card_id}.json"

    def ids(self) -> list[str]:
        folder = self.root / _CARDS
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []

    def get(self, card_id: str) -> SkillCard:
        path = self._card_path(card_id)
        if not path.is_file():
            raise BadInputError(f"no SkillCard {card_id!r} in {self.root}")
        try:
            return SkillCard.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadInputError(f"{path}: not a SkillCard JSON file ({exc})") from None
        except BadInputError as exc:
            raise BadInputError(f"{path}: {exc}") from None

    def cards(self, *, admitted_only: bool = False) -> list[SkillCard]:
        cards = [self.get(i) for i in self.ids()]
        return [c for c in cards if c.admitted] if admitted_only else cards

    def put(self, card: SkillCard) -> SkillCard:
        """Store `card` as is (replacing a card of the same id); updates the index."""
        atomic_write_text(self._card_path(card.id), json.dumps(card.to_json(), indent=1) + "\n")
        self._write_index()
        return card

    def add(self, card: SkillCard) -> SkillCard:
        """Store `card`, merged with the stored card of the same id; returns what was stored."""
        if self._card_path(card.id).is_file():
            card = self.get(card.id).merged(card)
        return self.put(card)

    def add_all(self, cards: Iterable[SkillCard]) -> list[SkillCard]:
        return [self.add(c) for c in cards]

    def _write_index(self) -> None:
        entries = []
        for cid in self.ids():
            try:
                card = self.get(cid)
            except BadInputError:
                continue
            entries.append({"id": card.id, "pass": card.pass_name, "language": card.language,
                            "locus": card.locus, "admitted": card.admitted,
                            "cases": list(card.scope.get("cases", [])),
                            "evidence": len(card.evidence)})
        provenance = self.provenance
        atomic_write_text(self.root / _INDEX, json.dumps(
            {"format": CARD_FORMAT, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             **({"provenance": provenance} if provenance is not None else {}),
             "cards": entries}, indent=1) + "\n")

    @property
    def provenance(self) -> dict[str, Any] | None:
        """Where the library's cards come from, as its index records it (`set_provenance`):
        e.g. the lineages lifted, the GPU and commit of admission; None when not recorded."""
        try:
            data = json.loads((self.root / _INDEX).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        found = data.get("provenance") if isinstance(data, dict) else None
        return found if isinstance(found, dict) else None

    def set_provenance(self, provenance: Mapping[str, Any]) -> None:
        """Record `provenance` (JSON data) in the index; rewrites of the index keep it."""
        index = self.root / _INDEX
        data = json.loads(index.read_text(encoding="utf-8")) if index.is_file() else {}
        data["provenance"] = _plain(provenance)
        atomic_write_text(index, json.dumps(data, indent=1) + "\n")
        self._write_index()

    def to_prompt(self, cards: Sequence[SkillCard] | None = None) -> str:
        """The library (or `cards`) as markdown: the LLM rewriter's cached prefix."""
        chosen = self.cards(admitted_only=True) if cards is None else list(cards)
        return "\n".join(c.to_markdown() for c in chosen)


# -- small helpers ------------------------------------------------------------------------------
def _union(a: Iterable[Any], b: Iterable[Any]) -> tuple[Any, ...] | list[Any]:
    out = list(a)
    for item in b:
        if item not in out and item not in ("", None):
            out.append(item)
    return tuple(out) if isinstance(a, tuple) else out


def _union_dicts(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(x) for x in a]
    for item in b:
        if dict(item) not in out:
            out.append(dict(item))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _list(values: Any) -> str:
    return ", ".join(map(str, values)) if values else "-"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _float_or_none(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


__all__ = ["Library", "SkillCard", "Trial", "anchor_query", "card_id", "lift",
           "locus_signature"]
