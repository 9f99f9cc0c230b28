"""Materialize SkillCards on a kernel and the optimize loop (paper §3.4).

`materialize(card, ir, ...)` performs one card on a kernel: it finds where the card's pass
applies (the pass's optimization sites, those at the card's locus first; for a pass without
a rule module, the matches of the card's anchor query), and asks the rewriter — the pass's
deterministic rule first, then the LLM rewriter when one is configured — to perform it there.

`optimize(target, case, library)` starts from any kernel that passes the gate, retrieves
admitted cards for it, materializes them one at a time, gates every candidate and keeps a
candidate only when it passes the gate *and* improves the kernel (device tier: faster than
the current best; interpret tier, which has no timing: the card's pass finds more sites where
its optimization is present, or fewer where it could still be applied). After each kept
candidate the target's features change, so cards are retrieved again (a card rejected
`MAX_CARD_FAILURES` times in the run is not tried again). The run is recorded as a new lineage
(`lineage.graph.Lineage`, saved after every gated candidate): the start state (role `root`),
every kept state and the forward transitions between them, and every rejected candidate as
risk evidence. It never returns a kernel that failed the gate: the best kernel is the start
kernel or a kept candidate, and both passed.
"""
from __future__ import annotations

import itertools
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kir.errors import BadInputError
from lineage.graph import KernelState, Lineage, Transition, atomic_write_text
from lineage.retrieval import Retriever, Target, kernel_features, kernel_sites
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
# Materializations of one card gated on one kernel (recorded options, then pass defaults).
CANDIDATES_PER_CARD = 2


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
        sites.sort(key=lambda s: (locus_signature(s.anchor) != card.locus, s.span))
        return sites
    query = str(card.anchor.get("query") or "")
    if not query:
        return []
    return [Site(card.pass_name, str(m.anchor.id), False, {"query": query},
                 (m.anchor.span.start, m.anchor.span.end)) for m in index.query(query)]


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
                     ctx: PassContext | None = None, *, max_sites: int = MAX_SITES
                     ) -> Iterator[Materialized]:
    """Distinct candidate materializations of `card` on `ir`, best first; the last item has
    no IR (it carries every refusal) when nothing else came out.

    Order: for each site (the card's locus first), each back-end (a chain is unwrapped so a
    result names the back-end that made it): a deterministic back-end tries the card's recorded
    option variants for the site (`SkillCard.option_candidates`) and then the pass's defaults
    (a recorded value may name what only the source kernel has, e.g. its accumulator); the LLM
    back-end is asked once per site. A candidate whose edit re-inserts a line the kernel already
    has (most likely a variant already applied at another site, e.g. the same TMA descriptor)
    comes after the others. Callers gate candidates in this order and may stop at the first
    that passes."""
    from passes.base import Applied  # noqa: PLC0415

    sites = card_sites(card, ir)
    if not sites:
        yield Materialized(card, None, None, refusals=(f"no site for {card.pass_name}",))
        return
    cls = _rule(card, ir)
    backends = tuple(getattr(rewriter, "backends", None) or (rewriter,))
    if cls is None:  # no rule for this language: only a back-end that is not a rule may act
        backends = tuple(b for b in backends if b.name != "deterministic")
    source = ir.unparse()
    old_lines = _significant_lines(source)
    refusals: list[str] = []
    seen: set[str] = {source}
    repeats: list[Materialized] = []
    produced = False
    for site in sites[:max_sites]:
        for backend in backends:
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
                text = result.ir.unparse()
                if text in seen:
                    continue
                seen.add(text)
                made = Materialized(card, result.ir, site, str(backend.name), tuple(refusals),
                                    dict(view.options))
                if any(ln in old_lines for ln in _inserted_lines(source, text)):
                    repeats.append(made)
                    continue
                produced = True
                yield made
    for made in repeats:
        produced = True
        yield made
    if not produced:
        yield Materialized(card, None, None, refusals=tuple(refusals))


def _significant_lines(text: str) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 12}


def _inserted_lines(before: str, after: str) -> list[str]:
    """Stripped non-trivial lines the edit inserted (difflib over lines)."""
    import difflib  # noqa: PLC0415

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

    def to_json(self) -> dict[str, Any]:
        out = {"card": self.card, "pass": self.pass_name, "anchor": self.anchor,
               "rewriter": self.rewriter}
        if self.kept:
            out.update({"ms": self.ms, "speedup": self.speedup})
        else:
            out.update({"stage": self.stage, "reason": self.reason})
        return out


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    best_path: Path
    best_verdict: Mapping[str, Any]
    applied: tuple[Step, ...]
    rejected: tuple[Step, ...]
    spent_usd: float
    lineage_path: Path
    start_ms: float | None
    best_ms: float | None
    termination: str
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"best": {"path": str(self.best_path), "verdict": dict(self.best_verdict)},
                "applied": [s.to_json() for s in self.applied],
                "rejected": [s.to_json() for s in self.rejected],
                "spent_usd": round(self.spent_usd, 6), "lineage": str(self.lineage_path),
                "start_ms": self.start_ms, "best_ms": self.best_ms,
                "speedup": (self.start_ms / self.best_ms
                            if self.start_ms and self.best_ms else None),
                "termination": self.termination, "notes": list(self.notes)}


