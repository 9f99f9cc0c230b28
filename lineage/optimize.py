"""The optimize loop (paper §3.4): one policy over a frontier of moves (docs/SEARCH.md).

`optimize(target, case, library)` starts from any kernel that passes the gate and spends a
budget of gated candidates. A *state* is a kernel of the run that passed the gate; a *move*
makes a candidate from a state (`lineage.moves`): a retrieved card at a site (a structural
step, timed under a list around its state's configuration), a card with the retrieved steps
its evidence ran with that the state lacks (`lineage.bundles`), a sweep around a launch
card's recorded configuration, the generic autotune list of the state's own tunables (the
no-library control's: `lineage.control`), or a sweep around the state's configuration.

Every move has an expected gain, its prior (`_prior`: a card's measured effect raised to its
scope match; `SWEEP_PRIOR` for a sweep) updated by what its candidates and its kin measured
(`_gain`), and an expected cost in gate seconds (`_cost`). The policy (`_choose`) gates the
start's plain sweep first (the control is the floor), then the move of highest expected log
gain over the best plus its upside while the budget binds, per expected gate second without
upside while the time box binds. Stepping stones, enabling steps, pairs and revisits are
outcomes of that rule; the rules of the space are in docs/SEARCH.md and `lineage.moves`.

The run is recorded as a lineage (saved after every candidate): the start (role `root`), each
best and state a move was taken from (role `stone` when not the best), the transitions between
them, every rejected candidate as risk evidence (`lineage.outcome.record_state`). `seed`
permutes retrieved cards of equal scope similarity, effect within `EFFECT_TIE`."""
from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kir.embedded import cuda_unit
from kir.errors import BadInputError
from lineage.ahead import Builds, build_ahead
from lineage.bundles import bundle_candidates, bundles, joint_prior
from lineage.graph import Lineage, state_id
from lineage.moves import (PIN_PRIOR, SWEEP_PASS, Materialized, all_configs_spill, card_sites,
                           effect_spread, feature_appears, first_run_s, gate_seconds, kernel_of,
                           kernel_shares, materialize, materializations, move_candidates,
                           pin_offered, rule_offers, sweep_card, used_up, verdict_ms)
from lineage.outcome import (EFFECT_TIE, OptimizeResult, Step, distinct_rejections,
                             failure_kind, finish, lineage_state, record_state, resolve_tier,
                             seeded_order, verdict_json)
from lineage.retrieval import (Retriever, Target, kernel_signature, kernel_sites,
                               signature_similarity, similarity)
from lineage.skills import Library, SkillCard
from lineage.transfer import HEAVY_FIRST_RUN_S, LAUNCH_PASSES, carrier_fit

if TYPE_CHECKING:
    from passes.rewriter import Rewriter

ProgressFn = Callable[[str, Mapping[str, Any]], None]
# A device-tier candidate must beat the best by this factor to become the best (timing noise).
MIN_GAIN = 1.01
# A card whose candidates failed the gate this many times in a run is out of the run.
MAX_CARD_FAILURES = 2
# Candidates one (state, move) makes (a card: its recorded options, then the pass defaults).
CANDIDATES_PER_CARD = 2
# Expected gain of a sweep of a state's own tunables before the run measured one: above
# MIN_GAIN (worth a gate), below a card measured to pay more whose scope matches the state.
SWEEP_PRIOR = 1.05
# How many measurements a move's prior counts as when the run's measurements update it: a
# measurement on the kernel being optimized weighs twice the effect recorded elsewhere; one of
# another card of its pass and kind, in its context, weighs KIN_WEIGHT (partial pooling).
PRIOR_WEIGHT, KIN_WEIGHT = 0.5, 0.5
# A candidate's gate started before the time box ends may run this long past it.
BOX_GRACE_S = 30.0
# Without an explicit gate timeout a candidate's gate may take this many times the start
# kernel's own gate, never less than the floor: a sweep compiles up to 12 configurations.
CANDIDATE_GATE_FACTOR = 10.0
CANDIDATE_GATE_FLOOR_S = 120.0


