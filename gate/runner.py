"""The parent side of a gate run: start the worker, enforce its time limit, judge what it sends.

Workers start from a fork server that has imported torch and nothing else (never candidate
code, never CUDA), so each candidate gets a fresh process with a clean CUDA context for a
fraction of a cold start; `KLINEAGE_GATE_START=spawn` starts each from scratch instead. From
the second gate of a run on, the next worker starts up while a gate runs and waits for its job
(`Standby`): still a process no candidate code has run in.
A hang, a signal, `os._exit` or the OOM killer end only the worker; the verdict says which.
"""
from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gate import compare as cmp
from gate import gpulock, precision, transport
from gate.cases import Case
from gate.verdict import (Correctness, Facts, CompileFacts, FailureKind, SeedResult, Tier, Timing,
                          VariantTiming, Verdict, picks_of, reject)
from gate.worker import (PHASE_CONFIG, PHASE_FAULT, PHASE_KNOCKOUT, PHASE_REFILL, PHASE_REVERIFY,
                         PHASE_SEALED, PHASE_SEED, PHASE_TIMED, REFILL_SAMPLE, Job,
                         main as worker_main, standby as worker_standby)

_LOG = logging.getLogger(__name__)
STARTUP_TIMEOUT_S = 180.0
SPEEDUP_FLAG = 10.0
_CONTEXT: Any = None


# Kernels a per-kernel profile keeps (a candidate's report; more names than this are noise).
MAX_PROFILED_KERNELS = 64


def _kernel_ms(raw: Any) -> tuple[tuple[str, float], ...]:
    """A worker's per-kernel GPU milliseconds, kept only as well-formed (name, finite ms >= 0)
    pairs, the slowest first; anything else in the message is dropped (the profile informs the
    search and judges nothing)."""
    if not isinstance(raw, dict):
        return ()
    pairs = [(str(k)[:200], float(v)) for k, v in raw.items()
             if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0]
    pairs.sort(key=lambda p: -p[1])
    return tuple(pairs[:MAX_PROFILED_KERNELS])


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        method = os.environ.get("KLINEAGE_GATE_START", "forkserver")
        if method not in multiprocessing.get_all_start_methods():
            method = "spawn"
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            # Not triton: its standard library is decorated when triton.language is imported,
            # and an interpret-tier worker must import it after setting TRITON_INTERPRET.
            ctx.set_forkserver_preload(["torch", "numpy", "gate.worker"])
        _CONTEXT = ctx
    return _CONTEXT


