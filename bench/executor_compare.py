"""Admission and a held-out-style batch through the local executor and through Ray: wall times,
verdicts job for job, and the wall time N GPUs would take by the same arithmetic.

    python3 bench/executor_compare.py --out DIR [--tier device] [LINEAGE ...]
        [--max-trials 1] [--states 6] [--trials 2] [--jobs 1] [--ray-address ADDRESS]
        [--gpus 1,2,4,8] [--skip admission|batch] [--heldout DIR ...]

LINEAGE: lineage directories or lineage.json files (default
bench/results/lineages/device/*/lineage.json).

1. Admission: the cards lifted from the lineages, admitted on their held-out states
   (`lineage.admission.admit`, --max-trials), once with the local executor (--jobs cards at
   once) and once through Ray (as many cards at once as the cluster has GPUs), each with a
   fresh verdict cache.
2. Held-out-style batch: up to --states states of every lineage (its expert first), or with
   --heldout the start kernel of every held-out operator under DIR, each gated --trials times (no cache: every trial is a fresh measurement), as one batch
   (`gate.check_many`) through each executor.

Every gate job is recorded (its source, case and tier) with its verdict and, for the local
run, its wall time. Jobs that both executors ran are compared: outcome, failure kind and stage
must agree (timings are noise and are reported, not compared; admission through Ray also
gates a trial's second candidate ahead, which the local run may never need). The projection
for N GPUs schedules the local run's job (batch) or card (admission) times longest first
over N slots. Writes DIR/executor_compare.json and prints a summary; exit code 1 when a
verdict differs.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import heapq
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gate.check import CheckRequest  # noqa: E402
from gate.executor import Executor, open_executor  # noqa: E402

DEFAULT_LINEAGES = "bench/results/lineages/device/*/lineage.json"


def say(message: str) -> None:
    print(f"[executor-compare {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Recording(Executor):
    """Passes jobs to `inner` and records each (job key -> verdict signature, wall seconds)."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.speculate = inner.speculate  # type: ignore[misc]
        self.jobs: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def submit(self, request: CheckRequest) -> Future[Any]:
        started = time.monotonic()
        future = self.inner.submit(request)
        future.add_done_callback(lambda f: self._record(request, f, started))
        return future

    def check(self, source: str, language: Any, case: Any, tier: Any = "auto", **kwargs: Any) -> Any:
        request = CheckRequest(source, str(getattr(language, "value", language)), case, tier,
                               str(kwargs["path"]) if kwargs.get("path") is not None else None,
                               kwargs.get("host"), kwargs.get("timeout"), kwargs.get("cache", True))
        return self.submit(request).result()

    def _record(self, request: CheckRequest, future: Future[Any], started: float) -> None:
        verdict = future.result()
        case = getattr(request.case, "name", request.case)
        timing = verdict.timing
        with self._lock:
            self.jobs.append({
                "job": hashlib.sha256(f"{request.source}\0{case}\0{verdict.tier.value}".encode()
                                      ).hexdigest()[:16],
                "case": str(case), "tier": verdict.tier.value, "ok": verdict.ok,
                "kind": getattr(verdict.failure_kind, "value", None), "stage": verdict.stage,
                "cached": verdict.cached, "ms": timing.candidate_ms if timing else None,
                "submitted": started, "done": time.monotonic()})

    def gpu_available(self) -> bool:
        return self.inner.gpu_available()

    def width(self, tier: Any) -> int:
        return self.inner.width(tier)


def serial_durations(rows: Sequence[dict[str, Any]]) -> list[float]:
    """Each job's own time in a run of one job at a time (queueing left out)."""
    out, last = [], float("-inf")
    for row in sorted(rows, key=lambda r: r["done"]):
        out.append(row["done"] - max(last, row["submitted"]))
        last = row["done"]
    return out


def lpt(durations: Sequence[float], slots: int) -> float:
    """Wall time of `durations` scheduled longest first over `slots` parallel slots."""
    loads = [0.0] * max(1, slots)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)  # onto the least loaded slot
    return max(loads)


