"""Roundtrip recovery and leave-one-out transfer of SkillCards.

    python3 bench/roundtrip.py [LINEAGE ...] --out DIR [--tier static|interpret|device]
        [--cases gemm,conv2d] [--trials 5] [--budget-steps 24] [--box 240]
        [--case-box gemm=240] [--grace 120] [--wall 560] [--gpus 0,1 | --jobs N]
        [--only roundtrip|loo] [--admit-tier interpret] [--libraries DIR] [--libraries-only]
        [--tables-only] [--held-out LINEAGE,...|none] [--loo-from-all] [--admit-jobs N]
        [--executor local|ray] [--ray-address ADDRESS]

LINEAGE: lineage directories or lineage.json files (default:
bench/results/lineages/device/*/lineage.json); each contributes the lineage of one case.

1. Libraries. `all`: the cards lifted from every lineage, admitted by roundtrip trials on
   held-out states of those lineages (`lineage.admission.admit` at --admit-tier).
   `loo-<case>`: the same without that case's lineage (lifted and admitted without it; with
   --loo-from-all, made from `all`'s trials on other cases' states, see derive_loo_library).
   Admission also tries cards on the states of held-out lineages (induced for admission
   and never lifted: e.g. each expert again with `klineage induce --first-branch 1`), so a
   pass that occurs in one case's lineage only can still meet a held-out state (a card that
   meets none stays untried, and retrieval never offers it); `loo-<case>` does not see that
   case's held-out lineage either. --held-out names them; without it, the repository's
   (every lineage under DEFAULT_HELD_OUT, where that folder exists); `--held-out none`: none.
   The log and each library's admission.json (`held_out`, `held_out_from`) say which.
   A library whose admission finished holds `admission.json` and is reused as it is (so a
   library admitted on a CPU and committed can be used for device trials: --libraries).
2. Roundtrip: per case and trial t (seed t; seed 0 is the deterministic order), start from
   the naive root of the case's lineage (role naive/root; else its least optimized state) and
   `optimize` with library `all` at --tier. Leave-one-out: per case, one run (seed 0) with
   library `loo-<case>`.
3. Every run is its own process (one per GPU with --gpus, CUDA_VISIBLE_DEVICES set; --jobs N
   runs N at once on the visible GPU, whose gates then time one at a time under the GPU's
   lock, `gate.gpulock`), with a
   fresh gate cache (KLINEAGE_CACHE_DIR inside its folder: no verdict is shared between runs),
   and gates the case's expert first, in the same process and tier, to measure expert_ms.
   With --executor ray every gate (admission's and the runs') is a task on the Ray cluster
   (gate.executor): runs and admission trials then spread over its GPUs (--jobs runs at once);
   a cluster this command starts is joined by the run processes and shut down at the end.
   Its record is written to OUT/runs/<run>/run.json when it ends; a rerun skips runs that
   have one (a run that ended without a record is redone). A run stops starting gates after
   --box seconds and is killed --grace seconds (and KILL_MARGIN_S) later (its saved lineage's
   fastest state is kept in the record as "partial"). --wall bounds the whole command: no run
   starts after it and each run's box is cut to what is left, so a device call ends inside its
   time limit.
4. OUT/roundtrip.json and OUT/roundtrip.md (the tables) from every run record under OUT/runs,
   this command's and earlier ones' (--tables-only rewrites them and runs nothing). At the
   device tier a last table sets each run's best time against the expert's time measured in
   the run and the one recorded in its lineage.

Figures: device tier: fraction of expert = expert_ms / best_ms (1.0 = as fast as the expert),
speedup = start_ms / best_ms. Interpret tier (no timing): "passes recovered" = the share of
the passes the lineage removed from the expert whose present sites in the best kernel are at
least as many as in the expert (a structural proxy; not a performance figure).
Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_LINEAGES = "bench/results/lineages/device/*/lineage.json"
DEFAULT_HELD_OUT = "bench/results/lineages/heldout"
"""The repository's held-out lineages (a folder each): admission's contexts without --held-out."""
# A run is killed this long after its box and grace: the optimize loop ends a gate at its box
# plus its own grace (lineage.optimize.BOX_GRACE_S), measured from after the run's imports, and
# then writes its record; without the margin the kill and the gate's own end coincided and a
# run whose last gate used its whole limit left no record.
KILL_MARGIN_S = 20.0


def say(message: str) -> None:
    print(f"[roundtrip {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- lineages and libraries ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CaseLineage:
    case: str
    path: Path
    root_state: str
    expert_state: str
    expert_path: str
    expert_ms: float | None = None
    """The expert's device time recorded in the lineage (None where it has none)."""


