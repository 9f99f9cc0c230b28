"""Roundtrip admission of SkillCards (paper §3.3, "Roundtrip admission").

A lifted card is a hypothesis. It is admitted only after a *trial* in a context absent from its
source lineage — a state of another case, a state of a lineage its evidence did not come
from, or a state of a *held-out lineage* (one induced for the purpose and not lifted, e.g. the
same expert de-optimized in another order: `klineage induce --first-branch 1`) that holds none
of the card's evidence and is no state of its source lineages — in which materializing the
card (`lineage.optimize.materialize`) gives a kernel that passes the gate and reproduces the
card's declared effect:

- interpret / static tier (no timing): the candidate passes the gate and the pass's
  optimization appears (more sites where it is present, or fewer where it could still be
  applied; `lineage.optimize.feature_appears`);
- device tier: the candidate passes the gate and its speedup over the context state shows
  the card's effect. A card whose every recorded speedup beat timing noise must speed the
  context up by more than that noise (`MIN_GAIN`); its recorded magnitudes belong to the states it was lifted
  from (a tile card that gave 2.3x on a naive kernel gives less on a tuned one), so they are
  required only with `magnitude=True` (then at least the smallest recorded speedup times
  (1 - `slack`)). Any other card must not fall below its smallest recorded speedup times
  (1 - `slack`); one whose recorded speedups lie within noise (an enabling step, such as a
  staging the tensor-core step after it needs) must also show its optimization in the
  candidate, as at the interpret tier. A card that was never timed is held to the interpret rule.

Contexts are tried in order (see `held_out_contexts`); with `jobs` > 1 several cards are
tried at once (device-tier gates share the GPU through `gate.gpulock`, which keeps their
timings apart).

Every trial, successful or not, is appended to the card's verification log and the card is
written back to the library at once (so an interrupted admission keeps what it learned).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kir.errors import BadInputError
from lineage.graph import Lineage
from lineage.optimize import (CANDIDATES_PER_CARD, MIN_GAIN, feature_appears,
                              materializations, resolve_tier)
from lineage.skills import Library, SkillCard, Trial

ProgressFn = Callable[[str, Mapping[str, Any]], None]
# States scanned beyond max_trials, tried only in place of trials that said nothing.
SPARE_CONTEXTS = 2


# Why a device trial says nothing about the card: the held-out state itself has no device time
# (an interpret-tier state that fails the device gate). Such a trial is logged and another
# state is tried in its place.
NO_BASELINE = "the context state has no timing"


@dataclass(frozen=True, slots=True)
class Context:
    """A held-out state a card may be tried on."""

    case: str
    state: str
    source: str
    language: str
    path: str
    """The kernel file whose lineage holds the state (names the gate's scratch module; for
    CUDA it locates the host module)."""
    timing_ms: float | None = None
    tier: str = ""

    @property
    def label(self) -> str:
        return f"{self.case}:{self.state}"


def held_out_contexts(card: SkillCard, lineages: Sequence[Lineage],
                      held_out: Sequence[Lineage] = ()) -> list[Context]:
    """States where `card` may be tried: same language and not among its source states, taken
    from (1) `lineages` of a case outside the card's scope or whose experts its evidence did
    not come from, and (2) `held_out` lineages that hold none of the card's evidence
    transitions, leaving out every state of a lineage in `lineages` that the card's evidence
    did come from. Other cases first, then the rest;
    within each, states without the card's pass before those that have it somewhere (where
    only another locus can take the card), and states nearest the naive root first (most
    room for the card)."""
    sources = {(s.get("case", ""), s.get("expert", "")) for s in card.sources}
    experts = {expert for _, expert in sources if expert}
    cases = set(card.scope.get("cases") or [])
    own = set(card.source_states)
    evidence = set(card.evidence)
    source_states: set[str] = set()
    for lineage in lineages:
        if _foreign(lineage, experts):
            continue
        source_states.update(lineage.states())
    found: list[tuple[int, int, int, Context]] = []
    for lineage, held in [(lin, False) for lin in lineages] + [(lin, True) for lin in held_out]:
        if held:
            if evidence & set(lineage.transitions()):
                continue
            skip = own | source_states
        else:
            skip = own
        foreign_lineage = held or _foreign(lineage, experts)
        for sid in lineage.states():
            node = lineage.node(sid)
            if sid in skip or node.get("language") != card.language:
                continue
            case = str(node.get("case", ""))
            if case in cases and not foreign_lineage:
                continue
            # The pass already present elsewhere in the state: still a context (the card may
            # have an open site there), after the states without it.
            present = any(f.get("pass") == card.pass_name for f in node.get("features") or ())
            expert = _expert_of(lineage, sid)
            timing = node.get("timing") or {}
            depth = _depth_from_root(lineage, sid)
            found.append((0 if case not in cases else 1, int(present), depth, Context(
                case=case, state=sid, source=str(node.get("source", "")),
                language=str(node.get("language", "")), path=expert,
                timing_ms=timing.get("candidate_ms"), tier=str(node.get("tier", "")))))
    found.sort(key=lambda item: (item[0], item[1], item[2], item[3].state))
    unique: dict[str, Context] = {}
    for *_, ctx in found:  # a state in two given lineages is one context
        unique.setdefault(ctx.state, ctx)
    return list(unique.values())


def _foreign(lineage: Lineage, experts: set[str]) -> bool:
    """The lineage's experts are none of those the card's evidence came from."""
    lineage_experts = set(lineage.graph.graph.get("experts") or [])
    return not (lineage_experts & experts) if lineage_experts else True


def _expert_of(lineage: Lineage, state: str) -> str:
    for neighbour in list(lineage.graph.successors(state)) + list(lineage.graph.predecessors(state)):
        expert = lineage.node(neighbour).get("expert")
        if expert:
            return str(expert)
    experts = lineage.graph.graph.get("experts") or []
    return str(experts[0]) if experts else ""


def _depth_from_root(lineage: Lineage, state: str) -> int:
    """Forward steps from the nearest root (a state with no incoming transition)."""
    depth, current, seen = 0, state, {state}
    while True:
        preds = [p for t in lineage.graph.predecessors(current) for p in lineage.graph.predecessors(t)]
        preds = [p for p in preds if p not in seen]
        if not preds:
            return depth
        current = preds[0]
        seen.add(current)
        depth += 1


def trial(card: SkillCard, context: Context, *, tier: str, rewriter: Any,
          slack: float = 0.25, gate_timeout: float | None = None,
          check_fn: Callable[..., Any] | None = None, magnitude: bool = False,
          batch_fn: Callable[[Sequence[Any]], Sequence[Any]] | None = None) -> Trial:
    """Materialize `card` on `context` and judge it (see module docstring). Up to
    `CANDIDATES_PER_CARD` materializations are gated (recorded options, then the pass's
    defaults); the first that passes the gate is judged. Never raises for a failed trial: the
    reason is in the returned `Trial` (the first candidate's failure when none passed).
    `check_fn` replaces `gate.check` (same signature). With `batch_fn` (`gate.check_many`'s
    role: `CheckRequest`s in, verdicts out, e.g. a cluster executor's `check_many`) every
    candidate, and the context state where a device trial needs its time, is gated at once
    before the judging, which goes on in the same order and to the same outcome."""
    import gate  # noqa: PLC0415
    import kir  # noqa: PLC0415

    from passes.base import PassContext  # noqa: PLC0415

    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def result(ok: bool, reason: str, speedup: float | None = None, by: str = "") -> Trial:
        return Trial(context.label, context.case, tier, ok, reason, speedup, by, at)

    try:
        the_case = gate.load_case(context.case)
    except BadInputError as exc:
        return result(False, f"context case unavailable: {exc}")
    ir = kir.parse(context.source, language=context.language, path=context.path or None)
    ctx = PassContext.for_case(the_case.ref, tier="interpret" if tier != "device" else "device")
    kwargs: dict[str, Any] = {"path": Path(context.path)} if context.path else {}
    if gate_timeout is not None:
        kwargs["timeout"] = gate_timeout
    # the card's own recorded step is what a trial reproduces: no configuration sweep (a
    # transfer proposal, gated where optimize makes it)
    candidates: Iterable[Any] = itertools.islice(
        materializations(card, ir, rewriter, ctx, sweeps=False), CANDIDATES_PER_CARD)
    known: dict[str, Any] = {}
    if batch_fn is not None:
        candidates = list(candidates)
        sources = [m.ir.unparse() for m in itertools.takewhile(
            lambda m: m.ok and m.ir is not None and m.site is not None, candidates)]
        if sources and tier == "device" and card.speedup and context.tier != "device":
            sources.append(context.source)
        requests = [gate.CheckRequest(src, context.language, the_case, tier,
                                      path=context.path or None, timeout=gate_timeout)
                    for src in dict.fromkeys(sources)]
        known = dict(zip((r.source for r in requests), batch_fn(requests))) if requests else {}

    def check(source: str) -> Any:
        if source in known:
            return known[source]
        return (check_fn or gate.check)(source, context.language, the_case, tier, **kwargs)

    first_failure: Trial | None = None
    for made in candidates:
        if not made.ok or made.ir is None or made.site is None:
            return first_failure or result(
                False, "not materialized: " + ("; ".join(made.refusals) or "no site"))
        verdict = check(made.ir.unparse())
        if not verdict.ok:
            kind = getattr(verdict.failure_kind, "value", verdict.failure_kind)
            first_failure = first_failure or result(False, f"gate: {kind}: {verdict.reason}",
                                                    by=made.rewriter)
            continue
        return _judge(card, context, ir, made, verdict, tier, slack, result,
                      lambda: check(context.source), magnitude)
    return first_failure or result(False, "not materialized")


def effect_floor(summary: Mapping[str, Any], slack: float, magnitude: bool = False) -> float:
    """The least speedup a device trial must show (module docstring): a card whose every
    recorded speedup beat timing noise must speed the context up by more than that noise
    (`MIN_GAIN`), and with `magnitude` also reach its smallest recorded speedup less `slack`;
    any other card (`within_noise`) must not fall below its smallest recorded speedup less
    `slack`."""
    low = float(summary["min"])
    floor = low * (1.0 - slack)
    if low >= MIN_GAIN:
        floor = max(floor, MIN_GAIN) if magnitude else MIN_GAIN
    return floor


def within_noise(summary: Mapping[str, Any]) -> bool:
    """Whether a card's smallest recorded speedup is inside timing noise (below `MIN_GAIN`): an
    enabling step (a cp.async staging that the tensor-core step after it needs) whose evidence
    never showed a speedup of its own. Its trial cannot be asked for one; it must not fall
    below its range and its optimization must appear in the candidate (`_judge`)."""
    return float(summary["min"]) < MIN_GAIN


def _judge(card: SkillCard, context: Context, ir: Any, made: Any, verdict: Any, tier: str,
           slack: float, result: Callable[..., Trial], baseline: Callable[[], Any],
           magnitude: bool = False) -> Trial:
    """Whether a candidate that passed the gate reproduces the card's effect."""
    summary = card.speedup
    if tier == "device" and summary:
        before = context.timing_ms if context.tier == "device" else None
        base_failed = ""
        if before is None:
            base = baseline()
            before = base.timing.candidate_ms if base.ok and base.timing else None
            if not base.ok:  # why the context state itself has no time: it fails this gate
                kind = getattr(base.failure_kind, "value", base.failure_kind)
                first = str(base.reason or "").splitlines()[:1]
                base_failed = f" (at the {tier} tier it fails the gate: {kind}: " \
                              f"{first[0][:160] if first else ''})"
        after = verdict.timing.candidate_ms if verdict.timing else None
        if not before or not after:
            why = NO_BASELINE + base_failed if not before else "the candidate has no timing"
            return result(False, f"no timing to compare: {why}", by=made.rewriter)
        speedup = before / after
        floor = effect_floor(summary, slack, magnitude)
        if speedup < floor:
            return result(False, f"speedup {speedup:.3f}x below the card's range "
                                 f"(min {float(summary['min']):.3f}x, floor {floor:.3f}x)",
                          speedup, made.rewriter)
        if within_noise(summary) and not feature_appears(card.pass_name, ir, made.ir):
            return result(False, f"speedup {speedup:.3f}x, but {card.pass_name} does not appear "
                                 f"(its recorded speedups are within noise: the structure is "
                                 f"what it shows)", speedup, made.rewriter)
        return result(True, f"speedup {speedup:.3f}x at {made.site.anchor}", speedup, made.rewriter)
    if not feature_appears(card.pass_name, ir, made.ir):
        return result(False, f"passes the gate but {card.pass_name} does not appear",
                      by=made.rewriter)
    return result(True, f"passes the {tier} gate; {card.pass_name} appears at {made.site.anchor}",
                  by=made.rewriter)


@dataclass(frozen=True, slots=True)
class AdmissionReport:
    admitted: tuple[str, ...]
    rejected: tuple[str, ...]
    untried: tuple[str, ...]
    trials: int
    pending: tuple[str, ...] = ()
    """Cards not tried because the deadline came first."""

    def to_json(self) -> dict[str, Any]:
        return {"admitted": list(self.admitted), "rejected": list(self.rejected),
                "untried": list(self.untried), "trials": self.trials,
                "pending": list(self.pending)}


def admit(library: Library, lineages: Sequence[Lineage], *, tier: str = "interpret",
          max_trials: int = 2, rewriter: Any = None, slack: float = 0.25,
          gate_timeout: float | None = None, progress: ProgressFn | None = None,
          retry_admitted: bool = False, check_fn: Callable[..., Any] | None = None,
          held_out: Sequence[Lineage] = (), magnitude: bool = False,
          jobs: int = 1, deadline: float | None = None, executor: Any = None) -> AdmissionReport:
    """Try every hypothesis of `library` on up to `max_trials` held-out contexts from
    `lineages` and the `held_out` lineages (see `held_out_contexts`) until one trial succeeds;
    each trial is logged on the card and the card is stored at once. A held-out state where
    the card does not materialize is passed over (it says nothing about the card); states
    that take one of the card's recorded variants come before those that take only the pass's
    defaults; a card with no held-out state where it materializes is reported `untried`. A
    device trial on a state that has no device time itself (`NO_BASELINE`) is logged and does
    not count: another state (up to `SPARE_CONTEXTS` more) is tried in its place. Cards
    already admitted are skipped unless `retry_admitted`. `jobs` cards are tried at once: their
    gates run side by side, everything else (materialization, the library's files) one card at
    a time, the cards with the largest recorded speedup first. No card starts after `deadline` (a
`time.monotonic()` value): those left are reported `pending`,
    and a later call takes them up (the cards tried so far keep their logs). `executor` (a
    `gate.executor.Executor`) runs the gates; one with spare capacity (`speculate`, e.g. a Ray
    cluster) gets each trial's candidates at once (`trial`'s `batch_fn`) unless the rewriter
    calls an LLM (which would be paid for candidates the trial may not need)."""
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    if jobs < 1:
        raise BadInputError("jobs must be >= 1")
    say = progress or (lambda event, data: None)
    if executor is not None:  # "auto" means a GPU where the executor runs the gates
        tier = executor.concrete_tier(tier)
    the_rewriter = rewriter if rewriter is not None else DeterministicRewriter()
    check = check_fn
    if check is None:
        import gate  # noqa: PLC0415

        check = executor.check if executor is not None else gate.check
    batch = (executor.check_many if executor is not None and executor.speculate
             and check_fn is None and not _calls_llm(the_rewriter) else None)
    cpu = threading.Lock()  # held by a card's thread except while its gate runs
    parsed: dict[str, Any] = {}  # state id -> its KernelIR (or None), shared by the cards

    def gated(*args: Any, **kwargs: Any) -> Any:
        cpu.release()
        try:
            return check(*args, **kwargs)
        finally:
            cpu.acquire()

    def gated_batch(requests: Sequence[Any]) -> Sequence[Any]:
        assert batch is not None
        cpu.release()
        try:
            return batch(requests)
        finally:
            cpu.acquire()

    def one(card: SkillCard) -> tuple[str, int]:
        """(outcome: admitted | rejected | untried | pending, trials run) for one card."""
        with cpu:
            if deadline is not None and time.monotonic() >= deadline:
                return "pending", 0
            # A few states beyond max_trials stand by for trials that say nothing (NO_BASELINE).
            contexts = _trial_contexts(card, held_out_contexts(card, lineages, held_out),
                                       max_trials + SPARE_CONTEXTS, the_rewriter, parsed, tier)
            if not contexts:
                say("untried", {"card": card.id})
                return "untried", 0
            count = informative = 0
            for context in contexts:
                if informative >= max_trials:
                    break
                run_tier = resolve_tier(tier, context.language)
                say("trial", {"card": card.id, "context": context.label})
                outcome = trial(card, context, tier=run_tier, rewriter=the_rewriter, slack=slack,
                                gate_timeout=gate_timeout, check_fn=gated, magnitude=magnitude,
                                batch_fn=gated_batch if batch is not None else None)
                count += 1
                informative += NO_BASELINE not in outcome.reason
                card = library.put(card.with_trial(outcome))
                say("admitted" if outcome.ok else "failed", {"card": card.id,
                                                             "reason": outcome.reason})
                if outcome.ok:
                    break
            return ("admitted" if card.admitted else "rejected"), count

    # The cards with the most at stake first (largest recorded speedup, then id): under a
    # deadline, a tile or tensor-core card is not left pending behind unroll pragmas that sort
    # before it by name.
    todo = sorted((c for c in library.cards() if retry_admitted or not c.admitted),
                  key=lambda c: (-c.effect_score, c.id))
    if jobs == 1:
        outcomes = [one(card) for card in todo]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, todo))
    kinds: dict[str, list[str]] = {"admitted": [], "rejected": [], "untried": [], "pending": []}
    for card, (kind, _) in zip(todo, outcomes):
        kinds[kind].append(card.id)
    return AdmissionReport(tuple(kinds["admitted"]), tuple(kinds["rejected"]),
                           tuple(kinds["untried"]), sum(n for _, n in outcomes),
                           tuple(kinds["pending"]))