@dataclass(slots=True)
class _Judge:
    """Accumulates the worker's messages into a verdict."""

    case: Case
    tier: Tier
    case_compare: Any = None
    refs: dict[tuple[str, str, int], tuple[Any, Any]] = field(default_factory=dict)
    results: list[SeedResult] = field(default_factory=list)
    ref_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    ref_tf32_ms: dict[str, float] = field(default_factory=dict)
    ref_compile_ms: dict[str, float] = field(default_factory=dict)
    cand_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    kernel_ms: dict[str, tuple[tuple[str, float], ...]] = field(default_factory=dict)
    picks: dict[str, tuple[tuple[str, tuple[tuple[str, int], ...]], ...]] = field(default_factory=dict)
    timed_s: float = 0.0
    facts: Facts | None = None
    stage: str = "import"
    verdict: Verdict | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    compare_s: float = 0.0  # the parent's own time decoding and comparing outputs
    compare_lock_s: float = 0.0  # the parent's time waiting for the GPU lock to compare
    gpu_lock: Any = field(default_factory=gpulock.NoLock)
    """The worker's GPU lock, held shared while comparing: no gate times a kernel while a
    parent's comparisons load the CPU."""
    seeds: tuple[int, ...] = ()
    """The job's correctness seeds: a finished run must have sent an output for each of them,
    on every variant (`_check_complete`)."""
    variant_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The seeds the worker kept per variant (`("seeds", variant, seeds)`, before `refs_done`)."""
    refs_closed: bool = False
    """`refs_done` arrived: every reference was made before candidate code loaded, so a later
    one was forged by candidate code over the worker's pipe."""
    sent: set[tuple[str, str, int]] = field(default_factory=set)
    probe_err: dict[tuple[str, int], float] = field(default_factory=dict)
    """(variant, seed) -> error of the reference on TF32-rounded inputs (`gate.precision`)."""
    lower: list[str] = field(default_factory=list)
    """Variants on which the candidate computed in lower precision than the reference."""
    held: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    """References the worker holds masked (`gate.heldcompare`): key, headers, sample, digest."""
    pending: tuple[Any, ...] | None = None
    """The held comparison asked for and not yet answered: (variant, phase, seed, reference,
    outputs' headers, sampled places asked)."""
    failing: tuple[Any, ...] | None = None
    """A held output that failed, waiting for its figures against the variant's other sets:
    (variant, phase, seed, outcome, reference, the other sets asked)."""
    outbox: list[tuple[Any, ...]] = field(default_factory=list)
    """Answers to send to the worker (`supervise` sends them)."""
    refill_budget: int | None = None
    """With held references: the most refilled-call outputs a variant may send (each one is
    answered with a key, so a forged one must not go unnoticed)."""
    refill_sent: dict[str, int] = field(default_factory=dict)
    config_budget: int | None = None
    """Configuration outputs the worker announced (`("configs", n)`, once)."""
    config_sent: int = 0
    seal_keys: dict[str, int] = field(default_factory=dict)
    """Per variant, the key its sealed call's real values are masked under now (`guards.Seal`):
    the worker sent the first one before candidate code loaded and forgot it; each launch
    window of the sealed call asks for it and a fresh one (`("unseal", variant)`)."""
    unseals: dict[str, int] = field(default_factory=dict)
    """Per variant, the seal's keys handed out (one per launch, and one for the outputs)."""

    def use_gpu_lock(self, path: str | None) -> None:
        if path:
            try:
                self.gpu_lock = gpulock.GpuLock(path)
            except OSError as exc:  # the comparisons then run unlocked; the verdict is the same
                _LOG.warning("gpu lock %s unavailable to the parent: %s", path, exc)

    def _shape(self, variant: str) -> Mapping[str, Any]:
        table = self.case.device_shapes if self.tier is Tier.DEVICE else self.case.small_shapes
        return table[variant]

    def _fail(self, kind: FailureKind, stage: str, reason: str) -> None:
        if self.verdict is not None:  # the first rejection stands
            return
        self.verdict = reject(self.tier, stage, kind, reason, facts=self.facts,
                              correctness=self._correctness() if self.results else None)

    def _correctness(self) -> Correctness:
        # Seeds of make_inputs draws; the refill pools' crossovers have numbers of their own.
        seeds = tuple(sorted({r.seed for r in self.results
                              if (r.variant, PHASE_REFILL, r.seed) not in self.refs}))
        errs = [r.rel_err for r in self.results]
        return Correctness(seeds, max(errs) if errs else 0.0, tuple(self.results),
                           check=self.case.check_text(), lower_precision=tuple(self.lower),
                           probe_err=tuple((v, e) for (v, _), e in self.probe_err.items()))

    def handle(self, msg: tuple[Any, ...]) -> bool:
        """Digest one message; True when the run is decided (see `verdict`) or finished."""
        if self.verdict is not None:
            return True
        kind = msg[0]
        if kind in ("ref", "refs_done", "precision", "seeds", "seal_key") and self.refs_closed:
            self._forged(f"a '{kind}' message after the references were closed")
        elif kind == "seal_key":
            if msg[1] in self.seal_keys:
                self._forged(f"a second key for the sealed inputs of {msg[1]}")
            else:
                self.seal_keys[str(msg[1])] = int(msg[2])
        elif kind == "unseal":
            self._unseal(str(msg[1]))
        elif kind == "ref":
            _, variant, phase, seed, outputs, inputs = msg
            if isinstance(outputs, dict) and outputs.get("held"):
                self.held[(variant, phase, seed)] = dict(outputs)
                outputs = list(outputs["headers"])
            self.refs[(variant, phase, seed)] = (outputs, inputs)
        elif kind == "seeds":
            self._kept_seeds(msg[1], msg[2])
        elif kind == "precision":
            self.probe_err[(str(msg[1]), int(msg[2]))] = float(msg[3])
        elif kind == "stage":
            self.stage = msg[1]
        elif kind == "mark":
            self.phases.append((str(msg[1]), float(msg[2])))
            _LOG.debug("worker phase %s: %.3f s", msg[1], msg[2])
        elif kind == "refs_done":
            self.refs_closed = True
            self._check_case()
        elif kind == "ref_ms":
            self.ref_ms[msg[1]] = (msg[2], msg[3])
            self.timed_s = max(self.timed_s, msg[4])
        elif kind in ("ref_tf32_ms", "ref_compile_ms"):
            table = self.ref_tf32_ms if kind == "ref_tf32_ms" else self.ref_compile_ms
            table[str(msg[1])] = float(msg[2])
            self.timed_s = max(self.timed_s, msg[3])
        elif kind == "cand_ms":
            self.cand_ms[msg[1]] = (msg[2], msg[3])
            self.timed_s = max(self.timed_s, msg[4])
        elif kind == "kernel_ms":
            self.kernel_ms[str(msg[1])] = _kernel_ms(msg[2])
        elif kind == "picks":
            self.picks[str(msg[1])] = picks_of(msg[2])
        elif kind == "flag":
            self.flags.append(str(msg[1]))
        elif kind == "facts":
            self.facts = Facts(tuple(CompileFacts.from_json(c) for c in msg[1]))
            self.stage = "compile"
        elif kind == "out":
            self._judge_out(*msg[1:])
        elif kind == "configs":
            if self.config_budget is not None or not isinstance(msg[1], int):
                self._forged("a second announcement of the configuration calls")
            else:
                self.config_budget = msg[1]
        elif kind == "judged":
            self._judged(*msg[1:])
        elif kind == "others":
            self._others(*msg[1:])
        elif kind == "reject":
            self._fail(FailureKind(msg[1]), msg[2], msg[3])
        elif kind == "done":
            self._finish()
        return self.verdict is not None

    def _unseal(self, variant: str) -> None:
        """A launch window of `variant`'s sealed call (or its outputs) asks for the key its
        real values are masked under and a fresh one to mask them under after it."""
        if not self.refs_closed or variant not in self.seal_keys:
            self._forged(f"a request for the sealed inputs' key of {variant} outside the sealed call")
            return
        key, fresh = self.seal_keys[variant], cmp.new_key()
        self.seal_keys[variant] = fresh
        self.unseals[variant] = self.unseals.get(variant, 0) + 1
        self.outbox.append(("unsealed", key, fresh))

    def _kept_seeds(self, variant: Any, seeds: Any) -> None:
        """The worker kept `seeds` of the job's for `variant` (its input sets sized to the
        device's memory, `gate.memplan`): the first ones, at least `memplan.MIN_SEEDS` of
        them (or all, when the job has fewer), said once per variant."""
        from gate.memplan import MIN_SEEDS  # noqa: PLC0415

        kept = tuple(seeds) if isinstance(seeds, (list, tuple)) else ()
        if variant in self.variant_seeds or not kept or kept != self.seeds[:len(kept)] \
                or len(kept) < min(MIN_SEEDS, len(self.seeds)):
            self._forged(f"a set of seeds {seeds!r} for {variant} the job never asked for")
            return
        self.variant_seeds[variant] = kept

    def _check_case(self) -> None:
        # per seed of a variant: (all zeros, what equal results share: the encoded items, or a
        # held reference's digest of its bytes)
        by_variant: dict[str, list[tuple[bool, Any]]] = {}
        for key, (outputs, _) in self.refs.items():
            if key[1] == PHASE_SEED:
                held = self.held.get(key)
                seen = (cmp.all_zero(outputs), outputs) if held is None else \
                    (bool(held["zero"]), held["digest"])
                by_variant.setdefault(key[0], []).append(seen)
        for variant, outs in by_variant.items():
            if all(zero for zero, _ in outs):
                self._fail(FailureKind.BAD_CASE, "correctness",
                           f"the reference output of {variant} is all zeros for every seed: "
                           f"the case cannot tell a kernel from one that writes zeros")
            elif len(outs) > 1 and all(_same(outs[0][1], o) for _, o in outs[1:]):
                self._fail(FailureKind.BAD_CASE, "correctness",
                           f"the reference output of {variant} does not depend on the inputs")

    def _forged(self, what: str) -> None:
        """The worker's messages break its own protocol: candidate code, which runs in the
        worker, wrote to the pipe to the parent (or ended the run early)."""
        self._fail(FailureKind.TAMPERING, "anti_cheat",
                   f"{what}: the worker never sends that, so candidate code wrote to the gate's "
                   f"pipe; the gate does not trust such a run")

    def _judge_out(self, variant: str, phase: str, seed: int, outputs: Any, launches: int) -> None:
        if not self.refs_closed:
            self._forged("an output before the references were closed")
            return
        if phase == PHASE_SEALED and variant in self.seal_keys \
                and self.unseals.get(variant, 0) != int(launches) + 1:
            self._forged(f"{self.unseals[variant]} requests for the sealed inputs' keys of "
                         f"{variant} in a call of {launches} launches")
            return
        if phase != PHASE_REFILL:  # each check's output is sent once; refilled calls may repeat
            if (variant, phase, seed) in self.sent:
                self._forged(f"a second output for {variant}/{phase} seed {seed}")
                return
            self.sent.add((variant, phase, seed))
        key = self._ref_key(variant, phase, seed)
        if key not in self.refs:
            self._forged(f"an output for {variant}/{phase} seed {seed}, which has no reference")
            return
        if key in self.held:
            self._ask_held(variant, phase, seed, outputs, key)
            return
        if not isinstance(outputs, (list, tuple)):  # headers alone where nothing is held
            self._forged(f"an output for {variant}/{phase} seed {seed} without its values")
            return
        self._decided(variant, phase, seed, self._compare(variant, outputs, key), outputs, key)

    def _ask_held(self, variant: str, phase: str, seed: int, outputs: Any,
                  key: tuple[str, str, int]) -> None:
        """An output to be compared in the worker against a held reference: check its
        structure here, then answer with the reference's key, a fresh one and the sampled
        places the worker returns the output's values at (`gate.heldcompare`)."""
        import random  # noqa: PLC0415

        if self.pending is not None or not (isinstance(outputs, dict) and outputs.get("held")):
            self._forged(f"an output for {variant}/{phase} seed {seed} out of turn")
            return
        if phase.startswith(PHASE_CONFIG + " "):
            self.config_sent += 1
            if self.config_budget is None or self.config_sent > self.config_budget:
                self._forged("more configuration outputs than the worker announced")
                return
        if phase == PHASE_REFILL and self.refill_budget is not None:
            self.refill_sent[variant] = self.refill_sent.get(variant, 0) + 1
            if self.refill_sent[variant] > self.refill_budget:
                self._forged(f"more refilled-call outputs of {variant} than the worker sends")
                return
        headers = [tuple(h) for h in outputs["headers"]]
        held = self.held[key]
        bad = cmp.held_outcome(headers, [tuple(h) for h in held["headers"]], {"err": 0.0},
                               tolerance=0.0)
        if not bad.ok:
            self._decided(variant, phase, seed, bad, None, key)
            return
        rng = random.SystemRandom()
        picks = [rng.sample(range(len(s[0])), min(cmp.SAMPLE_ASKED, len(s[0]))) if s else None
                 for s in held["samples"]]
        places = [[s[0][k] for k in p] if s and p else None for s, p in zip(held["samples"], picks)]
        fresh = cmp.new_key()
        self.outbox.append(("judge", key, held["key"], fresh, places, self.case.allclose))
        held["key"] = fresh
        self.pending = (variant, phase, seed, key, headers, picks)

    def _judged(self, variant: str, phase: str, seed: int, figures: Any) -> None:
        """The worker's figures for the held comparison asked for last."""
        pending = self.pending
        if pending is None or pending[:3] != (variant, phase, seed) or not isinstance(figures, dict):
            self._forged(f"figures for {variant}/{phase} seed {seed} that were not asked for")
            return
        self.pending = None
        key, headers, picks = pending[3:]
        dtype = str(self._shape(variant).get("dtype", ""))
        tolerance = self.case.tolerance_for(dtype)
        t0 = time.perf_counter()
        try:
            outcome = cmp.held_outcome(
                headers, [tuple(h) for h in self.held[key]["headers"]], figures,
                tolerance=tolerance,
                low_tolerance=cmp.lower_precision_tolerance(dtype, dict(self.case.tolerance)),
                allclose=self.case.allclose)
            wrong = cmp.sample_contradicts(outcome, self.held[key]["samples"], picks,
                                           list(figures.get("values") or ()), tolerance=tolerance,
                                           allclose=self.case.allclose)
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            wrong = f"the figures do not read ({exc})"
        self.compare_s += time.perf_counter() - t0
        if wrong is not None:
            self._fail(FailureKind.TAMPERING, "anti_cheat",
                       f"{variant}/{phase} seed {seed}: the worker's comparison says the output "
                       f"matches, the parent's sample of the reference says otherwise: {wrong}; "
                       f"the gate does not trust a run whose comparison was subverted")
            return
        # only where the failure rejects the run: the other sets' keys then open nothing that
        # matters (a knockout call is meant to fail, and the run goes on)
        if not outcome.ok and outcome.kind is FailureKind.WRONG_OUTPUT \
                and phase not in (PHASE_KNOCKOUT, PHASE_FAULT):
            others = [k for k in self.held if k[0] == variant and k != key and k[1] != PHASE_REVERIFY]
            asked = []
            for other in others:
                fresh = cmp.new_key()
                asked.append((other, self.held[other]["key"], fresh))
                self.held[other]["key"] = fresh
            self.outbox.append(("more", asked))
            self.failing = (variant, phase, seed, outcome, key, others)
            return
        self.outbox.append(("more", []))
        self._decided(variant, phase, seed, outcome, None, key)

    def _others(self, variant: str, phase: str, seed: int, found: Any) -> None:
        """The figures of a failing held output against the variant's other sets: the first
        it matches names whose answer it is (a result reused across calls)."""
        failing = self.failing
        if failing is None or failing[:3] != (variant, phase, seed) or not isinstance(found, list):
            self._forged(f"figures against other sets for {variant}/{phase} seed {seed} that "
                         f"were not asked for")
            return
        self.failing = None
        outcome, key, others = failing[3:]
        dtype = str(self._shape(variant).get("dtype", ""))
        other = None
        for ref, figures in zip(others, found):
            try:
                ok = cmp.held_outcome(
                    [tuple(h) for h in self.held[ref]["headers"]],
                    [tuple(h) for h in self.held[ref]["headers"]], figures,
                    tolerance=self.case.tolerance_for(dtype), allclose=self.case.allclose).ok
            except (TypeError, ValueError, KeyError, IndexError):
                ok = False
            if ok:
                other = _set_name(ref)
                break
        self._decided(variant, phase, seed, outcome, None, key, other)

    def _decided(self, variant: str, phase: str, seed: int, outcome: cmp.Outcome, outputs: Any,
                 key: tuple[str, str, int], other: str | None = None) -> None:
        """Record the outcome of one output (`outputs`: its encoded items, None when compared
        in the worker; `other`: the input set whose answer it is, where the worker found one)
        and reject where it fails."""
        if phase in (PHASE_KNOCKOUT, PHASE_FAULT):
            self.stage = "anti_cheat"
            if outcome.ok:
                how = "with its kernel launches skipped" if phase == PHASE_KNOCKOUT else \
                    "when its kernel launches fail"
                self._fail(FailureKind.FALLBACK, "anti_cheat",
                           f"the output still matches the reference {how} (error "
                           f"{outcome.rel_err:.3g}): the answer comes from somewhere other than "
                           f"the candidate's kernel")
            return
        self.stage = "timing" if phase in (PHASE_TIMED, PHASE_REVERIFY, PHASE_REFILL) \
            and self.tier is Tier.DEVICE \
            else "anti_cheat" if phase == PHASE_SEALED else "correctness"
        self.results.append(SeedResult(variant, seed, outcome.rel_err, phase))
        probe = self.probe_err.get((variant, seed)) if phase == PHASE_SEED else None
        if outcome.ok and probe is not None and variant not in self.lower \
                and precision.lower_precision(outcome.rel_err, probe):
            self.lower.append(variant)
            self.flags.append(
                f"lower precision ({variant}): error {outcome.rel_err:.3g} is "
                f"{outcome.rel_err / probe:.2g}x that of the reference on TF32-rounded inputs "
                f"({probe:.3g}): computed in lower precision than the fp32 reference "
                f"(TF32 / bf16 / fp16 operands); passes {self.case.check_text()}")
        if not outcome.ok:
            assert outcome.kind is not None and outcome.reason is not None
            kind, reason = outcome.kind, outcome.reason
            # whose answer it is can be told only where the parent holds the references
            if other is None and kind is FailureKind.WRONG_OUTPUT and outputs is not None:
                other = self._answers_other_inputs(variant, outputs, key)
            if other is not None:
                # The answer to other inputs: a result kept from an earlier call and returned again.
                kind = FailureKind.REUSED_OUTPUT
                reason = (f"the output is the answer to other inputs ({other}), not to the values in "
                          f"its input buffers: a result reused across calls ({reason})")
            elif phase == PHASE_SEALED and kind in (
                    FailureKind.WRONG_OUTPUT, FailureKind.NAN_OUTPUT,
                    FailureKind.PRECISION_DOWNGRADE):
                # Right when host code sees the inputs, wrong when only the kernels do.
                kind = FailureKind.HOST_COMPUTE
                reason = (f"the output differs when the inputs are visible only to the "
                          f"candidate's kernels: computed outside its kernels ({reason})")
            elif phase in (PHASE_TIMED, PHASE_REVERIFY, PHASE_REFILL) and kind in (
                    FailureKind.WRONG_OUTPUT, FailureKind.NAN_OUTPUT):
                # Right during the checks, wrong once timed: the kind that matters is "stale".
                kind = FailureKind.STALE_OUTPUT
                reason = f"after the timed/repeated runs, on fresh inputs: {reason}"
            self._fail(kind, self.stage, f"{variant}/{phase} seed {seed}: {reason}")

    def _ref_key(self, variant: str, phase: str, seed: int) -> tuple[str, str, int]:
        if phase in (PHASE_KNOCKOUT, PHASE_FAULT):
            return (variant, PHASE_SEED, seed)
        if phase.startswith(PHASE_CONFIG + " "):  # every configuration runs on the set of its own
            return (variant, PHASE_CONFIG, seed)
        if phase == PHASE_REFILL and (variant, PHASE_REFILL, seed) not in self.refs:
            return (variant, PHASE_TIMED, seed)  # the pool's first set is the timed set
        return (variant, phase, seed)

    def _compare(self, variant: str, outputs: Any, key: tuple[str, str, int]) -> cmp.Outcome:
        ref_outputs, inputs = self.refs[key]
        dtype = str(self._shape(variant).get("dtype", ""))
        t0, waited = time.perf_counter(), self.gpu_lock.waited_s
        with self.gpu_lock.shared():
            outcome = cmp.compare(outputs, ref_outputs, tolerance=self.case.tolerance_for(dtype),
                                  low_tolerance=cmp.lower_precision_tolerance(
                                      dtype, dict(self.case.tolerance)),
                                  case_compare=self.case_compare, inputs=inputs,
                                  allclose=self.case.allclose)
        lock_s = self.gpu_lock.waited_s - waited
        self.compare_s += time.perf_counter() - t0 - lock_s
        self.compare_lock_s += lock_s
        return outcome

    def _answers_other_inputs(self, variant: str, outputs: Any,
                              key: tuple[str, str, int]) -> str | None:
        """The input set of `variant` (other than `key`'s) whose reference `outputs` match,
        described; None when they match none."""
        for other in self.refs:
            if other[0] == variant and other != key and other[1] != PHASE_REVERIFY:
                if self._compare(variant, outputs, other).ok:
                    return _set_name(other)
        return None

    def _missing(self) -> str | None:
        """What a finished interpret / device run has not sent (None when complete): every
        variant's output of each seed and of its refilled (repeated / timed) calls, and on the
        device its re-verification and timing."""
        table = self.case.device_shapes if self.tier is Tier.DEVICE else self.case.small_shapes
        phases = {(r.variant, r.phase, r.seed) for r in self.results}
        for variant in table:
            for seed in self.variant_seeds.get(variant, self.seeds):
                if (variant, PHASE_SEED, seed) not in phases:
                    return f"the output of {variant}/seed {seed}"
            if not any(v == variant and p == PHASE_REFILL for v, p, _ in phases):
                return f"the outputs of {variant}'s repeated calls"
            if not any(v == variant and p == PHASE_SEALED for v, p, _ in phases):
                return f"the sealed call of {variant}"
            if self.tier is Tier.DEVICE:
                if not any(v == variant and p == PHASE_REVERIFY for v, p, _ in phases):
                    return f"the re-verification of {variant}"
                if variant not in self.cand_ms or variant not in self.ref_ms:
                    return f"the timing of {variant}"
        return None

    def _finish(self) -> None:
        if self.tier is Tier.STATIC:
            self.verdict = Verdict(True, self.tier, "compile", facts=self.facts,
                                   flags=tuple(self.flags))
            return
        missing = self._missing()
        if missing:
            self._forged(f"'done' before the run sent {missing}")
            return
        flags: list[str] = list(self.flags)
        timing = None
        if self.tier is Tier.DEVICE and self.cand_ms:
            variants = tuple(VariantTiming(v, self.cand_ms[v][0], self.ref_ms[v][0],
                                           self.kernel_ms.get(v, ()), self.picks.get(v, ()),
                                           self.ref_tf32_ms.get(v), self.ref_compile_ms.get(v))
                             for v in self.cand_ms)
            timing = Timing(sum(v.candidate_ms for v in variants), sum(v.reference_ms for v in variants),
                            variants, timed_s=self.timed_s)
            if timing.speedup > SPEEDUP_FLAG:
                walls = [self.ref_ms[v][1] / self.cand_ms[v][1] for v in self.cand_ms if self.cand_ms[v][1] > 0]
                wall = math.prod(walls) ** (1 / len(walls)) if walls else float("nan")
                flags.append(f"speedup {timing.speedup:.1f}x > {SPEEDUP_FLAG:g}x: re-verified on fresh "
                             f"inputs; wall-clock speedup {wall:.1f}x")
        stage = "timing" if self.tier is Tier.DEVICE else "correctness"
        self.verdict = Verdict(True, self.tier, stage, facts=self.facts, correctness=self._correctness(),
                               timing=timing, flags=tuple(flags))


