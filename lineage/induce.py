"""Guided de-optimization (paper §3.2): walk an expert kernel backward under the gate.

Starting at the expert K*, each step lists the optimizations present in the current state
(`Pass.sites`), orders them by the pass-dependency graph (what depends on others is removed
first; the order is a soft prior), and tries de-optimizations in that order. A de-optimized
candidate that passes the gate becomes the predecessor state; the forward edit is then
*re-derived* on the predecessor with the pass's `optimize` (given the options the
de-optimization recorded) and the transition is kept only if the re-derived kernel reaches the
successor's verdict. Rejections are kept as risk evidence. The lineage is written atomically
after every accepted step, and `resume=True` replays recorded outcomes instead of re-running
them, so an interrupted induction loses at most the step in flight.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anchors
import kir
from kir.errors import BadInputError
from lineage.graph import KernelState, Lineage, Transition, jsonable, state_id

# A forward transition that makes the kernel slower than this factor (device tier) is rejected.
SLOWER_MARGIN = 0.97
# Passes whose removal cheapens every later device-tier gate; tried first there (see
# Inducer._cheap_gates_first).
DEVICE_FIRST = ("autotune",)
# A re-derived forward kernel must reach the successor's time within this factor.
REDERIVE_MARGIN = 0.90

ProgressFn = Callable[[str, Mapping[str, Any]], None]


@dataclass(frozen=True, slots=True)
class InductionResult:
    out: Path
    lineage: Lineage
    states: int
    transitions: int
    rejected: int
    terminations: tuple[str, ...]
    root: str
    expert: str
    steps: int

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "states": self.states,
            "transitions": self.transitions,
            "rejected": self.rejected,
            "termination": self.terminations[0] if len(self.terminations) == 1 else list(self.terminations),
            "root": self.root,
            "expert": self.expert,
            "steps": self.steps,
        }


@dataclass
class _Branch:
    index: int
    current: str
    steps: int = 0
    rejections: int = 0
    termination: str | None = None
    path: list[str] = field(default_factory=list)


class Inducer:
    """Runs guided de-optimization for one expert kernel into one lineage directory."""

    def __init__(self, expert: str | Path, case: str, *, tier: str = "interpret",
                 out: str | Path = "out/lineage", width: int = 1, max_steps: int = 32,
                 max_rejections: int = 40, resume: bool = False,
                 progress: ProgressFn | None = None, rewriter: Any = None,
                 gate_timeout: float | None = None, first_branch: int = 0,
                 pass_specs: tuple[str, ...] = (), compile_check: bool = False,
                 executor: Any = None) -> None:
        self.expert_path = Path(expert)
        if not self.expert_path.is_file():
            raise BadInputError(f"{expert}: no such kernel file")
        if width < 1 or max_steps < 1 or max_rejections < 0 or first_branch < 0:
            raise BadInputError("--width and --max-steps must be >= 1, rejection limit and "
                                "--first-branch >= 0")
        import gate  # lazy: torch

        self._gate = gate
        # Where the gates run (`gate.executor.Executor`; None: `gate.check` on this machine).
        self._executor = executor
        self.case = gate.load_case(case)
        self.case_name = self.case.ref  # resolves again from any working directory
        self.tier = self._resolve_tier(tier)
        self.out = Path(out)
        self.width = width
        # Branch b starts with the b-th present site (see _walk); a lineage induced from
        # branch 1 on shares no first step with the default order, so its states can serve as
        # held-out contexts for cards lifted from the default lineage (lineage.admission).
        self.first_branch = first_branch
        # Interpret tier: compile every state for the GPU first (the static tier, at the
        # case's device shapes). The interpreter runs the small shapes and has no block-size
        # limit, so a de-optimization can pass it and still fail every device compile (fmha's
        # tensor-core removal at 128 x 128 tiles and D = 128: a 2M-element broadcast).
        self.compile_check = compile_check
        self.max_steps = max_steps
        self.max_rejections = max_rejections
        self.resume = resume
        self.progress = progress or (lambda event, data: None)
        self.rewriter = rewriter
        self.gate_timeout = gate_timeout
        self.ir = kir.parse_file(self.expert_path)
        self.language = str(getattr(self.ir.language, "value", self.ir.language))
        self.lineage_path = self.out / "lineage.json"
        if resume and self.lineage_path.exists():
            self.lineage = Lineage.load(self.lineage_path)
        else:
            self.lineage = Lineage()
        from passes import PassContext, PassGraph, get_all_passes

        self._registry = {name: load()() for name, load in get_all_passes().items()}
        # "name{key=value}" specs replace a pass's default options for this induction (e.g.
        # tile-sizes{floor=32}: the interpreter runs tiny tiles slowly).
        from passes.registry import pass_from_spec

        self.pass_specs = tuple(pass_specs)
        for spec in self.pass_specs:
            configured = pass_from_spec(spec)
            self._registry[configured.name] = configured
        self._graph = PassGraph.from_registry()
        self.ctx = PassContext.for_case(self.case_name, tier="interpret" if self.tier in ("interpret", "emulate")
                                        else "device")
        self._irs: dict[str, kir.KernelIR] = {}

    # ---- gate ---------------------------------------------------------------------------
    def _resolve_tier(self, tier: str) -> str:
        tier = str(getattr(tier, "value", tier))
        if tier not in ("static", "interpret", "emulate", "device", "auto"):
            raise BadInputError(f"unknown tier {tier!r} (static|interpret|emulate|device|auto)")
        if tier == "auto":
            gpu = self._executor.gpu_available() if self._executor is not None else self._gate.gpu_available()
            return "device" if gpu else "interpret"
        return tier

    def _gate_source(self, source: str) -> Any:
        kwargs: dict[str, Any] = {"path": self.expert_path}
        if self.gate_timeout is not None:
            kwargs["timeout"] = self.gate_timeout
        check = self._executor.check if self._executor is not None else self._gate.check
        if self.compile_check and self.tier == "interpret":
            compiled = check(source, self.language, self.case, "static", **kwargs)
            if not compiled.ok:
                return compiled
        return check(source, self.language, self.case, self.tier, **kwargs)

    @staticmethod
    def _ms(verdict: Any) -> float | None:
        timing = getattr(verdict, "timing", None)
        if timing is None:
            return None
        value = timing.get("candidate_ms") if isinstance(timing, Mapping) else getattr(timing, "candidate_ms", None)
        return float(value) if value else None

    @staticmethod
    def _timing_json(verdict: Any) -> dict[str, Any] | None:
        timing = getattr(verdict, "timing", None)
        return jsonable(timing) if timing is not None else None

    # ---- pass plumbing --------------------------------------------------------------------
    def _ir_of(self, sid: str) -> kir.KernelIR:
        if sid not in self._irs:
            source = self.lineage.node(sid)["source"]
            self._irs[sid] = kir.parse(source, language=self.language, path=str(self.expert_path))
        return self._irs[sid]

    def present_sites(self, ir: kir.KernelIR) -> list[tuple[Any, Any]]:
        """(pass instance, site) for every deterministic optimization present in `ir`, in
        de-optimization order (reverse dependency order; a soft prior)."""
        index = anchors.build_index(ir)
        found: list[tuple[Any, Any]] = []
        for p in self._registry.values():
            if self.language not in p.languages or not p.deterministic:
                continue
            for site in p.sites(ir, index):
                if site.present:
                    found.append((p, site))
        order = self._graph.deopt_order(sorted({p.name for p, _ in found}))
        if self.tier == "device":
            order = self._cheap_gates_first(order)
        rank = {name: i for i, name in enumerate(order)}
        found.sort(key=lambda ps: (rank.get(ps[0].name, len(rank)), ps[1].span))
        return found

    def _cheap_gates_first(self, order: list[str]) -> list[str]:
        """At the device tier every gated candidate is autotuned over its whole config list
        (each config compiled and timed at the real shapes, per shape variant), so removing
        the autotuner first makes every later gate run one config: fmha's gate drops from
        minutes to seconds. The order is a soft prior; this keeps it valid, because no pass
        requires what the autotuner provides."""
        moved = [name for name in order if name in DEVICE_FIRST
                 and not any(set(self._registry[name].provides) & set(self._registry[other].requires)
                             for other in order if other != name)]
        return moved + [name for name in order if name not in moved]

    def _features(self, ir: kir.KernelIR) -> tuple[dict[str, str], ...]:
        return tuple({"pass": p.name, "anchor": s.anchor} for p, s in self.present_sites(ir))

    def _state(self, source: str, ir: kir.KernelIR, verdict: Any, roles: frozenset[str]) -> KernelState:
        index = anchors.build_index(ir)
        return KernelState(
            source=source, language=self.language, case=self.case_name, tier=self.tier,
            anchors=tuple(str(a.id) for a in index.anchors), features=self._features(ir),
            verdict=jsonable(verdict) if verdict is not None else None,
            timing=self._timing_json(verdict), roles=roles)

    def _forward_site(self, p: Any, pred_ir: kir.KernelIR, backward_site: Any,
                      options: Mapping[str, Any] | None = None) -> Any | None:
        """The optimization site in the predecessor that corresponds to the removed one.

        Several sites of one pass may share an anchor (the tiles of one config) or a span start
        (the loads of one kernel), so candidates are ranked by: no identifying detail that
        contradicts the removed site (e.g. another tile name), the same anchor, identifying
        details in common, names the de-optimization recorded in its options (e.g. the base
        pointer of a removed descriptor), and finally nearness in the source.
        """
        index = anchors.build_index(pred_ir)
        candidates = [s for s in p.sites(pred_ir, index) if not s.present]
        if not candidates:
            return None
        back = {k: v for k, v in backward_site.detail.items() if isinstance(v, str)}
        recorded = repr(jsonable(options)) if options else ""

        def rank(s: Any) -> tuple:
            mine = {k: v for k, v in s.detail.items() if isinstance(v, str)}
            contradicts = sum(1 for k, v in mine.items() if k in back and back[k] != v)
            common = sum(1 for k, v in mine.items() if back.get(k) == v)
            mentioned = sum(1 for v in mine.values() if len(v) > 2 and v in recorded)
            return (-contradicts, s.anchor == backward_site.anchor, common, mentioned,
                    -abs(s.span[0] - backward_site.span[0]))

        return max(candidates, key=rank)

    # ---- recorded outcomes (resume) -----------------------------------------------------
    def _recorded(self, current: str, pass_name: str, anchor: str) -> tuple[str, str] | None:
        """A previously recorded outcome of de-optimizing `pass_name@anchor` at `current`:
        ("accepted", predecessor id) or ("rejected", reason)."""
        for t in self.lineage.graph.predecessors(current) if current in self.lineage.graph else ():
            attrs = self.lineage.node(t)
            back = attrs.get("backward") or {}
            if back.get("pass") == pass_name and back.get("anchor") == anchor:
                return "accepted", next(iter(self.lineage.graph.predecessors(t)))
        for r in self.lineage.graph.graph["rejected"]:
            if r["state"] == current and r["pass"] == pass_name and r["anchor"] == anchor:
                return "rejected", r["reason"]
        return None

    def _rejection_counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for r in self.lineage.graph.graph["rejected"]:
            key = (r["pass"], r["anchor"])
            counts[key] = counts.get(key, 0) + 1
        return counts

    # ---- one step ---------------------------------------------------------------------------
    def _try(self, branch: _Branch, p: Any, site: Any, allow_slower: bool = False) -> str | None:
        """Try one de-optimization at the branch's current state; return the predecessor id
        when accepted, else None (the rejection is recorded)."""
        current = branch.current
        cur_attrs = self.lineage.node(current)
        cur_ir = self._ir_of(current)

        def reject(stage: str, kind: str | None, reason: str) -> None:
            branch.rejections += 1
            self.lineage.record_rejection(current, p.name, site.anchor, stage, kind, reason,
                                          case=self.case_name, tier=self.tier)
            self.progress("rejected", {"pass": p.name, "anchor": site.anchor, "stage": stage,
                                       "reason": reason})

        back = p.deoptimize(cur_ir, site, self.ctx)
        if not back.ok:
            reason = getattr(back, "reason", None) or getattr(back, "error", "refused")
            reject("precondition" if hasattr(back, "facts") else "rewrite",
                   "precondition" if hasattr(back, "facts") else "rewrite-failed", str(reason))
            return None
        pred_src = back.ir.unparse()
        if state_id(pred_src) == current or self.lineage.reaches(current, state_id(pred_src)):
            reject("rewrite", "no-progress", "de-optimization produced an existing successor state")
            return None
        self.progress("gate", {"pass": p.name, "anchor": site.anchor})
        pred_verdict = self._gate_source(pred_src)
        if not pred_verdict.ok:
            kind = getattr(pred_verdict.failure_kind, "value", pred_verdict.failure_kind)
            reject(str(getattr(pred_verdict, "stage", "gate")), kind, str(pred_verdict.reason))
            return None
        pred_ms, cur_ms = self._ms(pred_verdict), (cur_attrs.get("timing") or {}).get("candidate_ms")
        regression = bool(pred_ms and cur_ms and cur_ms > pred_ms / SLOWER_MARGIN)
        if regression and not allow_slower:
            reject("profile", "slower", f"forward step would slow the kernel: {pred_ms:.4f} ms -> {cur_ms:.4f} ms")
            return None

        # Re-derive the forward edit on the predecessor (not a textual reversal).
        forward_pass = p.with_options(back.options) if back.options else p
        fsite = self._forward_site(forward_pass, back.ir, site, back.options)
        if fsite is None:
            reject("rederive", "no-site", "the pass finds no optimization site in the predecessor")
            return None
        fwd = forward_pass.optimize(back.ir, fsite, self.ctx)
        rederived_by = "deterministic"
        if not fwd.ok and self.rewriter is not None:
            fwd = self.rewriter.rewrite(back.ir, fsite, forward_pass, self.ctx)
            rederived_by = "llm"
        if not fwd.ok:
            reject("rederive", "rewrite-failed", str(getattr(fwd, "reason", None) or getattr(fwd, "error", "")))
            return None
        fwd_src = fwd.ir.unparse()
        if state_id(fwd_src) == current:
            fwd_verdict = cur_attrs.get("verdict")
            exact = True
        else:
            verdict = self._gate_source(fwd_src)
            exact = False
            fwd_ms = self._ms(verdict)
            if not verdict.ok:
                reject("rederive", str(getattr(verdict.failure_kind, "value", verdict.failure_kind)),
                       f"re-derived forward kernel fails the gate: {verdict.reason}")
                return None
            if fwd_ms and cur_ms and fwd_ms * REDERIVE_MARGIN > cur_ms:
                reject("rederive", "slower", f"re-derived forward kernel {fwd_ms:.4f} ms does not reach "
                                             f"the successor's {cur_ms:.4f} ms")
                return None
            fwd_verdict = jsonable(verdict)

        pred_id = self.lineage.add_state(self._state(pred_src, back.ir, pred_verdict, frozenset()))
        self._irs[pred_id] = back.ir
        script = anchors.diff(back.ir, fwd.ir)
        actions = jsonable(getattr(script, "actions", script))
        delta = None
        if pred_ms and cur_ms:
            delta = {"src_ms": pred_ms, "dst_ms": cur_ms, "ratio": pred_ms / cur_ms}
        self.lineage.add_transition(Transition(
            src=pred_id, dst=current, pass_name=p.name,
            category=str(getattr(p.category, "value", p.category)), anchor=fsite.anchor,
            options=jsonable(back.options) or {}, diff=tuple(actions) if isinstance(actions, list) else (),
            preconditions=tuple(jsonable(list(fwd.preconditions) + list(back.preconditions))),
            src_verdict={"ok": True, "tier": self.tier, "ms": pred_ms},
            dst_verdict={"ok": True, "tier": self.tier, "ms": cur_ms, "rederived_exact": exact,
                         "verdict": fwd_verdict if not exact else None,
                         "profile_regression": regression},
            profile_delta=delta,
            backward={"pass": p.name, "anchor": site.anchor, "options": jsonable(back.options)},
            rederived_by=rederived_by,
            case=self.case_name, language=self.language, platform="cuda",
            expert=str(self.expert_path), step=branch.steps + 1))
        self.progress("accepted", {"pass": p.name, "anchor": site.anchor, "state": pred_id,
                                   "exact": exact})
        return pred_id

    # ---- the walk ---------------------------------------------------------------------------
    def run(self) -> InductionResult:
        expert_src = self.ir.unparse()
        expert_id = state_id(expert_src)
        if expert_id not in self.lineage.graph or not self.lineage.node(expert_id).get("verdict"):
            self.progress("gate", {"pass": "(expert)", "anchor": ""})
            verdict = self._gate_source(expert_src)
            if not verdict.ok:
                raise BadInputError(f"the expert kernel fails the gate at the {self.tier} tier: "
                                    f"{getattr(verdict.failure_kind, 'value', verdict.failure_kind)}: {verdict.reason}")
            self.lineage.add_state(self._state(expert_src, self.ir, verdict, frozenset({"expert"})))
        else:
            self.lineage.node(expert_id)["roles"] = sorted(set(self.lineage.node(expert_id)["roles"]) | {"expert"})
        if str(self.expert_path) not in self.lineage.graph.graph["experts"]:
            self.lineage.graph.graph["experts"].append(str(self.expert_path))
        self._irs[expert_id] = self.ir
        self.lineage.save(self.lineage_path)

        # Branch b starts with the b-th of the expert's present sites; past the last one the
        # orders would repeat, so the branches stop there.
        starts = max(1, len(self.present_sites(self.ir)))
        if self.first_branch >= starts:
            raise BadInputError(f"--first-branch {self.first_branch}: the expert offers {starts} "
                                f"optimization(s) to start from (branches 0-{starts - 1})")
        branches: list[_Branch] = []
        for b in range(self.first_branch, min(self.first_branch + self.width, starts)):
            branch = _Branch(index=b, current=expert_id, path=[expert_id])
            self._walk(branch)
            branches.append(branch)
            self.lineage.add_run({"expert": str(self.expert_path), "case": self.case_name, "tier": self.tier,
                                  "branch": b, "termination": branch.termination, "steps": branch.steps,
                                  "width": self.width, "passes": list(self.pass_specs),
                                  "compile_check": self.compile_check,
                                  "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            self.lineage.save(self.lineage_path)
        root = max(branches, key=lambda br: br.steps).current
        return InductionResult(out=self.out, lineage=self.lineage, states=len(self.lineage.states()),
                               transitions=len(self.lineage.transitions()),
                               rejected=len(self.lineage.graph.graph["rejected"]),
                               terminations=tuple(br.termination or "unknown" for br in branches),
                               root=root, expert=expert_id, steps=max(br.steps for br in branches))

    def _walk(self, branch: _Branch) -> None:
        while True:
            if branch.steps >= self.max_steps:
                branch.termination = "max-steps"
                return
            ir = self._ir_of(branch.current)
            candidates = self.present_sites(ir)
            if not candidates:
                branch.termination = "naive"
                self._mark_naive(branch.current)
                return
            if branch.steps == 0 and branch.index:
                # Alternative orders: branch b starts with the b-th candidate (soft prior).
                k = branch.index % len(candidates)
                candidates = candidates[k:] + candidates[:k]
            # A de-optimization rejected at an earlier state is retried only after the others:
            # what failed (e.g. removing tensor cores at large tiles) may pass once other
            # optimizations are gone, but should not cost a gate run at every step.
            failures = self._rejection_counts()
            candidates.sort(key=lambda ps: failures.get((ps[0].name, ps[1].anchor), 0))
            moved = False
            for p, site in candidates:
                if branch.rejections >= self.max_rejections:
                    branch.termination = "max-rejections"
                    return
                recorded = self._recorded(branch.current, p.name, site.anchor)
                if recorded is not None:
                    outcome, value = recorded
                    if outcome == "rejected":
                        continue
                    pred = value
                else:
                    pred = self._try(branch, p, site)
                    self.lineage.save(self.lineage_path)
                    if pred is None:
                        continue
                branch.steps += 1
                branch.current = pred
                branch.path.append(pred)
                self.progress("step", {"branch": branch.index, "steps": branch.steps, "state": pred})
                moved = True
                break
            if not moved:
                # Every de-optimization left was rejected here. Those rejected only because the
                # forward step measured slower (the expert's choices interact: big tiles pay only
                # with many warps) still pass compile and correctness; take the first of them, in
                # order, as a transition flagged `profile_regression` rather than stop short of naive.
                pred = self._retry_slower(branch, candidates)
                if pred is not None:
                    branch.steps += 1
                    branch.current = pred
                    branch.path.append(pred)
                    self.progress("step", {"branch": branch.index, "steps": branch.steps, "state": pred})
                    continue
                branch.termination = "exhausted"
                self._mark_naive(branch.current, exhausted=True)
                return

    def _retry_slower(self, branch: _Branch, candidates: list[tuple[Any, Any]]) -> str | None:
        slower = {(r["pass"], r["anchor"]): r for r in self.lineage.graph.graph["rejected"]
                  if r["state"] == branch.current and r.get("failure_kind") == "slower"}
        for p, site in candidates:
            if (p.name, site.anchor) not in slower:
                continue
            pred = self._try(branch, p, site, allow_slower=True)
            self.lineage.save(self.lineage_path)
            if pred is not None:
                return pred
        return None

    def _mark_naive(self, sid: str, exhausted: bool = False) -> None:
        node = self.lineage.node(sid)
        roles = set(node.get("roles", []))
        if "expert" in roles:
            return
        roles.add("root")
        if not exhausted:
            roles.add("naive")
        node["roles"] = sorted(roles)
        self.lineage.save(self.lineage_path)


def induce(expert: str | Path, case: str, **kwargs: Any) -> InductionResult:
    """Induce (or extend, with `resume=True`) the lineage of `expert` for `case`; see `Inducer`."""
    return Inducer(expert, case, **kwargs).run()