def _calls_llm(rewriter: Any) -> bool:
    """Whether `rewriter` (or a back-end of its chain) is not a deterministic rule."""
    backends = tuple(getattr(rewriter, "backends", None) or (rewriter,))
    return any(getattr(b, "name", "") != "deterministic" for b in backends)


def _trial_contexts(card: SkillCard, contexts: Sequence[Context], max_trials: int,
                    rewriter: Any, parsed: dict[str, Any], tier: str) -> list[Context]:
    """Up to `max_trials` of `contexts` (in their order) on which `card` materializes; those
    that take one of the card's recorded variants (its carrier: what the lineage knows) before
    those that take only the pass's defaults (which say little about the card). A context with
    no candidate at all is passed over: it would spend a trial and say nothing. Scans lazily:
    it stops at the `max_trials`-th context that takes a recorded variant."""
    recorded: list[Context] = []
    defaults: list[Context] = []
    for context in contexts:
        kind = _materializes(card, context, rewriter, parsed, resolve_tier(tier, context.language))
        if kind == "recorded":
            recorded.append(context)
            if len(recorded) >= max_trials:
                break
        elif kind == "defaults":
            defaults.append(context)
    return (recorded + defaults)[:max_trials]


def _materializes(card: SkillCard, context: Context, rewriter: Any,
                  parsed: dict[str, Any], tier: str) -> str:
    """"recorded" when a recorded variant of `card` materializes on the context's state,
    "defaults" when only the pass's defaults (or an LLM back-end) do, "" when nothing does."""
    import kir  # noqa: PLC0415

    from passes.base import PassContext  # noqa: PLC0415

    if context.state not in parsed:
        try:
            parsed[context.state] = kir.parse(context.source, language=context.language,
                                              path=context.path or None)
        except BadInputError:
            parsed[context.state] = None
    ir = parsed[context.state]
    if ir is None:
        return ""
    try:
        ctx = PassContext.for_case(context.case, tier="device" if tier == "device" else "interpret")
    except BadInputError:
        return ""
    from lineage.optimize import card_sites  # noqa: PLC0415
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    # The scan asks the rules only (an LLM back-end would be paid for every state scanned).
    rule = DeterministicRewriter()
    kind = ""
    recorded: list[str] = []
    for made in itertools.islice(materializations(card, ir, rule, ctx, sweeps=False),
                                 CANDIDATES_PER_CARD):
        if not made.ok or made.ir is None:
            break
        kind = "defaults"
        if made.options:
            recorded.append(made.ir.unparse())
    if recorded:
        # A recorded variant counts only where it makes something the defaults do not (a
        # rule may ignore options that do not fit the kernel and do its default rewrite).
        bare = replace(card, options={}, variants=())
        defaults = {m.ir.unparse() for m in itertools.islice(
            materializations(bare, ir, rule, ctx, sweeps=False), CANDIDATES_PER_CARD) if m.ir is not None}
        if any(text not in defaults for text in recorded):
            return "recorded"
    if not kind and _calls_llm(rewriter):
        kind = "defaults" if card_sites(card, ir) else ""
    return kind


def load_lineages(paths: Sequence[str | Path]) -> list[Lineage]:
    """Lineages from directories or lineage.json files (BadInputError for a bad one)."""
    return [Lineage.load(p) for p in paths]