def _set_name(key: tuple[str, str, int]) -> str:
    """An input set described: "refill set 7", "the timed inputs of seed 3"."""
    return f"{key[1]} set {key[2]}" if key[1] == PHASE_REFILL else f"the {key[1]} inputs of seed {key[2]}"


def _same(a: Any, b: Any) -> bool:
    """Two references' results are the same: equal digests, or bit-identical encoded items."""
    return a == b if isinstance(a, str) else cmp.same_payload(a, b)


def supervise(job: Job, case: Case, tier: Tier, timeout: float) -> Verdict:
    """Run `job` in a fresh worker under `timeout` seconds (after start-up) and judge it."""
    judge = _Judge(case, tier, case_compare=case.module().compare if case.has_compare else None,
                   seeds=tuple(job.seeds))
    # timed runs (two per variant) send their sample and last call, and each call on a pool
    # set met for the first time (`gate.visits`); repeated calls one each (a lean plan's go
    # through each crossover of the pool beside the timed set)
    judge.refill_budget = 2 * (REFILL_SAMPLE + 1) + max(1, job.refill_sets) if tier is Tier.DEVICE else \
        max(job.repeat_calls, job.refill_sets, max(job.repeat_calls, 2) * (job.refill_sets - 1))
    spawn_t0 = time.perf_counter()
    proc, parent = STANDBY.take(job)
    if proc is None:
        ctx = _context()
        parent, child = ctx.Pipe(duplex=True)  # the worker asks before timing (`wait_quiet`)
        proc = ctx.Process(target=worker_main, args=(child, job), daemon=True)
        _start(proc)
        child.close()
    # the next gate's worker starts up while this one runs (from the second gate of a run on)
    STANDBY.prepare(job.tier, job.env, repeat=True, case_path=job.case_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    started = False
    try:
        while judge.verdict is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = "candidate" if started else "worker start-up"
                judge._fail(FailureKind.TIMEOUT, judge.stage,
                            f"{what} exceeded its time limit ({timeout if started else STARTUP_TIMEOUT_S:g} s)")
                break
            try:
                ready = parent.poll(min(remaining, 0.25))
                msg = transport.receive(parent, transport.recv(parent)) if ready else None
            except (EOFError, OSError):
                msg = None
                ready = True
            except transport.UnsafeMessage as exc:
                judge._forged(str(exc))
                break
            except transport.BadSealed as exc:
                proc.join(0.5)
                if proc.is_alive():
                    judge._forged(str(exc))
                else:  # the worker died between a message and its descriptors: a crash
                    _died(judge, proc.exitcode)
                break
            if msg is not None:
                if msg[0] == "ready" and not started:
                    started = True
                    judge.phases.append(("spawn", time.perf_counter() - spawn_t0))
                    deadline = time.monotonic() + timeout
                    judge.use_gpu_lock((msg[1] or {}).get("gpu_lock"))
                if msg[0] == "quiet":  # every output sent before it has been judged
                    parent.send(("go",))
                    continue
                if msg[0] == "warm":  # a standby worker's start-up ended (`Standby`)
                    continue
                decided = judge.handle(msg)
                while judge.outbox and not decided:
                    parent.send(judge.outbox.pop(0))
                if decided or msg[0] == "done":
                    break
            elif ready or not proc.is_alive():
                proc.join(5)
                _died(judge, proc.exitcode)
                break
    finally:
        end_t0 = time.perf_counter()
        _end(proc)
        parent.close()
        judge.gpu_lock.close()
        judge.phases.append(("end (parent)", time.perf_counter() - end_t0))
    if judge.verdict is None:  # "done" arrived without a decision: cannot happen, but never lie
        return reject(tier, judge.stage, FailureKind.INTERNAL, "the worker finished without a verdict")
    phases = judge.phases + ([("compare (parent)", judge.compare_s)] if judge.compare_s else [])
    if judge.compare_lock_s:  # another gate was timing: waiting, not comparing
        phases.append(("compare lock wait (parent)", judge.compare_lock_s))
    return replace(judge.verdict, phases=tuple(phases))


_START_LOCK = threading.Lock()
# Variables of a job's environment that only its candidate reads (after the job has set its
# whole environment, `gate.worker.main`): a standby worker's start-up does not depend on them,
# so a job whose environment differs only there takes it. A load_inline host's build folder
# is one per candidate text (`gate.extbuild.extension_dir`).
JOB_ONLY_ENV = frozenset({"TORCH_EXTENSIONS_DIR"})


def _standby_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`env` as a standby worker starts under it: without `JOB_ONLY_ENV`."""
    return tuple((k, v) for k, v in env if k not in JOB_ONLY_ENV)


class Standby:
    """Workers started before their jobs (`gate.worker.standby`), one per (tier, environment):
    a worker's start-up (imports, the CUDA context, the profiler's first session: seconds) then
    runs while the previous gate of a run does, instead of in front of the next one.

    Each standby worker takes exactly one job and ends with it, as a worker started for the job
    would: no candidate code runs in a process before its own job. A job whose environment
    differs from the one a standby started under (`JOB_ONLY_ENV` aside: the job's own
    environment is set when it arrives) gets a fresh worker (and the standby is ended).
    `KLINEAGE_GATE_STANDBY=0` turns it off (every job starts its worker from scratch, the way
    before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, Any]] = {}
        self._warm: set[int] = set()  # pids of standby workers whose start-up has ended
        self._last: tuple[str, tuple[tuple[str, str], ...]] | None = None

    @staticmethod
    def enabled() -> bool:
        return os.environ.get("KLINEAGE_GATE_STANDBY", "1") != "0"

    def prepare(self, tier: str, env: tuple[tuple[str, str], ...], wait: float = 0.0, *,
                repeat: bool = False, case_path: str | None = None) -> float:
        """Start a standby worker for jobs of `tier` in `env` unless one is waiting; end the
        standby workers of other environments (a run's environment changed). With `repeat`,
        only when the previous call was for the same tier and environment (a run of gates:
        a lone gate leaves no worker behind). With `case_path`, the worker also imports that
        case (a run's next gate is most likely of the same case). With `wait`, wait at most
        that many seconds for its start-up to end; the seconds taken."""
        t0 = time.perf_counter()
        if not self.enabled():
            if not repeat:  # a run's start: its workers' fork server at least
                _ensure_server()
            return time.perf_counter() - t0
        env = _standby_env(tuple(env))
        key = (tier, env)
        with self._lock:
            again, self._last = self._last == key, key
            for k in [k for k in self._ready if k[1] != key[1]]:  # the environment moved on
                _end_standby(*self._ready.pop(k))
        if repeat and not again:
            return 0.0
        self._start(tier, env, case_path)
        if wait > 0:
            with self._lock:
                found = self._ready.get(key)
            if found is not None and found[0].pid not in self._warm:
                proc, parent = found
                try:
                    if parent.poll(wait) and transport.recv(parent) == ("warm",):
                        self._warm.add(proc.pid)
                except (EOFError, OSError, transport.UnsafeMessage):
                    pass
        return time.perf_counter() - t0

    def _start(self, tier: str, env: tuple[tuple[str, str], ...], case_path: str | None) -> None:
        key = (tier, env)
        with self._lock:
            found = self._ready.get(key)
            if found is not None and found[0].is_alive():
                return
            ctx = _context()
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=worker_standby, args=(child, tier, key[1], case_path),
                               daemon=True)
            try:
                _start(proc)
            except OSError as exc:  # the next job starts its own worker
                _LOG.warning("no standby gate worker: %s", exc)
                parent.close()
                return
            finally:
                child.close()
            self._ready[key] = (proc, parent)

    def take(self, job: Job) -> tuple[Any, Any]:
        """(process, pipe) of a standby worker now running `job`, or (None, None) when none
        for its tier and environment is alive."""
        if not self.enabled():
            return None, None
        with self._lock:
            found = self._ready.pop((job.tier, _standby_env(tuple(job.env))), None)
        if found is None:
            return None, None
        proc, parent = found
        try:
            if not proc.is_alive():
                raise OSError("the standby worker has ended")
            parent.send(("job", job))
        except (OSError, ValueError):
            _end_standby(proc, parent)
            return None, None
        return proc, parent

    def close(self) -> None:
        """End every standby worker (they are daemons: they also end with this process)."""
        with self._lock:
            for proc, parent in self._ready.values():
                _end_standby(proc, parent)
            self._ready.clear()