def optimize(target: str | Path, case: str, library: str | Path | Library, *,
             budget_steps: int = 8, budget_usd: float = 1.0, tier: str = "auto",
             out: str | Path = "out/optimize", k: int = 5, rewriter: Rewriter | None = None,
             progress: ProgressFn | None = None, gate_timeout: float | None = None,
             check_fn: Callable[..., Any] | None = None, seed: int = 0,
             deadline: float | None = None, executor: Any = None,
             llm_config: Any = None, config_sweeps: bool = True,
             lookahead: bool = True, priors: bool = True, around: bool = True,
             bundles: bool = True, prebuild_fn: Callable[..., Any] | None = None) -> OptimizeResult:
    """Optimize the kernel file `target` for `case` with the admitted cards of `library`.

    `budget_steps` bounds the gated candidates, `budget_usd` the LLM spend (used when no
    `rewriter` is given: deterministic rules, then the LLM when `ANTHROPIC_API_KEY` is set).
    `seed` permutes equally ranked cards (module docstring; 0 = retrieval's order).
    `deadline` (a `time.monotonic()` value) stops the loop before a gate that would start
    after it (termination "time-box"; the best kernel so far is returned as usual), and a
    candidate's gate started before it may run at most `BOX_GRACE_S` past it (its time limit is
    cut to fit; a gate cut so is set aside as "time-box", not held against its card); the
    start's plain sweep, the control, is gated whatever the box.
    `gate_timeout` bounds every gate; without it a candidate's gate may take
    `CANDIDATE_GATE_FACTOR` times the start kernel's own (at least `CANDIDATE_GATE_FLOOR_S`).
    Ablations: `config_sweeps=False` leaves out every sweep move (single-parameter rewrites
    only); `lookahead=False` expands the best state only; `priors=False` gives every move the
    same prior; `around=False` gates a structural step at its state's configuration alone
    (`lineage.moves.around_parent`); `bundles=False` offers no card with the steps its
    evidence ran with (`lineage.bundles`). An empty library leaves the sweeps alone.
    Writes OUT/best.<ext> (CUDA: with its host module), OUT/lineage.json and OUT/result.json.
    Raises BadInputError for a missing target, an unknown case or tier, a missing library,
    or a target that fails the gate (there is nothing correct to start from). `check_fn`
    replaces `gate.check` (same signature; tests use it to script verdicts); `executor` (a
    `gate.executor.Executor`, e.g. a Ray cluster) runs the gates otherwise. `prebuild_fn`
    (`gate.prebuild`'s signature; its default without `check_fn` and `executor`, else none)
    starts a candidate's build ahead of its gate.
    `llm_config` (a `passes.llm_rewriter.LLMConfig`) shapes the LLM's requests."""
    import gate  # noqa: PLC0415 — lazy: the gate's workers import torch
    import kir  # noqa: PLC0415

    from passes.base import PassContext  # noqa: PLC0415
    from passes.llm_rewriter import LLMConfig, default_rewriter  # noqa: PLC0415

    if budget_steps < 0 or budget_usd < 0 or seed < 0:
        raise BadInputError("--budget-steps, --budget-usd and --seed must be >= 0")
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
    run_tier = executor.resolve_tier(tier, language) if executor is not None \
        else resolve_tier(tier, language)
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
        rewriter, note = default_rewriter(config, library=lib.to_prompt(admitted))
        if note:
            notes.append(note)
    ctx = PassContext.for_case(the_case.ref, tier="interpret" if run_tier in ("interpret", "emulate")
                               else "device")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    limit: list[float | None] = [None]  # a candidate's gate limit, set from the start's gate

    def check(source: str, boxed: bool = True) -> Any:
        kwargs: dict[str, Any] = {"path": path}
        cap = gate_timeout if gate_timeout is not None else limit[0]
        if boxed and deadline is not None:  # a candidate's gate ends near the box, not after it
            left = max(deadline - time.monotonic(), 0.0) + BOX_GRACE_S
            cap = min(cap, left) if cap is not None else left
        if cap is not None:
            kwargs["timeout"] = cap
        return (check_fn or (executor.check if executor is not None else gate.check))(
            source, language, the_case, run_tier, **kwargs)

    start_src = ir.unparse()
    say = progress or (lambda event, data: None)
    say("gate", {"card": "(start)"})
    began = time.monotonic()
    verdict = check(start_src, boxed=False)
    start_s = gate_seconds(verdict) or time.monotonic() - began
    limit[0] = max(CANDIDATE_GATE_FLOOR_S, CANDIDATE_GATE_FACTOR * start_s)
    if not verdict.ok:
        raise BadInputError(f"{target} fails the gate at the {run_tier} tier "
                            f"({failure_kind(verdict)}: {verdict.reason}); nothing correct to start from")

    run = _Run(rewriter=rewriter, ctx=ctx, check=check, lineage=Lineage(), language=language,
               case=the_case.ref, platform=the_case.platform, tier=run_tier, expert=str(path),
               say=say, budget=budget_steps, deadline=deadline, cards=tuple(admitted),
               retriever=Retriever(admitted, k=k), seed=seed,
               sweeps=config_sweeps and run_tier == "device",
               lookahead=lookahead, priors=priors, around=around, bundles=bundles,
               heavy=first_run_s(verdict) >= HEAVY_FIRST_RUN_S, spread=effect_spread(admitted))
    if (prebuild_fn is not None or (check_fn is None and executor is None)) \
            and language == "cuda" and run_tier == "device":
        run.ahead = Builds(prebuild_fn or gate.prebuild, language, the_case, run_tier, path)
    start = _State(start_src, ir, verdict, verdict_ms(verdict), seconds=start_s)
    start.sid = run.lineage.add_state(lineage_state(start_src, ir, verdict, language, the_case.ref, run_tier,
                                                 frozenset({"root"})))
    run.states, run.best, run.verdicts[start_src] = [start], start, verdict
    termination = "budget-steps"
    while run.gated < budget_steps:
        option = _choose(run)
        if option is None or (run.out_of_time() and not _floor(option, run)):
            termination = "exhausted" if option is None else "time-box"
            break
        _pull(option, run)
        run.lineage.save(out_dir / "lineage.json")  # an interrupted run keeps what it learned
    if run.ahead is not None and (note := run.ahead.note(run.verdicts.values())):
        notes.append(note)
    return finish(run, start, path, out_dir, termination, notes, seed)