def compare(local: list[dict[str, Any]], ray: list[dict[str, Any]]) -> dict[str, Any]:
    """Jobs both ran, their verdicts compared (outcome, kind, stage) in order per job key."""
    def by_job(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            if not row["cached"]:
                out.setdefault(row["job"], []).append(row)
        return out

    a, b = by_job(local), by_job(ray)
    common = sorted(set(a) & set(b))
    mismatches = []
    ratios = []
    for job in common:
        for x, y in zip(a[job], b[job]):
            if (x["ok"], x["kind"], x["stage"]) != (y["ok"], y["kind"], y["stage"]):
                mismatches.append({"job": job, "case": x["case"], "local": x, "ray": y})
            elif x["ms"] and y["ms"]:
                ratios.append(y["ms"] / x["ms"])
    ratios.sort()
    return {"jobs_local": sum(map(len, a.values())), "jobs_ray": sum(map(len, b.values())),
            "compared": len(common), "mismatches": mismatches,
            "median_ms_ratio_ray_over_local": ratios[len(ratios) // 2] if ratios else None}


def cold_compile_cache(folder: Path) -> None:
    """Empty the Triton compile cache both executors' workers use (TRITON_CACHE_DIR, set before
    Ray starts so its workers inherit it), so that neither run reuses the other's compiles."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)


def run_admission(name: str, gates: Executor, lineages: list[Any], out: Path, tier: str,
                  max_trials: int, jobs: int) -> dict[str, Any]:
    from lineage.admission import admit
    from lineage.skills import Library, lift

    folder = out / f"admission-{name}"
    os.environ["KLINEAGE_CACHE_DIR"] = str(folder / "cache")
    cold_compile_cache(Path(os.environ["TRITON_CACHE_DIR"]))
    lib = Library.open(folder / "library", create=True)
    for lin in lineages:
        lib.add_all(lift(lin))
    card_s: dict[str, float] = {}
    started_at: dict[str, float] = {}

    def progress(event: str, data: Any) -> None:
        card = str(data.get("card", ""))
        if event == "trial":
            started_at[card] = time.monotonic()
        elif event in ("admitted", "failed") and card in started_at:
            card_s[card] = card_s.get(card, 0.0) + time.monotonic() - started_at.pop(card)

    say(f"admission ({name}, {len(lib.ids())} cards, {jobs} at once)")
    t0 = time.monotonic()
    report = admit(lib, lineages, tier=tier, max_trials=max_trials, jobs=jobs, executor=gates,
                   progress=progress)
    wall = time.monotonic() - t0
    say(f"admission ({name}): {wall:.1f} s, {len(report.admitted)} admitted")
    return {"wall_s": round(wall, 1), "report": report.to_json(), "card_s": card_s,
            "trials": {c.id: [[t.context, t.ok, t.reason] for t in c.verification]
                       for c in lib.cards()}}


def run_batch(name: str, gates: Executor, requests: list[CheckRequest], out: Path) -> dict[str, Any]:
    os.environ["KLINEAGE_CACHE_DIR"] = str(out / f"batch-{name}" / "cache")
    cold_compile_cache(Path(os.environ["TRITON_CACHE_DIR"]))
    say(f"batch ({name}, {len(requests)} jobs)")
    t0 = time.monotonic()
    verdicts = gates.check_many(requests)
    wall = time.monotonic() - t0
    say(f"batch ({name}): {wall:.1f} s, {sum(v.ok for v in verdicts)}/{len(verdicts)} pass")
    return {"wall_s": round(wall, 1)}


def batch_requests(lineages: list[Any], states: int, trials: int, tier: str) -> list[CheckRequest]:
    requests = []
    for lin in lineages:
        experts = lin.roles("expert")
        ids = experts + [s for s in lin.states() if s not in experts]
        for sid in ids[:states]:
            node = lin.node(sid)
            if node.get("language") != "triton":
                continue
            requests += [CheckRequest(str(node["source"]), "triton", str(node["case"]), tier,
                                      cache=False)] * trials
    return requests


def heldout_requests(paths: Sequence[str], trials: int, tier: str) -> list[CheckRequest]:
    """The held-out tier's start kernels (`bench/heldout.py`'s operators), each `trials` times."""
    sys.path.insert(0, str(ROOT / "bench"))
    from heldout import operators

    requests = []
    for case in operators(paths, set()):
        source = case.start_path().read_text()
        requests += [CheckRequest(source, "triton", case.ref, tier, cache=False)] * trials
    return requests


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lineages", nargs="*")
    ap.add_argument("--out", default="bench/results/executor-compare")
    ap.add_argument("--tier", default="device", choices=["interpret", "device"])
    ap.add_argument("--max-trials", type=int, default=1)
    ap.add_argument("--states", type=int, default=6, help="states per lineage in the batch")
    ap.add_argument("--trials", type=int, default=2, help="gates of each state in the batch")
    ap.add_argument("--jobs", type=int, default=1, help="local executor: jobs at once")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--gpus", default="1,2,4,8", help="GPU counts to project to")
    ap.add_argument("--skip", choices=["admission", "batch"], default=None)
    ap.add_argument("--heldout", action="append", default=[], metavar="DIR",
                    help="the batch is these held-out operators' start kernels (bench/heldout.py) "
                         "instead of lineage states")
    args = ap.parse_args(argv)

    from lineage.graph import Lineage

    paths = args.lineages or sorted(glob.glob(str(ROOT / DEFAULT_LINEAGES)))
    lineages = [Lineage.load(Path(p) / "lineage.json" if Path(p).is_dir() else p) for p in paths]
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gpus = [int(g) for g in args.gpus.split(",") if g]
    result: dict[str, Any] = {"tier": args.tier, "lineages": paths,
                              "batch_of": args.heldout or "lineage states",
                              "command": "python3 bench/executor_compare.py " + " ".join(sys.argv[1:])}
    os.environ["TRITON_CACHE_DIR"] = str(out / "triton-cache")
    local = Recording(open_executor("local", jobs=args.jobs))
    try:
        ray = Recording(open_executor("ray", address=args.ray_address))
    except Exception as exc:  # noqa: BLE001 — reported as one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result["cluster"] = {"gpus": ray.width("device"), "cpus": ray.width("interpret")}
        if args.skip != "admission":
            a_local = run_admission("local", local, lineages, out, args.tier, args.max_trials, args.jobs)
            n_local = len(local.jobs)
            a_ray = run_admission("ray", ray, lineages, out, args.tier, args.max_trials,
                                  max(1, ray.width(args.tier)))
            result["admission"] = {
                "local": a_local, "ray": a_ray,
                "verdicts": compare(local.jobs[:n_local], ray.jobs),
                "projected_wall_s": {n: round(lpt(list(a_local["card_s"].values()), n), 1)
                                     for n in gpus}}
        if args.skip != "batch":
            requests = (heldout_requests(args.heldout, args.trials, args.tier) if args.heldout
                        else batch_requests(lineages, args.states, args.trials, args.tier))
            start_local, start_ray = len(local.jobs), len(ray.jobs)
            b_local = run_batch("local", local, requests, out)
            b_ray = run_batch("ray", ray, requests, out)
            times = serial_durations(local.jobs[start_local:])
            result["batch"] = {
                "jobs": len(requests), "local": b_local, "ray": b_ray,
                "verdicts": compare(local.jobs[start_local:], ray.jobs[start_ray:]),
                "projected_wall_s": ({n: round(lpt(times, n), 1) for n in gpus}
                                     if args.jobs == 1 else "needs --jobs 1")}
    finally:  # the measurements are written even when a shutdown fails
        (out / "executor_compare.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        ray.inner.close()
        local.inner.close()
    bad = 0
    for part in ("admission", "batch"):
        if part not in result:
            continue
        r = result[part]
        v = r["verdicts"]
        bad += len(v["mismatches"])
        print(f"{part}: local {r['local']['wall_s']} s, ray {r['ray']['wall_s']} s; "
              f"{v['compared']} jobs compared, {len(v['mismatches'])} verdicts differ; "
              f"median ms ratio ray/local {v['median_ms_ratio_ray_over_local']}; "
              f"projected on N GPUs {r['projected_wall_s']}")
    print(f"wrote {out / 'executor_compare.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