def load_case_lineages(paths: Sequence[str]) -> dict[str, CaseLineage]:
    """case -> its lineage (the first given for a case wins)."""
    from lineage.graph import Lineage

    out: dict[str, CaseLineage] = {}
    for raw in paths:
        path = Path(raw)
        file = path / "lineage.json" if path.is_dir() else path
        lin = Lineage.load(file)
        experts = [s for s in lin.states() if "expert" in (lin.node(s).get("roles") or [])]
        if not experts:
            raise SystemExit(f"{file}: no state with role expert")
        expert = experts[0]
        case = str(lin.node(expert).get("case", ""))
        timing = lin.node(expert).get("timing") or {}
        out.setdefault(case, CaseLineage(case, file, naive_root(lin), expert,
                                         str((lin.graph.graph.get("experts") or [""])[0]),
                                         timing.get("candidate_ms")))
    return out


def naive_root(lin: Any) -> str:
    """The state with role naive (else root); else the state farthest from the expert (a
    lineage stopped by its time box has no naive root: its least optimized state stands in)."""
    for role in ("naive", "root"):
        found = [s for s in lin.states() if role in (lin.node(s).get("roles") or [])]
        if found:
            return found[0]
    return max(lin.states(), key=lambda s: (len(lin.path_to_expert(s) or ()), s))


def held_out_paths(given: str | None) -> tuple[list[str], str]:
    """The held-out lineages --held-out asks for (a comma list; "none": none; not given: each
    lineage under DEFAULT_HELD_OUT, where that folder exists), and how they were chosen, for
    the log and the libraries' records."""
    if given is not None and given.strip().lower() == "none":
        return [], "none (--held-out none)"
    if given is not None:
        return [p for p in given.split(",") if p], "--held-out"
    folder = ROOT / DEFAULT_HELD_OUT
    if not folder.is_dir():
        return [], f"none (no --held-out, and no {DEFAULT_HELD_OUT})"
    found = sorted(str(f.parent) for f in folder.glob("*/lineage.json"))
    return found, f"the repository's, {DEFAULT_HELD_OUT} (no --held-out; --held-out none for none)"


def load_held_out(paths: Sequence[str]) -> list[tuple[str, Path]]:
    """(case, lineage.json) of each held-out lineage (the case of its expert state)."""
    from lineage.graph import Lineage

    out = []
    for raw in paths:
        file = Path(raw) / "lineage.json" if Path(raw).is_dir() else Path(raw)
        lin = Lineage.load(file)
        cases = {str(lin.node(s).get("case", "")) for s in lin.states()}
        if len(cases) != 1:
            raise SystemExit(f"{file}: a held-out lineage holds one case, found {sorted(cases)}")
        out.append((cases.pop(), file))
    return out