# -- the run and its frontier ----------------------------------------------------------------------
@dataclass(eq=False)
class _State:
    """A kernel of the run that passed the gate, and how it was reached."""

    source: str
    ir: Any
    verdict: Any
    ms: float | None
    seconds: float = 0.0  # what its own gate took
    parent: _State | None = None
    card: SkillCard | None = None
    made: Materialized | None = None
    sid: str = ""  # its lineage state, once recorded (a move was taken from it, or it is the best)
    path: tuple[Step, ...] = ()  # the steps from the start to it
    target: Target | None = None  # what retrieval conditions on (`_frontier`)
    used_up: dict[str, bool] = field(default_factory=dict)  # card id -> `used_up`


@dataclass(eq=False)
class _Option:
    """One move on one state: `kind` plain | own | recorded | rule | pin | card | bundle, the card
    it acts for (a stand-in card for the state's own sweeps and a rule offered without one), its
    rank; a bundle's cards in the order they are applied (`chain`, the card last)."""

    state: _State
    kind: str
    card: SkillCard
    rank: int
    prior: float = 0.0
    """log of the expected gain before the run measured anything."""
    context: tuple[str, ...] = ()
    """The card's prior actions the state has."""
    stream: Iterator[Materialized] | None = None
    pulls: int = 0
    done: bool = False
    refused: bool = False
    """Its first pull made no candidate (no site, or every back-end refused)."""
    held: list[Materialized] = field(default_factory=list)
    """Candidates taken from `stream` ahead of their pulls (`lineage.ahead`), in order."""
    chain: tuple[SkillCard, ...] = ()


