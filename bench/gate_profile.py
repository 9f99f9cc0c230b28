"""Where a gate's time goes: phase timings of the gate on chosen kernels.

    python3 bench/gate_profile.py [--tier device] [--out FILE.json] [CASE[:LINEAGE.json[:ROLE]] ...]

For each CASE (default: the five cases) gates the case's Triton expert, and with LINEAGE the
state of that lineage with role ROLE (default: root, the most simplified state), without the
verdict cache, and prints the gate's wall time next to the worker's phases (start-up,
references, load_candidate, correctness, knockout, timing / repeat, reverify) and the parent's
output comparison. Progress goes to stderr, the table to stdout; --out writes every record.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CASES = ("gemm", "conv2d", "fmha", "topk", "gdn")


def _targets(specs: list[str]) -> list[tuple[str, str, str, Path]]:
    """(case, label, source, path) of each kernel to gate."""
    from gate.cases import load_case

    out = []
    for spec in specs or list(CASES):
        case_name, _, rest = spec.partition(":")
        case = load_case(case_name)
        expert = next(p for p, lang in case.expert_paths() if lang == "triton")
        out.append((case_name, "expert", expert.read_text(), expert))
        if rest:
            from lineage.graph import Lineage
            from roundtrip import naive_root

            lineage_path, _, role = rest.partition(":")
            lin = Lineage.load(lineage_path)
            # root: the naive root, else the state farthest from the expert (bench/roundtrip.py)
            chosen = [naive_root(lin)] if (role or "root") == "root" else lin.roles(role)
            if not chosen:
                raise SystemExit(f"{lineage_path}: no state with role {role!r}")
            out.append((case_name, role or "root", lin.node(chosen[0])["source"], expert))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help="CASE or CASE:LINEAGE.json[:ROLE]")
    ap.add_argument("--tier", default="device", choices=["interpret", "device"])
    ap.add_argument("--out", default=None, help="write the records as JSON here")
    args = ap.parse_args(argv)

    from gate import check

    records = []
    for case, label, source, path in _targets(args.targets):
        print(f"gate_profile: {case}/{label} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        verdict = check(source, "triton", case, args.tier, path=path, cache=False)
        wall = time.perf_counter() - t0
        rec = {"case": case, "kernel": label, "ok": verdict.ok, "wall_s": round(wall, 2),
               "phases": {k: round(v, 2) for k, v in verdict.phases},
               "failure": None if verdict.ok else f"{verdict.failure_kind}: {verdict.reason}"[:300],
               "candidate_ms": verdict.timing.candidate_ms if verdict.timing else None}
        records.append(rec)
        print(json.dumps(rec), file=sys.stderr, flush=True)
    names = list(dict.fromkeys(k for r in records for k in r["phases"]))
    print("| case | kernel | ok | wall s | " + " | ".join(names) + " |")
    print("|---|---|---|---:|" + "---:|" * len(names))
    for r in records:
        print(f"| {r['case']} | {r['kernel']} | {r['ok']} | {r['wall_s']} | "
              + " | ".join(str(r["phases"].get(n, "")) for n in names) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"command": "python3 bench/gate_profile.py " + " ".join(sys.argv[1:]),
                                              "tier": args.tier, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