def build_library(name: str, lineages: list[CaseLineage], libraries: Path, tier: str,
                  max_trials: int, held_out: Sequence[tuple[str, Path]] = (),
                  jobs: int = 1, deadline: float | None = None,
                  executor: Any = None, held_out_from: str = "--held-out") -> Path | None:
    """Lift and admit one library (skipped when its admission.json exists); `held_out`
    lineages give admission contexts and are not lifted (`held_out_from`: how they were
    chosen, `held_out_paths`; logged and recorded). None when `deadline` (a
    `time.monotonic()` value) came before every card was tried: a rerun goes on from the
    cards' logs (admission.json is written only when admission is complete)."""
    from lineage.admission import admit
    from lineage.graph import Lineage
    from lineage.skills import Library, lift

    folder = libraries / name
    done = folder / "admission.json"
    if done.is_file():
        say(f"library {name}: reusing {folder}")
        return folder
    lins = [Lineage.load(c.path) for c in lineages]
    lib = Library.open(folder, create=True)
    for lin in lins:
        lib.add_all(lift(lin))
    say(f"library {name}: {len(lib.ids())} cards from {', '.join(c.case for c in lineages)}; "
        f"admitting at the {tier} tier; held-out lineages: {held_out_from}: "
        f"{', '.join(str(path.parent.name) for _, path in held_out) or 'none'}")
    # Admission verdicts may be shared (they are not trials of the benchmark): one cache.
    os.environ["KLINEAGE_CACHE_DIR"] = str(libraries / "admission-cache")
    started = time.monotonic()
    report = admit(lib, lins, tier=tier, max_trials=max_trials,
                   held_out=[Lineage.load(path) for _, path in held_out], jobs=jobs,
                   deadline=deadline, executor=executor,
                   progress=lambda event, data: say(f"  {name} {event} {data.get('card', '')}"
                                                    + (f": {data['reason'][:100]}"
                                                       if event == "failed" else "")))
    if report.pending:
        say(f"library {name}: {len(report.pending)} cards not yet tried (time is up); "
            f"rerun to go on")
        return None
    record = {**report.to_json(), "tier": tier, "lineages": [str(c.path) for c in lineages],
              "held_out": [str(path) for _, path in held_out], "held_out_from": held_out_from,
              "cards": len(lib.ids()), "wall_s": round(time.monotonic() - started, 1)}
    _write_json(done, record)
    say(f"library {name}: {len(report.admitted)} admitted, {len(report.rejected)} not, "
        f"{len(report.untried)} untried")
    if report.untried:  # retrieval offers admitted cards only: these are out of every run
        say(f"library {name}: untried for want of a held-out state with their site (never "
            f"retrieved; held-out lineages: {held_out_from}; --held-out LINEAGE,... gives them "
            f"states): {', '.join(report.untried)}")
    return folder


def derive_loo_library(case: str, lineages: list[CaseLineage], all_folder: Path,
                       libraries: Path) -> Path:
    """`loo-<case>` from the trials already run for library `all`, without new trials: the
    cards lifted from the other cases' lineages, each keeping only its trials on states of
    other cases (a trial on a state of `case`, its held-out lineages included, would let the
    left-out case shape the library); a card is admitted when one of those succeeded. A card
    whose only successful trial was on `case` is not admitted (stricter than admitting it
    afresh, which could have tried another context)."""
    import dataclasses

    from lineage.graph import Lineage
    from lineage.skills import Library, lift

    name = f"loo-{case}"
    folder = libraries / name
    done = folder / "admission.json"
    if done.is_file():
        say(f"library {name}: reusing {folder}")
        return folder
    if not (all_folder / "admission.json").is_file():
        raise SystemExit(f"--loo-from-all: {all_folder} has no finished admission")
    source = Library.open(all_folder)
    known = set(source.ids())
    lib = Library.open(folder, create=True)
    for c in lineages:
        for card in lift(Lineage.load(c.path)):
            trials = (tuple(t for t in source.get(card.id).verification if t.case != case)
                      if card.id in known else ())
            lib.add(dataclasses.replace(card, verification=trials,
                                        admitted=any(t.ok for t in trials)))
    cards = lib.cards()
    record = {"derived_from": str(all_folder), "left_out": case,
              "admitted": [c.id for c in cards if c.admitted],
              "rejected": [c.id for c in cards if not c.admitted and c.verification],
              "untried": [c.id for c in cards if not c.verification],
              "trials": sum(len(c.verification) for c in cards),
              "lineages": [str(c.path) for c in lineages], "cards": len(cards)}
    _write_json(done, record)
    say(f"library {name}: {len(record['admitted'])} admitted of {len(cards)} (derived from "
        f"{all_folder.name}'s trials outside {case})")
    return folder