@dataclass(eq=False)
class _Run:
    """One optimize run: what every step shares, and what the run has learned."""

    rewriter: Any
    ctx: Any
    check: Callable[[str], Any]
    lineage: Lineage
    language: str
    case: str
    platform: str
    tier: str
    expert: str
    say: ProgressFn
    budget: int
    deadline: float | None
    cards: tuple[SkillCard, ...]
    retriever: Retriever
    seed: int = 0
    sweeps: bool = True
    lookahead: bool = True
    priors: bool = True
    around: bool = True  # a structural step under a list around its state's configuration
    bundles: bool = True  # a card with the steps its evidence ran with (`lineage.bundles`)
    heavy: bool = False
    """The start's first run, compilation included, took `HEAVY_FIRST_RUN_S` or more."""
    spread: float = 0.0  # how far a move's log gain may lie from its prior (`effect_spread`)
    states: list[_State] = field(default_factory=list)
    best: _State | None = None
    options: dict[tuple[int, str, str], _Option] = field(default_factory=dict)
    observed: dict[str, list[float]] = field(default_factory=dict)
    """Move (`_move`) -> log speedup of each of its timed candidates over its state."""
    costs: dict[str, list[float]] = field(default_factory=dict)
    """Move kind -> log of each of its candidates' gate seconds over its state's."""
    gate_s: float = 0.0  # seconds the run's candidates' gates took
    failures: Counter[str] = field(default_factory=Counter)
    verdicts: dict[str, Any] = field(default_factory=dict)  # text -> verdict of every gated one
    applied: list[Step] = field(default_factory=list)
    rejected: list[Step] = field(default_factory=list)
    gated: int = 0
    reused: int = 0
    last: _State | None = None
    ranked: list[_Option] = field(default_factory=list)
    """The options of the last choice, best first (`_choose`)."""
    ahead: Builds | None = None
    """Starts building a candidate's text ahead of its gate (`gate.prebuild`), where the run's
    gates are this machine's CUDA device-tier gates."""

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    @property
    def timed(self) -> bool:
        return self.tier == "device"


def _choose(run: _Run) -> _Option | None:
    """The policy: among the moves of every state (the best alone without lookahead), the
    start's plain sweep first (the control is the floor), then the highest expected log gain
    over the best (the move's gain discounted by how much slower its state is than the best)
    plus its upside (`_Run.spread` / sqrt(1 + its candidates)), or, where the time box binds
    (`_paced`), that gain per expected gate second without upside (a bet expected to lose
    costs its seconds); ties: the cheaper move, the less measured, the faster state, rank."""
    beam = sorted(run.states if run.lookahead else [run.best],
                  key=lambda s: (s is not run.best, s.ms or math.inf))
    options = [o for state in beam for o in _frontier(state, run)]
    if not options:
        return None
    paced = _paced(run)

    def value(o: _Option) -> tuple[Any, ...]:
        behind = (run.best.ms / o.state.ms) if run.best.ms and o.state.ms else 1.0
        floor = _floor(o, run)
        gain, cost = math.log(_gain(o, run) * behind), _cost(o, run) if paced else 1.0
        own, kin = _measured(o, run)
        seen = len(own) + KIN_WEIGHT * len(kin)
        upside = 0.0 if paced else run.spread / math.sqrt(1 + seen)
        return (floor, (gain / cost if gain > 0 else gain * cost) + upside, -cost, -seen,
                -beam.index(o.state), -o.rank)

    run.ranked = sorted(options, key=value, reverse=True)  # stable: ties keep `max`'s pick
    return run.ranked[0]