@dataclass
class _Run:
    """Mutable state of one optimize run."""

    source: str
    ir: Any
    state: str
    verdict: Any
    ms: float | None
    tried: set[tuple[str, str]] = field(default_factory=set)
    applied: list[Step] = field(default_factory=list)
    rejected: list[Step] = field(default_factory=list)
    gated: int = 0


def optimize(target: str | Path, case: str, library: str | Path | Library, *,
             budget_steps: int = 8, budget_usd: float = 1.0, tier: str = "auto",
             out: str | Path = "out/optimize", k: int = 5, rewriter: Rewriter | None = None,
             progress: ProgressFn | None = None, gate_timeout: float | None = None,
             check_fn: Callable[..., Any] | None = None) -> OptimizeResult:
    """Optimize the kernel file `target` for `case` with the admitted cards of `library`.

    `budget_steps` bounds the gated candidates, `budget_usd` the LLM spend (used when no
    `rewriter` is given: deterministic rules, then the LLM when `ANTHROPIC_API_KEY` is set).
    Writes OUT/best.<ext> (CUDA: with its host module), OUT/lineage.json and OUT/result.json.
    Raises BadInputError for a missing target, an unknown case or tier, a missing library,
    or a target that fails the gate (there is nothing correct to start from). `check_fn`
    replaces `gate.check` (same signature; tests use it to script verdicts)."""
    import gate  # noqa: PLC0415 — lazy: the gate's workers import torch
    import kir  # noqa: PLC0415

    from passes.base import PassContext  # noqa: PLC0415
    from passes.llm_rewriter import LLMConfig, default_rewriter  # noqa: PLC0415

    say = progress or (lambda event, data: None)
    if budget_steps < 0 or budget_usd < 0:
        raise BadInputError("--budget-steps and --budget-usd must be >= 0")
    path = Path(target)
    if not path.is_file():
        raise BadInputError(f"{target}: no such kernel file")
    lib = library if isinstance(library, Library) else Library.open(library)
    the_case = gate.load_case(case)
    ir = kir.parse_file(path)
    language = str(getattr(ir.language, "value", ir.language))
    run_tier = resolve_tier(tier, language)
    notes: list[str] = []
    admitted = lib.cards(admitted_only=True)
    if not admitted:
        notes.append(f"{lib.root} holds no admitted SkillCard")
    if rewriter is None:
        rewriter, note = default_rewriter(LLMConfig(budget_usd=budget_usd),
                                          library=lib.to_prompt(admitted))
        if note:
            notes.append(note)
    ctx = PassContext.for_case(the_case.name, tier="interpret" if run_tier == "interpret" else "device")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def check(source: str) -> Any:
        kwargs: dict[str, Any] = {"path": path}
        if gate_timeout is not None:
            kwargs["timeout"] = gate_timeout
        return (check_fn or gate.check)(source, language, the_case, run_tier, **kwargs)

    start_src = ir.unparse()
    say("gate", {"card": "(start)"})
    verdict = check(start_src)
    if not verdict.ok:
        raise BadInputError(f"{target} fails the gate at the {run_tier} tier "
                            f"({_kind(verdict)}: {verdict.reason}); nothing correct to start from")
    lineage = Lineage()
    start = lineage.add_state(_state(start_src, ir, language, the_case.name, run_tier, verdict,
                                     frozenset({"root"})))
    run = _Run(start_src, ir, start, verdict, _ms(verdict))
    start_ms = run.ms
    retriever = Retriever(admitted, k=k)
    termination = "budget-steps"
    while run.gated < budget_steps:
        present, open_ = kernel_sites(run.ir)
        found = retriever.retrieve(Target(language, the_case.name, the_case.platform,
                                          present, open_))
        failures = Counter(step.card for step in run.rejected)
        fresh = [r.card for r in found.cards if (run.state, r.card.id) not in run.tried
                 and failures[r.card.id] < MAX_CARD_FAILURES]
        if not fresh:
            termination = "exhausted"
            break
        kept = False
        for card in fresh:
            if run.gated >= budget_steps:
                break
            run.tried.add((run.state, card.id))
            kept = _attempt(card, run, rewriter, ctx, check, lineage, language, the_case.name,
                            run_tier, str(path), say, budget_steps)
            lineage.save(out_dir / "lineage.json")  # an interrupted run keeps what it learned
            if kept:
                break
        if not kept and run.gated < budget_steps:
            termination = "exhausted"
            break
    spent = _spent(rewriter)
    best_path = out_dir / f"best{path.suffix}"
    atomic_write_text(best_path, run.source)
    if language == "cuda" and path.with_suffix(".py").is_file():
        shutil.copyfile(path.with_suffix(".py"), best_path.with_suffix(".py"))
    node = lineage.node(run.state)
    node["roles"] = sorted(set(node.get("roles", [])) | {"best"})
    lineage.add_run({"target": str(path), "case": the_case.name, "tier": run_tier,
                     "termination": termination, "steps": run.gated, "kept": len(run.applied),
                     "spent_usd": spent, "kind": "optimize",
                     "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    lineage_path = out_dir / "lineage.json"
    lineage.save(lineage_path)
    result = OptimizeResult(best_path, _verdict_json(run.verdict), tuple(run.applied),
                            tuple(run.rejected), spent, lineage_path, start_ms, run.ms,
                            termination, tuple(notes))
    atomic_write_text(out_dir / "result.json", json.dumps(result.to_json(), indent=1) + "\n")
    return result


def _attempt(card: SkillCard, run: _Run, rewriter: Any, ctx: Any, check: Callable[[str], Any],
             lineage: Lineage, language: str, case: str, tier: str, expert: str,
             say: ProgressFn, budget_steps: int) -> bool:
    """Materialize and gate one card on the run's current kernel (up to
    `CANDIDATES_PER_CARD` materializations); keep the first that improves it."""
    for made in itertools.islice(materializations(card, run.ir, rewriter, ctx),
                                 CANDIDATES_PER_CARD):
        if run.gated >= budget_steps:
            return False
        if _attempt_one(card, made, run, check, lineage, language, case, tier, expert, say):
            return True
        if not made.ok:
            return False
    return False


def _attempt_one(card: SkillCard, made: Materialized, run: _Run, check: Callable[[str], Any],
                 lineage: Lineage, language: str, case: str, tier: str, expert: str,
                 say: ProgressFn) -> bool:
    """Gate one materialization; keep it when it improves the kernel (module docstring)."""

    def reject(stage: str, reason: str, anchor: str = "") -> bool:
        step = Step(card.id, card.pass_name, anchor, False, stage, reason, rewriter=made.rewriter)
        run.rejected.append(step)
        lineage.record_rejection(run.state, card.pass_name, anchor, stage, None, reason,
                                 card=card.id, case=case, tier=tier)
        say("rejected", {"card": card.id, "stage": stage, "reason": reason})
        return False

    if not made.ok or made.site is None:
        return reject("materialize", "; ".join(made.refusals) or "no site")
    source = made.ir.unparse()
    run.gated += 1
    say("gate", {"card": card.id, "anchor": made.site.anchor})
    verdict = check(source)
    if not verdict.ok:
        return reject(str(verdict.stage), f"{_kind(verdict)}: {verdict.reason}", made.site.anchor)
    ms = _ms(verdict)
    if tier == "device":
        if ms is None or (run.ms is not None and ms * MIN_GAIN > run.ms):
            return reject("profile", f"not faster: {run.ms} ms -> {ms} ms", made.site.anchor)
    elif not feature_appears(card.pass_name, run.ir, made.ir):
        return reject("effect", f"{card.pass_name} is not present after the rewrite",
                      made.site.anchor)
    new_state = lineage.add_state(_state(source, made.ir, language, case, tier, verdict, frozenset()))
    delta = {"src_ms": run.ms, "dst_ms": ms, "ratio": run.ms / ms} if run.ms and ms else None
    lineage.add_transition(Transition(
        src=run.state, dst=new_state, pass_name=card.pass_name, category=card.category,
        anchor=made.site.anchor, options=dict(made.options), diff=_diff_actions(run.ir, made.ir),
        src_verdict={"ok": True, "tier": tier, "ms": run.ms},
        dst_verdict={"ok": True, "tier": tier, "ms": ms}, profile_delta=delta,
        backward=None, rederived_by="llm" if made.rewriter == "llm" else "deterministic",
        case=case, language=language, platform="cuda", expert=expert,
        step=len(run.applied) + 1))
    step = Step(card.id, card.pass_name, made.site.anchor, True, ms=ms,
                speedup=delta["ratio"] if delta else None, rewriter=made.rewriter)
    run.applied.append(step)
    say("accepted", {"card": card.id, "anchor": made.site.anchor, "ms": ms})
    run.source, run.ir, run.state, run.verdict, run.ms = source, made.ir, new_state, verdict, ms
    return True


def _diff_actions(old: Any, new: Any) -> tuple[Mapping[str, Any], ...]:
    """The structured diff of a kept step, as `klineage diff --json` lists its actions."""
    import kir  # noqa: PLC0415

    script = kir.diff(old, new)
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


def _spent(rewriter: Any) -> float:
    total = float(getattr(rewriter, "spent_usd", 0.0) or 0.0)
    for backend in getattr(rewriter, "backends", ()) or ():
        total += float(getattr(backend, "spent_usd", 0.0) or 0.0)
    return total


__all__ = ["Materialized", "OptimizeResult", "Step", "card_sites", "feature_appears", "materialize",
           "materializations", "optimize", "resolve_tier"]