# -- one run (child process) ------------------------------------------------------------------
def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One optimize run as the spec says; returns its record (also written to run.json)."""
    from gate.executor import open_executor

    with open_executor(spec.get("executor", "local"), address=spec.get("ray_address")) as gates:
        return _run_one(spec, gates)


def _run_one(spec: dict[str, Any], gates: Any) -> dict[str, Any]:
    from lineage.graph import Lineage
    from lineage.optimize import optimize
    from lineage.retrieval import kernel_sites
    from passes.rewriter import DeterministicRewriter

    folder = Path(spec["dir"])
    started = time.monotonic()
    lin = Lineage.load(spec["lineage"])
    root = lin.node(spec["root_state"])
    expert = lin.node(spec["expert_state"])
    start_path = kernel_file(folder / "start", root, spec["expert_path"])
    expert_path = kernel_file(folder / "expert", expert, spec["expert_path"])
    say(f"{spec['name']}: gating the expert ({spec['tier']})")
    ev = gates.check(expert["source"], expert["language"], spec["case"], spec["tier"],
                     path=expert_path)
    expert_ms = _ms(ev)
    say(f"{spec['name']}: expert {'ok' if ev.ok else 'FAILS'} {expert_ms} ms; optimizing")
    result = optimize(start_path, spec["case"], spec["library"], tier=spec["tier"],
                      budget_steps=spec["budget_steps"], out=folder / "optimize",
                      rewriter=DeterministicRewriter(), seed=spec["seed"],
                      deadline=started + spec["box"], executor=gates,
                      progress=lambda event, data: say(
                          f"{spec['name']}: {event} {data.get('card', '')} "
                          f"{data.get('ms') or ''}{data.get('reason', '')[:90]}"))
    best_source = result.best_path.read_text()
    removed = sorted({str(lin.node(t).get("pass")) for t in lin.transitions()})
    recovered = passes_recovered(removed, expert["source"], best_source, kernel_sites,
                                 str(expert["language"]))
    record = {
        "name": spec["name"], "kind": spec["kind"], "case": spec["case"], "trial": spec["trial"],
        "seed": spec["seed"], "tier": spec["tier"], "library": spec["library"],
        "expert_ok": bool(ev.ok), "expert_ms": expert_ms,
        "start_ms": result.start_ms, "best_ms": result.best_ms,
        "fraction_of_expert": (expert_ms / result.best_ms
                               if expert_ms and result.best_ms else None),
        "expert_variant_ms": _variant_ms(ev.to_json()),
        "best_variant_ms": _variant_ms(dict(result.best_verdict)),
        "speedup": (result.start_ms / result.best_ms
                    if result.start_ms and result.best_ms else None),
        "reached_gate": bool(result.best_verdict.get("ok")),
        "improved": bool(result.applied),
        "applied": [s.pass_name for s in result.applied],
        "rejected": len(result.rejected), "gated": result.gated,
        "termination": result.termination,
        "passes_removed": removed, "passes_recovered": recovered,
        "recovered_fraction": (len(recovered) / len(removed)) if removed else None,
        "wall_s": round(time.monotonic() - started, 1),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }
    _write_json(folder / "run.json", record)
    return record


def kernel_file(stem: Path, state: dict[str, Any], expert_path: str) -> Path:
    """Write a lineage state as a kernel file the gate takes: a Triton module `<stem>.py`, or
    a CUDA `<stem>.cu` with the expert's host module beside it as `<stem>.py` (the states of a
    CUDA lineage keep the expert's launch: one host serves them all)."""
    if state["language"] != "cuda":
        path = stem.with_suffix(".py")
        path.write_text(state["source"])
        return path
    host = (ROOT / expert_path).with_suffix(".py")
    if not expert_path or not host.is_file():
        raise SystemExit(f"no host module for the CUDA lineage's expert {expert_path!r}")
    path = stem.with_suffix(".cu")
    path.write_text(state["source"])
    shutil.copyfile(host, stem.with_suffix(".py"))
    return path


def passes_recovered(removed: Sequence[str], expert_src: str, best_src: str,
                     sites_fn: Any, language: str = "triton") -> list[str]:
    """The removed passes whose present sites in the best kernel are at least as many as in
    the expert (the interpret tier's structural measure of recovery)."""
    import kir

    def counts(source: str) -> dict[str, int]:
        present, _ = sites_fn(kir.parse(source, language=language))
        out: dict[str, int] = {}
        for f in present:
            out[f["pass"]] = out.get(f["pass"], 0) + 1
        return out

    want, have = counts(expert_src), counts(best_src)
    return [p for p in removed if have.get(p, 0) >= max(1, want.get(p, 0))]


def _variant_ms(verdict: Mapping[str, Any]) -> dict[str, float]:
    """Variant -> candidate ms of a verdict's JSON; {} when untimed."""
    return {str(v["variant"]): float(v["candidate_ms"])
            for v in (verdict.get("timing") or {}).get("variants") or ()
            if v.get("variant") and v.get("candidate_ms")}


def _ms(verdict: Any) -> float | None:
    timing = getattr(verdict, "timing", None)
    value = getattr(timing, "candidate_ms", None) if timing is not None else None
    return float(value) if value else None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