def _floor(option: _Option, run: _Run) -> bool:
    """The start's plain sweep: the control, gated first and whatever the time box."""
    return option.kind == "plain" and option.state is run.states[0]


def _cost(option: _Option, run: _Run) -> float:
    """A move's expected gate seconds: its state's own gate's times the geometric mean ratio
    of its kind's candidates' gates to their states' in the run (a prior ratio of 1, weighted
    `PRIOR_WEIGHT`: a candidate costs what its state cost until its kind was measured)."""
    seen = run.costs.get(_priced(option), [])
    state_s = option.state.seconds or run.states[0].seconds or 1.0
    return state_s * math.exp(sum(seen) / (PRIOR_WEIGHT + len(seen)))


def _priced(option: _Option) -> str:
    """The kind whose gates a move's cost is read from: a bundle's are its cards'."""
    return "card" if option.kind == "bundle" else option.kind


def _paced(run: _Run) -> bool:
    """The time box, not the budget of gates, ends the run at the pace gates took so far."""
    if run.deadline is None:
        return False
    pace = (run.states[0].seconds + run.gate_s) / (run.gated + 1)
    return (run.budget - run.gated) * pace > run.deadline - time.monotonic()


def _gain(option: _Option, run: _Run) -> float:
    """A move's expected gain: the mean log speedup of its prior (weighted `PRIOR_WEIGHT`), of
    every candidate it made in the run and of its kin's (`_measured`, each `KIN_WEIGHT`)."""
    (own, kin), prior = _measured(option, run), option.prior if run.priors else 0.0
    return math.exp((PRIOR_WEIGHT * prior + sum(own) + KIN_WEIGHT * sum(kin))
                    / (PRIOR_WEIGHT + len(own) + KIN_WEIGHT * len(kin)))


def _measured(option: _Option, run: _Run) -> tuple[list[float], list[float]]:
    """The log speedups of a move's own candidates, and of its kin's (`_kin`: a pass measured
    flat here is less likely to pay through another card, and its upside shrinks with them)."""
    kin = {_move(o) for o in run.options.values() if _kin(o) == _kin(option)} - {_move(option)}
    return run.observed.get(_move(option), []), [x for m in kin for x in run.observed.get(m, ())]


def _kin(o: _Option) -> tuple[Any, ...]:
    """Moves whose measurements tell about each other: a card's pass, kind and context; every
    launch-parameter card's (`LAUNCH_PASSES`) rewrites, and their recorded sweeps."""
    config = o.card.pass_name in LAUNCH_PASSES and o.kind in ("card", "recorded")
    return ("config", o.kind) if config else (o.card.pass_name, o.kind, o.context)


def _move(option: _Option) -> str:
    """What a measurement updates: the card's rewrites, its recorded sweep, or a sweep, in
    the context of the optimizations its evidence ran with that the state has (a card whose
    evidence ran with another step is another move once that step is there)."""
    return f"{option.card.id}:{option.kind}:{','.join(option.context)}"


def _prior(card: SkillCard, target: Target) -> float:
    """log of a card's expected gain on a state: the log of its measured effect times how well
    its scope matches (operator structure: its own case, else the Jaccard similarity of the
    operator signatures; its language; the share of the optimizations its evidence ran with
    that the state has); a launch-parameter card's, on a state an autotuner configures, a
    sweep's at most (its effect was measured from a configuration nobody swept)."""
    sim = similarity(card, target)
    structure = 1.0 if target.case in (card.scope.get("cases") or ()) else \
        signature_similarity(card.scope.get("signature") or (), target.signature)
    prior = math.log(max(card.effect_score, 1e-6)) * structure * sim["language"] \
        * sim["prior_actions"]
    return prior if card.pass_name not in LAUNCH_PASSES or SWEEP_PASS not in \
        target.present_passes else min(prior, math.log(SWEEP_PRIOR))


