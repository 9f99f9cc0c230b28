"""What an optimize run reports (`lineage.optimize`): its steps, its result, the records it
writes into its lineage and its output folder (`finish`), and the seeded order of equally
ranked cards."""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kir.errors import BadInputError
from kir import hostlaunch
from kir.embedded import in_file
from lineage.graph import KernelState, Transition, atomic_write_text

# Effect scores within this relative distance count as equal ranks (a seed may reorder them).
EFFECT_TIE = 0.05


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
    """Rejected as not faster, yet within `MIN_GAIN` of the best: a tie within timing noise."""

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



def diff_actions(old: Any, new: Any) -> tuple[Mapping[str, Any], ...]:
    """The structured diff of a kept step, as `klineage diff --json` lists its actions."""
    import anchors  # noqa: PLC0415

    return tuple(action.to_json() for action in anchors.diff(old, new).actions)


def lineage_state(source: str, ir: Any, verdict: Any, language: str, case: str, tier: str,
                  roles: frozenset[str]) -> KernelState:
    """The lineage state of a kernel of an optimize run."""
    import anchors  # noqa: PLC0415

    from lineage.retrieval import kernel_features  # noqa: PLC0415

    data = verdict_json(verdict)
    return KernelState(source=source, language=language, case=case, tier=tier,
                       anchors=tuple(str(a.id) for a in anchors.build_index(ir).anchors),
                       features=kernel_features(ir), verdict=data,
                       timing=data.get("timing"), roles=roles)


def verdict_json(verdict: Any) -> dict[str, Any]:
    to_json = getattr(verdict, "to_json", None)
    return dict(to_json()) if callable(to_json) else dict(verdict or {})


def failure_kind(verdict: Any) -> str:
    kind = getattr(verdict, "failure_kind", None)
    return str(getattr(kind, "value", kind))


def resolve_tier(tier: str, language: str) -> str:
    """The concrete tier for `tier` ("auto": device where a GPU is present, else interpret);
    BadInputError for an unknown tier."""
    tier = str(getattr(tier, "value", tier))
    if tier not in ("static", "interpret", "emulate", "device", "auto"):
        raise BadInputError(f"unknown tier {tier!r} (static|interpret|emulate|device|auto)")
    from gate.check import resolve_tier as gate_resolve  # noqa: PLC0415

    resolved, _ = gate_resolve(tier, language)
    return str(getattr(resolved, "value", resolved))


def llm_report(rewriter: Any) -> dict[str, Any] | None:
    """The LLM back-end's `usage_report()` (calls, failures, cache reads / writes), if any."""
    for backend in (rewriter, *(getattr(rewriter, "backends", ()) or ())):
        report = getattr(backend, "usage_report", None)
        if callable(report):
            return dict(report())
    return None


def spent_usd(rewriter: Any) -> float:
    total = float(getattr(rewriter, "spent_usd", 0.0) or 0.0)
    for backend in getattr(rewriter, "backends", ()) or ():
        total += float(getattr(backend, "spent_usd", 0.0) or 0.0)
    return total


def write_best(path: Path, source: str, language: str, best_path: Path) -> None:
    """Write the best kernel `source` of the kernel file `path` to `best_path`: a CUDA source held
    in its host module goes into that module, a `.cu` gets its host module beside it; either host
    with the launch edits the source asks of it (`kir.hostlaunch`)."""
    held = in_file(path) if language == "cuda" and path.suffix == ".py" else None
    atomic_write_text(best_path, hostlaunch.apply(held.splice(source), source)
                      if held is not None else source)
    if language == "cuda" and path.suffix == ".cu" and path.with_suffix(".py").is_file():
        atomic_write_text(best_path.with_suffix(".py"),
                          hostlaunch.apply(path.with_suffix(".py").read_text(), source))


EXTENSION_PART = "load_candidate: extension "  # a verdict's part naming how it had its extension