# -- scheduling ---------------------------------------------------------------------------------
# Run processes now alive: each runs in its own session, so a killed scheduler must end them
# itself (else they would go on writing into folders a rerun starts afresh).
_LIVE: set[subprocess.Popen[bytes]] = set()
_STOP = threading.Event()


def _end_live_runs(signum: int = 0, frame: Any = None) -> None:
    _STOP.set()
    for proc in list(_LIVE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if signum:
        raise SystemExit(128 + signum)


def launch(spec: dict[str, Any], gpu: str | None) -> dict[str, Any]:
    """Run one spec in a child process with a fresh gate cache; a record even if it dies."""
    folder = Path(spec["dir"])
    if folder.exists():  # an unfinished earlier attempt: start clean (fresh cache included)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    env = dict(os.environ, KLINEAGE_CACHE_DIR=str(folder / "cache"))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    (folder / "spec.json").write_text(json.dumps(spec, indent=1))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-spec", str(folder / "spec.json")]
    started = time.monotonic()
    with open(folder / "log.txt", "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(ROOT), start_new_session=True)
        _LIVE.add(proc)
        try:
            rc = proc.wait(timeout=spec["box"] + spec["grace"] + KILL_MARGIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group only
            proc.wait()
            rc = -9
        finally:
            _LIVE.discard(proc)
    if (folder / "run.json").is_file():
        return json.loads((folder / "run.json").read_text())
    record = {**{k: spec[k] for k in ("name", "kind", "case", "trial", "seed", "tier", "library")},
              "error": f"run ended without a record (rc {rc}); see {folder / 'log.txt'}",
              "wall_s": round(time.monotonic() - started, 1), "partial": partial_best(folder)}
    _write_json(folder / "run.json", record)
    return record


def partial_best(folder: Path) -> dict[str, Any] | None:
    """The fastest passing state of a killed run's saved lineage (None if there is none)."""
    path = folder / "optimize" / "lineage.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    times = [((n.get("timing") or {}).get("candidate_ms"), n["id"]) for n in data.get("nodes", [])
             if n.get("type") == "state" and (n.get("verdict") or {}).get("ok")]
    times = [t for t in times if t[0]]
    return {"best_ms": min(times)[0], "states": len(times)} if times else None


def schedule(specs: list[dict[str, Any]], slots: list[str | None], end: float | None = None,
             min_share: float = 0.0) -> list[dict[str, Any]]:
    """Run the specs over the slots (one process per slot at a time); with `end` (a
    `time.monotonic()` value) no run starts within `grace` + `KILL_MARGIN_S` + 30 s of it, nor
    with less than `min_share` of its box left (a run cut short measures the call's end, not
    the method: it is left for a rerun), and boxes are cut to what is left."""
    queue: Queue[dict[str, Any]] = Queue()
    for spec in specs:
        queue.put(spec)
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker(slot: str | None) -> None:
        while True:
            try:
                spec = queue.get_nowait()
            except Empty:
                return
            if _STOP.is_set():
                return
            if end is not None:
                left = end - time.monotonic() - spec["grace"] - KILL_MARGIN_S
                if left < max(30.0, min_share * spec["box"]):
                    say(f"skip {spec['name']}: the --wall budget is spent (rerun to resume)")
                    continue
                spec = {**spec, "box": min(spec["box"], left)}
            say(f"start {spec['name']}" + (f" on GPU {slot}" if slot is not None else ""))
            record = launch(spec, slot)
            with lock:
                records.append(record)
            say(f"done {spec['name']}: {summary(record)}")

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def summary(record: dict[str, Any]) -> str:
    if "error" in record:
        return record["error"]
    frac = record.get("fraction_of_expert")
    return (f"{record['termination']}, {record['gated']} gated, best {record['best_ms']} ms"
            + (f", {frac:.3f} of expert" if frac else "")
            + f", passes recovered {len(record['passes_recovered'])}/"
              f"{len(record['passes_removed'])}, {record['wall_s']} s")


# -- tables -------------------------------------------------------------------------------------
def tables(records: list[dict[str, Any]], tier: str,
           lineage_expert_ms: dict[str, float] | None = None) -> str:
    """The markdown tables of a folder's runs; `lineage_expert_ms` (case -> the expert's time
    recorded in its lineage) adds each run's fraction against that second measurement."""
    timed = tier == "device"
    rt = [r for r in records if r.get("kind") == "roundtrip"]
    loo = [r for r in records if r.get("kind") == "loo"]
    lines = [f"# SkillCard roundtrip and leave-one-out ({tier} tier)", ""]
    if timed:
        lines += ["Cells: fraction of expert = expert_ms / best_ms, both measured in the same run "
                  "process at the device tier (>= 0.95 is the goal).", ""]
    else:
        lines += ["Cells: passes recovered = share of the passes the lineage removed from the "
                  "expert that are back in the best kernel (at least as many present sites as "
                  "the expert). The interpret tier has no timing, so fraction of expert is not "
                  "measured here.", ""]
    cases = sorted({r["case"] for r in rt})
    trials = sorted({int(r["trial"]) for r in rt})
    if rt:
        lines += ["## Roundtrip (case x trial)", "",
                  "| case | " + " | ".join(f"trial {t} (seed {t})" for t in trials)
                  + " | min | gated per trial |",
                  "|---|" + "---:|" * (len(trials) + 2)]
        for case in cases:
            cells, values, gates = [], [], []
            for t in trials:
                r = next((x for x in rt if x["case"] == case and int(x["trial"]) == t), None)
                value = None if r is None or "error" in r else (
                    r.get("fraction_of_expert") if timed else r.get("recovered_fraction"))
                cells.append("—" if r is None else ("error" if "error" in r else _fmt(value)))
                if value is not None:
                    values.append(value)
                if r is not None and "gated" in r:
                    gates.append(str(r["gated"]))
            lines.append(f"| {case} | " + " | ".join(cells) + f" | {_fmt(min(values) if values else None)}"
                         f" | {', '.join(gates)} |")
        if timed:
            ok = sum(1 for r in rt if (r.get("fraction_of_expert") or 0) >= 0.95)
            lines += ["", f"Trials at >= 95% of the expert: {ok}/{len(rt)}."]
        lines.append("")
    if loo:
        lines += ["## Leave-one-out (library without the case's lineage)", "",
                  "| case | reached the gate | start ms | best ms | speedup over start | "
                  "fraction of expert | passes recovered | applied | gated |",
                  "|---|---|---:|---:|---:|---:|---:|---|---:|"]
        for r in sorted(loo, key=lambda x: x["case"]):
            if "error" in r:
                lines.append(f"| {r['case']} | error | | | | | | {r['error'][:60]} | |")
                continue
            lines.append(
                f"| {r['case']} | {'y' if r['reached_gate'] else 'n'} | {_fmt(r['start_ms'])} | "
                f"{_fmt(r['best_ms'])} | {_fmt(r['speedup'])} | {_fmt(r['fraction_of_expert'])} | "
                f"{len(r['passes_recovered'])}/{len(r['passes_removed'])} | "
                f"{', '.join(r['applied']) or '—'} | {r['gated']} |")
        improved = sum(1 for r in loo if r.get("improved"))
        lines += ["", f"Reached the gate: {sum(1 for r in loo if r.get('reached_gate'))}/{len(loo)}; "
                      f"improved on their start: {improved}/{len(loo)}."]
        split = [r for r in loo if len(r.get("expert_variant_ms") or {}) > 1
                 and r.get("best_variant_ms")]
        if timed and split:
            lines += ["", "Fraction of the expert per shape variant (a case timed over several "
                          "variants sums them; each variant's expert_ms / best_ms):", "",
                      "| case | variant | expert ms | best ms | fraction of expert |",
                      "|---|---|---:|---:|---:|"]
            for r in sorted(split, key=lambda x: x["case"]):
                for v, ems in r["expert_variant_ms"].items():
                    bms = r["best_variant_ms"].get(v)
                    lines.append(f"| {r['case']} | {v} | {_fmt(ems)} | {_fmt(bms)} | "
                                 f"{_fmt(ems / bms if bms else None)} |")
    if timed and lineage_expert_ms and (rt or loo):
        lines += ["", "## Every run against two measurements of the expert", "",
                  "The expert is timed again in each run's process; its lineage holds the time "
                  "measured when the lineage was induced. Where the two differ by more than the "
                  "noise, a run's fraction of the expert is not to be trusted.", "",
                  "| run | expert ms (this run) | expert ms (lineage) | best ms | fraction (this run) "
                  "| fraction (lineage's expert) |", "|---|---:|---:|---:|---:|---:|"]
        for r in sorted(rt + loo, key=lambda x: (x["kind"], x["case"], int(x["trial"]))):
            if "error" in r:
                continue
            lin_ms = lineage_expert_ms.get(r["case"])
            best = r.get("best_ms")
            lines.append(f"| {r['name']} | {_fmt(r.get('expert_ms'))} | {_fmt(lin_ms)} | {_fmt(best)} | "
                         f"{_fmt(r.get('fraction_of_expert'))} | "
                         f"{_fmt(lin_ms / best if lin_ms and best else None)} |")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, lineages: dict[str, CaseLineage], fallback_tier: str) -> str:
    """Write OUT/roundtrip.json and OUT/roundtrip.md from every run record in OUT/runs."""
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/run.json"))]
    tier = records[0]["tier"] if records else fallback_tier
    _write_json(out / "roundtrip.json", {"tier": tier, "cases": sorted({r["case"] for r in records}),
                                         "runs": records})
    text = tables(records, tier, {case: float(c.expert_ms) for case, c in lineages.items() if c.expert_ms})
    (out / "roundtrip.md").write_text(text)
    return text


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# -- main ---------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    from gate.executor import add_executor_arguments, executor_from_args

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lineages", nargs="*", help=f"lineage dirs/files (default {DEFAULT_LINEAGES})")
    ap.add_argument("--out", default="bench/results/roundtrip/run", help="output folder")
    ap.add_argument("--libraries", default=None,
                    help="folder of the admitted libraries (default OUT/libraries)")
    ap.add_argument("--tier", default="interpret", choices=["static", "interpret", "device", "auto"])
    ap.add_argument("--admit-tier", default="interpret",
                    choices=["static", "interpret", "device", "auto"],
                    help="CUDA has no interpreter: interpret means static for its kernels")
    ap.add_argument("--admit-max-trials", type=int, default=2)
    ap.add_argument("--admit-jobs", type=int, default=1,
                    help="cards tried at once in admission (gates share the GPU, see gate.gpulock)")
    ap.add_argument("--held-out", default=None,
                    help="comma-separated held-out lineages (dirs or lineage.json: induced for "
                         "admission, e.g. klineage induce --first-branch 1, and not lifted); "
                         f"loo-<case> leaves out that case's too (default: {DEFAULT_HELD_OUT}/*; "
                         "none: no held-out lineage)")
    ap.add_argument("--loo-from-all", action="store_true",
                    help="make each loo-<case> library from library all's admission trials on "
                         "other cases' states instead of admitting it afresh")
    ap.add_argument("--cases", default="", help="comma-separated cases (default: every lineage's)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--budget-steps", type=int, default=24)
    ap.add_argument("--box", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--case-box", default="",
                    help="per-case --box, e.g. gemm=240,conv2d=150 (others: --box)")
    ap.add_argument("--grace", type=float, default=120.0,
                    help="seconds a run may take past its box to finish its last gate")
    ap.add_argument("--wall", type=float, default=None,
                    help="seconds for the whole command (admission included)")
    ap.add_argument("--min-box-share", type=float, default=0.0,
                    help="with --wall: start a run only with at least this share of its box "
                         "left (else a rerun does it), e.g. 0.9")
    ap.add_argument("--gpus", default="", help="e.g. 0,1: one run per GPU at a time")
    ap.add_argument("--jobs", type=int, default=1, help="parallel runs without --gpus")
    ap.add_argument("--only", choices=["roundtrip", "loo"], default=None)
    ap.add_argument("--libraries-only", action="store_true",
                    help="lift and admit the libraries the other options call for, run nothing")
    ap.add_argument("--tables-only", action="store_true",
                    help="rewrite OUT/roundtrip.{json,md} from the run records in OUT/runs, run nothing")
    ap.add_argument("--run-spec", default=None, help=argparse.SUPPRESS)
    add_executor_arguments(ap)
    args = ap.parse_args(argv)

    if args.run_spec:
        run_one(json.loads(Path(args.run_spec).read_text()))
        return 0
    with executor_from_args(args, jobs=args.admit_jobs) as gates:
        return _main(args, gates)


def _main(args: argparse.Namespace, gates: Any) -> int:
    end = time.monotonic() + args.wall if args.wall else None
    import glob

    paths = args.lineages or sorted(glob.glob(str(ROOT / DEFAULT_LINEAGES)))
    lineages = load_case_lineages(paths)
    cases = [c for c in args.cases.split(",") if c] or sorted(lineages)
    unknown = [c for c in cases if c not in lineages]
    if unknown:
        raise SystemExit(f"no lineage for case(s) {', '.join(unknown)}")
    out = Path(args.out).resolve()
    if args.tables_only:
        print(write_tables(out, lineages, args.tier))
        return 0
    libraries = Path(args.libraries).resolve() if args.libraries else out / "libraries"
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    all_lineages = [lineages[c] for c in sorted(lineages)]
    held_paths, held_from = held_out_paths(args.held_out)
    held_out = load_held_out(held_paths)
    say(f"held-out lineages for admission: {held_from}: "
        f"{', '.join(str(path) for _, path in held_out) or 'none'}")
    try:
        boxes = {k: float(v) for k, v in (item.split("=") for item in args.case_box.split(",") if item)}
    except ValueError:
        raise SystemExit(f"--case-box: expected case=seconds,..., got {args.case_box!r}") from None

    specs: list[dict[str, Any]] = []

    def spec(kind: str, case: str, trial: int, library: Path) -> dict[str, Any]:
        c = lineages[case]
        name = f"{kind}-{case}-{trial}"
        return {"name": name, "kind": kind, "case": case, "trial": trial, "seed": trial,
                "tier": args.tier, "library": str(library), "lineage": str(c.path),
                "root_state": c.root_state, "expert_state": c.expert_state,
                "expert_path": c.expert_path,
                "budget_steps": args.budget_steps, "box": boxes.get(case, args.box), "grace": args.grace,
                "dir": str(runs / name), "executor": gates.name,
                "ray_address": getattr(gates, "address", None)}

    # Run order: every case's first trial, then leave-one-out, then the other trials (a call
    # cut short by --wall has the widest table; later trials find the kernels compiled).
    later: list[dict[str, Any]] = []
    # Admission stops starting trials early enough for those in flight to end inside --wall.
    admit_by = end - 2 * args.grace - 60 if end is not None else None
    unfinished: list[str] = []
    if args.only in (None, "roundtrip"):
        full = build_library("all", all_lineages, libraries, args.admit_tier, args.admit_max_trials,
                             held_out, args.admit_jobs, admit_by, gates, held_from)
        if full is None:
            unfinished.append("all")
        else:
            specs += [spec("roundtrip", c, 0, full) for c in cases if args.trials > 0]
            later = [spec("roundtrip", c, t, full) for t in range(1, args.trials) for c in cases]
    if args.only in (None, "loo"):
        for case in cases:
            rest = [c for c in all_lineages if c.case != case]
            if args.loo_from_all:
                lib = derive_loo_library(case, rest, libraries / "all", libraries)
            else:
                lib = build_library(f"loo-{case}", rest, libraries, args.admit_tier,
                                    args.admit_max_trials, [h for h in held_out if h[0] != case],
                                    args.admit_jobs, admit_by, gates, held_from)
            if lib is None:
                unfinished.append(f"loo-{case}")
            else:
                specs.append(spec("loo", case, 0, lib))
    specs += later
    if unfinished:
        say(f"admission unfinished for {', '.join(unfinished)}: rerun to go on")
    if args.libraries_only:
        say(f"libraries ready under {libraries}")
        return 0
    done = [s for s in specs if (Path(s["dir"]) / "run.json").is_file()
            and "error" not in json.loads((Path(s["dir"]) / "run.json").read_text())]
    todo = [s for s in specs if s not in done]
    say(f"{len(specs)} runs, {len(done)} already done, {len(todo)} to run")
    slots: list[str | None] = ([g.strip() for g in args.gpus.split(",") if g.strip()]
                               if args.gpus else [None] * max(1, args.jobs))
    signal.signal(signal.SIGTERM, _end_live_runs)
    try:
        schedule(todo, slots, end, args.min_box_share)
    finally:
        _end_live_runs()
    text = write_tables(out, lineages, args.tier)
    say(f"wrote {out / 'roundtrip.md'} (every run under {runs})")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