def _frontier(state: _State, run: _Run) -> list[_Option]:
    """The moves of `state` not yet spent: its own sweeps (timed runs), its autotuners' picks
    pinned (the best), recorded sweeps of retrieved launch cards, rules, the retrieved cards."""
    if state.target is None:  # what retrieval conditions on does not change with the run
        present, open_ = kernel_sites(state.ir)
        state.target = Target(run.language, run.case, run.platform, present,
                              signature=kernel_signature(state.ir), open_sites=open_)
    target = state.target
    failed = {c.id for c in run.cards
              if run.failures[c.id] >= MAX_CARD_FAILURES or used_up(c, state)}
    spent = failed | {c.id for c in run.cards  # and a tie's own card (as a sweep's kind)
                      if getattr(run.options.get((id(state), "card", c.id)), "done", False)
                      or state.card is not None and c.id == state.card.id and state is not run.best}
    found = [r.card for r in seeded_order(run.retriever.retrieve(target, exclude=spent).cards, run.seed)]
    moves: list[tuple[str, SkillCard, float]] = []
    swept: set[str] = set()
    if run.sweeps:
        # a sweep-made state is swept while it is the best: own climbs pick to pick, a list once
        made = state.made.options if state.made and state.made.rewriter == "config-sweep" else None
        kinds = ("plain", "own", "recorded") if made is None or state is run.best else ()
        kinds = tuple(k for k in kinds if k != "own" or state is run.best)  # own: the best's
        kinds = tuple(k for k in kinds if made is None or k != "plain" or _sweep_kind(made) != k)
        moves += [(k, sweep_card(k, run.language), math.log(SWEEP_PRIOR)) for k in kinds
                  if k == "own" or k == "plain" and run.language == "triton"]
        if state is run.best and pin_offered(state.ir, state.verdict):  # its autotuners' picks
            moves.append(("pin", sweep_card("pin", run.language), math.log(PIN_PRIOR)))
        fits = sorted(((f, c) for c in found if c.pass_name in LAUNCH_PASSES and c.carrier.get("config")
                       and c.language == run.language and (f := carrier_fit(c.carrier, state.ir)) > 0),
                      key=lambda f: -f[0])
        # where an autotuner configures the state, a launch card's point is one entry of its
        # recorded sweep: each card that fits is offered as that sweep, none as a point
        swept = {c.id for _, c in fits} if SWEEP_PASS in target.present_passes else set()
        moves += [("recorded", c, _prior(c, target)) for _, c in fits[:len(swept) or 1]  # else the best fit's
                  if "recorded" in kinds and (made is None or c.id != getattr(state.card, "id", None))]
        moves += [("rule", c, p) for c, p in rule_offers(state.ir, run.ctx)]  # no card needed
    # A card with no site here whose evidence ran with a pass the state lacks bets on that
    # pass's step: the step's prior adds the card's (an enabling step, two moves deep).
    blocked = [o.card for o in run.options.values()
               if o.state is state and o.kind == "card" and o.refused]

    def enabling(card: SkillCard) -> float:
        if card.pass_name in target.present_passes:
            return 0.0
        return max([0.0] + [_prior(b, target) for b in blocked
                            if card.pass_name in (b.scope.get("prior_actions") or ())])

    moves += [("card", c, _prior(c, target) + enabling(c)) for c in found if c.id not in swept]
    # a bundle's prior: its cards' priors on the states along it (`joint_prior`)
    chains = bundles([r.card for r in run.retriever.retrieve(target, exclude=failed).cards],
                     target.present_passes, run.cards) if run.bundles else {}
    moves += [("bundle", ch[-1], joint_prior(ch, target, _prior)) for ch in chains.values()]
    out = []
    for rank, (kind, card, prior) in enumerate(moves):
        key = (id(state), kind, card.id)
        option = run.options.setdefault(key, _Option(state, kind, card, rank, prior))
        option.rank, option.prior = rank, prior
        option.chain = chains.get(card.id, ()) if kind == "bundle" else ()
        option.context = tuple(sorted(target.present_passes if kind in ("plain", "own") else
                                      set(card.scope.get("prior_actions") or ()) & target.present_passes))
        if not option.done:
            out.append(option)
    return out


