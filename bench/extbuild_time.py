"""Device-tier gate time of a `load_inline` CUDA host, its candidates built in the gate or ahead.

Gates N distinct candidates of one KernelBench-style host (the style tier's row softmax unless
`--kernel` / `--case` name another), one after another as a search does, twice:

- `before`: builds ahead off (`KLINEAGE_BUILD_AHEAD=off`) and no standby worker
  (`KLINEAGE_GATE_STANDBY=0`): each gate's worker starts for its job and builds the extension
  when it imports the candidate, as a gate of such a host ran before (its environment, a
  build folder per candidate, never matched a standby worker's);
- `at-start` (with `--modes`): standby workers and builds ahead on, none asked for: each
  gate's build starts with the gate, beside its worker's start-up and references;
- `ahead`: as `at-start`, and before each gate the next candidates' builds are started
  (`gate.prebuild`, as the optimize loop does for the moves it ranks next), so a build
  overlaps the gate before it.

The candidates differ by a comment line in their CUDA source (a distinct text, so each one is
a full build; a run-unique salt keeps builds of earlier runs out). Verdict cache off. Writes
`extbuild_time.json` under OUT_DIR: per gate its wall seconds, its `load_candidate` phase
(the import, i.e. the extension build), how its worker had the extension (`extension`: "found
built ahead", "built here", ...; the verdict's `load_candidate: extension ...` phase), ok / ms;
per mode the totals and how many gates found their extension built ahead (`hits`).
`reuse`: whether the builds ran through `gate.extbuild.tools` (the C++ half's object reused
across candidates; `KLINEAGE_BUILD_REUSE=off` in the environment: not).

    python bench/extbuild_time.py OUT_DIR [--n 5] [--kernel PATH --case DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CASE = ROOT / "bench/styles/cuda/cu_softmax_rows"
DEFAULT_KERNEL = DEFAULT_CASE / "softmax_rows.py"


def _variants(source: str, n: int, salt: str) -> list[str]:
    return [f"{source.rstrip()}\n// candidate {salt} {k}\n" for k in range(n)]


def _gate(gate, unit, case, text: str) -> dict:
    t0 = time.monotonic()
    verdict = gate.check(text, "cuda", case, "device", path=unit.source_path, host=unit.host_path,
                         cache=False)
    wall = time.monotonic() - t0
    phases = dict(verdict.phases or ())
    ms = verdict.timing.candidate_ms if verdict.ok and verdict.timing else None
    prefix = "load_candidate: extension "
    had = [k[len(prefix):] for k in phases if k.startswith(prefix) and k != prefix + "lock wait"]
    return {"wall_s": round(wall, 2), "ok": verdict.ok,
            "reason": None if verdict.ok else str(verdict.reason)[:300],
            "load_candidate_s": round(phases.get("load_candidate", 0.0), 2), "ms": ms,
            "extension": had[0] if had else None,
            "phases": {k: round(v, 2) for k, v in phases.items()}}


def run_mode(mode: str, unit, case, n: int) -> dict:
    import gate
    from gate import extbuild

    salt = f"{mode}-{uuid.uuid4().hex[:8]}"
    texts = _variants(unit.source, n, salt)
    if mode not in ("before", "at-start", "ahead"):
        raise SystemExit(f"unknown mode {mode!r} (before, at-start, ahead)")
    os.environ["KLINEAGE_BUILD_AHEAD"] = "off" if mode == "before" else "on"
    os.environ["KLINEAGE_GATE_STANDBY"] = "0" if mode == "before" else "1"
    gate.prestart("device", wait=120, case=case)  # as a run starts: its first worker (or server)
    gates, started = [], set()
    t0 = time.monotonic()
    for k, text in enumerate(texts):
        if mode == "ahead":
            for j in range(k + 1, min(n, k + 1 + extbuild.slots())):
                if j not in started and gate.prebuild(texts[j], "cuda", case, "device",
                                                      path=unit.source_path, host=unit.host_path):
                    started.add(j)
        row = _gate(gate, unit, case, text)
        row["built_ahead"] = k in started
        gates.append(row)
        print(f"{mode} {k}: {row['wall_s']} s (load {row['load_candidate_s']} s, extension "
              f"{row['extension']}) ok={row['ok']}", flush=True)
    total = time.monotonic() - t0
    return {"mode": mode, "total_s": round(total, 2), "gates": gates,
            "hits": sum(g["extension"] == "found built ahead" for g in gates),
            "mean_gate_s": round(sum(g["wall_s"] for g in gates) / len(gates), 2),
            "mean_load_s": round(sum(g["load_candidate_s"] for g in gates) / len(gates), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--kernel", type=Path, default=DEFAULT_KERNEL)
    ap.add_argument("--case", type=Path, default=DEFAULT_CASE)
    ap.add_argument("--modes", default="before,ahead")
    args = ap.parse_args()
    import gate
    from gate import extbuild
    from kir import embedded

    unit = embedded.cuda_unit(args.kernel)
    if unit is None:
        print(f"{args.kernel}: not a CUDA kernel", file=sys.stderr)
        return 2
    case = gate.load_case(str(args.case))
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"kernel": str(args.kernel), "case": str(args.case), "n": args.n,
              "cpus": os.cpu_count(), "slots": extbuild.slots(), "reuse": extbuild.reuse_enabled(),
              "arch_list": extbuild.device_arch_list(), "modes": []}
    for mode in args.modes.split(","):
        report["modes"].append(run_mode(mode, unit, case, args.n))
        (args.out / "extbuild_time.json").write_text(json.dumps(report, indent=1))
    for m in report["modes"]:
        print(f"{m['mode']}: total {m['total_s']} s for {args.n} gates, mean gate {m['mean_gate_s']} s,"
              f" mean load {m['mean_load_s']} s, {m['hits']} found built ahead")
    return 0


if __name__ == "__main__":
    sys.exit(main())
