"""Gate every honest kernel of the repository and count the rejections: false rejections.

    .venv/bin/python bench/gate_honest.py --tier interpret --out results.json [--limit N]

Honest kernels: each case's experts (experts/*/case.py EXPERTS) and every state of the lineages
under bench/results/lineages/*/*/lineage.json (each state's source against its lineage's case).
Writes one record per kernel (source, case, ok, failure kind, reason, seconds) as it goes, and
prints the rejections by failure kind.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gate  # noqa: E402


def kernels() -> list[tuple[str, str, str, str, str | None]]:
    """(label, case, language, source, host text) of every honest kernel."""
    out: list[tuple[str, str, str, str, str | None]] = []
    for name in gate.list_cases():
        case = gate.load_case(name)
        for path, lang in case.expert_paths():
            host = path.with_suffix(".py").read_text() if lang == "cuda" else None
            out.append((f"expert {name}/{path.name}", name, lang, path.read_text(), host))
    for lineage in sorted(ROOT.glob("bench/results/lineages/*/*/lineage.json")):
        data = json.loads(lineage.read_text())
        for node in data["nodes"]:
            if str(node.get("type", "state")).lower() != "state" or not node.get("source"):
                continue
            case = node.get("case") or lineage.parent.name
            out.append((f"{lineage.parent.parent.name}/{lineage.parent.name} {node['id']}"[:120],
                        case, node.get("language", "triton"), node["source"], None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", default="interpret")
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    todo = kernels()
    if args.limit:
        todo = todo[:args.limit]
    records = []
    for label, case, lang, source, host in todo:
        if lang == "cuda" and host is None:
            continue  # a lineage's CUDA state has no host module in the file
        t0 = time.perf_counter()
        try:
            v = gate.check(source, lang, case, args.tier, host=host, cache=False)
            rec = {"kernel": label, "case": case, "language": lang, "ok": v.ok, "tier": v.tier.value,
                   "failure_kind": v.failure_kind.value if v.failure_kind else None,
                   "reason": (v.reason or "")[:400]}
        except Exception as exc:  # a case that does not load here: recorded, not counted
            rec = {"kernel": label, "case": case, "language": lang, "ok": None,
                   "failure_kind": "error", "reason": f"{type(exc).__name__}: {exc}"[:400]}
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        records.append(rec)
        print(json.dumps(rec), flush=True)
        Path(args.out).write_text(json.dumps(records, indent=1))
    kinds = collections.Counter(r["failure_kind"] for r in records if r["ok"] is False)
    print(f"{len(records)} kernels, {sum(1 for r in records if r['ok'])} passed, rejections: "
          f"{dict(kinds)}")


if __name__ == "__main__":
    main()