def _ensure_server() -> None:
    """Start the fork server workers come from, if that is how they start (its imports are
    paid once per process)."""
    ctx = _context()
    if ctx.get_start_method() == "forkserver":
        # the server imports its preloads before its first fork: one empty child waits for them
        proc = ctx.Process(target=_nothing, daemon=True)
        _start(proc)
        proc.join(STARTUP_TIMEOUT_S)


def _nothing() -> None:
    """An empty worker (`_ensure_server`)."""


def _end_standby(proc: Any, parent: Any) -> None:
    try:
        parent.close()
    except OSError:
        pass
    _end(proc)


STANDBY = Standby()


def prestart(tier: Tier | str, wait: float = 0.0, case: Any = None) -> float:
    """Start a worker for `tier` in this process's environment ahead of the run's first gate
    (`Standby`); with `wait`, wait at most that many seconds for its start-up (imports, CUDA
    context, libraries) to end; with `case` (a `Case` or its path), the worker imports that
    case too. Where standby workers are off, only the fork server they come from is started.
    The seconds taken."""
    path = getattr(case, "path", case)
    return STANDBY.prepare(getattr(tier, "value", str(tier)), tuple(os.environ.items()), wait,
                           case_path=str(path) if path is not None else None)


def _start(proc: Any) -> None:
    """Start a worker without re-running the caller's __main__ script in it.

    spawn/forkserver children normally re-import the parent's main module, which re-runs a
    plain script that calls `gate.check` at top level (and so recurses). The worker's target
    lives in `gate.worker`, so the main module is hidden while the child is prepared.
    """
    main = sys.modules.get("__main__")
    with _START_LOCK:
        saved_file = main.__dict__.pop("__file__", None) if main is not None else None
        saved_spec = getattr(main, "__spec__", None)
        try:
            if main is not None:
                main.__spec__ = None
            proc.start()
        finally:
            if main is not None:
                main.__spec__ = saved_spec
                if saved_file is not None:
                    main.__file__ = saved_file


def _died(judge: _Judge, code: int | None) -> None:
    if code is not None and code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        if sig == signal.SIGKILL:
            judge._fail(FailureKind.OUT_OF_MEMORY, judge.stage,
                        "the worker was killed by SIGKILL, most likely by the out-of-memory killer")
        else:
            judge._fail(FailureKind.CRASH, judge.stage, f"the worker died of {name}")
    else:
        judge._fail(FailureKind.CRASH, judge.stage,
                    f"the worker exited with code {code} before finishing (os._exit or sys.exit "
                    f"in candidate code?)")


def _end(proc: Any) -> None:
    """Stop the worker and anything it started (its own process group)."""
    if proc.pid is None:
        return
    try:
        # The worker leads its own group (os.setpgrp at start); a group with its pid exists
        # only while the worker or a child it left behind is alive.
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.is_alive():
            proc.kill()
    proc.join(10)