def _sweep_kind(options: Mapping[str, Any]) -> str:
    return "plain" if options.get("plain") else "own" if options.get("own") else "recorded"


def _stream(option: _Option, run: _Run) -> Iterator[Materialized]:
    """The option's candidates (`lineage.moves.move_candidates`), those that are a state of
    the run or were gated already left out."""
    kw = {"ctx": run.ctx, "rewriter": run.rewriter, "heavy": run.heavy,
          "around": run.sweeps and run.around}
    made = bundle_candidates(option.chain, option.state, **kw) if option.kind == "bundle" \
        else move_candidates(option.kind, option.card, option.state, **kw)
    return (m for m in made if m.ir is None or _unseen(m.ir.unparse(), run))


def _unseen(source: str, run: _Run) -> bool:
    """Neither a state of the run nor a candidate it has gated."""
    return source not in run.verdicts and not run.lineage.graph.has_node(state_id(source))


def _pull(option: _Option, run: _Run) -> None:
    """Take `option`'s next candidate and gate it (`_judge`); the option is done after
    `CANDIDATES_PER_CARD` candidates (a sweep of the state's own: one per kernel, as many),
    or when it has no more."""
    state = option.state
    if not state.sid:
        record_state(state, run, frozenset({"stone"}))
        run.say("stone", {"card": state.card.id if state.card else "", "ms": state.ms})
    elif run.last is not None and run.last is not run.best and state is run.best:
        run.say("back", {"ms": state.ms})  # from a state that was not the best
    run.last = state
    if option.stream is None:
        option.stream = _stream(option, run)
    made = _next(option, run)
    option.refused = option.pulls == 0 and (made is None or not made.ok)
    option.pulls += 1
    option.done = made is None or not made.ok or option.pulls >= CANDIDATES_PER_CARD \
        or option.kind in ("plain", "pin")  # one candidate each
    if made is not None:
        fits = run.ahead is not None and made.ok and made.ir is not None and made.site is not None
        build_ahead(run, option, made, _kept_as(option.state, made) if fits else None, _stream,
                    lambda kept, o: _Option(kept, o.kind, o.card, o.rank, chain=o.chain))
        _judge(option, made, run)


def _next(option: _Option, run: _Run) -> Materialized | None:
    """The option's next candidate: the first one held ahead that is still unseen, else the
    stream's next."""
    while option.held:
        made = option.held.pop(0)
        if made.ir is None or _unseen(made.ir.unparse(), run):
            return made
    return next(option.stream, None) if option.stream is not None else None


def _kept_as(state: _State, made: Materialized) -> _State:
    """`made` as the state it would be if kept, for what its moves would make
    (`lineage.ahead`): its path has the step, its profile is `state`'s until its own is
    measured."""
    kept = _State(made.ir.unparse(), made.ir, state.verdict, None, parent=state, card=made.card,
                  made=made)
    kept.path = (*state.path, Step(made.card.id, made.card.pass_name, made.site.anchor, True))
    return kept


def _reject(option: _Option, made: Materialized, run: _Run, stage: str, reason: str,
            near_miss: bool = False, **timed: Any) -> None:  # timed: a slower pass's timing
    card, state = option.card, option.state
    anchor = made.site.anchor if made.site is not None else ""
    run.rejected.append(Step(card.id, card.pass_name, anchor, False, stage, reason,
                             rewriter=made.rewriter, state=state.sid, near_miss=near_miss))
    run.lineage.record_rejection(state.sid, card.pass_name, anchor, stage, None, reason,
                                 card=card.id, case=run.case, tier=run.tier, **timed)
    run.say("rejected", {"card": card.id, "stage": stage, "reason": reason})