def extension_note(verdicts: Sequence[Any], started: int) -> str | None:
    """How a run's gates had their `load_inline` extensions (`gate.extbuild`: each verdict's
    `load_candidate: extension ...` part) and how many builds ahead it started, as a note of
    its result: "load_inline extensions: 2 found built ahead, 1 built here (4 builds ahead
    started)"; None where no gate built one (another host, cached verdicts)."""
    counts = Counter(name[len(EXTENSION_PART):] for v in verdicts
                     for name, _ in (getattr(v, "phases", None) or ())
                     if name.startswith(EXTENSION_PART) and name != EXTENSION_PART + "lock wait")
    if not counts:
        return None
    return ("load_inline extensions: " + ", ".join(f"{n} {what}" for what, n in counts.most_common())
            + f" ({started} builds ahead started)")


def finish(run: Any, start: Any, path: Path, out_dir: Path, termination: str,
           notes: list[str], seed: int) -> OptimizeResult:
    """Write an optimize run's best kernel (CUDA: into its host, or beside its host module),
    its lineage and result.json; the result. `run` and `start` are `lineage.optimize`'s."""
    spent = spent_usd(run.rewriter)
    llm = llm_report(run.rewriter)
    if llm is not None and llm["disabled"]:
        notes.append(llm["disabled"])
    best = run.best
    best_path = out_dir / f"best{path.suffix}"
    write_best(path, best.source, run.language, best_path)
    node = run.lineage.node(best.sid)
    node["roles"] = sorted(set(node.get("roles", [])) | {"best"})
    run.lineage.add_run({"target": str(path), "case": run.case, "tier": run.tier,
                         "termination": termination, "steps": run.gated,
                         "kept": len(run.applied), "reused_verdicts": run.reused, "seed": seed,
                         "spent_usd": spent, "llm": llm, "kind": "optimize",
                         "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    lineage_path = out_dir / "lineage.json"
    run.lineage.save(lineage_path)
    result = OptimizeResult(best_path, verdict_json(best.verdict), tuple(run.applied),
                            tuple(run.rejected), spent, lineage_path, start.ms, best.ms,
                            termination, tuple(notes), gated=run.gated, seed=seed, llm=llm)
    atomic_write_text(out_dir / "result.json", json.dumps(result.to_json(), indent=1) + "\n")
    return result


def record_state(state: Any, run: Any, roles: frozenset[str]) -> None:
    """Add a search state (`lineage.optimize._State`) of `run` to its lineage, and the
    transition from its parent (recorded already)."""
    state.sid = run.lineage.add_state(lineage_state(state.source, state.ir, state.verdict, run.language,
                                                       run.case, run.tier, roles))
    parent, made, card = state.parent, state.made, state.card
    if parent is None or made is None or card is None:
        return
    delta = ({"src_ms": parent.ms, "dst_ms": state.ms, "ratio": parent.ms / state.ms}
             if parent.ms and state.ms else None)
    run.lineage.add_transition(Transition(
        src=parent.sid, dst=state.sid, pass_name=card.pass_name, category=card.category,
        anchor=made.site.anchor if made.site else "", options=dict(made.options),
        diff=diff_actions(parent.ir, made.ir),
        src_verdict={"ok": True, "tier": run.tier, "ms": parent.ms},
        dst_verdict={"ok": True, "tier": run.tier, "ms": state.ms}, profile_delta=delta,
        backward=None, rederived_by=(made.rewriter if made.rewriter in ("llm", "transplant")
                                     else "deterministic"),
        case=run.case, language=run.language, platform="cuda", expert=run.expert,
        step=len(state.path)))

__all__ = ["EFFECT_TIE", "OptimizeResult", "Step", "diff_actions", "distinct_rejections",
           "failure_kind", "finish", "lineage_state", "llm_report", "resolve_tier", "seeded_order",
           "spent_usd", "verdict_json", "write_best"]