def _judge(option: _Option, made: Materialized, run: _Run) -> None:
    """Gate one candidate (or reuse its verdict); make it a state, the best where it improves
    on the best (module docstring); update its move's measurements."""
    card, state = made.card, option.state  # a configuration rule's sweep: the rule's name
    if not made.ok or made.site is None:
        return _reject(option, made, run, "materialize", "; ".join(made.refusals) or "no site")
    if not run.timed and made.rewriter != "config-sweep" \
            and not feature_appears(card.pass_name, state.ir, made.ir):
        return _reject(option, made, run, "effect",
                       f"{card.pass_name} is not present after the rewrite")
    source = made.ir.unparse()
    verdict = run.verdicts.get(source)
    seconds = gate_seconds(verdict)  # a reused verdict: what its gate took when it ran
    if verdict is None:
        run.gated += 1
        run.say("gate", {"card": card.id, "anchor": made.site.anchor})
        began = time.monotonic()
        verdict = run.check(source, not _floor(option, run))  # the control's, whatever the box
        seconds = gate_seconds(verdict) or time.monotonic() - began
        run.gate_s += seconds
        if state.seconds and seconds > 0 and not getattr(verdict, "cached", False):
            run.costs.setdefault(_priced(option), []).append(math.log(seconds / state.seconds))
        if failure_kind(verdict) == "timeout" and run.out_of_time():
            # cut by the time box: not a verdict on the card, never reused
            return _reject(option, made, run, "time-box", "the gate was cut at the end of the time box")
        run.verdicts[source] = verdict
    else:
        run.reused += 1  # reached again along another path: the same text, the same verdict
    if not verdict.ok:
        run.failures[card.id] += 1
        return _reject(option, made, run, str(verdict.stage), f"{failure_kind(verdict)}: {verdict.reason}")
    spilling = (all_configs_spill(verdict) - all_configs_spill(state.verdict)
                if not run.timed and run.language == "triton" else set())
    if spilling:  # untimed, the slowdown the tier cannot time; CUDA holds local arrays on purpose
        return _reject(option, made, run, "profile", f"every configuration of "
                       f"{', '.join(sorted(spilling))} spills registers, where the kernel it came "
                       "from did not")
    ms = verdict_ms(verdict)
    if ms and state.ms:
        run.observed.setdefault(_move(option), []).append(math.log(state.ms / ms))
    new = _State(source, made.ir, verdict, ms, seconds, state, card, made)
    members = [Step(c.id, c.pass_name, a, True, rewriter=made.rewriter)  # a bundle's first steps
               for c, a in zip(option.chain[:-1], made.options.get("sites") or ())]
    new.path = (*state.path, *members, Step(card.id, card.pass_name, made.site.anchor, True, ms=ms,
                                            speedup=state.ms / ms if ms and state.ms else None,
                                            rewriter=made.rewriter))
    best_ms = run.best.ms
    if run.timed and (ms is None or (best_ms is not None and ms * MIN_GAIN > best_ms)):
        if card.pass_name not in LAUNCH_PASSES:  # a tie that only reconfigures repeats its state
            run.states.append(new)  # a passing state: expandable while it is near the best
        return _reject(option, made, run, "profile", f"not faster: {best_ms} ms -> {ms} ms",
                       near_miss=bool(ms and best_ms and ms <= best_ms * MIN_GAIN),
                       timing=verdict_json(verdict).get("timing"), options=made.options)
    if not run.timed:  # untimed, the kept state replaces the one it came from
        run.states.remove(state)
    run.states.append(new)
    run.best = new
    record_state(new, run, frozenset())
    run.applied = list(new.path)
    run.say("accepted", {"card": card.id, "anchor": made.site.anchor, "ms": ms})


__all__ = ["CANDIDATES_PER_CARD", "EFFECT_TIE", "MIN_GAIN", "Materialized", "OptimizeResult",
           "Step", "card_sites", "distinct_rejections", "feature_appears", "first_run_s",
           "gate_seconds", "kernel_of", "kernel_shares", "materialize", "materializations",
           "optimize", "resolve_tier", "seeded_order"]
